"""SeqDrift clustering: the scalable spectral clustering against the paper's dense recipe.

Each measurement runs in its own child process (``python -m bench.seqdrift DATASET KIND
AFFINITY``), so that its peak RSS (``VmHWM``, see `bench.child`) is its own: the corpus is read
and filtered and its n-gram features built as a training run does (`robustnlu.seqdrift`), then
only `spectral_clusters` is timed. Reported: seconds of clustering, peak RSS of the process.

- SNIPS slot context (14,484 utterances), scalable vs dense: goals ≥ 5× faster, ≥ 10× less
  peak memory (the dense recipe materialises the n×n cosine affinity: 6.4 GB here).
- TOP-NN slot context (29,104), scalable: goal < 60 s.
- All eight TOPv2 domains joined (151,441 non-nested utterances), slot context, scalable:
  goals < 180 s and < 3 GB peak RSS. The dense recipe would need 183 GB here.

``--quick`` runs only the SNIPS and TOP-NN scalable clusterings (a smoke check).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from bench.child import peak_rss_bytes

REPO = Path(__file__).resolve().parents[1]
TOPV2_DOMAINS = ("alarm", "event", "messaging", "music", "navigation", "reminder", "timer", "weather")


def load_utterances(dataset: str):
    """All utterances of ``dataset`` (``topv2_all`` = the eight TOPv2 domains joined)."""
    from robustnlu.data.readers import load_corpus
    from robustnlu.paths import shipped_config

    names = [f"topv2_{d}" for d in TOPV2_DOMAINS] if dataset == "topv2_all" else [dataset]
    return [u for name in names for u in load_corpus(shipped_config("dataset", name)).all()]


def drift_config(kind: str, dataset: str) -> dict:
    cfg = OmegaConf.load(REPO / "conf" / "drift" / "slot_context.yaml")
    if kind == "slot_value":
        cfg = OmegaConf.merge(cfg, OmegaConf.load(REPO / "conf" / "drift" / "slot_value.yaml"))
    cfg.pop("defaults", None)
    if dataset.startswith("top"):
        cfg.ngram_max = 5  # Table 7, TOP column
    return OmegaConf.to_container(cfg)


def measure(dataset: str, kind: str, affinity: str) -> dict:
    """Runs in the child: cluster once, report time and this process's peak RSS."""
    from robustnlu.seqdrift.cluster import spectral_clusters
    from robustnlu.seqdrift.features import build_features
    from robustnlu.seqdrift.config import SplitConfig
    from robustnlu.seqdrift.filtering import filter_utterances

    cfg = SplitConfig.from_configs(drift_config(kind, dataset), {"kind": "iid"})
    utterances = filter_utterances(load_utterances(dataset), cfg).utterances
    features = build_features(utterances, kind=cfg.kind, n_min=cfg.ngram_min, n_max=cfg.ngram_max, top_n=cfg.top_ngrams)
    rss_before = peak_rss_bytes()
    started = time.perf_counter()
    labels = spectral_clusters(features.matrix, n_clusters=cfg.n_clusters, seed=cfg.seed, affinity=affinity)
    seconds = time.perf_counter() - started
    return {"dataset": dataset, "kind": kind, "affinity": affinity, "utterances": len(utterances),
            "clusters": int(labels.max()) + 1, "seconds": seconds, "rss_before_clustering_bytes": rss_before}


#: (dataset, kind, affinity) of each child run; --quick runs only the first and the TOP one
RUNS = [("snips", "slot_context", "scalable"), ("snips", "slot_context", "dense"),
        ("top", "slot_context", "scalable"), ("topv2_all", "slot_context", "scalable")]


def measure_seqdrift(quick: bool, results: dict) -> None:
    """Run each measurement in a child process; fill ``results["seqdrift"]`` and the ratios."""
    from bench.memory import run_child

    runs = {}
    for dataset, kind, affinity in RUNS:
        if quick and (affinity == "dense" or dataset == "topv2_all"):
            continue
        print(f"  SeqDrift clustering: {dataset} {kind} {affinity} ...", flush=True)
        child = run_child(["bench.seqdrift", dataset, kind, affinity], timeout_s=1200)
        if child["returncode"] != 0:
            raise RuntimeError(f"bench.seqdrift {dataset} {affinity} failed:\n{child['output'][-3000:]}")
        run = json.loads(child["output"].strip().splitlines()[-1])
        run["peak_rss_gb"] = child["peak_rss_bytes"] / 1e9
        runs[f"{dataset}_{affinity}"] = run
        print(f"  ... {run['utterances']:,} utterances, {run['seconds']:.1f} s, peak RSS {run['peak_rss_gb']:.2f} GB", flush=True)
    results["seqdrift"] = runs
    ratios = results["ratios"]
    if "snips_dense" in runs:
        dense, scalable = runs["snips_dense"], runs["snips_scalable"]
        ratios["seqdrift_speedup"] = dense["seconds"] / scalable["seconds"]
        ratios["seqdrift_memory_ratio"] = dense["peak_rss_gb"] / scalable["peak_rss_gb"]
    ratios["seqdrift_top_s"] = runs["top_scalable"]["seconds"]
    if "topv2_all_scalable" in runs:
        ratios["seqdrift_topv2_s"] = runs["topv2_all_scalable"]["seconds"]
        ratios["seqdrift_topv2_rss_gb"] = runs["topv2_all_scalable"]["peak_rss_gb"]


if __name__ == "__main__":
    print(json.dumps(measure(*sys.argv[1:4])))
