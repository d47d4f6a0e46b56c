"""SeqDrift statistics: hand-computed correlations and distances, the proxy A-distance."""

from __future__ import annotations

import numpy as np
import pytest

from robustnlu.seqdrift.split import split_by_clusters
from robustnlu.seqdrift.stats import (
    cluster_histogram,
    distribution,
    format_table,
    pearson,
    proxy_a_distance,
    split_statistics,
    total_variation,
)


def test_pearson_and_tvd_by_hand():
    # train intents A A B C -> (.5, .25, .25); test A B -> (.5, .5, 0)
    p, q = distribution(["A", "A", "B", "C"]), distribution(["A", "B"])
    # deviations from 1/3: (1/6, -1/12, -1/12) and (1/6, 1/6, -1/3)
    # r = (1/24) / sqrt((1/24) * (1/6)) = (1/24) / (1/12) = 0.5
    assert pearson(p, q) == pytest.approx(0.5)
    assert total_variation(p, q) == pytest.approx(0.25)  # 0.5 * (0 + .25 + .25)
    assert pearson(p, p) == pytest.approx(1.0) and total_variation(p, p) == 0
    assert pearson({"A": 1.0}, {"A": 1.0}) is None  # one label: undefined
    assert pearson({"A": 0.5, "B": 0.5}, {"A": 0.2, "B": 0.8}) is None  # constant vector


def test_cluster_histogram_bins():
    hist = cluster_histogram([1, 1, 3, 9, 10, 250, 700])
    assert hist["1"] == 2 and hist["2-4"] == 1 and hist["5-9"] == 1 and hist["10-19"] == 1
    assert hist["200-499"] == 1 and hist["500+"] == 1 and sum(hist.values()) == 7


def random_sentences(rng, n, vocab):
    return [tuple(rng.choice(vocab, size=rng.integers(3, 9))) for _ in range(n)]


def test_proxy_a_distance_is_about_0_for_one_sample_and_2_for_separable_sets():
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(200)]
    sample = random_sentences(rng, 2000, vocab)
    same = proxy_a_distance(sample[:1000], sample[1000:], seed=0)
    assert 0 <= same < 0.3
    other = random_sentences(rng, 1000, [f"v{i}" for i in range(200)])  # no shared word
    assert proxy_a_distance(sample[:1000], other, seed=0) == pytest.approx(2.0)
    assert proxy_a_distance(sample[:2], other, seed=0) is None


def test_split_statistics_and_table(clustered, config, as_corpus):
    # 400 x intent A (slot x), 10 clusters of 10: test and ood valid 4 clusters each
    utts, ids = clustered([(10, "A", ["x"], c) for c in range(10)] + [(300, "A", ["x"], -1)])
    corpus = as_corpus(utts)
    cluster_of = dict(zip((u.uid for u in utts), ids))
    split = split_by_clusters(corpus.all(), [cluster_of[u.uid] for u in corpus.all()], config(validation="ood"))
    stats = split_statistics(split, corpus, a_distance=False)
    assert stats["splits"]["test"] == {"size": 40, "percent_of_corpus": 10.0, "drift": 40, "percent_drift": 100.0}
    assert stats["splits"]["train"]["percent_drift"] == 0.0 and stats["splits"]["train"]["size"] == 320
    assert stats["clusters"] == {"count": 10, "isolated": 300, "test": 4, "valid": 4, "largest": 10,
                                 "size_histogram": cluster_histogram([10] * 10)}
    assert stats["train_vs_test"]["intent_tvd"] == 0.0
    table = format_table(stats)
    assert "test" in table and "40" in table and "100.0" in table


def test_printed_cluster_histogram_is_in_size_order():
    from robustnlu.seqdrift.stats import format_table

    labels = {"intent_pearson": 1.0, "intent_slot_pearson": 1.0, "label_pearson": 1.0, "intent_tvd": 0.0}
    hist = {"1": 4, "10-19": 28, "2-4": 50, "500+": 6, "5-9": 39}
    stats = {  # as read back from stats.json, whose keys are sorted
        "dataset": "d", "description": "x", "corpus_size": 10, "kept": 10, "removed": 0, "removed_by_reason": {},
        "relabelled_slots": [], "train_vs_test": labels, "train_vs_valid": labels,
        "splits": {s: {"size": 1, "percent_of_corpus": 10.0, "drift": 0, "percent_drift": 0.0} for s in ("train", "valid", "test")},
        "clusters": {"count": 5, "isolated": 0, "test": 1, "valid": 1, "largest": 600, "size_histogram": dict(sorted(hist.items()))},
    }
    line = next(ln for ln in format_table(stats).splitlines() if ln.startswith("cluster sizes:"))
    assert line == "cluster sizes: 1: 4, 2-4: 50, 5-9: 39, 10-19: 28, 500+: 6"
