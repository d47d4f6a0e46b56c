"""Statistics and paired tests of a study: per scenario and method the mean / sample std / n of
each metric over the models (`scenario_stats`), the relative change of each mean to ERM's and
the paired approximate randomization tests against ERM (`compare_to_baseline`), and how many
scenarios each method is significantly better / worse in (`significance_counts`).

`scenario_stats` covers the metrics of Table 10 (`robustnlu.metrics.registry.TABLE10`): test
intent accuracy, slot F1, COMBINED, SEMER, MA INT. COMBINED, worst-cluster COMBINED (when the
runs have one) and the valid → test drop of COMBINED, all in %. `compare_to_baseline`: relative
change of each metric's mean to the ERM mean, (m − erm) / erm in % (SEMER: lower is better, so a
positive change is a deterioration), and paired tests of `robustnlu.metrics.registry.TESTED`.
The ERM mean is over the ERM models the method's models are paired with (below): with as many
models per seed as ERM, all of ERM's; while a study is incomplete (ERM has seeds the method has not
run yet) only the matching seeds, so that a change compares like with like.

Pairing rule (`robustnlu.analysis.significance`): tests pair utterances by uid between two
runs, and each of a method's models is tested against the ERM model of the same seed in the same
scenario (several models of one seed, e.g. two hyperparameter settings: paired in the order of
their run paths). A model whose seed has no (unused) ERM model is paired with the remaining ERM
models in sorted (seed, path) order, cycling if ERM has fewer models; such pairs are listed in
the report as "paired by order". Every test uses the same ``seed`` (deterministic given it).

Significance rule (``rule``; default ``any``, the paper's reading): with k paired tests of a
method in a scenario, the method is *significantly better* (worse) than ERM on a metric if the
method's mean of the metric is better (worse) than ERM's (the sign of the relative change, also
where ERM's mean is 0 and the change undefined) and

- ``any``: at least one of the k tests has p < alpha with the method's model better (worse) than
  its ERM partner, and none is significant in the opposite direction. The chance of declaring a
  difference where there is none is then at most the family-wise error of the k tests
  (`Comparison.family_wise_error`): 1 − (1 − alpha)^k for independent tests, the core paper's
  reading (section 5.2: 0.185 for k = 4, alpha = 0.05); where two of the k tests share their ERM
  model (paired by order, cycling) they are not independent, and the bound is the union
  (Bonferroni) bound min(1, k · alpha), which holds for any dependence;
- ``majority``: more than k / 2 tests significant in that direction;
- ``all``: all k tests significant in that direction (the strictest).

Otherwise the method performs "the same" as ERM in the scenario. The counts of scenarios
significantly better / worse (Tables 11-14 "SIGN. 0.05 ERM", Figures 1b, 1c and 2) use COMBINED.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robustnlu.analysis.runs import BASELINE, Run, StudyError
from robustnlu.analysis.significance import (
    PairedCounts,
    SignificanceResult,
    approximate_randomization,
    family_wise_error,
    paired_counts,
)
from robustnlu.metrics.registry import METRICS, MIN_CLUSTER_SIZE, TABLE10, TESTED, relative_change
from robustnlu.scenario import Scenario

RULES = ("any", "majority", "all")


def _mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    mean = float(np.mean(values))
    std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return mean, std


@dataclass
class MethodStats:
    scenario: Scenario
    method: str
    runs: list[Run]
    #: metric key → (mean, sample std) in %, NaN where no run has the metric (std: fewer than 2)
    stats: dict[str, tuple[float, float]]
    #: the worst-cluster COMBINED's minimum cluster size the stats were computed with
    min_cluster_size: int = MIN_CLUSTER_SIZE

    @property
    def n(self) -> int:
        return len(self.runs)


def scenario_stats(grouped: dict[Scenario, dict[str, list[Run]]],
                   min_cluster_size: int = MIN_CLUSTER_SIZE) -> list[MethodStats]:
    rows = []
    for scenario, methods in grouped.items():
        for method, runs in methods.items():
            stats = {key: _mean_std(_percentages(runs, key, min_cluster_size)) for key in TABLE10}
            rows.append(MethodStats(scenario, method, runs, stats, min_cluster_size))
    return rows


def _percentages(runs: Sequence[Run], key: str, min_cluster_size: int) -> list[float]:
    """``key``'s value of each run that has it, in %."""
    return [100.0 * v for v in (r.value(key, min_cluster_size) for r in runs) if v is not None]


@dataclass(frozen=True)
class Pair:
    run: Run
    baseline: Run
    by_seed: bool  # False: paired by sorted order (the seed has no ERM model left)


def pair_models(runs: Sequence[Run], baselines: Sequence[Run]) -> list[Pair]:
    """Each of ``runs`` with an ERM model of the same seed (the pairing rule in the module
    docstring); the others with the unused ERM models in sorted order, cycling if needed."""
    if not baselines:
        return []
    by_seed: dict[int, list[Run]] = defaultdict(list)
    for b in sorted(baselines, key=lambda r: (r.seed, str(r.path))):
        by_seed[b.seed].append(b)
    used: set[Path] = set()
    pairs: dict[Path, Pair] = {}
    leftovers = []
    for run in sorted(runs, key=lambda r: (r.seed, str(r.path))):
        candidates = [b for b in by_seed.get(run.seed, []) if b.path not in used]
        if candidates:
            used.add(candidates[0].path)
            pairs[run.path] = Pair(run, candidates[0], True)
        else:
            leftovers.append(run)
    ordered = sorted(baselines, key=lambda r: (r.seed, str(r.path)))
    spare = [b for b in ordered if b.path not in used] or ordered
    for i, run in enumerate(leftovers):
        pairs[run.path] = Pair(run, spare[i % len(spare)], False)
    return [pairs[r.path] for r in sorted(runs, key=lambda r: (r.seed, str(r.path)))]


@dataclass
class Verdict:
    """The paired tests of one metric for one method in one scenario and the rule's decision."""

    metric: str
    tests: list[SignificanceResult]
    difference: float  # of the means, method − ERM, in points (the means are percentages)
    decision: str  # "better" | "worse" | "same" | "n/a"
    n_better: int  # tests with p < alpha and the method's model better
    n_worse: int


def _improves(metric: str, difference: float) -> bool | None:
    if not difference or math.isnan(difference):
        return None
    return METRICS[metric].better(difference, 0.0)


def decide(metric: str, difference: float, tests: Sequence[SignificanceResult], alpha: float, rule: str) -> Verdict:
    """Apply ``rule`` (module docstring) to the k paired tests of one metric; ``difference``: the
    method's mean minus ERM's, whose sign is the direction (also where ERM's mean is 0 and the
    relative change undefined)."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {', '.join(RULES)}")
    n_better = sum(t.significant(alpha) and t.a_is_better for t in tests)
    n_worse = sum(t.significant(alpha) and not t.a_is_better and t.difference != 0 for t in tests)
    k = len(tests)
    if not k:
        return Verdict(metric, list(tests), difference, "n/a", 0, 0)
    direction = _improves(metric, difference)
    decision = "same"
    if direction is not None:
        agree, against = (n_better, n_worse) if direction else (n_worse, n_better)
        ok = {"any": agree >= 1 and against == 0, "majority": agree > k / 2, "all": agree == k}[rule]
        if ok:
            decision = "better" if direction else "worse"
    return Verdict(metric, list(tests), difference, decision, n_better, n_worse)


@dataclass
class Comparison:
    scenario: Scenario
    method: str
    n: int
    pairs: list[Pair]
    #: metric key (TABLE10) → the method's mean in %
    means: dict[str, float]
    #: metric key (TABLE10) → relative change of the mean to ERM in %
    changes: dict[str, float]
    #: metric key (TABLE10) → ERM's mean in % that ``changes`` are relative to (over the ERM models
    #: paired with the method's: the same seeds)
    baseline: dict[str, float]
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return len(self.pairs)

    @property
    def shares_erm_model(self) -> bool:
        """Whether two of the k tests are against one ERM model (paired by order, cycling): they
        are then not independent."""
        return len({p.baseline.path for p in self.pairs}) < self.k

    def family_wise_error(self, alpha: float) -> float:
        """The bound on a false "better" / "worse" from the k tests (module docstring)."""
        return family_wise_error(alpha, self.k, independent=not self.shares_erm_model)


def compare_to_baseline(stats: Sequence[MethodStats], alpha: float = 0.05, rounds: int = 10_000, seed: int = 0,
                        rule: str = "any", split: str = "test") -> list[Comparison]:
    """Relative changes to ERM and the paired tests, one `Comparison` per scenario and method
    (ERM's own rows: zero change, no tests; a scenario without ERM: NaN, no tests)."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {', '.join(RULES)}")
    base = {s.scenario: s for s in stats if s.method == BASELINE}
    predictions: dict[Path, list[dict[str, Any]]] = {}

    def rows(run: Run) -> list[dict[str, Any]]:
        if run.path not in predictions:
            predictions[run.path] = run.dir.predictions(split)
        return predictions[run.path]

    out = []
    for s in stats:
        erm = base.get(s.scenario)
        pairs = pair_models(s.runs, erm.runs) if erm is not None and s.method != BASELINE else []
        # ERM's mean over the models paired with this method's (all of ERM's for ERM itself)
        partners = list({p.baseline.path: p.baseline for p in pairs}.values()) if pairs else (erm.runs if erm else [])
        baseline = {key: _mean_std(_percentages(partners, key, s.min_cluster_size))[0] for key in TABLE10}
        means = {key: s.stats[key][0] for key in TABLE10}
        changes = {key: relative_change(means[key], baseline[key]) for key in TABLE10}
        comparison = Comparison(s.scenario, s.method, s.n, [], means, changes, baseline)
        if pairs:
            comparison.pairs = pairs
            tests: dict[str, list[SignificanceResult]] = {m: [] for m in TESTED}
            for pair in comparison.pairs:
                try:
                    counts: PairedCounts = paired_counts(rows(pair.run), rows(pair.baseline))
                except ValueError as err:
                    raise StudyError(f"{pair.run.path} vs {pair.baseline.path}: {err}") from None
                for metric in TESTED:
                    tests[metric].append(approximate_randomization(counts, None, metric, rounds, seed))
            comparison.verdicts = {m: decide(m, s.stats[m][0] - baseline[m], tests[m], alpha, rule) for m in TESTED}
        out.append(comparison)
    return out


#: groups of scenarios the counts are split by: (title, function of a scenario)
COUNT_GROUPS = (
    ("all", lambda s: "all"),
    ("dataset", lambda s: s.dataset),
    ("drift", lambda s: s.drift),
    ("amount", lambda s: s.amount),
    ("validation", lambda s: s.validation),
)


def significance_counts(comparisons: Sequence[Comparison], metric: str = TESTED[0]) -> list[dict[str, Any]]:
    """Per non-ERM method and group of scenarios (all; per dataset, drift kind, full/partial,
    i.i.d./o.o.d. validation): scenarios tested, significantly better, worse, same on ``metric``."""
    rows = []
    methods = sorted({c.method for c in comparisons if c.method != BASELINE})
    for method in methods:
        tested = [c for c in comparisons if c.method == method and metric in c.verdicts
                  and c.verdicts[metric].decision != "n/a"]
        for group, key in COUNT_GROUPS:
            for value in sorted({key(c.scenario) for c in tested}):
                members = [c for c in tested if key(c.scenario) == value]
                decisions = [c.verdicts[metric].decision for c in members]
                rows.append({"method": method, "metric": metric, "group": group, "value": value,
                             "scenarios": len(members),
                             "better": decisions.count("better"), "worse": decisions.count("worse"),
                             "same": decisions.count("same")})
    return rows
