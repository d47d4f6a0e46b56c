"""The study's tables (core paper Appendix D, Tables 10-14), each as (Markdown, CSV) text: the
metrics per scenario and method (`scenario_table`), the relative change to ERM with the paired tests
(`relative_change_table`) and the scenarios significantly better / worse (`counts_table`). The
columns come from `robustnlu.metrics.registry`; the writer is `robustnlu.tables`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from robustnlu.analysis.runs import BASELINE
from robustnlu.analysis.significance import family_wise_error
from robustnlu.analysis.statistics import Comparison, MethodStats
from robustnlu.metrics.registry import METRICS, TABLE10, TESTED, at_floor
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
    """(Markdown, CSV): relative change of each metric's mean to ERM in %, and per tested metric
    the decision, the significant tests (better / worse of k) and the p-values."""
    metrics = [k for k in _present(stats) if METRICS[k].unit != "points"]  # not the drop, a difference already
    md_rows, csv_rows = [], []
    for c in comparisons:
        sc = c.scenario
        cells, flat = [], []
        for key in metrics:
            change = c.changes[key]
            verdict = c.verdicts.get(key)
            mark = {"better": " ▲", "worse": " ▼"}.get(verdict.decision, "") if verdict else ""
            cells.append(fmt(change, sign=True) + mark)
            flat.append(fmt(change, 4))
        tests = []
        for metric in TESTED:
            v = c.verdicts.get(metric)
            tests += ([v.decision, v.n_better, v.n_worse, ";".join(f"{t.p_value:.6g}" for t in v.tests)] if v
                      else ["" if c.method == BASELINE else "n/a", "", "", ""])
        pairing = "; ".join(f"{p.run.path.name}~{p.baseline.path.name}" + ("" if p.by_seed else " (by order)")
                            for p in c.pairs)
        fwe = fmt(family_wise_error(alpha, c.k), 3) if c.k else ""
        main = c.verdicts.get("combined")
        md_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, c.method, c.n, *cells,
                        main.decision if main else ("baseline" if c.method == BASELINE else "n/a"),
                        f"{main.n_better}/{main.n_worse} of {c.k}" if main else "", fwe])
        csv_rows.append([sc.dataset, sc.drift, sc.amount, sc.validation, c.method, c.n, *flat, c.k, fwe,
                         *tests, pairing])
    head = ["dataset", "drift", "amount", "validation", "method"]
    md = markdown(head + ["n models"] + [f"{METRICS[k].title} %" for k in metrics]
                  + ["COMBINED vs ERM", "sig. better/worse tests", "family-wise error"], md_rows)
    floor = stats[0].min_cluster_size if stats else None
    csv = csv_text(head + ["n_models"] + [f"{at_floor(k, floor)}_rel_change_pct" for k in metrics]
                   + ["k_tests", "family_wise_error"]
                   + [f"{m}_{x}" for m in TESTED for x in ("decision", "n_sig_better", "n_sig_worse", "p_values")]
                   + ["pairs"], csv_rows)
    return md, csv


def counts_table(counts: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """(Markdown: one row per method, "better / worse of n" per group, or a line saying there is
    none; CSV: the long rows)."""
    keys = ["method", "group", "value", "scenarios", "better", "worse", "same"]
    if not counts:  # e.g. a report of one run, or of ERM alone
        return "No method was tested against ERM.\n", csv_text(keys, [])
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
    md = markdown(["method"] + [v if g != "all" else "all scenarios" for g, v in columns], md_rows)
    return md, csv_text(keys, [[r[k] for k in keys] for r in counts])
