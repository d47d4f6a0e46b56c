"""`robustnlu.analysis.significance`: metrics from counts, approximate randomization against the
exact permutation test, pairing by uid, loading predictions."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest
from seqeval.metrics import f1_score

from robustnlu.analysis import significance as sig
from robustnlu.analysis.significance import (
    PairedCounts,
    approximate_randomization,
    counts_array,
    exact_permutation_test,
    family_wise_error,
    metric_from_sums,
    paired_counts,
)
from robustnlu.metrics.registry import PER_GROUP
from robustnlu.metrics.slu import SLUMetrics

INTENTS = ("play", "weather", "book")
TAGS = ("O", "O", "O", "B-artist", "I-artist", "B-city", "I-city", "B-date")


def random_rows(rng: random.Random, n: int, *, p_intent: float = 0.7, p_tags: float = 0.6, gold=None):
    """n prediction rows; with ``gold`` (rows), reuse their uids and gold labels."""
    rows = []
    for i in range(n):
        if gold is None:
            length = rng.randint(1, 7)
            uid, tokens = f"u{i:03d}", [f"w{j}" for j in range(length)]
            gold_intent, gold_tags = rng.choice(INTENTS), [rng.choice(TAGS) for _ in range(length)]
        else:
            uid, tokens, gold_intent, gold_tags = (gold[i][k] for k in ("uid", "tokens", "gold_intent", "gold_tags"))
        pred_intent = gold_intent if rng.random() < p_intent else rng.choice(INTENTS)
        # Copy gold tags, or perturb some (may produce conlleval-repaired I- after O).
        pred_tags = list(gold_tags) if rng.random() < p_tags else [
            t if rng.random() < 0.6 else rng.choice(TAGS) for t in gold_tags]
        rows.append({"uid": uid, "tokens": tokens, "gold_intent": gold_intent, "pred_intent": pred_intent,
                     "gold_tags": list(gold_tags), "pred_tags": pred_tags, "group": -1})
    return rows


def pair(n: int, seed: int, **kwargs):
    rng = random.Random(seed)
    a = random_rows(rng, n, **kwargs)
    b = random_rows(rng, n, gold=a, **kwargs)
    return a, b


def slu_compute(rows) -> dict[str, float]:
    metric = SLUMetrics(INTENTS)
    metric.update([r["pred_intent"] for r in rows], [r["gold_intent"] for r in rows],
                  [r["pred_tags"] for r in rows], [r["gold_tags"] for r in rows])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ill-defined slot F1 warning of span-free sets
        return metric.compute()


def from_counts(rows, name: str) -> float:
    return metric_from_sums(name, counts_array(rows).sum(axis=0), len(rows))


@pytest.mark.parametrize("seed", range(6))
def test_metrics_from_summed_counts_equal_slumetrics_and_seqeval(seed):
    rows = random_rows(random.Random(seed), 40 + seed)
    expected = slu_compute(rows)
    for name in PER_GROUP:
        assert from_counts(rows, name) == pytest.approx(expected[name], abs=1e-12), name
    seqeval_f1 = f1_score([r["gold_tags"] for r in rows], [r["pred_tags"] for r in rows])
    assert from_counts(rows, "slot_f1") == pytest.approx(seqeval_f1, abs=1e-12)


def test_metrics_from_counts_without_any_span_follow_the_zero_convention():
    rows = [{"uid": f"u{i}", "gold_intent": "play", "pred_intent": "play" if i else "book",
             "gold_tags": ["O", "O"], "pred_tags": ["O", "O"]} for i in range(4)]
    expected = slu_compute(rows)
    assert from_counts(rows, "slot_f1") == expected["slot_f1"] == 0.0
    assert from_counts(rows, "combined") == pytest.approx(expected["combined"]) == pytest.approx(0.375)
    assert from_counts(rows, "semer") == pytest.approx(expected["semer"]) == pytest.approx(0.25)


def test_metric_from_sums_is_vectorised_over_leading_axes():
    rows = random_rows(random.Random(7), 30)
    sums = counts_array(rows).sum(axis=0)
    stacked = np.stack([sums, sums])
    for name in PER_GROUP:
        values = metric_from_sums(name, stacked, len(rows))
        assert values.shape == (2,) and values[0] == values[1] == from_counts(rows, name)


def brute_force_p(a, b, name: str) -> float:
    """p over all 2^n swaps of the n utterances, each metric by SLUMetrics (no shortcuts)."""
    observed = abs(slu_compute(a)[name] - slu_compute(b)[name])
    n, extreme = len(a), 0
    for code in range(1 << n):
        sa = [b[i] if code >> i & 1 else a[i] for i in range(n)]
        sb = [a[i] if code >> i & 1 else b[i] for i in range(n)]
        extreme += abs(slu_compute(sa)[name] - slu_compute(sb)[name]) >= observed - 1e-12
    return extreme / (1 << n)


def test_exact_test_equals_brute_force_enumeration_of_all_swaps():
    # 7 utterances, some with identical predictions (left out of the enumeration by the exact
    # test, which must not change p): 2^7 = 128 swaps recomputed with SLUMetrics.
    a, b = pair(7, seed=3, p_intent=0.5, p_tags=0.5)
    b[0] = {**a[0]}  # identical on one utterance
    for name in ("intent_acc", "slot_f1", "semer"):
        result = exact_permutation_test(a, b, name)
        assert result.p_value == pytest.approx(brute_force_p(a, b, name), abs=1e-12), name


@pytest.mark.parametrize("seed", [3, 5])  # exact p between 0.014 and 0.38 (and 1.0 once)
@pytest.mark.parametrize("name", ["intent_acc", "slot_f1", "combined", "semer", "frame_acc"])
def test_approximate_randomization_agrees_with_the_exact_test(name, seed):
    # n = 14, all utterances differ in intent correctness or tags: the exact test enumerates all
    # 2^14 swaps. With R rounds the sd of p-hat is sqrt(p (1 - p) / R); allow 4 sd (with p(1-p)
    # floored at 0.01 for p near 0 or 1) plus the add-one bias, at most (1 - p) / (R + 1).
    rng = random.Random(seed)
    a = random_rows(rng, 14, p_intent=0.9, p_tags=0.8)
    b = random_rows(rng, 14, gold=a, p_intent=0.4, p_tags=0.3)
    for row_a, row_b in zip(a, b):  # make every utterance differ: flip B's intent correctness
        if counts_array([row_a]).tolist() == counts_array([row_b]).tolist():
            wrong = next(i for i in INTENTS if i != row_b["gold_intent"])
            row_b["pred_intent"] = wrong if row_b["pred_intent"] == row_b["gold_intent"] else row_b["gold_intent"]
    exact = exact_permutation_test(a, b, name)
    assert exact.rounds == 2**14
    rounds = 4000
    approx = approximate_randomization(a, b, name, rounds=rounds, seed=1)
    p = exact.p_value
    tolerance = 4 * math.sqrt(max(p * (1 - p), 0.01) / rounds) + (1 - p) / (rounds + 1)
    assert abs(approx.p_value - p) <= tolerance, (name, approx.p_value, p)
    assert (approx.value_a, approx.value_b, approx.difference) == (exact.value_a, exact.value_b, exact.difference)
    assert approx.rounds == rounds and approx.n == exact.n == 14


def test_identical_systems_have_p_one():
    a, _ = pair(25, seed=2)
    b = [dict(row) for row in reversed(a)]  # same predictions, other order
    for name in PER_GROUP:
        assert approximate_randomization(a, b, name, rounds=200).p_value == 1.0
        assert exact_permutation_test(a, b, name).p_value == 1.0


def test_a_clearly_better_system_is_significant():
    rows_a, rows_b = [], []
    for i in range(200):
        gold = {"uid": f"u{i}", "gold_intent": "play", "gold_tags": ["O"]}
        rows_a.append({**gold, "pred_intent": "play" if i < 190 else "book", "pred_tags": ["O"]})
        rows_b.append({**gold, "pred_intent": "play" if i < 100 else "book", "pred_tags": ["O"]})
    result = approximate_randomization(rows_a, rows_b, "intent_acc", rounds=2000, seed=0)
    assert result.value_a == pytest.approx(0.95) and result.value_b == pytest.approx(0.5)
    assert result.p_value < 0.01 and result.significant() and result.a_is_better
    assert result.p_value == pytest.approx(1 / 2001)  # no shuffle as extreme: add-one only


def test_p_value_is_deterministic_given_the_seed_and_independent_of_blocking(monkeypatch):
    a, b = pair(60, seed=5, p_intent=0.6)
    first = approximate_randomization(a, b, "combined", rounds=1500, seed=42)
    assert approximate_randomization(a, b, "combined", rounds=1500, seed=42) == first
    monkeypatch.setattr(sig, "_BLOCK_ELEMENTS", 97)  # many small blocks of masks
    assert approximate_randomization(a, b, "combined", rounds=1500, seed=42) == first


def test_the_test_is_two_sided_and_symmetric():
    a, b = pair(40, seed=8, p_intent=0.6)
    ab = approximate_randomization(a, b, "semer", rounds=1000, seed=3)
    ba = approximate_randomization(b, a, "semer", rounds=1000, seed=3)
    assert ab.difference == -ba.difference and ab.p_value == ba.p_value
    # semer: lower is better
    assert ab.a_is_better == (ab.value_a < ab.value_b)


def test_paired_counts_can_be_reused_for_several_metrics():
    a, b = pair(30, seed=9)
    pairs = paired_counts(a, b)
    assert isinstance(pairs, PairedCounts) and pairs.a.dtype == np.int64 and pairs.a.shape == (30, 6)
    for name in ("intent_acc", "slot_f1"):
        assert approximate_randomization(pairs, None, name, rounds=300) == approximate_randomization(a, b, name, rounds=300)


def test_mismatched_uids_and_gold_labels_are_named():
    a, b = pair(10, seed=4)
    with pytest.raises(ValueError, match="'u003'.*in the predictions of A but not of B"):
        paired_counts(a, [r for r in b if r["uid"] != "u003"])
    with pytest.raises(ValueError, match="'extra'.*in the predictions of B but not of A"):
        approximate_randomization(a, [*b, {**b[0], "uid": "extra"}], "intent_acc", rounds=10)
    with pytest.raises(ValueError, match="'u002' occurs twice"):
        paired_counts([*a, a[2]], b)
    wrong_gold = [dict(r) for r in b]
    wrong_gold[5] = {**wrong_gold[5], "gold_intent": "other"}
    with pytest.raises(ValueError, match="'u005': gold intent"):
        paired_counts(a, wrong_gold)
    wrong_tags = [dict(r) for r in b]
    wrong_tags[6] = {**wrong_tags[6], "gold_tags": ["O"] * len(wrong_tags[6]["gold_tags"])}
    assert wrong_tags[6]["gold_tags"] != a[6]["gold_tags"]
    with pytest.raises(ValueError, match="'u006': the gold tags differ"):
        paired_counts(a, wrong_tags)
    with pytest.raises(ValueError, match="unknown metric"):
        approximate_randomization(a, b, "accuracy")


def test_exact_test_refuses_too_many_differing_utterances():
    rows_a = [{"uid": f"u{i}", "gold_intent": "play", "pred_intent": "play", "gold_tags": ["O"], "pred_tags": ["O"]}
              for i in range(21)]
    rows_b = [{**r, "pred_intent": "book"} for r in rows_a]
    with pytest.raises(ValueError, match="21 utterances differ"):
        exact_permutation_test(rows_a, rows_b, "intent_acc")


def test_family_wise_error_of_the_core_paper():
    assert round(family_wise_error(0.05, 4), 3) == 0.185
    assert family_wise_error(0.05, 1) == pytest.approx(0.05)
    assert family_wise_error(0.05, 0) == 0.0
