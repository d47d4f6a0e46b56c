"""The content-addressed cache of SeqDrift splits.

A split is stored as ``<cache_dir>/seqdrift/<key>/split.json`` (canonical JSON, see
`DriftSplit.to_json`) with ``stats.json`` beside it. ``key`` is the sha256 of

- the corpus: name, then every utterance (all splits, corpus order) as its original split,
  uid, tokens, tags and intent; equivalent to hashing the input files' content, and
  independent of where the files lie;
- the split config (drift + validation, canonical JSON, the seed included);
- `ALGORITHM_VERSION` and `CLUSTERS_VERSION`: bump the first whenever a change to filtering,
  splitting or the statistics changes what a config produces, the second for a change to the
  features or the clustering (it also keys the cluster cache below).

The cluster ids are cached on their own as ``<cache_dir>/seqdrift/clusters/<key>.json``, keyed
by the filtered utterances (uid, tokens, tags, intent) and the feature and clustering options
(kind, n-gram sizes, top n-grams, number of clusters, affinity, seed): the full/partial and
i.i.d./o.o.d. variants of a split share one clustering, the expensive step.

Files are written atomically (`robustnlu.io`: temporary sibling + rename), ``stats.json``
first and ``split.json`` last: a directory with ``split.json`` is complete. Two processes
computing the same key write the same bytes, so the last rename wins harmlessly.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from robustnlu.data.utterance import SPLITS, Corpus, Utterance
from robustnlu.io import atomic_write_json, atomic_write_text
from robustnlu.seqdrift.split import DriftSplit, SplitConfig

logger = logging.getLogger(__name__)

ALGORITHM_VERSION = 1  # filtering + splitting + statistics
CLUSTERS_VERSION = 1  # features + clustering
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


def cache_key(corpus: Corpus, cfg: SplitConfig) -> str:
    payload = {"algorithm": ALGORITHM_VERSION, "clusters": CLUSTERS_VERSION, "corpus": corpus_digest(corpus), "config": cfg.to_dict()}
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
    "artifact_dir",
    "cache_key",
    "clusters_key",
    "corpus_digest",
    "load_clusters",
    "load_split",
    "save_clusters",
    "save_split",
    "write_split_files",
]
