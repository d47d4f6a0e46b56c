"""The content-addressed cache of SeqDrift splits and clusterings.

A split is stored as ``<cache_dir>/seqdrift/<key>/split.json`` (canonical JSON, see
`DriftSplit.to_json`) with ``stats.json`` and ``SHA256SUMS`` beside it. ``key`` is the sha256 of

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

The computed cluster ids are cached on their own as ``<cache_dir>/seqdrift/clusters/<key>/
clusters.json``, keyed by `clusters_key`: the filtered utterances (uid, tokens, tags, intent),
the feature and clustering options (kind, n-gram sizes, top n-grams, number of clusters,
affinity, seed) and `CLUSTERS_VERSION`: the full/partial and i.i.d./o.o.d. variants of a split
share one clustering, the expensive step. The same key finds a shipped clustering
(`robustnlu.seqdrift.canonical`).

Each entry is a folder whose files are listed with their sha256 in ``SHA256SUMS``, written last
(`robustnlu.seqdrift.entries`); every file is written atomically (`robustnlu.io`: temporary
sibling + rename). An entry is used only if its files match their sums, parse whole and record
the key (and for a split: the config and clustering) they are stored under; otherwise it is
recomputed, with one log line saying why. Each entry is computed once however many processes
ask for it at the same time (`robustnlu.io.compute_once`: the jobs of a Slurm array starting
together on a shared filesystem).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from robustnlu.data.utterance import SPLITS, Corpus, Utterance
from robustnlu.io import compute_once, json_text, writing
from robustnlu.seqdrift.config import SplitConfig
from robustnlu.seqdrift.entries import UnusableEntry, check_fields, parse_json, read_entry, write_entry
from robustnlu.seqdrift.split import DriftSplit

logger = logging.getLogger(__name__)
T = TypeVar("T")

ALGORITHM_VERSION = 2  # filtering + splitting + statistics; 2: the key holds the clustering's record
CLUSTERS_VERSION = 2  # features + clustering; 2: tie-aware k-means (robustnlu.seqdrift.kmeans)
SPLIT_FILE = "split.json"
STATS_FILE = "stats.json"
#: the statistics table ``python -m robustnlu.seqdrift`` writes into its run directory after the split's
#: files (`write_split_files`): its last file, so a run directory that holds it is a finished run's
STATS_TABLE_FILE = "stats.txt"
CLUSTERS_FILE = "clusters.json"


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


def clusters_dir(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / "seqdrift" / "clusters" / key


def load_clusters(cache_dir: str | Path, key: str, uids: Sequence[str]) -> np.ndarray | None:
    """The cached cluster ids of ``key`` (in the order of ``uids``); None if there are none;
    `UnusableEntry` if the entry fails a check (`robustnlu.seqdrift.entries`, then its content:
    its key, the uids of ``key`` in their order, one cluster id >= -1 per uid)."""
    folder = clusters_dir(cache_dir, key)
    files = read_entry(folder, [CLUSTERS_FILE])
    if files is None:
        return None
    try:
        doc = parse_json(files[CLUSTERS_FILE])
        check_fields(doc, {"clusters": list, "key": str, "uids": list}, "the file")
        if doc["key"] != key or doc["uids"] != list(uids):
            raise ValueError("it records another key or other uids than its key stands for")
        ids = doc["clusters"]
        if len(ids) != len(uids) or not all(type(c) is int and c >= -1 for c in ids):
            raise ValueError("clusters is not one integer >= -1 per uid")
    except ValueError as err:
        raise UnusableEntry(folder / CLUSTERS_FILE, str(err)) from err
    return np.asarray(ids, dtype=np.int64)


def save_clusters(cache_dir: str | Path, key: str, uids: Sequence[str], clusters: np.ndarray) -> Path:
    doc = {"clusters": [int(c) for c in clusters], "key": key, "uids": list(uids)}
    return write_entry(clusters_dir(cache_dir, key), {CLUSTERS_FILE: json.dumps(doc) + "\n"})


def cached_computation(cache_dir: str | Path, key: str, load: Callable[[], T | None], compute: Callable[[], T]) -> T:
    """`robustnlu.io.compute_once` for the cache entry ``key`` (a split or a clustering). An
    entry that ``load`` finds unusable (`UnusableEntry`) is recomputed, and why is logged once. A
    cache folder that cannot be written (missing parent, read-only, full) is a `ConfigError` naming
    ``paths.cache_dir`` (`robustnlu.io.writing`), the key every command passes as ``cache_dir``."""
    claim = Path(cache_dir) / "seqdrift" / "claims" / key
    reported: set[str] = set()

    def checked_load() -> T | None:
        try:
            return load()
        except UnusableEntry as err:
            if str(err) not in reported:  # compute_once looks again right after its claim
                reported.add(str(err))
                logger.warning("recomputing the cache entry %s", err)
            return None

    with writing("paths.cache_dir"):
        return compute_once(claim, checked_load, compute)


def artifact_dir(cache_dir: str | Path, key: str) -> Path:
    return Path(cache_dir) / "seqdrift" / key


def load_split(cache_dir: str | Path, key: str, config: Mapping[str, Any], clustering: Mapping[str, str]) -> DriftSplit | None:
    """The cached split of ``key``; None if there is none; `UnusableEntry` if the entry fails a
    check: its ``SHA256SUMS`` (`robustnlu.seqdrift.entries`), its format (`DriftSplit.from_json`,
    ``stats.json`` an object), and the key, split config (`SplitConfig.to_dict`) and clustering
    record (`Clustering.record`) it records, which must be those that ``key`` stands for."""
    folder = artifact_dir(cache_dir, key)
    files = read_entry(folder, (SPLIT_FILE, STATS_FILE))
    if files is None:
        return None
    try:
        stats = parse_json(files[STATS_FILE])
        if not isinstance(stats, dict):
            raise ValueError("not a JSON object")
    except ValueError as err:
        raise UnusableEntry(folder / STATS_FILE, str(err)) from err
    try:
        split = DriftSplit.from_json(files[SPLIT_FILE], stats)
        expected = json.loads(json.dumps({"key": key, "config": config, "clustering": clustering}))
        recorded = {"key": split.key, "config": split.config, "clustering": split.info.get("clustering")}
        wrong = [name for name in expected if recorded[name] != expected[name]]
        if wrong:
            raise ValueError(f"it records another {' and '.join(wrong)} than its key stands for")
    except ValueError as err:
        raise UnusableEntry(folder / SPLIT_FILE, str(err)) from err
    return split


def save_split(cache_dir: str | Path, split: DriftSplit) -> Path:
    """Write ``split`` (and its stats) under its key; return the folder."""
    if not split.key:
        raise ValueError("a split needs its cache key before it can be saved")
    return write_split_files(artifact_dir(cache_dir, split.key), split)


def write_split_files(folder: str | Path, split: DriftSplit) -> Path:
    """``stats.json`` and ``split.json`` into ``folder`` with their ``SHA256SUMS``
    (`robustnlu.seqdrift.entries.write_entry`)."""
    return write_entry(folder, {STATS_FILE: json_text(split.stats), SPLIT_FILE: split.to_json()})


__all__ = [
    "ALGORITHM_VERSION",
    "CLUSTERS_VERSION",
    "Clustering",
    "artifact_dir",
    "cached_computation",
    "cache_key",
    "clusters_dir",
    "clusters_key",
    "corpus_digest",
    "load_clusters",
    "load_split",
    "save_clusters",
    "save_split",
    "write_split_files",
]
