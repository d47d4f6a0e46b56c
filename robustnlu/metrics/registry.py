"""The one registry of the metrics robustnlu reports: per key its title, whether higher is better,
its unit and, for a corpus metric, its formula from summed per-utterance counts (core paper
section 5.1 and Appendix D; `robustnlu.metrics.counts.UtteranceCounts` are the counts).

Every table, summary, figure, significance test and run summary reads its metrics from here: the
tuples at the end say which metrics each of them shows, in order. Adding a metric: a `Metric` in
`METRICS` (with a formula if it derives from counts: then its count goes into `UtteranceCounts`)
and its key in the tuples of the tables that should show it.

The study's robustness measures of a model are defined here too, once: the valid → test `drop`
(core paper section 2.4) and the `worst_cluster` over clusters of at least `MIN_CLUSTER_SIZE`
utterances; `run_measures` gives both under the keys of results.json and W&B, and the reports
compute them with the same functions from the stored metrics.

A formula takes ``sums`` (count name → sum over the utterances: a number, or a numpy array for
many sums at once, e.g. one per shuffle of a randomization test) and ``n`` (the number of
utterances), and computes with numpy, so that one definition serves `SLUMetrics` and the
vectorised significance tests alike. An undefined ratio is 0.0, as seqeval's default
``zero_division="warn"`` makes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from robustnlu.tables import fmt

Sums = Mapping[str, Any]


def _ratio(numerator: Any, denominator: Any) -> np.ndarray:
    """numerator / denominator where the denominator is positive, else 0.0."""
    numerator, denominator = np.asarray(numerator), np.asarray(denominator)
    positive = denominator > 0
    return np.where(positive, numerator / np.where(positive, denominator, 1), 0.0)


def slot_precision(sums: Sums, n: int) -> np.ndarray:
    return _ratio(sums["correct_spans"], sums["pred_spans"])


def slot_recall(sums: Sums, n: int) -> np.ndarray:
    return _ratio(sums["correct_spans"], sums["gold_spans"])


def slot_f1(sums: Sums, n: int) -> np.ndarray:
    """Micro span F1 as seqeval computes it: 2PR / (P + R), 0.0 if P + R = 0."""
    precision, recall = slot_precision(sums, n), slot_recall(sums, n)
    return _ratio(2 * precision * recall, precision + recall)


def intent_acc(sums: Sums, n: int) -> np.ndarray:
    return np.asarray(sums["intent_correct"]) / n


def combined(sums: Sums, n: int) -> np.ndarray:
    """COMBINED-IC-SF (core paper section 5.1): (intent_acc + slot_f1) / 2."""
    return (intent_acc(sums, n) + slot_f1(sums, n)) / 2


def semer(sums: Sums, n: int) -> np.ndarray:
    """SEMER (App. D): Σ (slot substitutions + deletions + insertions + intent error) / Σ (gold spans + 1)."""
    return np.asarray(sums["semer_errors"]) / (np.asarray(sums["gold_spans"]) + n)


def frame_acc(sums: Sums, n: int) -> np.ndarray:
    """Intent correct and predicted spans == gold spans (exact match)."""
    return np.asarray(sums["frame_correct"]) / n


#: the fewest utterances a SeqDrift cluster of a split needs to count for the worst-cluster
#: measures (`worst_cluster`): without a floor, clusters of 1-2 test utterances decide them (on a
#: real ATIS grid the worst-cluster COMBINED read 0.00 in every slot-context and 50.00 in
#: every slot-value scenario, for every method). 10: the paper's groups are "as little as 10
#: examples" (core paper section 5.2, Discussion). `SLUMetrics`' own ``worst_group/<m>`` is over
#: all clusters (what ``selection=worst_group`` monitors)
MIN_CLUSTER_SIZE = 10
#: the metrics whose valid → test drop a run records (`drop`)
DROPPED = ("intent_acc", "slot_f1", "combined")


def drop_key(key: str) -> str:
    """``drop/<key>``: the valid → test drop of ``key`` (`drop`) in results.json and W&B."""
    return f"drop/{key}"


def worst_cluster_key(key: str, min_size: int = MIN_CLUSTER_SIZE) -> str:
    """``worst_group_min<min_size>/<key>``: ``key`` of the worst cluster among those of at least
    ``min_size`` utterances (`worst_cluster`); the name says the floor, unlike `SLUMetrics`'
    ``worst_group/<key>`` over all clusters."""
    return f"worst_group_min{min_size}/{key}"


def at_floor(key: str, min_size: int) -> str:
    """A worst-cluster key (`worst_cluster_key`) renamed for the floor ``min_size`` it was computed
    with (a report's ``--min-cluster-size``); any other key as it is."""
    name = key.partition("/")[2]
    return worst_cluster_key(name, min_size) if key == worst_cluster_key(name) else key


@dataclass(frozen=True)
class Metric:
    """One reported metric.

    ``title``: its column title; ``higher_is_better``: its direction (SEMER and the drop: lower
    is better); ``unit``: what a table shows (``%``: the value × 100; ``points``: a difference of
    such values); ``words``: how prose names it; ``abbrev``: the short label of the noise tables
    (Krone et al., paper 002, Table 4); ``formula``: from summed counts (module docstring), None
    for a metric derived otherwise (e.g. over intents or clusters, or across splits).
    """

    key: str
    title: str
    higher_is_better: bool = True
    unit: str = "%"
    words: str | None = None
    abbrev: str | None = None
    formula: Callable[[Sums, int], np.ndarray] | None = None

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is strictly better than ``b``."""
        return a > b if self.higher_is_better else a < b

    def worst(self, values):
        """The worst of ``values`` (the minimum, the maximum where lower is better)."""
        return min(values) if self.higher_is_better else max(values)


METRICS: dict[str, Metric] = {m.key: m for m in (
    Metric("intent_acc", "intent acc", abbrev="IC", formula=intent_acc),
    Metric("slot_precision", "slot precision", formula=slot_precision),
    Metric("slot_recall", "slot recall", formula=slot_recall),
    Metric("slot_f1", "slot F1", abbrev="SL", formula=slot_f1),
    Metric("combined", "COMBINED", formula=combined),
    Metric("semer", "SEMER", higher_is_better=False, formula=semer),
    Metric("frame_acc", "frame acc", words="exact match", abbrev="EM", formula=frame_acc),
    Metric("ma_intent_combined", "MA INT. COMBINED"),
    Metric(worst_cluster_key("combined"), "worst-cluster COMBINED"),
    Metric(drop_key("intent_acc"), "drop valid→test intent acc", higher_is_better=False, unit="points"),
    Metric(drop_key("slot_f1"), "drop valid→test slot F1", higher_is_better=False, unit="points"),
    Metric(drop_key("combined"), "drop valid→test COMBINED", higher_is_better=False, unit="points"),
)}

#: `SLUMetrics`' corpus metrics computed from counts, in the order of its result
COUNTED = tuple(k for k, m in METRICS.items() if m.formula is not None)
#: reported per group (``group/<id>/<m>``, ``worst_group/<m>``, `worst_cluster_key`) and testable by
#: approximate randomization
PER_GROUP = ("intent_acc", "slot_f1", "combined", "semer", "frame_acc")
#: the study's Table 10 (`robustnlu.analysis.study_tables.scenario_table`), in order
TABLE10 = ("intent_acc", "slot_f1", "combined", "semer", "ma_intent_combined", worst_cluster_key("combined"),
           drop_key("combined"))
#: tested against ERM in the study; the first decides the counts (the paper's main metric)
TESTED = ("combined", "intent_acc", "slot_f1", "semer")
#: ``python -m robustnlu.analysis.compare``'s columns
COMPARE = ("combined", "intent_acc", "slot_f1", "semer", "frame_acc")
#: the summary a training run prints (`robustnlu.train.summary_table`)
RUN_SUMMARY = ("intent_acc", "slot_f1", "combined", "semer", "frame_acc", "ma_intent_combined")
#: the reproduction report's Tables 11-12
REPRODUCTION_SUMMARY = ("combined", "semer", "ma_intent_combined")
#: a model on noisy control / treatment pairs (Krone et al., paper 002, Table 4)
NOISE = ("intent_acc", "slot_f1", "frame_acc")
#: the noise effects (drop, gain, residual, clean cost) reported, as paper 002's headline numbers
NOISE_EFFECTS = ("intent_acc", "slot_f1")


def metric(key: str) -> Metric:
    """The `Metric` of ``key``; ValueError naming the known keys otherwise."""
    try:
        return METRICS[key]
    except KeyError:
        raise ValueError(f"unknown metric {key!r}; one of {', '.join(METRICS)}") from None


def in_words(key: str) -> str:
    """How prose names the metric ``key``: its ``words``, else the key itself (also for a key
    that is not registered, e.g. a per-group metric)."""
    return (METRICS[key].words if key in METRICS else None) or key


def relative_change(value: float, baseline: float) -> float:
    """(value − baseline) / baseline in % (the core paper's "%" columns, Tables 11-14); NaN if
    undefined (a NaN, or a zero baseline)."""
    if math.isnan(value) or math.isnan(baseline) or baseline == 0:
        return math.nan
    return 100.0 * (value - baseline) / baseline


def change_text(value: float, baseline: float, unit: str = "%") -> str:
    """The relative change of ``value`` to ``baseline`` as a table shows it (`relative_change`,
    signed, with `robustnlu.tables.fmt`, then ``unit``: "" in a table whose header names it):
    ``+3.33%``; ``n/a: from 0`` from a baseline of 0, ``n/a`` where either is NaN."""
    change = relative_change(value, baseline)
    if math.isnan(change):
        return "n/a: from 0" if baseline == 0 else "n/a"
    return f"{fmt(change, sign=True)}{unit}"


def drop(valid: Mapping[str, Any], test: Mapping[str, Any], key: str = "combined") -> float:
    """The valid → test drop of metric ``key``, valid − test, from one model's two splits'
    metrics (fractions): the core paper's robustness measure (section 2.4: model B is more robust
    than A when E(B, valid) − E(B, test) < E(A, valid) − E(A, test)); positive = worse on test.
    The paper's Table 10 prints the same change as test − valid (a drop negative), which the
    reproduction report's Table 10 shows beside it as −drop."""
    return float(valid[key]) - float(test[key])


def cluster_metrics(metrics: Mapping[str, Any]) -> dict[int, dict[str, float]]:
    """Cluster id → its metrics (``n`` and `PER_GROUP`), read from one split's ``group/<id>/<m>``
    keys as `SLUMetrics` writes them, by id; empty without clusters."""
    clusters: dict[int, dict[str, float]] = {}
    for key, value in metrics.items():
        if key.startswith("group/"):
            _, cluster, name = key.split("/", 2)
            clusters.setdefault(int(cluster), {})[name] = float(value)
    return dict(sorted(clusters.items()))


def worst_cluster(metrics: Mapping[str, Any], key: str = "combined",
                  min_size: int = MIN_CLUSTER_SIZE) -> tuple[float | None, int, int]:
    """(worst ``key``, qualifying clusters, all clusters) of one split's metrics: the minimum
    (for semer the maximum) of ``key`` over the clusters of at least ``min_size`` utterances
    (`cluster_metrics`); the worst is None if no cluster qualifies."""
    if key not in PER_GROUP:
        raise ValueError(f"unknown cluster metric {key!r}; one of {', '.join(PER_GROUP)}")
    clusters = cluster_metrics(metrics)
    values = [c[key] for c in clusters.values() if c["n"] >= min_size]
    if not values:
        return None, 0, len(clusters)
    return metric(key).worst(values), len(values), len(clusters)


def run_measures(metrics: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The robustness measures of one model from its ``{"valid": ..., "test": ...}`` metrics, under
    the keys results.json (``measures``) and the W&B summary use: ``drop/<m>`` (`drop`) of
    `DROPPED`, and ``<split>/worst_group_min10/<m>`` (`worst_cluster`) of `PER_GROUP` where some
    cluster of the split qualifies."""
    valid, test = metrics["valid"], metrics["test"]
    out = {drop_key(k): drop(valid, test, k) for k in DROPPED}
    for split in ("valid", "test"):
        for key in PER_GROUP:
            worst = worst_cluster(metrics[split], key)[0]
            if worst is not None:
                out[f"{split}/{worst_cluster_key(key)}"] = worst
    return out
