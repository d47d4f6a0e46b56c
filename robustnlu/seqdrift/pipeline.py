"""`make_drift_split`: filter -> n-gram features -> spectral clusters -> split -> statistics,
cached as a content-addressed artifact (`robustnlu.seqdrift.artifact`).

Typical use (the training run)::

    split = make_drift_split(corpus, cfg.drift, cfg.validation, cache_dir)
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
from robustnlu.errors import ConfigError
from robustnlu.seqdrift.artifact import (
    artifact_dir,
    cache_key,
    clusters_key,
    load_clusters,
    load_split,
    save_clusters,
    save_split,
)
from robustnlu.seqdrift.split import DriftSplit, SplitConfig, filter_utterances, identity_split, split_by_clusters
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


def cached_clusters(utterances, cfg: SplitConfig, cache_dir: str | Path | None) -> np.ndarray:
    """`cluster_utterances`, through the cluster cache of `robustnlu.seqdrift.artifact`."""
    if cache_dir is None:
        return cluster_utterances(utterances, cfg)
    key = clusters_key(utterances, cfg)
    uids = [u.uid for u in utterances]
    clusters = load_clusters(cache_dir, key, uids)
    if clusters is not None:
        logger.info("reusing cached clusters %s", key[:12])
        return clusters
    clusters = np.asarray(cluster_utterances(utterances, cfg), dtype=np.int64)
    save_clusters(cache_dir, key, uids, clusters)
    return clusters


def compute_drift_split(corpus: Corpus, cfg: SplitConfig, stats: bool = True, cache_dir: str | Path | None = None) -> DriftSplit:
    """The computation behind `make_drift_split` (``cache_dir``: where clusterings are cached)."""
    if cfg.kind == "none":
        split = identity_split(corpus, cfg)
    else:
        started = time.time()
        filtered = filter_utterances(corpus.all(), cfg)
        n = len(filtered.utterances)
        if n <= cfg.n_clusters:
            raise ConfigError(f"drift.n_clusters: {cfg.n_clusters} clusters for {n} utterances left after filtering")
        clusters = cached_clusters(filtered.utterances, cfg, cache_dir)
        split = split_by_clusters(filtered, clusters, cfg)
        logger.info("SeqDrift split of %s computed in %.1f s", corpus.name, time.time() - started)
    if stats:
        split.stats = split_statistics(split, corpus, seed=cfg.seed)
    return split


def make_drift_split(
    corpus: Corpus,
    drift_cfg: Mapping[str, Any] | None,
    validation_cfg: Mapping[str, Any] | None = None,
    cache_dir: str | Path | None = None,
) -> DriftSplit:
    """The SeqDrift split of ``corpus`` for ``cfg.drift`` and ``cfg.validation``, read from
    ``<cache_dir>/seqdrift/<key>/`` when it was computed before (``cache_dir=None``: no
    cache). Bad options raise `ConfigError`."""
    cfg = SplitConfig.from_configs(drift_cfg, validation_cfg)
    if cfg.kind == "none":
        return compute_drift_split(corpus, cfg)
    key = cache_key(corpus, cfg)
    if cache_dir is not None:
        cached = load_split(cache_dir, key)
        if cached is not None:
            logger.info("reusing cached split %s", artifact_dir(cache_dir, key))
            return cached
    split = compute_drift_split(corpus, cfg, cache_dir=cache_dir)
    split.key = key
    if cache_dir is not None:
        folder = save_split(cache_dir, split)
        logger.info("wrote split %s", folder)
    return split


__all__ = ["cluster_utterances", "compute_drift_split", "make_drift_split"]
