"""`robustnlu.metrics.registry`: every formula against counts computed by hand, one definition for
`SLUMetrics` and the vectorised significance tests, and the metadata every table reads."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from integration_helpers import REPO

from robustnlu.metrics.registry import (
    COMPARE,
    COUNTED,
    METRICS,
    MIN_CLUSTER_SIZE,
    NOISE,
    NOISE_EFFECTS,
    PER_GROUP,
    REPRODUCTION_SUMMARY,
    RUN_SUMMARY,
    TABLE10,
    TESTED,
    at_floor,
    cluster_metrics,
    drop,
    in_words,
    metric,
    relative_change,
    run_measures,
    worst_cluster,
)
from robustnlu.metrics.counts import UtteranceCounts
from robustnlu.metrics.slu import SLUMetrics

# 4 utterances: 3 intents right, 2 frames right; 5 gold spans, 4 predicted, 3 of them correct;
# SEMER numerator 3 (slot substitutions + deletions + insertions + intent errors)
SUMS = {"intent_correct": 3, "gold_spans": 5, "pred_spans": 4, "correct_spans": 3, "semer_errors": 3,
        "frame_correct": 2}
N = 4
BY_HAND = {
    "intent_acc": 3 / 4,
    "slot_precision": 3 / 4,
    "slot_recall": 3 / 5,
    "slot_f1": 2 / 3,  # 2PR / (P + R) = 2 · 3/4 · 3/5 / (27/20)
    "combined": (3 / 4 + 2 / 3) / 2,
    "semer": 3 / (5 + 4),
    "frame_acc": 2 / 4,
}


def test_every_formula_against_counts_by_hand():
    assert set(COUNTED) == set(BY_HAND)
    for key, expected in BY_HAND.items():
        assert float(METRICS[key].formula(SUMS, N)) == pytest.approx(expected, abs=1e-15), key


def test_undefined_ratios_are_zero_as_seqeval():
    none = {k: 0 for k in SUMS}
    for key in ("slot_precision", "slot_recall", "slot_f1"):
        assert float(METRICS[key].formula(none, 1)) == 0.0
    only_gold = {**none, "gold_spans": 2}  # recall 0, precision undefined: F1 0
    assert float(METRICS["slot_f1"].formula(only_gold, 1)) == 0.0


def test_formulas_are_vectorised_and_agree_with_the_scalar_form():
    fields = UtteranceCounts._fields
    rows = np.array([[SUMS[k] for k in fields], [4, 5, 5, 5, 0, 4], [0, 2, 0, 0, 6, 0]], dtype=np.float64)
    columns = {name: rows[:, i] for i, name in enumerate(fields)}
    for key in COUNTED:
        values = METRICS[key].formula(columns, N)
        assert values.shape == (3,)
        for i in range(3):
            assert values[i] == float(METRICS[key].formula({k: int(rows[i, j]) for j, k in enumerate(fields)}, N)), key
    assert METRICS["slot_f1"].formula(columns, N).tolist()[1:] == [1.0, 0.0]


def test_slu_metrics_computes_through_the_registry():
    metrics = SLUMetrics(intents=["play", "book"])
    metrics.update(["play", "book"], ["play", "play"], [["B-a", "O"], ["O"]], [["B-a", "O"], ["B-b"]])
    result = metrics.compute()
    # 1 of 2 intents; gold spans 2, predicted 1, correct 1; SEMER: 1 deletion + 1 intent error over 2 + 2
    sums = {"intent_correct": 1, "gold_spans": 2, "pred_spans": 1, "correct_spans": 1, "semer_errors": 2,
            "frame_correct": 1}
    for key in COUNTED:
        assert result[key] == float(METRICS[key].formula(sums, 2)), key
    assert result["slot_f1"] == pytest.approx(2 / 3) and result["semer"] == 0.5


def test_directions_titles_and_units():
    drops = ("drop/intent_acc", "drop/slot_f1", "drop/combined")
    assert not METRICS["semer"].higher_is_better and not any(METRICS[k].higher_is_better for k in drops)
    assert all(METRICS[k].higher_is_better for k in METRICS if k not in ("semer", *drops))
    assert METRICS["semer"].better(0.1, 0.2) and METRICS["combined"].better(0.2, 0.1)
    assert not METRICS["combined"].better(0.1, 0.1)
    assert METRICS["semer"].worst([0.1, 0.3, 0.2]) == 0.3 and METRICS["slot_f1"].worst([0.1, 0.3]) == 0.1
    assert all(METRICS[k].unit == "points" for k in drops) and METRICS["combined"].unit == "%"
    assert [METRICS[k].abbrev for k in NOISE] == ["IC", "SL", "EM"]
    assert in_words("frame_acc") == "exact match" and in_words("intent_acc") == "intent_acc"
    assert in_words("group/0/combined") == "group/0/combined"
    with pytest.raises(ValueError, match="unknown metric 'f2'"):
        metric("f2")


def test_every_table_names_registered_metrics():
    for view in (PER_GROUP, TABLE10, TESTED, COMPARE, RUN_SUMMARY, REPRODUCTION_SUMMARY, NOISE, NOISE_EFFECTS):
        assert set(view) <= set(METRICS)
    assert set(PER_GROUP) <= set(COUNTED)  # per-group values and significance tests need counts
    assert set(TESTED) <= set(PER_GROUP)
    assert TESTED[0] == "combined"  # the paper's main metric decides the counts


def test_relative_change():
    assert relative_change(1.1, 1.0) == pytest.approx(10.0)
    assert relative_change(0.5, 1.0) == pytest.approx(-50.0)
    assert math.isnan(relative_change(1.0, 0.0))
    assert math.isnan(relative_change(math.nan, 1.0)) and math.isnan(relative_change(1.0, math.nan))


def test_the_drop_is_valid_minus_test_the_papers_robustness_measure():
    """Core paper 2.4: B is more robust than A when E(B, valid) − E(B, test) < E(A, valid) −
    E(A, test); the paper's Table 10 prints test − valid (a drop negative)."""
    valid, test = {"combined": 0.90, "slot_f1": 0.8}, {"combined": 0.85, "slot_f1": 0.83}
    assert drop(valid, test) == pytest.approx(0.05)  # worse on test: a positive drop
    assert drop(valid, test, "slot_f1") == pytest.approx(-0.03)
    assert METRICS["drop/combined"].better(0.01, 0.05)  # the smaller drop is the more robust model


CLUSTERED = {"group/0/n": 12.0, "group/0/combined": 0.50, "group/0/semer": 0.2,
             "group/1/n": 2.0, "group/1/combined": 0.00, "group/1/semer": 0.9,
             "group/7/n": 10.0, "group/7/combined": 0.40, "group/7/semer": 0.3,
             "combined": 0.8}


def test_worst_cluster_by_hand():
    assert MIN_CLUSTER_SIZE == 10
    assert cluster_metrics(CLUSTERED) == {0: {"n": 12.0, "combined": 0.5, "semer": 0.2},
                                          1: {"n": 2.0, "combined": 0.0, "semer": 0.9},
                                          7: {"n": 10.0, "combined": 0.4, "semer": 0.3}}
    assert worst_cluster(CLUSTERED) == (0.40, 2, 3)  # cluster 1 (2 utterances) left out
    assert worst_cluster(CLUSTERED, "semer") == (0.3, 2, 3)  # semer: the highest
    assert worst_cluster(CLUSTERED, min_size=1) == (0.0, 3, 3)
    assert worst_cluster(CLUSTERED, min_size=13) == (None, 0, 3)
    assert worst_cluster({"combined": 0.8}) == (None, 0, 0)


def test_run_measures_name_the_floor_and_leave_out_what_no_cluster_gives():
    valid = {"intent_acc": 0.9, "slot_f1": 0.7, "combined": 0.8, "group/3/n": 4.0, "group/3/combined": 0.1}
    test = {**CLUSTERED, "intent_acc": 0.95, "slot_f1": 0.55, "combined": 0.75}
    for key in ("intent_acc", "slot_f1", "frame_acc"):
        test[f"group/0/{key}"], test[f"group/7/{key}"] = 0.6, 0.3
        valid[f"group/3/{key}"] = 0.0
    measures = run_measures({"valid": valid, "test": test})
    assert measures == pytest.approx({
        "drop/intent_acc": -0.05, "drop/slot_f1": 0.15, "drop/combined": 0.05,
        "test/worst_group_min10/combined": 0.40, "test/worst_group_min10/semer": 0.3,
        "test/worst_group_min10/intent_acc": 0.3, "test/worst_group_min10/slot_f1": 0.3,
        "test/worst_group_min10/frame_acc": 0.3})  # valid's one cluster has 4 utterances: none
    assert at_floor("worst_group_min10/combined", 5) == "worst_group_min5/combined"
    assert at_floor("drop/combined", 5) == "drop/combined"


#: docs/architecture.md's recipe "A metric", applied to a copy of the package: a `Metric` in
#: `METRICS` and its key in the tuple of the table that should show it (COMPARE: python -m
#: robustnlu.analysis.compare), in registry.py alone (its count, intent_correct, exists)
RECIPE = {
    '    Metric("frame_acc", ': '    Metric("intent_error", "intent error", higher_is_better=False, '
                             'formula=lambda sums, n: 1 - np.asarray(sums["intent_correct"]) / n),\n    Metric("frame_acc", ',
    'COMPARE = ("combined", ': 'COMPARE = ("intent_error", "combined", ',
}
USE_IT = textwrap.dedent("""
    import robustnlu
    from robustnlu.analysis.compare import comparison_table
    from robustnlu.metrics.slu import SLUMetrics

    assert robustnlu.__file__.startswith(sys.argv[1]), robustnlu.__file__
    metrics = SLUMetrics(intents=["play", "book"])
    metrics.update(["play", "book"], ["play", "play"], [["B-a", "O"], ["O"]], [["B-a", "O"], ["B-b"]])
    test = metrics.compute()
    print(test["intent_error"])
    print(comparison_table([{"metrics": {"test": test, "valid": test}}], ["run"]).splitlines()[0])
""")


def test_the_metric_recipe_adds_a_metric_every_part_computes_and_shows(tmp_path):
    """In a copy of robustnlu/ (imported in a subprocess), SLUMetrics computes the new metric
    from its formula (1 of 2 intents right: 0.5) and the comparison table titles a column with it."""
    shutil.copytree(REPO / "robustnlu", tmp_path / "robustnlu", ignore=shutil.ignore_patterns("__pycache__"))
    registry = tmp_path / "robustnlu" / "metrics" / "registry.py"
    text = registry.read_text()
    for anchor, edit in RECIPE.items():
        assert text.count(anchor) == 1, anchor
        text = text.replace(anchor, edit)
    registry.write_text(text)
    proc = subprocess.run([sys.executable, "-c", f"import sys\n{USE_IT}", str(tmp_path)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    value, head = proc.stdout.splitlines()
    assert float(value) == 0.5
    assert head.split()[1:3] == ["intent", "error"]
