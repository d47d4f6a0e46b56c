"""`make_drift_split`: filter -> clusters (shipped, or n-gram features -> spectral clusters) ->
split -> statistics, cached as a content-addressed artifact (`robustnlu.seqdrift.artifact`).

Typical use (the training run)::

    split = make_drift_split(corpus, cfg.drift, cfg.validation, cache_dir, shipped_dir)
    corpus = split.apply(corpus)          # the new train/valid/test
    groups = split.groups()               # uid -> cluster id, for group-DRO methods

``drift.kind: none`` returns the dataset's own splits (no filtering, clustering or cache).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from robustnlu.data.utterance import Corpus
from robustnlu.errors import ConfigError, DataError
from robustnlu.seqdrift.artifact import (
    SPLIT_FILE,
    Clustering,
    artifact_dir,
    cache_key,
    cached_computation,
    clusters_key,
    load_clusters,
    load_split,
    save_clusters,
    save_split,
)
from robustnlu.seqdrift.shipped import MANIFEST_FILE, SHIPPED_DIR, canonical_split, shipped_clustering
from robustnlu.seqdrift.config import SplitConfig
from robustnlu.seqdrift.entries import UnusableEntry
from robustnlu.seqdrift.filtering import Filtered, filter_utterances
from robustnlu.seqdrift.split import DriftSplit, identity_split, split_by_clusters
from robustnlu.seqdrift.stats import split_statistics

logger = logging.getLogger(__name__)


def cluster_utterances(utterances, cfg: SplitConfig) -> np.ndarray:
    """Cluster ids (-1 = isolated) of ``utterances`` from their n-gram features (Appendix A).
    Utterances with no feature at all are isolated whatever the clustering says."""
    from robustnlu.seqdrift.cluster import spectral_clusters
    from robustnlu.seqdrift.features import build_features

    features = build_features(utterances, kind=cfg.kind, n_min=cfg.ngram_min, n_max=cfg.ngram_max, top_n=cfg.top_ngrams)
    try:
        ids = spectral_clusters(features.matrix, n_clusters=cfg.n_clusters, seed=cfg.seed, affinity=cfg.affinity)
    except ValueError as err:  # e.g. fewer clusterable utterances than clusters
        raise ConfigError(f"drift.n_clusters: cannot make {cfg.n_clusters} {cfg.kind} clusters: {err}") from err
    clusters = np.asarray(ids, dtype=np.int64).copy()
    if len(clusters) != len(utterances):
        raise RuntimeError(f"spectral_clusters returned {len(clusters)} ids for {len(utterances)} utterances")
    empty = np.asarray(features.empty_rows, dtype=bool)
    clusters[empty] = -1
    logger.info(
        "%s features: %d n-grams, %d utterances without any; %d clusters",
        cfg.kind, len(features.vocabulary), int(empty.sum()), len(set(clusters.tolist()) - {-1}),
    )
    return clusters


def resolve_clustering(utterances, cfg: SplitConfig, cache_dir: str | Path | None, shipped_dir: str | Path | None) -> Clustering:
    """The clustering of the filtered ``utterances``: the shipped one (``drift.clusters`` auto or
    shipped, `robustnlu.seqdrift.shipped`) or a computed one, through the cluster cache."""
    key = clusters_key(utterances, cfg)
    uids = tuple(u.uid for u in utterances)
    if cfg.clusters != "compute" and shipped_dir is not None:
        shipped = shipped_clustering(shipped_dir, key, uids)
        if shipped is not None:
            logger.info("using the shipped clustering %s", shipped.file)
            return shipped
    if cfg.clusters == "shipped":
        raise ConfigError(
            f"drift.clusters: no shipped clustering for this corpus and drift config "
            f"({Path(shipped_dir or SHIPPED_DIR) / MANIFEST_FILE} lists them); drift.clusters=compute computes one"
        )
    logger.info("computing the %s clustering (none shipped for this config; the result can depend on "
                "the machine, README 'One benchmark for everyone')", cfg.kind)

    def computed(ids) -> Clustering:
        return Clustering(uids, np.asarray(ids, dtype=np.int64), "computed", key)

    if cache_dir is None:
        return computed(cluster_utterances(utterances, cfg))

    def load() -> Clustering | None:
        ids = load_clusters(cache_dir, key, uids)
        if ids is None:
            return None
        logger.info("reusing cached clusters %s", key[:12])
        return computed(ids)

    def compute() -> Clustering:
        clustering = computed(cluster_utterances(utterances, cfg))
        save_clusters(cache_dir, key, uids, clustering.ids)
        return clustering

    return cached_computation(cache_dir, f"clusters-{key}", load, compute)


def split_from_clustering(corpus: Corpus, cfg: SplitConfig, filtered: Filtered, clustering: Clustering,
                          cache_dir: str | Path | None, shipped_dir: str | Path | None = None) -> DriftSplit:
    """The split (with statistics) of ``filtered`` by ``clustering``, through the split cache.
    A canonical scenario of a shipped clustering (`canonical_split` in ``shipped_dir``) must be
    the split the manifest records: a cached one that is not is recomputed, and a computed one
    that is not is refused (`DataError` naming the manifest), as it cannot be recomputed."""
    key = cache_key(corpus, cfg, clustering)
    canonical = canonical_split(shipped_dir, key) if shipped_dir is not None and clustering.source == "shipped" else None

    def compute() -> DriftSplit:
        started = time.time()
        split = split_by_clusters(filtered, clustering.ids, cfg)
        split.info["clustering"] = clustering.record()
        split.key = key
        split.stats = split_statistics(split, corpus, seed=cfg.seed)
        logger.info("SeqDrift split of %s computed in %.1f s", corpus.name, time.time() - started)
        problem = canonical and canonical.mismatch(split.to_json())
        if problem:
            raise DataError(canonical.manifest, None, f"the {canonical.name} split built here from {clustering.file} is not "
                                                      f"the canonical one: {problem}")
        if cache_dir is not None:
            logger.info("wrote split %s", save_split(cache_dir, split))
        return split

    if cache_dir is None:
        return compute()

    def load() -> DriftSplit | None:
        cached = load_split(cache_dir, key, cfg.to_dict(), clustering.record())
        if cached is None:
            return None
        problem = canonical and canonical.mismatch(cached.to_json())
        if problem:
            raise UnusableEntry(artifact_dir(cache_dir, key) / SPLIT_FILE, problem)
        logger.info("reusing cached split %s", artifact_dir(cache_dir, key))
        return cached

    return cached_computation(cache_dir, key, load, compute)


def make_drift_split(
    corpus: Corpus,
    drift_cfg: Mapping[str, Any] | None,
    validation_cfg: Mapping[str, Any] | None = None,
    cache_dir: str | Path | None = None,
    shipped_dir: str | Path | None = None,
) -> DriftSplit:
    """The SeqDrift split of ``corpus`` for ``cfg.drift`` and ``cfg.validation``, from the
    shipped clustering in ``shipped_dir`` when one matches (`robustnlu.seqdrift.shipped`),
    read from ``<cache_dir>/seqdrift/<key>/`` when it was computed before and passes its checks
    (`robustnlu.seqdrift.artifact`; ``cache_dir=None``: no cache). Bad options raise
    `ConfigError`; a shipped file or canonical split that differs from the manifest `DataError`."""
    cfg = SplitConfig.from_configs(drift_cfg, validation_cfg)
    if cfg.kind == "none":
        split = identity_split(corpus, cfg)
        split.stats = split_statistics(split, corpus, seed=cfg.seed)
        return split
    filtered = filter_utterances(corpus.all(), cfg)
    n = len(filtered.utterances)
    if n <= cfg.n_clusters:
        raise ConfigError(f"drift.n_clusters: {cfg.n_clusters} clusters for {n} utterances left after filtering")
    clustering = resolve_clustering(filtered.utterances, cfg, cache_dir, shipped_dir)
    return split_from_clustering(corpus, cfg, filtered, clustering, cache_dir, shipped_dir)


__all__ = ["cluster_utterances", "make_drift_split", "resolve_clustering", "split_from_clustering"]
