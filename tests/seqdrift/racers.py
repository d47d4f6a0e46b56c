"""Functions that spawned processes of the SeqDrift tests run (test_canonical.py: several at once;
test_claims.py: one killed mid-clustering); a module of their own: a spawned process imports it,
and this one imports little."""

from __future__ import annotations

import os
import time
from pathlib import Path


from robustnlu.data.readers import load_corpus
from robustnlu.paths import shipped_config
from robustnlu.io import atomic_write_text, compute_once
from robustnlu.seqdrift import pipeline
from robustnlu.seqdrift.pipeline import make_drift_split

REPO = Path(__file__).resolve().parents[2]


def race_for_an_entry(args) -> tuple[int, str]:
    result, log, delay = args
    result, log = Path(result), Path(log)

    def load():
        return result.read_text() if result.is_file() else None

    def compute():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(delay)
        atomic_write_text(result, f"computed by {os.getpid()}")  # the contract: written atomically
        return result.read_text()

    return os.getpid(), compute_once(result, load, compute, poll_s=0.05)


def race_for_a_split(args) -> str:
    """A SeqDrift split of the SNIPS sample by one of several processes sharing a cache dir;
    counts the clusterings it computes in ``log``."""
    cache, log = args
    real = pipeline.cluster_utterances

    def counted(utterances, cfg):
        with open(log, "a") as f:
            f.write("clustered\n")
        return real(utterances, cfg)

    pipeline.cluster_utterances = counted
    corpus = load_corpus(shipped_config("dataset", "snips"))
    corpus.train, corpus.valid, corpus.test = (corpus.split(s)[::6] for s in ("train", "valid", "test"))
    drift = {"kind": "slot_context", "n_clusters": 20, "min_intent_freq": 30, "min_slot_freq": 10}
    return make_drift_split(corpus, drift, {"kind": "iid"}, cache).to_json()


def cluster_until_killed(args) -> None:
    """`python -m robustnlu.seqdrift <overrides>` as far as its clustering, which never ends
    (touches ``started`` when it begins): the test kills this process there, leaving its claim."""
    overrides, started = args
    from hydra import compose, initialize_config_dir

    def forever(utterances, cfg):
        Path(started).touch()
        time.sleep(3600)

    pipeline.cluster_utterances = forever
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="seqdrift", overrides=overrides)
    make_drift_split(load_corpus(cfg.dataset, REPO), cfg.drift, cfg.validation, cfg.paths.cache_dir)
