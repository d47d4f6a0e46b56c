"""The reproduction report's tables (`robustnlu.studies.seqdrift_dro.report` says what each computes),
as Markdown (`robustnlu.tables`): Table 10 beside the paper's, Tables 11-12 per method, the k
search, ERM's valid curves, the splits, the worst cluster, the settings and the hardware."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from robustnlu.analysis.runs import BASELINE, Run, method_order
from robustnlu.analysis.statistics import Comparison, MethodStats
from robustnlu.metrics.registry import (
    METRICS, MIN_CLUSTER_SIZE, REPRODUCTION_SUMMARY, change_text, drop, relative_change, worst_cluster)
from robustnlu.studies.seqdrift_dro import paper_results as paper
from robustnlu.studies.seqdrift_dro.records import Design, Records, valid_combined_by_epoch
from robustnlu.tables import fmt, markdown


def _pct(metrics: dict[str, Any], key: str) -> float:
    return 100.0 * float(metrics[key])


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def table10(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per (dataset, drift kind, full/partial) of ERM's runs: n runs and the mean test − valid
    change in points of intent_acc, slot_f1, combined (−`drop`: the paper's Table 10 prints it
    so); the paper's acc / f1 beside (None if the paper has no cell)."""
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
            row[metric] = _mean([-100.0 * drop(r.results["metrics"]["valid"], r.results["metrics"]["test"], metric)
                                 for r in members])
        theirs = paper.TABLE10.get(key)
        row["paper_acc"], row["paper_f1"] = (theirs["acc"], theirs["f1"]) if theirs else (None, None)
        rows.append(row)
    return rows


def _paper_cell(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}"


def table10_markdown(rows: Sequence[dict[str, Any]]) -> str:
    return markdown(["dataset", "drift", "amount", "runs", "acc (ours)", "acc (paper)", "F1 (ours)", "F1 (paper)",
                     "COMBINED (ours)"],
                    [[r["dataset"], r["drift"], r["amount"], r["n"], fmt(r["intent_acc"], sign=True),
                      _paper_cell(r["paper_acc"]), fmt(r["slot_f1"], sign=True), _paper_cell(r["paper_f1"]),
                      fmt(r["combined"], sign=True)] for r in rows])


def method_label(run: Run) -> str:
    """The run's method: our name (with k) and the paper's, e.g. ``topk (k=4) = TOPK``."""
    config = run.results.get("config", {}).get("method", {})
    k = config.get("k")
    theirs = paper.paper_method(run.method, config.get("assignment"))
    return f"{run.method}" + (f" (k={k})" if k is not None else "") + (f" = {theirs}" if theirs else "")


def method_summary(stats: Sequence[MethodStats], comparisons: Sequence[Comparison],
                   counts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tables 11-12 (module docstring): one row per method, ERM first. A method's change is to
    ERM's mean over the same scenarios and, in each, the same seeds (`Comparison.baseline`)."""
    erm = {s.scenario: s for s in stats if s.method == BASELINE}
    baselines = {(c.scenario, c.method): c.baseline for c in comparisons}
    compared = sorted({s.scenario for s in stats if s.method != BASELINE and s.scenario in erm})
    all_counts = {r["method"]: r for r in counts if r["group"] == "all"}
    rows = []
    for method in sorted({s.method for s in stats}, key=method_order):
        mine = [s for s in stats if s.method == method and s.scenario in erm
                and (method != BASELINE or s.scenario in compared)]
        if not mine:
            continue
        row: dict[str, Any] = {"method": method, "label": method_label(mine[0].runs[0]), "scenarios": len(mine),
                               "runs": sum(s.n for s in mine)}
        for key in REPRODUCTION_SUMMARY:
            row[key] = _mean([s.stats[key][0] for s in mine])
            base = _mean([baselines[s.scenario, method][key] for s in mine])
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
            *[x for key in REPRODUCTION_SUMMARY
              for x in (fmt(r[key]), "" if base else fmt(r[f"{key}_pct"], sign=True))],
            "" if base or r["better"] is None else f"{r['better']} / {r['worse']} of {r['tested']}",
            fmt(t12.get("combined"), 1), "" if base else fmt(t12.get("combined_pct"), 1, sign=True),
            "" if base or "better" not in t12 else f"{t12['better']} / {t12['worse']} of 8",
            "" if base else fmt(t14.get("combined_pct"), 1, sign=True),
            "" if base else fmt(t14.get("semer_pct"), 1, sign=True),
            "" if base or "better" not in t14 else f"{t14['better']} / {t14['worse']} of 4",
        ])
    head = ["method", "scenarios", "runs"]
    for key in REPRODUCTION_SUMMARY:
        head += [f"{METRICS[key].title} %", f"{METRICS[key].title} vs ERM %"]
    head += ["sig. better / worse than ERM", "paper T12 COMBINED", "paper T12 vs ERM %", "paper T12 better / worse",
             "paper T14 full COMBINED vs ERM %", "paper T14 full SEMER vs ERM %", "paper T14 full better / worse"]
    return markdown(head, md_rows)


# --------------------------------------------------------------------------- k search, curves


def k_search_table(records: Records, design: Design) -> str:
    grid = sorted({k for ks in design.k_search.values() for k in ks})
    rows = []
    for method in sorted(design.k_search):
        cells = []
        for k in grid:
            run = records.runs.get(design.k_search[method].get(k, ""))
            cells.append(fmt(_pct(run.results["metrics"]["valid"], "combined")) if run else "not recorded")
        chosen = design.chosen_k.get(method)
        rows.append([method, *cells, chosen if chosen is not None else "pending"])
    return markdown(["method", *[f"k={k} valid COMBINED %" for k in grid], "chosen k"], rows)


def valid_curve(run: Run) -> list[float | None]:
    """Valid COMBINED (%) after each training epoch below ``epochs_trained``, from the run's
    ``metrics.csv`` (the last valid row of each epoch; a row at epoch ``epochs_trained``, the
    evaluation after training in a log that has one, is no epoch). None for an epoch the log lacks: a run resumed before
    `robustnlu.resume.ResumableCSVLogger` lost the rows of the epochs it had trained before."""
    by_epoch = valid_combined_by_epoch(run)
    trained = int(run.results.get("epochs_trained") or len(by_epoch))
    return [100.0 * by_epoch[epoch] if epoch in by_epoch else None for epoch in range(trained)] if by_epoch else []


def last_epoch_gain(curve: Sequence[float | None]) -> float | None:
    """How much valid COMBINED rose in the last epoch (points); None if either epoch is missing."""
    if len(curve) < 2 or curve[-1] is None or curve[-2] is None:
        return None
    return curve[-1] - curve[-2]


def valid_curves_markdown(runs: Sequence[Run]) -> str:
    curves = {r.path.name: valid_curve(r) for r in runs}
    width = max([len(c) for c in curves.values()], default=0)
    rows = [[name, *[fmt(v) for v in curve] + [""] * (width - len(curve)), fmt(last_epoch_gain(curve), sign=True)]
            for name, curve in curves.items()]
    table = markdown(["run", *[f"epoch {e + 1}" for e in range(width)], "last − previous (points)"], rows)
    if any(None in curve for curve in curves.values()):
        table += ("\nA blank epoch: the run was resumed from a checkpoint before the fix of 2026-11-24, and "
                  "its log lost the epochs trained before the resume (its results are those of the "
                  "uninterrupted run: tests/test_kill_and_resume.py).\n")
    return table


def last_epoch_gains_markdown(runs: Sequence[Run]) -> str:
    """Per method (in the report's method order): how much valid COMBINED rose in each run's last
    epoch, in points — whether the one budget left a method still learning."""
    gains: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        gain = last_epoch_gain(valid_curve(run))
        if gain is not None:
            gains[run.method].append(gain)
    rows = [[method, len(gains[method]), fmt(float(np.mean(gains[method])), sign=True),
             fmt(min(gains[method]), sign=True), fmt(max(gains[method]), sign=True)]
            for method in sorted(gains, key=method_order)]
    return markdown(["method", "runs", "mean gain (points)", "least", "most"], rows)


# --------------------------------------------------------------------------- splits, clusters


def best_epoch(run: Run) -> int | None:
    """The epoch (1-based) of the run's best checkpoint, ``checkpoints/best-epochNNN.ckpt`` (NNN 0-based)."""
    match = re.search(r"epoch(\d+)", run.results.get("best_checkpoint") or "")
    return int(match.group(1)) + 1 if match else None


def plateau_table(records: Records, design: Design, comparisons: Sequence[Comparison]) -> str:
    """Part D, in the plan's order (ERM first): each method's run to its own plateau (epochs
    trained, the best-valid epoch, valid and test COMBINED, test slot F1, test COMBINED's change to
    ERM's run of the same budget and the paired test's p) beside its run at the fixed budget (test
    COMBINED, its change to ERM's run at that budget, its last-epoch gain). ``comparisons``:
    `compare_to_baseline` over the Part D runs alone."""
    tested = {c.method: c for c in comparisons if c.pairs}
    names = design.parts.get("D", [])

    def fixed_budget(name: str) -> Run | None:
        return records.runs.get(design.plateau_reference.get(name, ""))

    def combined(run: Run, split: str = "test") -> float:
        return _pct(run.results["metrics"][split], "combined")

    erm_fixed = next((fixed_budget(n) for n in names if n in records.runs and records.runs[n].method == BASELINE), None)
    rows = []
    for name in names:
        run, fixed = records.runs.get(name), fixed_budget(name)
        if run is None:
            rows.append([name, "not recorded", *[""] * 9])
            continue
        comparison = tested.get(run.method)
        rows.append([
            method_label(run), run.results["epochs_trained"], best_epoch(run), fmt(combined(run, "valid")),
            fmt(combined(run)), fmt(_pct(run.results["metrics"]["test"], "slot_f1")),
            change_text(comparison.means["combined"], comparison.baseline["combined"], unit="") if comparison else "",
            fmt(comparison.verdicts["combined"].tests[0].p_value, digits=4) if comparison else "",
            fmt(combined(fixed)) if fixed else "not recorded",
            change_text(combined(fixed), combined(erm_fixed), unit="")
            if fixed and erm_fixed and run.method != BASELINE else "",
            fmt(last_epoch_gain(valid_curve(fixed)), sign=True) if fixed else ""])
    return markdown(["method", "epochs trained", "best epoch", "valid COMBINED %", "test COMBINED %", "test slot F1 %",
                     "test COMBINED vs ERM %", "p (paired, vs ERM)", "fixed budget: test COMBINED %",
                     "fixed budget: vs ERM %", "fixed budget: last-epoch gain (points)"], rows)


def at_plateau(run: Run, max_epochs: int, tolerance: float) -> str:
    """Whether ``run`` reached its plateau, and why: early stopping ended it before
    ``max_epochs``, or its last epoch changed valid COMBINED by less than ``tolerance`` points;
    "no" otherwise (it was still learning when the epochs ran out)."""
    if int(run.results.get("epochs_trained") or 0) < max_epochs:
        return "yes: early-stopped"
    gain = last_epoch_gain(valid_curve(run))
    if gain is None:
        return "unknown: its log lacks the last epochs"
    return f"yes: last change within ±{tolerance:g}" if abs(gain) < tolerance else "no"


def plateau_runs_markdown(records: Records, names: Sequence[str], max_epochs: int, tolerance: float) -> str:
    """Part E per run: epochs trained, the best-valid epoch, the last epoch's change of valid
    COMBINED and the plateau criterion (`at_plateau`) checked."""
    rows = []
    for name in names:
        run = records.runs.get(name)
        if run is None:
            rows.append([name, "not recorded", "", "", ""])
            continue
        rows.append([name, run.results["epochs_trained"], best_epoch(run),
                     fmt(last_epoch_gain(valid_curve(run)), sign=True), at_plateau(run, max_epochs, tolerance)])
    return markdown(["run", "epochs trained", "best epoch", "last-epoch change of valid COMBINED (points)",
                     "at its plateau"], rows)


def budgets_markdown(plateau: Sequence[dict[str, Any]], fixed: Sequence[dict[str, Any]]) -> str:
    """Q4 at each budget, per method: `method_summary` rows of the plateau runs beside those of
    the fixed-budget runs of the same scenarios and seeds."""
    at_fixed = {r["method"]: r for r in fixed}

    def change(row: dict[str, Any] | None) -> str:
        return "" if row is None else fmt(row["combined_pct"], sign=True)

    def significance(row: dict[str, Any] | None) -> str:
        return "" if row is None or row["better"] is None else f"{row['better']} / {row['worse']} of {row['tested']}"

    rows = [[r["label"], r["scenarios"], r["runs"], change(r), significance(r), change(at_fixed.get(r["method"])),
             significance(at_fixed.get(r["method"]))] for r in plateau if r["method"] != BASELINE]
    return markdown(["method", "scenarios", "runs", "at plateau: COMBINED vs ERM %", "at plateau: sig. better / worse",
                     "fixed budget: COMBINED vs ERM %", "fixed budget: sig. better / worse"], rows)


def adamw_kernels(stats: MethodStats) -> str:
    """The AdamW kernel of a per-scenario row's models (``results.json`` optimizer_fused): ``fused``,
    ``loop`` (PyTorch's per-parameter loop), or per seed where they differ."""
    kernel = {run.seed: "fused" if run.results.get("optimizer_fused", False) else "loop" for run in stats.runs}
    if len(set(kernel.values())) == 1:
        return next(iter(kernel.values()))
    return ", ".join(f"{k} (seed {seed})" for seed, k in sorted(kernel.items()))


def resumed_markdown(name: str, run: Run) -> str | None:
    """The disclosure line of a record whose run was resumed (``results.json`` resumed_from) or whose
    per-epoch log lacks epochs (resumed before `robustnlu.resume.ResumableCSVLogger`): where it
    continued from, its wall time (`wall_time_s`: the session that finished it, plus the fit time of
    the sessions before where its checkpoint recorded it) and which epochs its curve lacks. None for
    a run trained in one go."""
    resumed = run.results.get("resumed_from")
    missing = [str(e + 1) for e, v in enumerate(valid_curve(run)) if v is None]
    if not resumed and not missing:
        return None
    line = f"- `{name}` was resumed"
    if resumed:
        line += f" from a checkpoint taken in epoch {resumed['epoch'] + 1} (optimizer step {resumed['global_step']}); "
        before = resumed.get("fit_time_s")
        line += ("its wall time counts the training after the resume only" if before is None else
                 f"its wall time adds the {before / 60:.1f} minutes its sessions before trained up to that checkpoint")
    lacks = f"lacks epoch{'s' if len(missing) > 1 else ''} {', '.join(missing)}" if missing else "is complete"
    return f"{line}; its log {lacks}"


def disclosures_markdown(records: Records) -> str:
    """The records that differ from the others in how they were trained or logged: those that
    trained with PyTorch's per-parameter AdamW loop (the rest: the fused kernel; the same update,
    float rounding apart), and every resumed one (`resumed_markdown`; a resumed run's results are
    those of an uninterrupted one, its wall time and, before the log kept them, its curve are not)."""
    lines = []
    loop = sorted(n for n, r in records.runs.items() if not r.results.get("optimizer_fused", False))
    if loop:
        lines.append(f"- AdamW's per-parameter loop, not the fused kernel ({len(loop)} records): "
                     + ", ".join(f"`{n}`" for n in loop))
    lines += [line for name, run in sorted(records.runs.items()) if (line := resumed_markdown(name, run))]
    return "\n".join(lines) + "\n" if lines else "None.\n"


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
            cells += [s.get("size", ""), fmt(s.get("percent_drift"), 1)]
        pad = stats.get("proxy_a_distance", {})
        clusters = stats.get("clusters", {})
        rows.append([scenario.dataset, scenario.drift, scenario.amount, scenario.validation, *cells,
                     clusters.get("count", ""), clusters.get("test", ""), fmt(pad.get("train_vs_test"), 3),
                     "yes" if len(keys) == 1 else f"NO: {len(keys)} splits"])
    return markdown(["dataset", "drift", "amount", "validation", "train", "train % drift", "valid", "valid % drift",
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
        rows.append([s.scenario.dataset, s.scenario.label, method_label(s.runs[0]), s.n, fmt(_mean(kept)),
                     f"{floor[0][1]} of {floor[0][2]}",
                     fmt(_mean([100 * v for v in anything if v is not None]))])
    return markdown(["dataset", "scenario", "method", "runs", f"worst-cluster COMBINED % (≥ {min_size} test utt.)",
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
    # results.json records the AdamW kernel from optimizer.fused=auto on (2026-11-24); the runs before it
    # trained with PyTorch's per-parameter loop: the same update, float rounding apart
    kernels = Counter({True: "fused", False: "loop"}[bool(r.results.get("optimizer_fused", False))]
                      for r in records.runs.values())
    rows.append(["AdamW kernel (fused or per-parameter loop)", ", ".join(f"{v} ({n})" for v, n in sorted(kernels.items()))])
    return markdown(["setting", "value (runs)"], rows)


def _machine(records: Records, name: str) -> str:
    """The CPU (``meta.json``) a run trained on, or its GPU (results.json's ``device``)."""
    device = records.runs[name].results.get("device") or {}
    if device.get("accelerator", "cpu") != "cpu":
        return f"{device.get('name', device['accelerator'])} x {device.get('processes', 1)}"
    return f"{records.meta[name].get('cpu', '?')}, {records.meta[name].get('cores', '?')} cores"


def hardware_markdown(records: Records) -> str:
    """Per part (as ``meta.json`` records it): runs, wall time (`wall_time_s`), hardware; the count of
    resumed records whose wall time lacks the sessions before the resume."""
    part_of = {name: str(records.meta[name].get("part", "?")) for name in records.runs}
    rows = []
    for part in sorted(set(part_of.values())):
        names = [n for n in records.runs if part_of[n] == part]
        walls = [wall_time_s(records, n) for n in names if "wall_time_s" in records.meta[n]]
        machines = Counter(_machine(records, n) for n in names)
        rows.append([part, len(names), fmt(sum(walls) / 3600, 1) if walls else "",
                     fmt(float(np.median(walls)) / 60, 1) if walls else "",
                     "; ".join(f"{m} ({n})" for m, n in sorted(machines.items()))])
    table = markdown(["part", "runs recorded", "wall time (hours)", "median per run (minutes)", "hardware (runs)"], rows)
    resumed = [run.results["resumed_from"] for run in records.runs.values() if run.results.get("resumed_from")]
    partial = sum(1 for r in resumed if r.get("fit_time_s") is None)
    if partial:
        table += (f"\nThe wall time of {partial} of the {len(resumed)} resumed records is their training after the "
                  "resume only: their checkpoints did not record the sessions before ([Records trained or logged "
                  "differently](#records-trained-or-logged-differently)).\n")
    return table


def wall_time_s(records: Records, name: str) -> float:
    """A record's wall time: its last session's (``meta.json``), plus the fit time of the sessions
    before a resume where its checkpoint recorded it (``resumed_from.fit_time_s``)."""
    before = (records.runs[name].results.get("resumed_from") or {}).get("fit_time_s") or 0.0
    return float(records.meta[name]["wall_time_s"]) + float(before)
