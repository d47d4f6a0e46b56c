"""The study report of a sweep (core paper section 5, Appendix D Tables 10-14, Figures 1 and 2):
`python -m robustnlu.report` is the command line; every computation lives here.

Scenario = (dataset, drift kind, partial, validation): per dataset {slot value, slot context}
drift × {full, partial} × {i.i.d., o.o.d.} validation = 8 scenarios (section 5). A *model* is one
finished run (a directory holding ``results.json``); the paper averages four models per method and
scenario (two hyperparameter settings × two seeds).

- `discover`: run directories found recursively under the given directories, plus the runs that
  did not finish (``status.json`` says failed, interrupted or running, or there is no ``results.json``).
- `scenario_stats`: per scenario and method, mean / sample std / n over the models of the test
  intent accuracy, slot F1, COMBINED, SEMER, MA INT. COMBINED, worst-cluster COMBINED (when the
  runs have one) and the valid → test drop of COMBINED (Table 10), all in %.
- `worst_cluster`: the worst-cluster figures count only test clusters of at least
  ``min_cluster_size`` utterances (default `MIN_CLUSTER_SIZE` = 10), so that clusters of 1-2
  test utterances do not decide them.
- `compare_to_baseline`: relative change of each metric's mean to the ERM mean,
  (m − erm) / erm in % (SEMER: lower is better, so a positive change is a deterioration), and
  paired approximate randomization tests on the test predictions.

Pairing rule (`robustnlu.analysis.significance`): tests pair utterances by uid between two
runs, and each of a method's models is tested against the ERM model of the same seed in the same
scenario (several models of one seed, e.g. two hyperparameter settings: paired in the order of
their run paths). A model whose seed has no (unused) ERM model is paired with the remaining ERM
models in sorted (seed, path) order, cycling if ERM has fewer models; such pairs are listed in
the report as "paired by order". Every test uses the same ``seed`` (deterministic given it).

Significance rule (``rule``; default ``any``, the paper's reading): with k paired tests of a
method in a scenario, the method is *significantly better* (worse) than ERM on a metric if the
relative change of the metric's mean is an improvement (deterioration) and

- ``any``: at least one of the k tests has p < alpha with the method's model better (worse) than
  its ERM partner, and none is significant in the opposite direction. The chance of declaring a
  difference where there is none is then at most the family-wise error 1 − (1 − alpha)^k
  (`family_wise_error`; the paper's 0.185 for k = 4, alpha = 0.05);
- ``majority``: more than k / 2 tests significant in that direction;
- ``all``: all k tests significant in that direction (the strictest).

Otherwise the method performs "the same" as ERM in the scenario. The counts of scenarios
significantly better / worse (Tables 11-14 "SIGN. 0.05 ERM", Figures 1b, 1c and 2) use COMBINED.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robustnlu.analysis.significance import (
    PairedCounts,
    SignificanceResult,
    approximate_randomization,
    family_wise_error,
    load_predictions,
    paired_counts,
)
from robustnlu.errors import DataError, RobustNLUError
from robustnlu.io import atomic_write_text, atomic_write_with
from robustnlu.metrics.slu import GROUP_METRICS

BASELINE = "erm"
#: (key in metrics[split], column title, higher is better); "drop" is valid − test COMBINED
STAT_METRICS = (
    ("intent_acc", "intent acc", True),
    ("slot_f1", "slot F1", True),
    ("combined", "COMBINED", True),
    ("semer", "SEMER", False),
    ("ma_intent_combined", "MA INT. COMBINED", True),
    ("worst_group/combined", "worst-cluster COMBINED", True),
    ("drop", "drop valid→test COMBINED", False),
)
#: metrics tested by approximate randomization; the first decides the counts (the paper's main)
TESTED_METRICS = ("combined", "intent_acc", "slot_f1", "semer")
RULES = ("any", "majority", "all")
#: Smallest SeqDrift cluster (test utterances) the worst-cluster figures consider. Without a floor,
#: clusters of 1-2 test utterances decide them (issue 17: on a real ATIS grid the worst-cluster
#: COMBINED read 0.00 in every slot-context and 50.00 in every slot-value scenario, for every
#: method). 10: the paper's groups are "as little as 10 examples" (core paper section 5.2, Discussion).
MIN_CLUSTER_SIZE = 10
#: sub-directories of a run directory that never hold runs (not walked)
_RUN_SUBDIRS = {"checkpoints", "predictions", "csv", "wandb", ".hydra"}


class StudyError(RobustNLUError):
    """Input a report cannot be built from (names the directory)."""


@dataclass(frozen=True, order=True)
class Scenario:
    dataset: str
    drift: str
    partial: bool
    validation: str

    @property
    def amount(self) -> str:
        return "partial" if self.partial else "full"

    @property
    def label(self) -> str:
        """e.g. ``slot_context full iid`` (the dataset not included)."""
        return f"{self.drift} {self.amount} {self.validation}"

    def as_row(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "drift": self.drift, "amount": self.amount, "validation": self.validation}


@dataclass(frozen=True)
class Run:
    path: Path
    results: dict[str, Any]

    @property
    def method(self) -> str:
        return str(self.results["method"])

    @property
    def seed(self) -> int:
        return int(self.results["seed"])

    @property
    def scenario(self) -> Scenario:
        drift = self.results["drift"]
        return Scenario(str(self.results["dataset"]), str(drift["kind"]), bool(drift.get("partial", False)),
                        str(drift.get("validation", "")))

    def value(self, key: str, min_cluster_size: int = MIN_CLUSTER_SIZE) -> float | None:
        """A test metric (``drop``: valid − test COMBINED; ``worst_group/<m>``: over the clusters
        of at least ``min_cluster_size`` test utterances, `worst_cluster`), None if the run lacks it."""
        metrics = self.results["metrics"]
        if key == "drop":
            return float(metrics["valid"]["combined"]) - float(metrics["test"]["combined"])
        if key.startswith("worst_group/"):
            return worst_cluster(metrics["test"], key.removeprefix("worst_group/"), min_cluster_size)[0]
        value = metrics["test"].get(key)
        return None if value is None else float(value)


def worst_cluster(metrics: dict[str, Any], metric: str = "combined",
                  min_size: int = MIN_CLUSTER_SIZE) -> tuple[float | None, int, int]:
    """(worst ``metric``, qualifying clusters, all clusters) of one split's metrics: the minimum
    (for semer the maximum) of ``group/<id>/<metric>`` over the clusters whose ``group/<id>/n`` is
    at least ``min_size`` (as `SLUMetrics` writes them); the worst is None if no cluster qualifies."""
    if metric not in GROUP_METRICS:
        raise ValueError(f"unknown cluster metric {metric!r}; one of {', '.join(GROUP_METRICS)}")
    sizes = {key.split("/")[1]: float(v) for key, v in metrics.items()
             if key.startswith("group/") and key.endswith("/n")}
    values = [float(metrics[f"group/{g}/{metric}"]) for g, n in sorted(sizes.items()) if n >= min_size]
    if not values:
        return None, 0, len(sizes)
    return (min(values) if GROUP_METRICS[metric] else max(values)), len(values), len(sizes)


@dataclass(frozen=True)
class Incomplete:
    """A run directory without ``results.json``: state ``failed``, ``running`` (unfinished or
    killed) or what ``status.json`` says; ``error`` as the run recorded it."""

    path: Path
    state: str
    error: str | None


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; `DataError` (file, line, problem) otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(path, err.lineno, f"invalid JSON: {err.msg}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(path, None, f"cannot read: {err}") from None
    if not isinstance(data, dict):
        raise DataError(path, None, "expected a JSON object")
    return data


def walk_run_dirs(root: Path) -> Iterable[Path]:
    """``root`` and its sub-directories, sorted, not descending into a run directory (one with
    ``results.json`` or ``status.json``) nor into a run's own sub-folders."""
    stack = [root]
    while stack:
        folder = stack.pop()
        yield folder
        if (folder / "results.json").is_file() or (folder / "status.json").is_file():
            continue
        children = sorted((p for p in folder.iterdir() if p.is_dir() and p.name not in _RUN_SUBDIRS), reverse=True)
        stack.extend(children)


def discover(paths: Sequence[Path]) -> tuple[list[Run], list[Incomplete]]:
    """Finished runs (``results.json``) and incomplete ones (``status.json`` only) found
    recursively under ``paths``, each once, sorted by path. Raises `StudyError` naming the first
    path that does not exist or holds neither; `DataError` for an unreadable JSON file."""
    seen: set[Path] = set()
    runs: list[Run] = []
    incomplete: list[Incomplete] = []
    for path in paths:
        path = Path(path)
        if not path.is_dir():
            raise StudyError(f"{path}: not a directory")
        found = 0
        for folder in walk_run_dirs(path):
            results, status = folder / "results.json", folder / "status.json"
            if not (results.is_file() or status.is_file()):
                continue
            found += 1
            key = folder.resolve()
            if key in seen:
                continue
            seen.add(key)
            if results.is_file():
                runs.append(Run(folder, read_json_object(results)))
            else:
                info = read_json_object(status)
                state = str(info.get("state", "unknown"))
                if state == "finished":
                    state = "finished without results.json"
                incomplete.append(Incomplete(folder, state, info.get("error")))
        if not found:
            raise StudyError(f"{path}: no runs found (no results.json or status.json below it)")
    if not runs:
        raise StudyError(f"{', '.join(map(str, paths))}: no finished runs (no results.json), "
                         f"only {len(incomplete)} failed or unfinished")
    runs.sort(key=lambda r: str(r.path))
    incomplete.sort(key=lambda r: str(r.path))
    return runs, incomplete


def check_results(runs: Iterable[Run]) -> None:
    """`DataError` naming the first ``results.json`` that lacks a key a report reads."""
    for run in runs:
        for key in ("dataset", "method", "seed", "drift", "metrics"):
            if key not in run.results:
                raise DataError(run.path / "results.json", None, f"missing key {key!r}")


def group_runs(runs: Iterable[Run]) -> dict[Scenario, dict[str, list[Run]]]:
    """Scenario → method → its runs (sorted by seed, then path); scenarios sorted, ERM first."""
    grouped: dict[Scenario, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        grouped[run.scenario][run.method].append(run)
    out = {}
    for scenario in sorted(grouped):
        methods = grouped[scenario]
        out[scenario] = {m: sorted(methods[m], key=lambda r: (r.seed, str(r.path)))
                         for m in sorted(methods, key=lambda m: (m != BASELINE, m))}
    return out


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

    @property
    def n(self) -> int:
        return len(self.runs)


def scenario_stats(grouped: dict[Scenario, dict[str, list[Run]]],
                   min_cluster_size: int = MIN_CLUSTER_SIZE) -> list[MethodStats]:
    rows = []
    for scenario, methods in grouped.items():
        for method, runs in methods.items():
            stats = {}
            for key, _, _ in STAT_METRICS:
                values = [v for v in (r.value(key, min_cluster_size) for r in runs) if v is not None]
                mean, std = _mean_std([100.0 * v for v in values])
                stats[key] = (mean, std)
            rows.append(MethodStats(scenario, method, runs, stats))
    return rows


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
    relative_change: float  # of the mean, in %
    decision: str  # "better" | "worse" | "same" | "n/a"
    n_better: int  # tests with p < alpha and the method's model better
    n_worse: int


def _improves(metric: str, change: float) -> bool | None:
    if not change or math.isnan(change):
        return None
    higher = dict((k, h) for k, _, h in STAT_METRICS)[metric]
    return change > 0 if higher else change < 0


def decide(metric: str, change: float, tests: Sequence[SignificanceResult], alpha: float, rule: str) -> Verdict:
    """Apply ``rule`` (module docstring) to the k paired tests of one metric."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {', '.join(RULES)}")
    n_better = sum(t.significant(alpha) and t.a_is_better for t in tests)
    n_worse = sum(t.significant(alpha) and not t.a_is_better and t.difference != 0 for t in tests)
    k = len(tests)
    if not k:
        return Verdict(metric, list(tests), change, "n/a", 0, 0)
    direction = _improves(metric, change)
    decision = "same"
    if direction is not None:
        agree, against = (n_better, n_worse) if direction else (n_worse, n_better)
        ok = {"any": agree >= 1 and against == 0, "majority": agree > k / 2, "all": agree == k}[rule]
        if ok:
            decision = "better" if direction else "worse"
    return Verdict(metric, list(tests), change, decision, n_better, n_worse)


def relative_change(value: float, baseline: float) -> float:
    """(value − baseline) / baseline in %; NaN if undefined."""
    if math.isnan(value) or math.isnan(baseline) or baseline == 0:
        return math.nan
    return 100.0 * (value - baseline) / baseline


@dataclass
class Comparison:
    scenario: Scenario
    method: str
    n: int
    pairs: list[Pair]
    #: metric key (STAT_METRICS) → relative change of the mean to ERM in %
    changes: dict[str, float]
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return len(self.pairs)


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
            predictions[run.path] = load_predictions(run.path, split)
        return predictions[run.path]

    out = []
    for s in stats:
        erm = base.get(s.scenario)
        changes = {key: relative_change(s.stats[key][0], erm.stats[key][0]) if erm else math.nan
                   for key, _, _ in STAT_METRICS}
        comparison = Comparison(s.scenario, s.method, s.n, [], changes)
        if erm is not None and s.method != BASELINE:
            comparison.pairs = pair_models(s.runs, erm.runs)
            tests: dict[str, list[SignificanceResult]] = {m: [] for m in TESTED_METRICS}
            for pair in comparison.pairs:
                try:
                    counts: PairedCounts = paired_counts(rows(pair.run), rows(pair.baseline))
                except ValueError as err:
                    raise StudyError(f"{pair.run.path} vs {pair.baseline.path}: {err}") from None
                for metric in TESTED_METRICS:
                    tests[metric].append(approximate_randomization(counts, None, metric, rounds, seed))
            comparison.verdicts = {m: decide(m, changes[m], tests[m], alpha, rule) for m in TESTED_METRICS}
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


def significance_counts(comparisons: Sequence[Comparison], metric: str = "combined") -> list[dict[str, Any]]:
    """Per non-ERM method and group of scenarios (all; per dataset, drift kind, full/partial,
    i.i.d./o.o.d. validation): scenarios tested, significantly better, worse, same."""
    rows = []
    methods = sorted({c.method for c in comparisons if c.method != BASELINE})
    for method in methods:
        tested = [c for c in comparisons if c.method == method and metric in c.verdicts
                  and c.verdicts[metric].decision != "n/a"]
        for group, key in COUNT_GROUPS:
            for value in sorted({key(c.scenario) for c in tested}):
                members = [c for c in tested if key(c.scenario) == value]
                decisions = [c.verdicts[metric].decision for c in members]
                rows.append({"method": method, "group": group, "value": value, "scenarios": len(members),
                             "better": decisions.count("better"), "worse": decisions.count("worse"),
                             "same": decisions.count("same")})
    return rows


# --------------------------------------------------------------------------- tables


def _fmt(value: float, digits: int = 2, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _markdown(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def _present(stats: Sequence[MethodStats]) -> list[tuple[str, str, bool]]:
    """STAT_METRICS that at least one run has (worst-cluster only under a SeqDrift split)."""
    return [m for m in STAT_METRICS if any(not math.isnan(s.stats[m[0]][0]) for s in stats)]


def table10(stats: Sequence[MethodStats]) -> tuple[str, str]:
    """(Markdown, CSV) of the per-scenario and method means ± std over the models, in %."""
    metrics = _present(stats)
    md_rows, csv_rows = [], []
    for s in stats:
        sc = s.scenario
        md_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, s.method, s.n]
                       + [f"{_fmt(s.stats[k][0])} ± {_fmt(s.stats[k][1])}".removesuffix(" ± ")
                          for k, _, _ in metrics])
        csv_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, s.method, s.n]
                        + [x for k, _, _ in metrics for x in (_fmt(s.stats[k][0], 4), _fmt(s.stats[k][1], 4))])
    head = ["dataset", "drift", "amount", "validation", "method", "n models"]
    md = _markdown(head + [f"{t} (%)" if k != "drop" else f"{t} (points)" for k, t, _ in metrics], md_rows)
    csv = _csv(head[:5] + ["n_models"] + [f"{k}_{x}" for k, _, _ in metrics for x in ("mean", "std")], csv_rows)
    return md, csv


def relative_change_table(comparisons: Sequence[Comparison], stats: Sequence[MethodStats],
                          alpha: float) -> tuple[str, str]:
    """(Markdown, CSV): relative change of each metric's mean to ERM in %, and per tested metric
    the decision, the significant tests (better / worse of k) and the p-values."""
    metrics = [m for m in _present(stats) if m[0] != "drop"]
    md_rows, csv_rows = [], []
    for c in comparisons:
        sc = c.scenario
        cells, flat = [], []
        for key, _, _ in metrics:
            change = c.changes[key]
            verdict = c.verdicts.get(key)
            mark = {"better": " ▲", "worse": " ▼"}.get(verdict.decision, "") if verdict else ""
            cells.append(_fmt(change, sign=True) + mark)
            flat.append(_fmt(change, 4))
        tests = []
        for metric in TESTED_METRICS:
            v = c.verdicts.get(metric)
            tests += ([v.decision, v.n_better, v.n_worse, ";".join(f"{t.p_value:.6g}" for t in v.tests)] if v
                      else ["" if c.method == BASELINE else "n/a", "", "", ""])
        pairing = "; ".join(f"{p.run.path.name}~{p.baseline.path.name}" + ("" if p.by_seed else " (by order)")
                            for p in c.pairs)
        fwe = _fmt(family_wise_error(alpha, c.k), 3) if c.k else ""
        main = c.verdicts.get("combined")
        md_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, c.method, c.n, *cells,
                        main.decision if main else ("baseline" if c.method == BASELINE else "n/a"),
                        f"{main.n_better}/{main.n_worse} of {c.k}" if main else "", fwe])
        csv_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, c.method, c.n, *flat, c.k, fwe,
                         *tests, pairing])
    head = ["dataset", "drift", "amount", "validation", "method"]
    md = _markdown(head + ["n models"] + [f"{t} %" for _, t, _ in metrics]
                   + ["COMBINED vs ERM", "sig. better/worse tests", "family-wise error"], md_rows)
    csv = _csv(head + ["n_models"] + [f"{k}_rel_change_pct" for k, _, _ in metrics] + ["k_tests", "family_wise_error"]
               + [f"{m}_{x}" for m in TESTED_METRICS for x in ("decision", "n_sig_better", "n_sig_worse", "p_values")]
               + ["pairs"], csv_rows)
    return md, csv


def counts_table(counts: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """(Markdown: one row per method, "better / worse of n" per group; CSV: the long rows)."""
    columns = []
    for row in counts:
        if (row["group"], row["value"]) not in columns:
            columns.append((row["group"], row["value"]))
    methods = sorted({r["method"] for r in counts})
    cell = {(r["method"], r["group"], r["value"]): r for r in counts}
    md_rows = []
    for method in methods:
        md_rows.append([method] + [f"{r['better']} / {r['worse']} of {r['scenarios']}" if r else ""
                                   for r in (cell.get((method, g, v)) for g, v in columns)])
    md = _markdown(["method"] + [v if g != "all" else "all scenarios" for g, v in columns], md_rows)
    keys = ["method", "group", "value", "scenarios", "better", "worse", "same"]
    return md, _csv(keys, [[r[k] for k in keys] for r in counts])


# --------------------------------------------------------------------------- figures


def _method_order(methods: Iterable[str]) -> list[str]:
    return sorted(set(methods), key=lambda m: (m != BASELINE, m))


def plot_drop(stats: Sequence[MethodStats]):
    """Figure 1a: valid → test drop of COMBINED (points), one panel per dataset, a group of bars
    (one per method) per drift scenario. Returns the Figure."""
    from matplotlib.figure import Figure

    datasets = sorted({s.scenario.dataset for s in stats})
    methods = _method_order(s.method for s in stats)
    fig = Figure(figsize=(max(6.0, 1.6 * len({s.scenario.label for s in stats}) + 2), 3.6 * len(datasets)))
    axes = fig.subplots(len(datasets), 1, squeeze=False)[:, 0]
    colors = {m: f"C{i}" for i, m in enumerate(methods)}
    width = 0.8 / max(1, len(methods))
    for ax, dataset in zip(axes, datasets):
        rows = [s for s in stats if s.scenario.dataset == dataset]
        scenarios = sorted({s.scenario for s in rows})
        index = {(s.scenario, s.method): s for s in rows}
        for j, method in enumerate(methods):
            xs, heights, errs = [], [], []
            for i, scenario in enumerate(scenarios):
                s = index.get((scenario, method))
                if s is None:
                    continue
                xs.append(i + (j - (len(methods) - 1) / 2) * width)
                mean, std = s.stats["drop"]
                heights.append(mean)
                errs.append(0.0 if math.isnan(std) else std)
            if xs:
                ax.bar(xs, heights, width, yerr=errs if any(errs) else None, label=method, color=colors[method],
                       capsize=2)
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(scenarios)), [s.label.replace(" ", "\n") for s in scenarios], fontsize=8)
        ax.set_ylabel("drop valid → test\nCOMBINED (points)")
        ax.set_title(f"{dataset}: drop in performance from validation to test")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_counts(counts: Sequence[dict[str, Any]]):
    """Figures 1b, 1c and 2: scenarios where each method is significantly worse / better than ERM
    on COMBINED; panels: all scenarios, full vs partial drift, i.i.d. vs o.o.d. validation. Every
    (method, group value) gets a "worse" and a "better" bar (height 0 included). Returns the Figure."""
    from matplotlib.figure import Figure

    panels = [("all", "all scenarios (Fig. 2)"), ("amount", "full vs partial drift (Fig. 1b)"),
              ("validation", "i.i.d. vs o.o.d. validation (Fig. 1c)")]
    methods = sorted({r["method"] for r in counts})
    fig = Figure(figsize=(max(6.0, 1.2 * len(methods) + 2) * len(panels) / 2, 4.0))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (group, title) in zip(axes, panels):
        rows = [r for r in counts if r["group"] == group]
        values = sorted({r["value"] for r in rows})
        cell = {(r["method"], r["value"]): r for r in rows}
        n_bars = 2 * max(1, len(values))
        width = 0.8 / n_bars
        top = max([r[k] for r in rows for k in ("better", "worse")], default=0)
        for v_i, value in enumerate(values):
            for d_i, (kind, hatch) in enumerate((("worse", "//"), ("better", ""))):
                offset = (2 * v_i + d_i - (n_bars - 1) / 2) * width
                heights = [cell[(m, value)][kind] if (m, value) in cell else 0 for m in methods]
                label = f"sign. {kind}" + ("" if group == "all" else f" ({value})")
                ax.bar([i + offset for i in range(len(methods))], heights, width, label=label,
                       color="C3" if kind == "worse" else "C2", alpha=1.0 - 0.45 * v_i, hatch=hatch,
                       edgecolor="black", linewidth=0.4)
        ax.set_xticks(range(len(methods)), methods, rotation=30, fontsize=8)
        ax.set_ylabel("scenarios (COMBINED vs ERM)")
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, max(1, top) + 0.5)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def atomic_save_figure(fig, path: Path) -> Path:
    """``fig`` as PNG at ``path``, written atomically (Agg canvas); no metadata (no matplotlib
    version), so the same figure gives the same bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    return atomic_write_with(path, lambda f: fig.savefig(f, format="png", dpi=100, metadata={"Software": None}))


# --------------------------------------------------------------------------- the study


@dataclass
class Study:
    inputs: list[Path]
    runs: list[Run]
    incomplete: list[Incomplete]
    stats: list[MethodStats]
    comparisons: list[Comparison]
    counts: list[dict[str, Any]]
    alpha: float
    rounds: int
    seed: int
    rule: str
    min_cluster_size: int = MIN_CLUSTER_SIZE


def build_study(paths: Sequence[Path], alpha: float = 0.05, rounds: int = 10_000, seed: int = 0,
                rule: str = "any", min_cluster_size: int = MIN_CLUSTER_SIZE) -> Study:
    """Everything the report shows; reads the run directories, writes nothing."""
    if not 0.0 < alpha < 1.0:
        raise StudyError(f"alpha must lie in (0, 1), got {alpha}")
    if rounds < 1:
        raise StudyError(f"rounds must be >= 1, got {rounds}")
    if min_cluster_size < 1:
        raise StudyError(f"min_cluster_size must be >= 1, got {min_cluster_size}")
    runs, incomplete = discover(paths)
    check_results(runs)
    stats = scenario_stats(group_runs(runs), min_cluster_size)
    comparisons = compare_to_baseline(stats, alpha, rounds, seed, rule)
    return Study(list(map(Path, paths)), runs, incomplete, stats, comparisons, significance_counts(comparisons),
                 alpha, rounds, seed, rule, min_cluster_size)


FILES = ("table10_metrics.md", "table10_metrics.csv", "relative_change.md", "relative_change.csv",
         "significance_counts.md", "significance_counts.csv", "fig1a_drop.png", "fig1bc_counts.png", "report.md")


def _report_md(study: Study, t10: str, rel: str, counts: str) -> str:
    ks = sorted({c.k for c in study.comparisons if c.k})
    fwe = ", ".join(f"k = {k}: {family_wise_error(study.alpha, k):.3f}" for k in ks) or "no tests (no ERM partner)"
    scenarios = sorted({r.scenario for r in study.runs})
    by_order = [p for c in study.comparisons for p in c.pairs if not p.by_seed]
    no_erm = sorted({c.scenario.label for c in study.comparisons if c.method != BASELINE and not c.pairs})
    lines = [
        "# Study report", "",
        "Generated by `python -m robustnlu.report` (core paper section 5, Appendix D Tables 10-14, "
        "Figures 1 and 2).", "",
        "## What was read", "",
        *[f"- `{p}`" for p in study.inputs], "",
        f"{len(study.runs)} finished runs in {len(scenarios)} scenarios "
        f"(scenario = dataset, drift kind, full/partial, validation); "
        f"{len(study.incomplete)} failed or unfinished runs.", "",
    ]
    if study.incomplete:
        lines += ["### Failed or unfinished runs", "", "| run directory | state | error |", "|---|---|---|"]
        lines += [f"| `{r.path}` | {r.state} | {(r.error or '').replace('|', '/')} |" for r in study.incomplete]
        lines.append("")
    lines += [
        "## Method", "",
        "Metrics are test metrics of each run's best checkpoint, averaged over the models (runs) of a "
        "method in a scenario (mean ± sample std, in %); drop = valid − test COMBINED in points; "
        f"worst-cluster COMBINED = the lowest test COMBINED over the SeqDrift clusters of at least "
        f"{study.min_cluster_size} test utterances (smaller clusters are left out). "
        "Relative change = (method − ERM) / ERM of the means, in % (SEMER: lower is better, so a "
        "positive change is worse).", "",
        "Significance: two-sided approximate randomization (Noreen, 1989) on the test predictions, "
        f"{study.rounds} shuffles, seed {study.seed}, p < alpha = {study.alpha}. **Pairing rule:** tests "
        "pair utterances by uid between two runs; each of a method's models is tested against the ERM "
        "model of the same seed in the same scenario (several models of a seed: in the order of their "
        "paths); a model whose seed has no ERM model left is paired with the remaining ERM models in "
        "sorted order (listed below).", "",
        f"**Decision rule `{study.rule}`:** " + {
            "any": "a method is significantly better (worse) than ERM in a scenario if its mean change is "
                   "an improvement (deterioration) and at least one of its k paired tests is significant "
                   "in that direction and none in the other.",
            "majority": "a method is significantly better (worse) than ERM in a scenario if its mean change "
                        "is an improvement (deterioration) and more than k/2 of its k paired tests are "
                        "significant in that direction.",
            "all": "a method is significantly better (worse) than ERM in a scenario if its mean change is an "
                   "improvement (deterioration) and all k of its paired tests are significant in that direction.",
        }[study.rule] + f" Family-wise error of the k paired tests per scenario, 1 − (1 − alpha)^k: {fwe} "
        "(the paper: 0.185 for k = 4). Counts use COMBINED; ▲ / ▼ mark significantly better / worse.", "",
    ]
    if by_order:
        lines += ["Paired by sorted order (no ERM model of the same seed left):", ""]
        lines += [f"- `{p.run.path}` (seed {p.run.seed}) ~ `{p.baseline.path}` (seed {p.baseline.seed})"
                  for p in by_order]
        lines.append("")
    if no_erm:
        lines += [f"Scenarios without an ERM model (no relative change, no tests): {', '.join(no_erm)}.", ""]
    lines += [
        "## Table 10: metrics per scenario and method", "", t10,
        "Files: [table10_metrics.md](table10_metrics.md), [table10_metrics.csv](table10_metrics.csv)", "",
        "## Relative change to ERM and significance (Tables 11-14)", "", rel,
        "Files: [relative_change.md](relative_change.md), [relative_change.csv](relative_change.csv) "
        "(with every p-value and pair)", "",
        "## Scenarios significantly better / worse than ERM on COMBINED (Tables 11-14, Figures 1b, 1c, 2)", "",
        counts, "Files: [significance_counts.md](significance_counts.md), "
        "[significance_counts.csv](significance_counts.csv)", "",
        "## Figures", "",
        "![valid → test drop of COMBINED per scenario and method (Figure 1a)](fig1a_drop.png)", "",
        "![scenarios significantly better / worse than ERM (Figures 1b, 1c, 2)](fig1bc_counts.png)", "",
    ]
    return "\n".join(lines)


def write_report(study: Study, out: Path) -> list[Path]:
    """Every table, figure and ``report.md`` under ``out``, each written atomically; returns the
    paths (`FILES`). Everything is rendered before the first file is written."""
    out = Path(out)
    t10_md, t10_csv = table10(study.stats)
    rel_md, rel_csv = relative_change_table(study.comparisons, study.stats, study.alpha)
    cnt_md, cnt_csv = counts_table(study.counts)
    texts = {"table10_metrics.md": t10_md, "table10_metrics.csv": t10_csv, "relative_change.md": rel_md,
             "relative_change.csv": rel_csv, "significance_counts.md": cnt_md, "significance_counts.csv": cnt_csv,
             "report.md": _report_md(study, t10_md, rel_md, cnt_md)}
    figures = {"fig1a_drop.png": plot_drop(study.stats), "fig1bc_counts.png": plot_counts(study.counts)}
    written = [atomic_save_figure(fig, out / name) for name, fig in figures.items()]
    written += [atomic_write_text(out / name, text) for name, text in texts.items()]
    return written
