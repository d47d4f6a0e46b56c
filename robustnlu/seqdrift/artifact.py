"""The content-addressed cache of SeqDrift splits and clusterings.

A split is stored as ``<cache_dir>/seqdrift/<key>/split.json`` (canonical JSON, see
`DriftSplit.to_json`) with ``stats.json`` beside it. ``key`` is the sha256 of

- the corpus: name, then every utterance (all splits, corpus order) as its original split,
  uid, tokens, tags and intent; equivalent to hashing the input files' content, and
  independent of where the files lie;
- the split config (drift + validation, canonical JSON, the seed included);
- the clustering it was built from: its source (``shipped`` or ``computed``) and the sha256 of
  its uid -> cluster rows (`Clustering.record`). Two machines whose computed clusterings differ
  (another BLAS kernel, README "One benchmark for everyone") therefore never store two
  different splits under one key;
- `ALGORITHM_VERSION`: bump it whenever a change to filtering, splitting or the statistics
  changes what a config produces (`CLUSTERS_VERSION` for the features or the clustering).

The computed cluster ids are cached on their own as ``<cache_dir>/seqdrift/clusters/<key>.json``,
keyed by `clusters_key`: the filtered utterances (uid, tokens, tags, intent), the feature and
clustering options (kind, n-gram sizes, top n-grams, number of clusters, affinity, seed) and
`CLUSTERS_VERSION`: the full/partial and i.i.d./o.o.d. variants of a split share one
clustering, the expensive step. The same key finds a shipped clustering
(`robustnlu.seqdrift.canonical`).

Files are written atomically (`robustnlu.io`: temporary sibling + rename), ``stats.json``
first and ``split.json`` last: a directory with ``split.json`` is complete. Each entry is
computed once however many processes ask for it at the same time (`robustnlu.io.compute_once`:
the jobs of a Slurm array starting together on a shared filesystem).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import numpy as np

from robustnlu.data.utterance import SPLITS, Corpus, Utterance
from robustnlu.io import atomic_write_json, atomic_write_text, compute_once
from robustnlu.seqdrift.config import SplitConfig
from robustnlu.seqdrift.split import DriftSplit

logger = logging.getLogger(__name__)
T = TypeVar("T")

ALGORITHM_VERSION = 2  # filtering + splitting + statistics; 2: the key holds the clustering's record
CLUSTERS_VERSION = 2  # features + clustering; 2: tie-aware k-means (robustnlu.seqdrift.kmeans)
SPLIT_FILE = "split.json"
STATS_FILE = "stats.json"


def corpus_digest(corpus: Corpus) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(["corpus", corpus.name]).encode())
    for split in SPLITS:
        for u in corpus.split(split):
            row = [split, u.uid, list(u.tokens), list(u.tags), u.intent]
            h.update(b"\n" + json.dumps(row, ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


@dataclass(frozen=True)
class Clustering:
    """Cluster ids of the filtered utterances (``-1``: isolated) and where they came from:
    ``source`` is ``shipped`` (``file`` in data/seqdrift/) or ``computed`` (on this machine)."""

    uids: tuple[str, ...]
    ids: np.ndarray
    source: str
    key: str
    file: str | None = None

    @cached_property  # used by the cache key and the record: the rows are hashed once
    def sha256(self) -> str:
        """The digest of the uid -> cluster rows: equal digests, equal clusterings."""
        rows = json.dumps([[u, int(c)] for u, c in zip(self.uids, self.ids)], ensure_ascii=False)
        return hashlib.sha256(rows.encode("utf-8")).hexdigest()

    def record(self) -> dict[str, str]:
        """What a split, its key and a run's results.json record of the clustering."""
        out = {"source": self.source, "clusters_key": self.key, "sha256": self.sha256}
        if self.file:
            out["file"] = self.file
        return out


def cache_key(corpus: Corpus, cfg: SplitConfig, clustering: Clustering) -> str:
    payload = {
        "algorithm": ALGORITHM_VERSION,
        "clustering": {"source": clustering.source, "sha256": clustering.sha256},
        "corpus": corpus_digest(corpus),
        "config": cfg.to_dict(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


CLUSTER_OPTIONS = ("kind", "ngram_min", "ngram_max", "top_ngrams", "n_clusters", "affinity", "seed")


def clusters_key(utterances: Sequence[Utterance], cfg: SplitConfig) -> str:
    h = hashlib.sha256()
    options = {k: getattr(cfg, k) for k in CLUSTER_OPTIONS}
    h.update(json.dumps({"clusters": CLUSTERS_VERSION, "options": options}, sort_keys=True).encode())
    for u in utterances:
        h.update(b"\n" + json.dumps([u.uid, list(u.tokens), list(u.tags), u.intent], ensure_ascii=False).encode("utf-8"))
    return h.hexdigest()


def clusters_path(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / "seqdrift" / "clusters" / f"{key}.json"


def load_clusters(cache_dir: str | Path, key: str, uids: Sequence[str]) -> np.ndarray | None:
    """The cached cluster ids of ``key`` (in the order of ``uids``), or None."""
    path = clusters_path(cache_dir, key)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc["uids"] != list(uids):
            raise ValueError("its uids differ")
        return np.asarray(doc["clusters"], dtype=np.int64)
    except (OSError, ValueError, KeyError, TypeError) as err:
        logger.warning("ignoring unreadable cached clusters %s (%s); recomputing", path, err)
        return None


def save_clusters(cache_dir: str | Path, key: str, uids: Sequence[str], clusters: np.ndarray) -> Path:
    path = clusters_path(cache_dir, key)
    atomic_write_text(path, json.dumps({"clusters": [int(c) for c in clusters], "key": key, "uids": list(uids)}) + "\n")
    return path


def cached_computation(cache_dir: str | Path, key: str, load: Callable[[], T | None], compute: Callable[[], T]) -> T:
    """`robustnlu.io.compute_once` for the cache entry ``key`` (a split or a clustering)."""
    claim = Path(cache_dir) / "seqdrift" / "claims" / key
    return compute_once(claim, load, compute)


def artifact_dir(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / "seqdrift" / key


def load_split(cache_dir: str | Path, key: str) -> DriftSplit | None:
    """The cached split of ``key``, or None if there is none (or it is unreadable)."""
    folder = artifact_dir(cache_dir, key)
    path = folder / SPLIT_FILE
    if not path.is_file():
        return None
    try:
        stats_path = folder / STATS_FILE
        stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.is_file() else {}
        split = DriftSplit.from_json(path.read_text(encoding="utf-8"), stats)
    except (OSError, ValueError, KeyError, TypeError) as err:
        logger.warning("ignoring unreadable cached split %s (%s); recomputing", path, err)
        return None
    if split.key != key:
        logger.warning("ignoring cached split %s: it records key %s; recomputing", path, split.key)
        return None
    return split


def save_split(cache_dir: str | Path, split: DriftSplit) -> Path:
    """Write ``split`` (and its stats) under its key; return the folder."""
    if not split.key:
        raise ValueError("a split needs its cache key before it can be saved")
    folder = artifact_dir(cache_dir, split.key)
    write_split_files(folder, split)
    return folder


def write_split_files(folder: str | Path, split: DriftSplit) -> None:
    """``stats.json`` then ``split.json`` into ``folder``, each written atomically."""
    folder = Path(folder)
    atomic_write_json(folder / STATS_FILE, split.stats)
    atomic_write_text(folder / SPLIT_FILE, split.to_json())


__all__ = [
    "ALGORITHM_VERSION",
    "CLUSTERS_VERSION",
    "Clustering",
    "artifact_dir",
    "cached_computation",
    "cache_key",
    "clusters_key",
    "corpus_digest",
    "load_clusters",
    "load_split",
    "save_clusters",
    "save_split",
    "write_split_files",
]
