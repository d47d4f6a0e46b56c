"""The study's tables (core paper Appendix D, Tables 10-14), each as (Markdown, CSV) text: the
metrics per scenario and method (`scenario_table`), the relative change to ERM with the paired tests
(`relative_change_table`) and the scenarios significantly better / worse (`counts_table`). The
columns come from `robustnlu.metrics.registry`; the writer is `robustnlu.tables`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from robustnlu.analysis.runs import BASELINE
from robustnlu.analysis.statistics import Comparison, MethodStats
from robustnlu.metrics.registry import METRICS, TABLE10, TESTED, at_floor, change_text
from robustnlu.tables import csv_text, fmt, markdown


def _present(stats: Sequence[MethodStats]) -> list[str]:
    """The metrics of `TABLE10` that at least one run has (worst-cluster only under a SeqDrift split)."""
    return [k for k in TABLE10 if any(not math.isnan(s.stats[k][0]) for s in stats)]


def scenario_table(stats: Sequence[MethodStats],
                   extra: tuple[str, Callable[[MethodStats], str]] | None = None) -> tuple[str, str]:
    """(Markdown, CSV) of the per-scenario and method means ± std over the models, in %;
    ``extra``: a last column (its title, and its cell of a row's models)."""
    metrics = _present(stats)
    md_rows, csv_rows = [], []
    for s in stats:
        sc = s.scenario
        last = [extra[1](s)] if extra else []
        md_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, s.method, s.n]
                       + [f"{fmt(s.stats[k][0])} ± {fmt(s.stats[k][1])}".removesuffix(" ± ")
                          for k in metrics] + last)
        csv_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, s.method, s.n]
                        + [x for k in metrics for x in (fmt(s.stats[k][0], 4), fmt(s.stats[k][1], 4))] + last)
    head = ["dataset", "drift", "amount", "validation", "method", "n models"]
    title = [extra[0]] if extra else []
    md = markdown(head + [f"{METRICS[k].title} ({METRICS[k].unit})" for k in metrics] + title, md_rows)
    floor = stats[0].min_cluster_size if stats else None
    csv = csv_text(head[:5] + ["n_models"] + [f"{at_floor(k, floor)}_{x}" for k in metrics for x in ("mean", "std")]
                   + title, csv_rows)
    return md, csv


def relative_change_table(comparisons: Sequence[Comparison], stats: Sequence[MethodStats],
                          alpha: float) -> tuple[str, str]:
    """(Markdown, CSV): relative change of each metric's mean to ERM in % (Markdown: as
    `robustnlu.metrics.registry.change_text` words it, "n/a: from 0" from an ERM mean of 0; CSV:
    the number, empty where it is undefined), and per tested metric the decision, the
    significant tests (better / worse of k) and the p-values; the family-wise error of the k
    tests and which bound it is (`Comparison.family_wise_error`)."""
    metrics = [k for k in _present(stats) if METRICS[k].unit != "points"]  # not the drop, a difference already
    md_rows, csv_rows = [], []
    for c in comparisons:
        sc = c.scenario
        cells, flat = [], []
        for key in metrics:
            verdict = c.verdicts.get(key)
            mark = {"better": " ▲", "worse": " ▼"}.get(verdict.decision, "") if verdict else ""
            cells.append(change_text(c.means[key], c.baseline[key], unit="") + mark)
            flat.append(fmt(c.changes[key], 4))
        tests = []
        for metric in TESTED:
            v = c.verdicts.get(metric)
            tests += ([v.decision, v.n_better, v.n_worse, ";".join(f"{t.p_value:.6g}" for t in v.tests)] if v
                      else ["" if c.method == BASELINE else "n/a", "", "", ""])
        pairing = "; ".join(f"{p.run.path.name}~{p.baseline.path.name}" + ("" if p.by_seed else " (by order)")
                            for p in c.pairs)
        fwe = fmt(c.family_wise_error(alpha), 3) if c.k else ""
        bound = "" if not c.k else "min(1,k*alpha)" if c.shares_erm_model else "1-(1-alpha)^k"
        main = c.verdicts.get("combined")
        md_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, c.method, c.n, *cells,
                        main.decision if main else ("baseline" if c.method == BASELINE else "n/a"),
                        f"{main.n_better}/{main.n_worse} of {c.k}" if main else "",
                        f"{fwe} (union bound: tests share an ERM model)" if c.shares_erm_model else fwe])
        csv_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, c.method, c.n, *flat, c.k, fwe, bound,
                         *tests, pairing])
    head = ["dataset", "drift", "amount", "validation", "method"]
    md = markdown(head + ["n models"] + [f"{METRICS[k].title} %" for k in metrics]
                  + ["COMBINED vs ERM", "sig. better/worse tests", "family-wise error"], md_rows)
    floor = stats[0].min_cluster_size if stats else None
    csv = csv_text(head + ["n_models"] + [f"{at_floor(k, floor)}_rel_change_pct" for k in metrics]
                   + ["k_tests", "family_wise_error", "family_wise_error_bound"]
                   + [f"{m}_{x}" for m in TESTED for x in ("decision", "n_sig_better", "n_sig_worse", "p_values")]
                   + ["pairs"], csv_rows)
    return md, csv


#: the counts' CSV columns: the key of a `robustnlu.analysis.statistics.significance_counts` row →
#: its column, named for what it counts
COUNT_COLUMNS = {"method": "method", "metric": "metric", "group": "group", "value": "value",
                 "scenarios": "scenarios_tested", "better": "sig_better_than_erm", "worse": "sig_worse_than_erm",
                 "same": "same_as_erm"}


def counts_table(counts: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """(Markdown: a line saying what the cells count, then one row per method with "better /
    worse of n" per group of scenarios, each column headed ``<group> = <value>``, or a line
    saying there is none; CSV: the long rows, `COUNT_COLUMNS`)."""
    csv_head = list(COUNT_COLUMNS.values())
    if not counts:  # e.g. a report of one run, or of ERM alone
        return "No method was tested against ERM.\n", csv_text(csv_head, [])
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
    metric = METRICS[counts[0]["metric"]].title  # one metric: significance_counts's
    md = (f"Scenarios in which a method is significantly better / worse than ERM on {metric}, of the n "
          "scenarios tested (better / worse of n), per group of scenarios (column: group = value).\n\n"
          + markdown(["method"] + ["all scenarios" if g == "all" else f"{g} = {v}" for g, v in columns], md_rows))
    return md, csv_text(csv_head, [[r[k] for k in COUNT_COLUMNS] for r in counts])
