"""``python -m robustnlu.seqdrift.canonical {check,verify,write} [NAME ...]``: the canonical
clusterings shipped in ``data/seqdrift/`` (`robustnlu.seqdrift.shipped`).

- ``check`` (fast): rebuild the split of every scenario (full/partial x i.i.d./o.o.d.) from each
  shipped clustering and compare its ``split.json`` and cache key with ``MANIFEST.json``'s (a
  run checks its canonical split against them: a stale manifest stops it);
- ``verify``: compute each clustering afresh on this machine and compare it with the shipped
  one (identical, or the adjusted Rand index and the share of utterances placed alike);
- ``write``: compute the clusterings and write them with the manifest (what the maintainers ran
  to make ``data/seqdrift/``; see its SOURCE.md).

NAME is ``<dataset>-<kind>`` (``snips-slot_context``; default: all of `CANONICAL`). Exit 0 when
everything agrees, 1 when something differs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from robustnlu.cli import compose_run_config
from robustnlu.paths import DATA_DIR
from robustnlu.data.readers import load_corpus
from robustnlu.data.utterance import Corpus
from robustnlu.errors import CommandLineParser, ConfigError, entry_point
from robustnlu.seqdrift.artifact import CLUSTER_OPTIONS, Clustering, clusters_key
from robustnlu.seqdrift.pipeline import cluster_utterances, split_from_clustering
from robustnlu.seqdrift.shipped import SHIPPED_DIR, file_sha256, manifest, shipped_clustering, write_clustering, write_manifest
from robustnlu.seqdrift.config import SplitConfig
from robustnlu.seqdrift.entries import sha256_text
from robustnlu.seqdrift.filtering import Filtered, filter_utterances
from robustnlu.seqdrift.split import DriftSplit

# name -> the preset whose drift config the clustering is for (drift seed 0)
CANONICAL = {
    f"{dataset}-{kind}": f"{dataset}_{kind}"
    for dataset in ("snips", "atis", "top", "mit")
    for kind in ("slot_context", "slot_value")
}
SCENARIOS = tuple((partial, validation) for partial in (False, True) for validation in ("iid", "ood"))


@dataclass
class Preset:
    """One canonical clustering's inputs: the corpus, its filtered utterances, the split config."""

    name: str
    corpus: Corpus
    cfg: SplitConfig
    filtered: Filtered

    @property
    def key(self) -> str:
        return clusters_key(self.filtered.utterances, self.cfg)

    @property
    def uids(self) -> tuple[str, ...]:
        return tuple(u.uid for u in self.filtered.utterances)

    def scenario(self, partial: bool, validation: str) -> SplitConfig:
        return SplitConfig.from_configs({**self.cfg.to_dict()["drift"], "partial": partial}, {"kind": validation})


def preset_of(cfg: DictConfig, name: str = "") -> Preset:
    corpus = load_corpus(cfg.dataset)
    split_cfg = SplitConfig.from_configs(cfg.drift, cfg.validation)
    return Preset(name, corpus, split_cfg, filter_utterances(corpus.all(), split_cfg))


def load_preset(name: str) -> Preset:
    if name not in CANONICAL:
        raise ConfigError(f"{name}: not a canonical clustering; one of {sorted(CANONICAL)}")
    return preset_of(compose_run_config([f"+experiment={CANONICAL[name]}"]), name)


def scenario_split(preset: Preset, clustering: Clustering, partial: bool, validation: str) -> DriftSplit:
    """The split of one scenario, with its cache key (no cache, no manifest check)."""
    return split_from_clustering(preset.corpus, preset.scenario(partial, validation), preset.filtered, clustering, None)


def scenario_name(partial: bool, validation: str) -> str:
    return f"{'partial' if partial else 'full'}-{validation}"


def compare(shipped: Clustering, computed: Clustering) -> str:
    """``identical`` or how far apart the two clusterings are."""
    from sklearn.metrics import adjusted_rand_score

    if np.array_equal(shipped.ids, computed.ids):
        return "identical"
    ari = adjusted_rand_score(shipped.ids, computed.ids)
    return f"DIFFERENT: adjusted Rand index {ari:.4f} between the shipped and this machine's clustering"


def compute(preset: Preset) -> Clustering:
    return Clustering(preset.uids, np.asarray(cluster_utterances(preset.filtered.utterances, preset.cfg)), "computed", preset.key)


def shipped_of(preset: Preset, shipped_dir: Path) -> Clustering:
    clustering = shipped_clustering(shipped_dir, preset.key, preset.uids)
    if clustering is None:
        raise ConfigError(f"{preset.name or 'drift'}: no shipped clustering for this corpus and drift config in {shipped_dir}")
    return clustering


def check(preset: Preset, shipped_dir: Path) -> bool:
    clustering = shipped_of(preset, shipped_dir)
    entry = manifest(shipped_dir)[preset.key]
    ok = True
    for partial, validation in SCENARIOS:
        name = scenario_name(partial, validation)
        split = scenario_split(preset, clustering, partial, validation)
        differ = [what for what, same in (("sha256", sha256_text(split.to_json()) == entry["splits"][name]),
                                          ("cache key", split.key == entry["split_keys"][name])) if not same]
        ok &= not differ
        verdict = f"DIFFERS from the manifest: {', '.join(differ)}" if differ else "matches the manifest"
        print(f"{preset.name} {name}: split.json {verdict}")
    return ok


def verify(preset: Preset, shipped_dir: Path) -> bool:
    verdict = compare(shipped_of(preset, shipped_dir), compute(preset))
    print(f"{preset.name}: the clustering computed here is {verdict}")
    return verdict == "identical"


def write(presets: list[Preset], shipped_dir: Path) -> None:
    entries = {entry["name"]: entry for entry in manifest(shipped_dir).values()}
    for preset in presets:
        clustering = compute(preset)
        path = write_clustering(shipped_dir, preset.name, clustering, {k: getattr(preset.cfg, k) for k in CLUSTER_OPTIONS})
        shipped = Clustering(clustering.uids, clustering.ids, "shipped", clustering.key, path.name)
        splits = {scenario_name(p, v): scenario_split(preset, shipped, p, v) for p, v in SCENARIOS}
        entries[preset.name] = {
            "clusters_key": preset.key,
            "clusters_sha256": clustering.sha256,
            "experiment": f"+experiment={CANONICAL[preset.name]}",
            "file": path.name,
            "file_sha256": file_sha256(path),
            "n_clusters": int(len(set(clustering.ids.tolist()) - {-1})),
            "n_utterances": len(clustering.uids),
            "name": preset.name,
            "split_keys": {name: split.key for name, split in splits.items()},
            "splits": {name: sha256_text(split.to_json()) for name, split in splits.items()},
        }
        write_manifest(shipped_dir, [entries[name] for name in sorted(entries)])
        print(f"{preset.name}: wrote {path.name} ({len(clustering.uids)} utterances)")


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.seqdrift.canonical", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["check", "verify", "write"])
    parser.add_argument("names", nargs="*", help=f"default: all of {', '.join(CANONICAL)}")
    args = parser.parse_args(argv)
    shipped_dir = DATA_DIR / SHIPPED_DIR

    presets = [load_preset(name) for name in args.names or CANONICAL]
    if args.action == "write":
        write(presets, shipped_dir)
        return 0
    action = check if args.action == "check" else verify
    return 0 if all([action(p, shipped_dir) for p in presets]) else 1


if __name__ == "__main__":
    sys.exit(main())
