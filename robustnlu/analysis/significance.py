"""Paired significance tests between two runs' predictions: approximate randomization
(Noreen, 1989, *Computer-Intensive Methods for Testing Hypotheses*) and, for tiny sets, the
exact permutation test it approximates.

Core paper, section 5.2: "We computed significance with p < 0.05 between models with
approximate randomization (Noreen, 1989). Due to the repetition with different random seeds,
this effectively results in a family-wise error rate of 0.185." Each scenario's result is the
average of four models per method (the two best hyperparameter settings × two seeds), and
0.185 = 1 − 0.95⁴ (`family_wise_error`): four paired tests per method and scenario, taken as
independent. Tests that share a model are not; for them `family_wise_error` gives the union bound.

Pairing rule (the contract a report builds on): **tests are paired by utterance uid between two
runs; the report compares each of a method's models with the ERM model of the same seed.**
Both runs must hold exactly the same uids with the same gold intent and gold tags
(`paired_counts` raises ValueError otherwise); the order of the rows does not matter.

The statistic is two-sided: t = |metric(A) − metric(B)|, the metric recomputed on the whole
test set (corpus-level, e.g. micro slot F1) after each shuffle. A shuffle swaps, independently
for every utterance with probability 1/2, the predictions of A and B (the null hypothesis: the
two systems are exchangeable). Every supported metric is a function of column sums of
per-utterance integer counts (`robustnlu.metrics.counts.utterance_counts`), so the counts are
computed once and every round is a matrix product: with D = counts(B) − counts(A) and a 0/1
swap mask M (rounds × utterances), the shuffled sums are Σ A + M·D and Σ B − M·D. Utterances on
which A and B have identical counts cannot change any sum when swapped and are left out of the
masks; this does not change the distribution of the statistic.

- `approximate_randomization`: R random shuffles; p = (c + 1) / (R + 1), c = #{shuffles with
  t ≥ t_observed} (Noreen's add-one: the observed assignment counts as one of the shuffles, so
  p is never 0 and is a valid, slightly conservative p-value; identical systems give p = 1).
- `exact_permutation_test`: all 2^m assignments of the m utterances whose counts differ
  (m ≤ 20), p = #{assignments with t ≥ t_observed} / 2^m, which equals the fraction over all
  2^n swaps of the n utterances. With R rounds the Monte-Carlo standard deviation of the
  approximate p is sqrt(p (1 − p) / R).

"t ≥ t_observed" is evaluated with a relative tolerance of 1e-12 (`TIE_TOLERANCE`), so that
shuffles whose metric equals the observed one mathematically but differs by float rounding
count as ties (as they must).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from robustnlu.metrics.registry import METRICS, PER_GROUP
from robustnlu.metrics.counts import UtteranceCounts, utterance_counts

#: Columns of a count array: the fields of `UtteranceCounts`, in order.
COUNT_COLUMNS = UtteranceCounts._fields
#: |diff| ≥ observed is tested as |diff| ≥ observed − TIE_TOLERANCE · max(1, observed).
TIE_TOLERANCE = 1e-12
#: Most utterances with differing counts `exact_permutation_test` enumerates (2^20 swaps).
EXACT_MAX = 20
#: Elements (rounds × utterances) of one block of swap masks, to bound memory.
_BLOCK_ELEMENTS = 1 << 22


def family_wise_error(alpha: float, k: int, independent: bool = True) -> float:
    """Bound on the probability of at least one false positive among k tests at level alpha.
    Independent tests: 1 − (1 − alpha)^k, the core paper's reading (section 5.2: 0.185 is
    ``family_wise_error(0.05, 4)``, 4 models per method and scenario, each tested against ERM).
    Tests that may depend on one another (``independent=False``, e.g. two tests against one ERM
    model): the union (Bonferroni) bound min(1, k · alpha), which holds for any dependence."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return 1.0 - (1.0 - alpha) ** k if independent else min(1.0, k * alpha)


@dataclass(frozen=True)
class PairedCounts:
    """Two systems' per-utterance counts on the same utterances, row i = ``uids[i]``.

    ``a`` and ``b`` are int64 arrays of shape (n, len(COUNT_COLUMNS)).
    """

    uids: tuple[str, ...]
    a: np.ndarray
    b: np.ndarray

    @property
    def n(self) -> int:
        return len(self.uids)


@dataclass(frozen=True)
class SignificanceResult:
    """Outcome of a paired test of system A against system B on one metric.

    ``difference`` is value_a − value_b (for semer a negative difference means A is better);
    ``p_value`` is two-sided; ``rounds`` is the number of shuffles (for the exact test, the
    2^m enumerated assignments); ``n`` the number of paired utterances.
    """

    metric: str
    value_a: float
    value_b: float
    difference: float
    p_value: float
    rounds: int
    n: int

    def significant(self, alpha: float = 0.05) -> bool:
        """p < alpha (the core paper uses alpha = 0.05)."""
        return self.p_value < alpha

    @property
    def a_is_better(self) -> bool:
        """Whether A scores better than B (higher, or lower for semer)."""
        return METRICS[self.metric].better(self.difference, 0.0)


def _check_metric(metric: str) -> None:
    if metric not in PER_GROUP:  # the metrics the tests support: each a formula of summed counts
        raise ValueError(f"unknown metric {metric!r}; supported: {', '.join(PER_GROUP)}")


def metric_from_sums(metric: str, sums: np.ndarray, n: int) -> np.ndarray | float:
    """A corpus metric from summed counts, by the formula `SLUMetrics.compute` uses
    (`robustnlu.metrics.registry`).

    ``sums`` has `COUNT_COLUMNS` on its last axis (any leading shape, e.g. one row per shuffle);
    ``n`` is the number of utterances summed.
    """
    _check_metric(metric)
    if n <= 0:
        raise ValueError("a metric needs at least one utterance")
    sums = np.asarray(sums, dtype=np.float64)
    value = METRICS[metric].formula({name: sums[..., i] for i, name in enumerate(COUNT_COLUMNS)}, n)
    return float(value) if np.ndim(value) == 0 else value


def counts_array(rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """(n, len(COUNT_COLUMNS)) int64 counts of prediction rows, in their order."""
    out = np.zeros((len(rows), len(COUNT_COLUMNS)), dtype=np.int64)
    for i, row in enumerate(rows):
        try:
            out[i] = utterance_counts(row["pred_intent"], row["gold_intent"], row["pred_tags"], row["gold_tags"])
        except ValueError as err:
            raise ValueError(f"uid {row.get('uid')!r}: {err}") from None
    return out


def _by_uid(rows: Sequence[Mapping[str, Any]], name: str) -> dict[str, Mapping[str, Any]]:
    index: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        uid = row["uid"]
        if uid in index:
            raise ValueError(f"uid {uid!r} occurs twice in the predictions of system {name}")
        index[uid] = row
    return index


def paired_counts(a_rows: Sequence[Mapping[str, Any]], b_rows: Sequence[Mapping[str, Any]]) -> PairedCounts:
    """Pair two systems' prediction rows by uid and count each utterance for both.

    Rows are dicts as in ``predictions/<split>.jsonl`` (uid, gold_intent, pred_intent,
    gold_tags, pred_tags; other keys are ignored). The pairs follow A's row order. Raises
    ValueError naming the first uid (in A's order, then B's) that is duplicated, missing from
    the other system, or has a different gold intent or gold tags in the two systems.
    """
    a_index, b_index = _by_uid(a_rows, "A"), _by_uid(b_rows, "B")
    for uid in a_index:
        if uid not in b_index:
            raise ValueError(f"uid {uid!r} is in the predictions of A but not of B; tests pair utterances by uid")
    for uid in b_index:
        if uid not in a_index:
            raise ValueError(f"uid {uid!r} is in the predictions of B but not of A; tests pair utterances by uid")
    if not a_index:
        raise ValueError("no utterances to compare")
    uids = tuple(a_index)
    b_sorted = [b_index[uid] for uid in uids]
    for uid, a, b in zip(uids, a_index.values(), b_sorted, strict=True):
        if a["gold_intent"] != b["gold_intent"]:
            raise ValueError(f"uid {uid!r}: gold intent {a['gold_intent']!r} in A but {b['gold_intent']!r} in B")
        if list(a["gold_tags"]) != list(b["gold_tags"]):
            raise ValueError(f"uid {uid!r}: the gold tags differ between A and B")
    return PairedCounts(uids=uids, a=counts_array(list(a_index.values())), b=counts_array(b_sorted))


def _as_paired(a_rows, b_rows) -> PairedCounts:
    if isinstance(a_rows, PairedCounts):
        if b_rows is not None:
            raise ValueError("pass b_rows=None together with a PairedCounts")
        return a_rows
    return paired_counts(a_rows, b_rows)


def _stats(metric: str, sum_a: np.ndarray, sum_b: np.ndarray, d: np.ndarray, masks: np.ndarray, n: int) -> np.ndarray:
    """|metric(A') − metric(B')| for each row of 0/1 ``masks`` (1 = swap that utterance)."""
    delta = masks @ d  # float64 products of small integers: exact
    return np.abs(metric_from_sums(metric, sum_a + delta, n) - metric_from_sums(metric, sum_b - delta, n))


class _Setup:
    """Observed values and the differing utterances of a paired test."""

    def __init__(self, pairs: PairedCounts, metric: str):
        _check_metric(metric)
        self.metric, self.n = metric, pairs.n
        if self.n == 0:
            raise ValueError("no utterances to compare")
        a, b = pairs.a.astype(np.float64), pairs.b.astype(np.float64)
        self.sum_a, self.sum_b = a.sum(axis=0), b.sum(axis=0)
        self.value_a = metric_from_sums(metric, self.sum_a, self.n)
        self.value_b = metric_from_sums(metric, self.sum_b, self.n)
        differs = np.any(pairs.a != pairs.b, axis=1)
        self.d = (b - a)[differs]  # only these utterances can change a sum when swapped
        self.m = int(differs.sum())
        observed = abs(self.value_a - self.value_b)
        self.threshold = observed - TIE_TOLERANCE * max(1.0, observed)

    def result(self, p_value: float, rounds: int) -> SignificanceResult:
        return SignificanceResult(self.metric, self.value_a, self.value_b, self.value_a - self.value_b,
                                  p_value, rounds, self.n)

    def count_extreme(self, masks: np.ndarray) -> int:
        return int(np.count_nonzero(_stats(self.metric, self.sum_a, self.sum_b, self.d, masks, self.n) >= self.threshold))


def approximate_randomization(
    a_rows: Sequence[Mapping[str, Any]] | PairedCounts,
    b_rows: Sequence[Mapping[str, Any]] | None,
    metric: str,
    rounds: int = 10_000,
    seed: int = 0,
) -> SignificanceResult:
    """Two-sided approximate randomization test (Noreen, 1989) of |metric(A) − metric(B)|.

    Paired by utterance uid (see the module docstring: the report compares each of a method's
    models with the ERM model of the same seed). Each of ``rounds`` shuffles swaps A's and B's
    predictions of every utterance independently with probability 1/2 and recomputes the corpus
    metric of both; p = (c + 1) / (rounds + 1) where c counts the shuffles whose |difference|
    is at least the observed one (Noreen's add-one). Deterministic given ``seed`` (a numpy
    ``Generator``). ``a_rows`` may be a `PairedCounts` (with ``b_rows=None``) to test several
    metrics without recounting. The Monte-Carlo sd of p is about sqrt(p (1 − p) / rounds).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    setup = _Setup(_as_paired(a_rows, b_rows), metric)
    if setup.m == 0:  # every shuffle reproduces the observed (zero) difference
        return setup.result(1.0, rounds)
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_ELEMENTS // setup.m)
    extreme = 0
    for start in range(0, rounds, block):
        size = min(block, rounds - start)
        # One uniform double per (round, utterance): the stream does not depend on the blocking.
        masks = (rng.random((size, setup.m)) < 0.5).astype(np.float64)
        extreme += setup.count_extreme(masks)
    return setup.result((extreme + 1) / (rounds + 1), rounds)


def exact_permutation_test(
    a_rows: Sequence[Mapping[str, Any]] | PairedCounts,
    b_rows: Sequence[Mapping[str, Any]] | None,
    metric: str,
) -> SignificanceResult:
    """The exact paired permutation test that `approximate_randomization` samples from.

    Enumerates all 2^m swap assignments of the m utterances whose counts differ between A and B
    (utterances with equal counts do not change any statistic, so this equals enumerating all
    2^n swaps of the n utterances); p = #{assignments with |difference| ≥ observed} / 2^m, the
    observed assignment included. Raises ValueError if m > 20 (use approximate randomization).
    ``rounds`` of the result is 2^m.
    """
    setup = _Setup(_as_paired(a_rows, b_rows), metric)
    m = setup.m
    if m > EXACT_MAX:
        raise ValueError(f"{m} utterances differ between A and B: 2^{m} assignments are too many for "
                         f"the exact test (at most {EXACT_MAX}); use approximate_randomization")
    total = 1 << m
    bits = np.arange(m, dtype=np.int64)
    block = max(1, _BLOCK_ELEMENTS // max(m, 1))
    extreme = 0
    for start in range(0, total, block):
        codes = np.arange(start, min(start + block, total), dtype=np.int64)
        masks = ((codes[:, None] >> bits) & 1).astype(np.float64)
        extreme += setup.count_extreme(masks)
    return setup.result(extreme / total, total)
