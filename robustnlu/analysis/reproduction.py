"""The reproduction report (issue 17): ``docs/reproduction/report.md`` and its figures, built from
the committed records of `robustnlu.reproduce` alone, beside the core paper's numbers
(`robustnlu.analysis.paper_results`). ``python -m robustnlu.reproduce report`` is the command.

A record is ``<records>/<run name>/`` with ``results.json``, ``metrics.csv``, ``meta.json`` and
``predictions/{valid,test}.jsonl.gz``; the run name says the scenario, method (with k) and seed.
What the report computes, each with the function that does it:

- `table10`: ERM's change from validation to test (test − valid, points; the paper's sign) of
  intent accuracy, slot F1 and COMBINED per dataset, drift kind and full/partial drift, the mean
  over the recorded Part A runs of the cell (both validation kinds, both seeds); Figure 1a.
- `method_summary`: Tables 11-12 for SNIPS. Per method, the mean over the scenarios it was
  compared in of the per-scenario means (over seeds) of test COMBINED, SEMER and MA INT.
  COMBINED; the relative change to ERM's mean over the same scenarios, (m − erm) / erm in %; and
  the scenarios significantly better / worse than ERM on COMBINED: `robustnlu.analysis.study`'s
  paired approximate randomization tests (p < 0.05, each model against the ERM model of the same
  seed, decision rule ``any``: the paper's reading), `SIGNIFICANCE` fixed so the report is the
  same each time; Figure 2.
- `k_search_table`: valid COMBINED per k of each TopK method on the k-search scenario, and the k
  the driver chose (best valid COMBINED, never test).
- `valid_curves`: ERM's per-epoch valid COMBINED (``metrics.csv``), to show whether the budget
  plateaued.
- `drift_table`: the splits' sizes and % drift (``results.json`` drift.split_stats).
- `worst_cluster_table`: worst-cluster COMBINED over the test clusters of at least
  `robustnlu.analysis.study.MIN_CLUSTER_SIZE` utterances, and how many clusters qualify.
- hyper-parameters, budget, hardware and wall times (``results.json`` config, ``meta.json``).

Everything is iterated in sorted order and no clock is read: the same records give the same
bytes. The section "Reading" is `READING`, written by the person who reads the results (a
placeholder while it does not exist).
"""

from __future__ import annotations

import csv
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robustnlu.analysis import paper_results as paper
from robustnlu.analysis.study import (
    BASELINE,
    MIN_CLUSTER_SIZE,
    Comparison,
    MethodStats,
    Run,
    StudyError,
    _fmt,
    _markdown,
    atomic_save_figure,
    check_results,
    compare_to_baseline,
    discover,
    group_runs,
    read_json_object,
    relative_change,
    relative_change_table,
    scenario_stats,
    significance_counts,
    table10 as scenario_table,
    worst_cluster,
)
from robustnlu.io import atomic_write_text

#: The significance tests of the report: the paper's (section 5.2), fixed so the report is
#: reproducible byte for byte.
SIGNIFICANCE = {"alpha": 0.05, "rounds": 10_000, "seed": 0, "rule": "any"}
#: Metrics of Tables 11-12: (key in metrics["test"], column title)
SUMMARY_METRICS = (("combined", "COMBINED"), ("semer", "SEMER"), ("ma_intent_combined", "MA INT. COMBINED"))
FIGURES = ("fig1a_drop.png", "fig2_significance.png", "erm_valid_curves.png")
#: The section "Reading" is written by a person, in this file beside report.md (committed); the
#: report includes it verbatim, so that rebuilding the report keeps it.
READING = "reading.md"
PLACEHOLDER = (f"**TO BE WRITTEN** (in `{READING}` beside this report, which the report includes) once the "
               "study is complete")


@dataclass(frozen=True)
class Design:
    """What the driver planned (`robustnlu.reproduce`): run names per part ("A", "k", "B"), the
    k-search runs (method → k → name) and the k chosen per method (None: search unfinished)."""

    parts: dict[str, list[str]]
    k_search: dict[str, dict[int, str]]
    chosen_k: dict[str, int | None]
    budget: tuple[str, ...]
    k_scenario: str


@dataclass
class Records:
    """The finished runs under the records folder, by run name, with their ``meta.json``."""

    root: Path
    runs: dict[str, Run]
    meta: dict[str, dict[str, Any]]

    def select(self, names: Sequence[str]) -> list[Run]:
        return [self.runs[n] for n in sorted(set(names)) if n in self.runs]


def read_records(root: Path) -> Records:
    """Every record under ``root`` (a folder holding ``results.json``); `StudyError` if none."""
    root = Path(root)
    if not root.is_dir():
        raise StudyError(f"{root}: no records folder")
    found = [p.parent for p in sorted(root.glob("*/results.json"))]
    if not found:
        raise StudyError(f"{root}: no records (no <run>/results.json)")
    runs, _ = discover(found)
    check_results(runs)
    by_name = {r.path.name: r for r in runs}
    meta = {name: read_json_object(r.path / "meta.json") if (r.path / "meta.json").is_file() else {}
            for name, r in by_name.items()}
    return Records(root, dict(sorted(by_name.items())), meta)


def _pct(metrics: dict[str, Any], key: str) -> float:
    return 100.0 * float(metrics[key])


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


# --------------------------------------------------------------------------- Table 10, Figure 1a


def table10(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per (dataset, drift kind, full/partial) of ERM's runs: n runs and the mean test − valid
    change in points of intent_acc, slot_f1, combined; the paper's acc / f1 beside (None if the
    paper has no cell)."""
    cells: dict[tuple[str, str, str], list[Run]] = defaultdict(list)
    for run in runs:
        if run.method == BASELINE:
            s = run.scenario
            cells[(s.dataset, s.drift, s.amount)].append(run)
    rows = []
    for key in sorted(cells):
        members = cells[key]
        row: dict[str, Any] = {"dataset": key[0], "drift": key[1], "amount": key[2], "n": len(members)}
        for metric in ("intent_acc", "slot_f1", "combined"):
            row[metric] = _mean([_pct(r.results["metrics"]["test"], metric)
                                 - _pct(r.results["metrics"]["valid"], metric) for r in members])
        theirs = paper.TABLE10.get(key)
        row["paper_acc"], row["paper_f1"] = (theirs["acc"], theirs["f1"]) if theirs else (None, None)
        rows.append(row)
    return rows


def _paper_cell(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}"


def table10_markdown(rows: Sequence[dict[str, Any]]) -> str:
    return _markdown(["dataset", "drift", "amount", "runs", "acc (ours)", "acc (paper)", "F1 (ours)", "F1 (paper)",
                      "COMBINED (ours)"],
                     [[r["dataset"], r["drift"], r["amount"], r["n"], _fmt(r["intent_acc"], sign=True),
                       _paper_cell(r["paper_acc"]), _fmt(r["slot_f1"], sign=True), _paper_cell(r["paper_f1"]),
                       _fmt(r["combined"], sign=True)] for r in rows])


def plot_table10(rows: Sequence[dict[str, Any]]):
    """Figure 1a: test − valid of accuracy and F1 per cell, ours (solid) beside the paper's
    (hatched), one panel per dataset."""
    from matplotlib.figure import Figure

    datasets = sorted({r["dataset"] for r in rows})
    fig = Figure(figsize=(8.0, 3.2 * max(1, len(datasets))))
    axes = fig.subplots(max(1, len(datasets)), 1, squeeze=False)[:, 0]
    bars = (("intent_acc", "paper_acc", "acc", "C0"), ("slot_f1", "paper_f1", "F1", "C1"))
    for ax, dataset in zip(axes, datasets):
        cells = [r for r in rows if r["dataset"] == dataset]
        for j, (ours, theirs, label, color) in enumerate(bars):
            for k, (source, hatch, alpha) in enumerate(((ours, "", 1.0), (theirs, "//", 0.45))):
                xs = [i + (2 * j + k - 1.5) * 0.2 for i in range(len(cells))]
                heights = [0.0 if c[source] is None or math.isnan(c[source]) else c[source] for c in cells]
                ax.bar(xs, heights, 0.2, color=color, alpha=alpha, hatch=hatch, edgecolor="black", linewidth=0.4,
                       label=f"{label} ({'ours' if k == 0 else 'paper'})")
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(cells)), [f"{c['drift']}\n{c['amount']}" for c in cells], fontsize=8)
        ax.set_ylabel("test − valid (points)")
        ax.set_title(f"{dataset}: ERM from validation to test (Figure 1a / Table 10)", fontsize=9)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Tables 11-12, Figure 2


def comparison(runs: Sequence[Run]) -> tuple[list[MethodStats], list[Comparison], list[dict[str, Any]]]:
    """Per-scenario stats, the paired tests against ERM (`SIGNIFICANCE`) and the counts."""
    stats = scenario_stats(group_runs(runs))
    comparisons = compare_to_baseline(stats, SIGNIFICANCE["alpha"], SIGNIFICANCE["rounds"], SIGNIFICANCE["seed"],
                                      SIGNIFICANCE["rule"])
    return stats, comparisons, significance_counts(comparisons)


def method_label(stats: MethodStats) -> str:
    """Our name (with k) and the paper's, e.g. ``topk (k=4) = TOPK``."""
    config = stats.runs[0].results.get("config", {}).get("method", {})
    k = config.get("k")
    theirs = paper.paper_method(stats.method, config.get("assignment"))
    return f"{stats.method}" + (f" (k={k})" if k is not None else "") + (f" = {theirs}" if theirs else "")


def method_summary(stats: Sequence[MethodStats], counts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tables 11-12 (module docstring): one row per method, ERM first."""
    erm = {s.scenario: s for s in stats if s.method == BASELINE}
    compared = sorted({s.scenario for s in stats if s.method != BASELINE and s.scenario in erm})
    all_counts = {r["method"]: r for r in counts if r["group"] == "all"}
    rows = []
    for method in sorted({s.method for s in stats}, key=lambda m: (m != BASELINE, m)):
        mine = [s for s in stats if s.method == method and s.scenario in erm
                and (method != BASELINE or s.scenario in compared)]
        if not mine:
            continue
        row: dict[str, Any] = {"method": method, "label": method_label(mine[0]), "scenarios": len(mine),
                               "runs": sum(s.n for s in mine)}
        for key, _ in SUMMARY_METRICS:
            row[key] = _mean([s.stats[key][0] for s in mine])
            base = _mean([erm[s.scenario].stats[key][0] for s in mine])
            row[f"{key}_pct"] = relative_change(row[key], base) if method != BASELINE else math.nan
        c = all_counts.get(method)
        row["better"], row["worse"], row["tested"] = (c["better"], c["worse"], c["scenarios"]) if c else (None, None, 0)
        config = mine[0].runs[0].results.get("config", {}).get("method", {})
        row["paper"] = paper.paper_method(method, config.get("assignment"))
        rows.append(row)
    return rows


def summary_markdown(rows: Sequence[dict[str, Any]]) -> str:
    md_rows = []
    for r in rows:
        t12 = paper.TABLE12_SNIPS.get(r["paper"], {})
        t14 = paper.TABLE14_SNIPS_FULL.get(r["paper"], {})
        base = r["method"] == BASELINE
        md_rows.append([
            r["label"], r["scenarios"], r["runs"],
            *[x for key, _ in SUMMARY_METRICS
              for x in (_fmt(r[key]), "" if base else _fmt(r[f"{key}_pct"], sign=True))],
            "" if base or r["better"] is None else f"{r['better']} / {r['worse']} of {r['tested']}",
            _fmt(t12.get("combined"), 1), "" if base else _fmt(t12.get("combined_pct"), 1, sign=True),
            "" if base or "better" not in t12 else f"{t12['better']} / {t12['worse']} of 8",
            "" if base else _fmt(t14.get("combined_pct"), 1, sign=True),
            "" if base else _fmt(t14.get("semer_pct"), 1, sign=True),
            "" if base or "better" not in t14 else f"{t14['better']} / {t14['worse']} of 4",
        ])
    head = ["method", "scenarios", "runs"]
    for _, title in SUMMARY_METRICS:
        head += [f"{title} %", f"{title} vs ERM %"]
    head += ["sig. better / worse than ERM", "paper T12 COMBINED", "paper T12 vs ERM %", "paper T12 better / worse",
             "paper T14 full COMBINED vs ERM %", "paper T14 full SEMER vs ERM %", "paper T14 full better / worse"]
    return _markdown(head, md_rows)


def plot_significance(rows: Sequence[dict[str, Any]]):
    """Figure 2: scenarios significantly worse / better than ERM on COMBINED, ours (of the
    scenarios compared) beside the paper's SNIPS full-drift counts (Table 14, of 4)."""
    from matplotlib.figure import Figure

    methods = [r for r in rows if r["method"] != BASELINE]
    fig = Figure(figsize=(max(6.0, 1.6 * len(methods) + 2), 3.8))
    ax = fig.subplots()
    series = (("worse", "ours", "C3", ""), ("worse", "paper", "C3", "//"),
              ("better", "ours", "C2", ""), ("better", "paper", "C2", "//"))
    for j, (kind, source, color, hatch) in enumerate(series):
        heights = []
        for r in methods:
            if source == "ours":
                heights.append(r[kind] or 0)
            else:
                heights.append(paper.TABLE14_SNIPS_FULL.get(r["paper"], {}).get(kind, 0))
        ax.bar([i + (j - 1.5) * 0.2 for i in range(len(methods))], heights, 0.2, color=color, hatch=hatch,
               alpha=1.0 if source == "ours" else 0.45, edgecolor="black", linewidth=0.4,
               label=f"sign. {kind} ({'ours' if source == 'ours' else 'paper, SNIPS full drift, Table 14'})")
    ax.set_xticks(range(len(methods)), [f"{r['label']}\n(ours of {r['tested']}, paper of 4)" for r in methods],
                  fontsize=8)
    ax.set_ylabel("scenarios (COMBINED vs ERM)")
    ax.set_ylim(0, max([4] + [r["tested"] for r in methods]) + 0.5)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title("SNIPS: scenarios significantly worse / better than ERM (Figure 2)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- k search, curves


def k_search_table(records: Records, design: Design) -> str:
    grid = sorted({k for ks in design.k_search.values() for k in ks})
    rows = []
    for method in sorted(design.k_search):
        cells = []
        for k in grid:
            run = records.runs.get(design.k_search[method].get(k, ""))
            cells.append(_fmt(_pct(run.results["metrics"]["valid"], "combined")) if run else "not recorded")
        chosen = design.chosen_k.get(method)
        rows.append([method, *cells, chosen if chosen is not None else "pending"])
    return _markdown(["method", *[f"k={k} valid COMBINED %" for k in grid], "chosen k"], rows)


def valid_curve(run: Run) -> list[float]:
    """Valid COMBINED (%) after each training epoch, from the run's ``metrics.csv`` (the last
    valid row of each epoch below ``epochs_trained``; the row logged after training is the
    final evaluation, not an epoch)."""
    path = run.path / "metrics.csv"
    if not path.is_file():
        return []
    by_epoch: dict[int, float] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("valid/combined"):
                by_epoch[int(row["epoch"])] = 100.0 * float(row["valid/combined"])
    trained = int(run.results.get("epochs_trained") or len(by_epoch))
    return [by_epoch[e] for e in sorted(by_epoch) if e < trained]


def valid_curves_markdown(runs: Sequence[Run]) -> str:
    curves = {r.path.name: valid_curve(r) for r in runs}
    width = max([len(c) for c in curves.values()], default=0)
    rows = []
    for name, curve in curves.items():
        last = _fmt(curve[-1] - curve[-2], sign=True) if len(curve) > 1 else ""
        rows.append([name, *[_fmt(v) for v in curve] + [""] * (width - len(curve)), last])
    return _markdown(["run", *[f"epoch {e + 1}" for e in range(width)], "last − previous (points)"], rows)


def plot_valid_curves(runs: Sequence[Run]):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.0))
    ax = fig.subplots()
    for i, run in enumerate(runs):
        curve = valid_curve(run)
        ax.plot(range(1, len(curve) + 1), curve, marker="o", color=f"C{i % 10}", label=run.path.name, linewidth=1)
    ax.set_xlabel("epoch")
    ax.set_ylabel("valid COMBINED (%)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("ERM on SNIPS: valid COMBINED per epoch (is the budget plateaued?)", fontsize=9)
    if runs:
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- splits, clusters


def drift_table(runs: Sequence[Run]) -> str:
    """One row per scenario: the split of its first record (by name); a scenario whose records
    disagree on the split (split_key) is marked."""
    by_scenario: dict[Any, list[Run]] = defaultdict(list)
    for run in runs:
        by_scenario[run.scenario].append(run)
    rows = []
    for scenario in sorted(by_scenario):
        members = sorted(by_scenario[scenario], key=lambda r: r.path.name)
        drift = members[0].results["drift"]
        stats = drift.get("split_stats", {})
        splits = stats.get("splits", {})
        keys = {r.results["drift"].get("split_key") for r in members}
        cells = []
        for split in ("train", "valid", "test"):
            s = splits.get(split, {})
            cells += [s.get("size", ""), _fmt(s.get("percent_drift"), 1)]
        pad = stats.get("proxy_a_distance", {})
        clusters = stats.get("clusters", {})
        rows.append([scenario.dataset, scenario.drift, scenario.amount, scenario.validation, *cells,
                     clusters.get("count", ""), clusters.get("test", ""), _fmt(pad.get("train_vs_test"), 3),
                     "yes" if len(keys) == 1 else f"NO: {len(keys)} splits"])
    return _markdown(["dataset", "drift", "amount", "validation", "train", "train % drift", "valid", "valid % drift",
                      "test", "test % drift", "clusters", "test clusters", "proxy A-dist. train/test",
                      "same split in every record"], rows)


def worst_cluster_table(stats: Sequence[MethodStats], min_size: int = MIN_CLUSTER_SIZE) -> str:
    """Per scenario and method: worst-cluster test COMBINED over clusters of ≥ ``min_size`` test
    utterances (mean over the runs), the qualifying clusters (of all test clusters; the same in
    every run of a scenario: the first run's), and the worst over all clusters for contrast."""
    rows = []
    for s in stats:
        test_metrics = [r.results["metrics"]["test"] for r in s.runs]
        floor = [worst_cluster(m, "combined", min_size) for m in test_metrics]
        anything = [worst_cluster(m, "combined", 1)[0] for m in test_metrics]
        if not floor[0][2]:
            continue
        kept = [100 * v for v, _, _ in floor if v is not None]
        rows.append([s.scenario.dataset, s.scenario.label, method_label(s), s.n, _fmt(_mean(kept)),
                     f"{floor[0][1]} of {floor[0][2]}",
                     _fmt(_mean([100 * v for v in anything if v is not None]))])
    return _markdown(["dataset", "scenario", "method", "runs", f"worst-cluster COMBINED % (≥ {min_size} test utt.)",
                      f"clusters ≥ {min_size} test utt. (of those in test)", "worst over all clusters %"], rows)


# --------------------------------------------------------------------------- budget, hardware


CONFIG_KEYS = (("encoder", "kind"), ("encoder", "name"), ("optimizer", "name"), ("optimizer", "lr"),
               ("optimizer", "weight_decay"), ("optimizer", "warmup_steps"), ("data", "batch_size"),
               ("model", "crf"), ("model", "intent_loss_scale"), ("trainer", "max_epochs"), ("trainer", "precision"),
               ("callbacks", "early_stopping", "patience"), ("selection", "name"), ("drift", "clusters"),
               ("drift", "seed"))


def _lookup(config: dict[str, Any], path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(config, dict) or key not in config:
            return "—"
        config = config[key]
    return config


def settings_markdown(records: Records) -> str:
    """Each setting's values over all records, with how many runs had each."""
    rows = []
    for path in CONFIG_KEYS:
        values = Counter(str(_lookup(r.results.get("config", {}), path)) for r in records.runs.values())
        rows.append([".".join(path), ", ".join(f"`{v}` ({n})" for v, n in sorted(values.items()))])
    epochs = Counter(str(r.results.get("epochs_trained")) for r in records.runs.values())
    rows.append(["epochs trained", ", ".join(f"{v} ({n})" for v, n in sorted(epochs.items()))])
    return _markdown(["setting", "value (runs)"], rows)


def hardware_markdown(records: Records) -> str:
    """Per part (as ``meta.json`` records it): runs, wall time, hardware."""
    part_of = {name: str(records.meta[name].get("part", "?")) for name in records.runs}
    rows = []
    for part in sorted(set(part_of.values())):
        names = [n for n in records.runs if part_of[n] == part]
        walls = [float(records.meta[n]["wall_time_s"]) for n in names if "wall_time_s" in records.meta[n]]
        machines = Counter(f"{records.meta[n].get('cpu', '?')}, {records.meta[n].get('cores', '?')} cores"
                           for n in names)
        rows.append([part, len(names), _fmt(sum(walls) / 3600, 1) if walls else "",
                     _fmt(float(np.median(walls)) / 60, 1) if walls else "",
                     "; ".join(f"{m} ({n})" for m, n in sorted(machines.items()))])
    return _markdown(["part", "runs recorded", "wall time (hours)", "median per run (minutes)", "hardware (runs)"],
                     rows)


# --------------------------------------------------------------------------- the report


def status_lines(records: Records, design: Design) -> list[str]:
    titles = {"A": "Part A (ERM, 8 scenarios of SNIPS and ATIS, 2 seeds)", "k": "k search",
              "B": "Part B (TopK methods on SNIPS' full-drift scenarios, 2 seeds)"}
    lines = []
    for part, names in design.parts.items():
        done = sum(n in records.runs for n in set(names))
        lines.append(f"- {titles.get(part, part)}: {done} of {len(set(names))} runs recorded")
    planned = {n for names in design.parts.values() for n in names}
    outside = sorted(set(records.runs) - planned)
    if outside:
        lines.append(f"- records outside the plan (not used): {', '.join(f'`{n}`' for n in outside)}")
    return lines


def render(records: Records, design: Design, reading: str | None = None) -> tuple[str, dict[str, Any]]:
    """(report.md, figure name → Figure) of the records; ``reading``: the section "Reading"."""
    part_a = records.select(design.parts.get("A", []))
    snips_names = [n for n in design.parts.get("A", []) + design.parts.get("B", []) if n.startswith("snips-")]
    snips = records.select(snips_names)
    t10 = table10(part_a)
    stats, comparisons, counts = comparison(snips) if snips else ([], [], [])
    summary = method_summary(stats, counts)
    compared = sorted({c.scenario.label for c in comparisons if c.pairs})
    erm_snips = [r for r in part_a if r.scenario.dataset == "snips" and r.method == BASELINE]
    cluster_stats = scenario_stats(group_runs(part_a + [r for r in snips if r not in part_a]))
    sig = SIGNIFICANCE
    lines = [
        "# Reproduction of the core paper on this machine", "",
        "Generated by `python -m robustnlu.reproduce report` from the records in "
        "`docs/reproduction/records/` alone (see README \"The reproduction\"); regenerating it gives the same "
        "bytes. The paper's numbers are transcribed in `robustnlu/analysis/paper_results.py`, with where each "
        "came from and where the extraction is unsure.", "",
        "## Status", "", *status_lines(records, design), "",
        "## Reading", "",
        reading.strip() if reading else PLACEHOLDER + ": where we agree with the paper, where we do not, and the "
        "likely reasons (encoder size, budget, no full HPO).", "",
        "## Q1: the drop under drift (Table 10, Figure 1a)", "",
        "ERM's change from validation to test, test − valid in points (negative: a drop; the paper's sign), "
        "mean over the recorded runs of the cell (i.i.d. and o.o.d. validation, seeds 0 and 1). Paper: Table 10 "
        "(which validation kind its cells average is not said; its reading of the extraction is unsure, see "
        "paper_results.TABLE10).", "",
        table10_markdown(t10) if t10 else "No Part A run recorded yet.\n",
        "![ERM: test − valid of accuracy and F1, ours and the paper's (Figure 1a)](fig1a_drop.png)", "",
        "## Q4: DRO vs ERM on SNIPS (Tables 11-12, Figure 2)", "",
        "Per method: the mean over the scenarios it was compared in (column *scenarios*) of the per-scenario "
        "means over seeds of test COMBINED, SEMER and MA INT. COMBINED (%); *vs ERM %*: relative change to "
        "ERM's mean over the same scenarios, (method − ERM) / ERM (SEMER: lower is better). Significance as the "
        f"paper (section 5.2): two-sided approximate randomization (Noreen, 1989), {sig['rounds']} shuffles, "
        f"seed {sig['seed']}, p < {sig['alpha']}, each model tested against the ERM model of the same seed on "
        "the same test utterances; a method is significantly better (worse) in a scenario if its mean COMBINED "
        "change points that way, one of its paired tests is significant that way and none the other "
        f"(rule `{sig['rule']}` of `robustnlu.analysis.study`). Scenarios compared: "
        f"{', '.join(compared) if compared else 'none yet'}.", "",
        "The paper's columns: Table 12 averages all 8 SNIPS scenarios (4 models per method and scenario after "
        "HPO); Table 14's full-drift half covers the 4 full-drift scenarios our Part B runs.", "",
        summary_markdown(summary) if summary else "No SNIPS comparison recorded yet.\n",
        "![scenarios significantly worse / better than ERM, ours and the paper's (Figure 2)](fig2_significance.png)",
        "",
        "Figure 2 of the paper counts SNIPS and TOP together (of 16 scenarios): "
        + "; ".join(f"{m} worse {v['worse']}, better {v['better']}" for m, v in paper.FIGURE2.items()) + ".", "",
        "### Per scenario", "",
        "Test metrics, mean ± sample std over the seeds (%), drop = valid − test COMBINED (points):", "",
        scenario_table(stats)[0] if stats else "None yet.\n",
        "Relative change to ERM (%) and the paired tests (▲ / ▼: significantly better / worse):", "",
        relative_change_table(comparisons, stats, sig["alpha"])[0] if stats else "None yet.\n",
        "## The k search and the training budget", "",
        f"k of each TopK method chosen on {design.k_scenario}, seed 0, by valid COMBINED (never test; ties: the "
        f"smaller k). The paper searches k in 1-16 with its HPO and reports that k \"typically ended up ... "
        "between 2-8\" (Appendix C).", "",
        k_search_table(records, design),
        "Budget: " + ", ".join(f"`{b}`" for b in design.budget) + f". The paper: {paper.BUDGET}.", "",
        "ERM's valid COMBINED after each epoch on SNIPS (from `metrics.csv`); the last column shows whether the "
        "budget plateaued:", "",
        valid_curves_markdown(erm_snips) if erm_snips else "No SNIPS ERM run recorded yet.\n",
        "![ERM valid COMBINED per epoch](erm_valid_curves.png)", "",
        "## The splits", "",
        "Sizes and % of utterances from drifted clusters per split (`results.json` drift.split_stats), the "
        "canonical clusterings shipped in `data/seqdrift/`. The paper (section 5): "
        f"{paper.DRIFT_PERCENT_TEST['snips'][0]}-{paper.DRIFT_PERCENT_TEST['snips'][1]}% of SNIPS' test set "
        f"drifted; with partial drift {paper.PARTIAL_TRAIN_LEAK_PERCENT[0]}-{paper.PARTIAL_TRAIN_LEAK_PERCENT[1]}% "
        "of the training split belong to test clusters.", "",
        drift_table(list(records.runs.values())),
        "## Worst cluster", "",
        f"Worst-cluster test COMBINED over the SeqDrift clusters with at least {MIN_CLUSTER_SIZE} test utterances "
        "(the default `robustnlu.analysis.study.MIN_CLUSTER_SIZE`; over all clusters, clusters of 1-2 "
        "utterances decide it, last column). Mean over the runs.", "",
        worst_cluster_table(cluster_stats) if cluster_stats else "None yet.\n",
        "## Hyper-parameters, hardware and wall times", "",
        settings_markdown(records),
        hardware_markdown(records),
    ]
    figures = {"fig1a_drop.png": plot_table10(t10), "fig2_significance.png": plot_significance(summary),
               "erm_valid_curves.png": plot_valid_curves(erm_snips)}
    return "\n".join(lines), figures


def write(records_root: Path, design: Design, out: Path) -> list[Path]:
    """``report.md`` and `FIGURES` under ``out`` (with ``out``/`READING` as the section
    "Reading" if it exists), rendered before the first file is written."""
    reading = Path(out) / READING
    text, figures = render(read_records(records_root), design,
                           reading.read_text(encoding="utf-8") if reading.is_file() else None)
    written = [atomic_save_figure(fig, Path(out) / name) for name, fig in figures.items()]
    written.append(atomic_write_text(Path(out) / "report.md", text))
    return written
