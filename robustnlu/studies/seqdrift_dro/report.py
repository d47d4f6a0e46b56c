"""The reproduction report: ``docs/reproduction/report.md`` and its figures, built from
the committed records of `robustnlu.reproduce` alone, beside the core paper's numbers
(`robustnlu.studies.seqdrift_dro.paper_results`). ``python -m robustnlu.reproduce report`` is the command.

A record is ``<records>/<run name>/`` with ``results.json``, ``metrics.csv``, ``meta.json`` and
``predictions/{valid,test}.jsonl.xz``; the run name says the scenario, method (with k) and seed.
What the report computes, each with the function that does it:

- `table10`: ERM's change from validation to test (test − valid, points; the paper's sign) of
  intent accuracy, slot F1 and COMBINED per dataset, drift kind and full/partial drift, the mean
  over the recorded Part A runs of the cell (both validation kinds, both seeds); Figure 1a.
- `method_summary`: Tables 11-12 for SNIPS. Per method, the mean over the scenarios it was
  compared in of the per-scenario means (over seeds) of test COMBINED, SEMER and MA INT.
  COMBINED; the relative change to ERM's mean over the same scenarios and seeds, (m − erm) / erm in %; and
  the scenarios significantly better / worse than ERM on COMBINED: the study's
  (`robustnlu.analysis.statistics`) paired approximate randomization tests (p < 0.05, each model against the ERM model of the same
  seed, decision rule ``any``: the paper's reading), `SIGNIFICANCE` fixed so the report is the
  same each time; Figure 2.
- `k_search_table`: valid COMBINED per k of each TopK method on the k-search scenario, and the k
  the driver chose (best valid COMBINED, never test).
- `valid_curves`: ERM's per-epoch valid COMBINED (``metrics.csv``), to show whether the budget
  plateaued.
- `plateau_table`: Part D, each method trained to its own plateau beside its run at the fixed
  budget, with the paired test against ERM's run of the same budget.
- Part E, with Part F's Group-DRO runs: Q4 (`method_summary`) over the runs trained to their
  plateau, beside the fixed budget's over the same scenarios and seeds (`budgets_markdown`), its
  per-scenario tables as Q4's, and each run's plateau criterion checked (`plateau_runs_markdown`,
  `at_plateau`).
- `disclosures_markdown`: the records trained with the other AdamW kernel, and every resumed one:
  from where, that its wall time is the part after the resume, what its log lacks.
- `drift_table`: the splits' sizes and % drift (``results.json`` drift.split_stats).
- `worst_cluster_table`: worst-cluster COMBINED over the test clusters of at least
  `robustnlu.metrics.registry.MIN_CLUSTER_SIZE` utterances, and how many clusters qualify.
- hyper-parameters, budget, hardware and wall times (``results.json`` config, ``meta.json``).

The records are read by `robustnlu.studies.seqdrift_dro.records`, the tables computed and
rendered by `robustnlu.studies.seqdrift_dro.tables`, the figures drawn by
`robustnlu.studies.seqdrift_dro.figures`; this module writes the report.

Everything is iterated in sorted order and no clock is read: the same records give the same
bytes. The section "Reading" is `READING`, written by the person who reads the results (a
placeholder while it does not exist).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robustnlu.analysis.runs import BASELINE, Run, group_runs
from robustnlu.analysis.statistics import (
    Comparison,
    MethodStats,
    compare_to_baseline,
    scenario_stats,
    significance_counts,
)
from robustnlu.analysis.study_tables import relative_change_table, scenario_table
from robustnlu.io import atomic_write_files, check_outputs
from robustnlu.metrics.registry import MIN_CLUSTER_SIZE
from robustnlu.plotting import png
from robustnlu.studies.seqdrift_dro import paper_results as paper
from robustnlu.studies.seqdrift_dro.figures import plot_significance, plot_table10, plot_valid_curves
from robustnlu.studies.seqdrift_dro.records import Design, Records, read_records
from robustnlu.studies.seqdrift_dro.tables import (
    adamw_kernels,
    budgets_markdown,
    disclosures_markdown,
    drift_table,
    hardware_markdown,
    k_search_table,
    last_epoch_gains_markdown,
    method_summary,
    plateau_runs_markdown,
    plateau_table,
    settings_markdown,
    summary_markdown,
    table10,
    table10_markdown,
    valid_curves_markdown,
    worst_cluster_table,
)

#: The significance tests of the report: the paper's (section 5.2), fixed so the report is
#: reproducible byte for byte.
SIGNIFICANCE = {"alpha": 0.05, "rounds": 10_000, "seed": 0, "rule": "any"}
FIGURES = ("fig1a_drop.png", "fig2_significance.png", "erm_valid_curves.png")
#: The section "Reading" is written by a person, in this file beside report.md (committed); the
#: report includes it verbatim, so that rebuilding the report keeps it.
READING = "reading.md"
PLACEHOLDER = (f"**TO BE WRITTEN** (in `{READING}` beside this report, which the report includes) once the "
               "study is complete")


def comparison(runs: Sequence[Run]) -> tuple[list[MethodStats], list[Comparison], list[dict[str, Any]]]:
    """Per-scenario stats, the paired tests against ERM (`SIGNIFICANCE`) and the counts."""
    stats = scenario_stats(group_runs(runs))
    comparisons = compare_to_baseline(stats, SIGNIFICANCE["alpha"], SIGNIFICANCE["rounds"], SIGNIFICANCE["seed"],
                                      SIGNIFICANCE["rule"])
    return stats, comparisons, significance_counts(comparisons)


# --------------------------------------------------------------------------- the report


def status_lines(records: Records, design: Design) -> list[str]:
    titles = {"A": "Part A (ERM, 8 scenarios of SNIPS and ATIS, 2 seeds)", "k": "k search",
              "B": "Part B (TopK methods on SNIPS' full-drift scenarios, 2 seeds)",
              "C": "Part C (Group-DRO on SNIPS' full-drift scenarios, 2 seeds; as compute allows)",
              "D": "Part D (ERM, TopK-Group and TopK-AE each to its own plateau, the k-search scenario, seed 0; "
                   "as compute allows)",
              "E": "Part E (ERM and the three TopK methods each to its own plateau on SNIPS' full-drift scenarios, "
                   "2 seeds; Part D's runs among them)",
              "F": "Part F (Group-DRO to its own plateau, Part E's scenarios and seeds; as compute allows)"}
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
    snips_names = [n for part in ("A", "B", "C") for n in design.parts.get(part, []) if n.startswith("snips-")]
    snips = records.select(snips_names)
    t10 = table10(part_a)
    stats, comparisons, counts = comparison(snips) if snips else ([], [], [])
    summary = method_summary(stats, comparisons, counts)
    compared = sorted({c.scenario.label for c in comparisons if c.pairs})
    erm_snips = [r for r in part_a if r.scenario.dataset == "snips" and r.method == BASELINE]
    cluster_stats = scenario_stats(group_runs(part_a + [r for r in snips if r not in part_a]))
    part_d = records.select(design.parts.get("D", []))
    plateau_comparisons = comparison(part_d)[1] if part_d else []
    part_e_names = design.parts.get("E", []) + design.parts.get("F", [])  # Part F: one more method, the same ERM
    part_e = records.select(part_e_names)
    e_stats, e_comparisons, e_counts = comparison(part_e) if part_e else ([], [], [])
    part_e_summary = method_summary(e_stats, e_comparisons, e_counts)
    fixed_e = records.select([design.plateau_reference[n] for n in part_e_names if n in records.runs])
    fixed_e_summary = method_summary(*comparison(fixed_e)) if fixed_e else []
    sig = SIGNIFICANCE
    lines = [
        "# Reproduction of the core paper on this machine", "",
        "Generated by `python -m robustnlu.reproduce report` from the records in "
        "`docs/reproduction/records/` alone (see README \"The reproduction\"); regenerating it gives the same "
        "bytes. The paper's numbers are transcribed in `robustnlu/studies/seqdrift_dro/paper_results.py`, with where each "
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
        f"(rule `{sig['rule']}` of `robustnlu.analysis.statistics`). Scenarios compared: "
        f"{', '.join(compared) if compared else 'none yet'}.", "",
        "The paper's columns: Table 12 averages all 8 SNIPS scenarios (4 models per method and scenario after "
        "HPO); Table 14's full-drift half covers the 4 full-drift scenarios our Part B runs.", "",
        summary_markdown(summary) if summary else "No SNIPS comparison recorded yet.\n",
        "![scenarios significantly worse / better than ERM, ours and the paper's (Figure 2)](fig2_significance.png)",
        "",
        "Figure 2 of the paper counts SNIPS and TOP together (of 16 scenarios): "
        + "; ".join(f"{m} worse {v['worse']}, better {v['better']}" for m, v in paper.FIGURE2.items()) + ".", "",
        "### Per scenario", "",
        "Test metrics, mean ± sample std over the seeds (%), drop = valid − test COMBINED (points); the AdamW "
        "kernel the models trained with (fused, or PyTorch's per-parameter loop: the same update, float rounding "
        "apart), per seed where they differ:", "",
        scenario_table(stats, ("AdamW kernel", adamw_kernels))[0] if stats else "None yet.\n",
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
        "Every method of the SNIPS comparison at the same budget: valid COMBINED gained in the last epoch "
        "(from each run's `metrics.csv`; a method still gaining points was stopped by the budget, not by a "
        "plateau):", "",
        last_epoch_gains_markdown(snips) if snips else "No SNIPS run recorded yet.\n",
        "## Part D: each method to its own plateau", "",
        f"ERM and the methods the fixed budget left furthest from a plateau, on {design.k_scenario}, seed 0, "
        "trained with " + ", ".join(f"`{b}`" for b in design.plateau_budget) + " in place of the fixed budget's "
        "epochs (the paper's way: many epochs, early stopping on validation). The learning rate decays linearly "
        "over the larger number of epochs, so their first epochs are not the fixed budget's. The best-valid "
        "checkpoint is tested; *p*: the paired approximate randomization test of test COMBINED against ERM's "
        "run of the same budget (settings as above); the last columns: the same method and seed at the fixed "
        "budget.", "",
        plateau_table(records, design, plateau_comparisons),
        "Valid COMBINED per epoch:", "",
        valid_curves_markdown(part_d) if part_d else "No Part D run recorded yet.\n",
        "## Part E: every method to its own plateau, the whole DRO comparison", "",
        "ERM and the three TopK methods (their chosen k) on SNIPS' 4 full-drift scenarios, seeds 0 and 1, each "
        "trained with " + ", ".join(f"`{b}`" for b in design.plateau_budget) + " (Part D's budget, fixed before "
        "Part E's first run; Part D's runs are Part E's on their scenario). A run is at its plateau when early "
        f"stopping ended it before epoch {design.plateau_epochs}, or when its last epoch changed valid COMBINED "
        f"by less than {design.plateau_tolerance:g} points (fixed before Part E's first run). Means, changes to "
        "ERM and significance as in Q4, over the recorded scenarios and seeds. Part F, planned last, adds "
        "Group-DRO (Part C's method) at the same budget: its runs are listed here and compared with the same "
        "ERM runs.", "",
        summary_markdown(part_e_summary) if part_e_summary else "No Part E comparison recorded yet.\n",
        "The same comparison at both budgets, over the same scenarios and seeds (the fixed budget's runs are "
        "Parts A, B and C):", "",
        budgets_markdown(part_e_summary, fixed_e_summary) if part_e_summary else "None yet.\n",
        "Per scenario at plateau, as in Q4: test metrics, mean ± sample std over the recorded seeds (%), drop "
        "= valid − test COMBINED (points):", "",
        scenario_table(e_stats)[0] if e_stats else "None yet.\n",
        "Relative change to ERM (%) and the paired tests (▲ / ▼: significantly better / worse):", "",
        relative_change_table(e_comparisons, e_stats, sig["alpha"])[0] if e_stats else "None yet.\n",
        "Each run:", "",
        plateau_runs_markdown(records, sorted(set(part_e_names), key=part_e_names.index), design.plateau_epochs,
                              design.plateau_tolerance),
        "## Records trained or logged differently", "",
        disclosures_markdown(records),
        "## The splits", "",
        "Sizes and % of utterances from drifted clusters per split (`results.json` drift.split_stats), the "
        "canonical clusterings shipped in `data/seqdrift/`. The paper (section 5): "
        f"{paper.DRIFT_PERCENT_TEST['snips'][0]}-{paper.DRIFT_PERCENT_TEST['snips'][1]}% of SNIPS' test set "
        f"drifted; with partial drift {paper.PARTIAL_TRAIN_LEAK_PERCENT[0]}-{paper.PARTIAL_TRAIN_LEAK_PERCENT[1]}% "
        "of the training split belong to test clusters.", "",
        drift_table(list(records.runs.values())),
        "## Worst cluster", "",
        f"Worst-cluster test COMBINED over the SeqDrift clusters with at least {MIN_CLUSTER_SIZE} test utterances "
        "(the default `robustnlu.analysis.runs.MIN_CLUSTER_SIZE`; over all clusters, clusters of 1-2 "
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
    "Reading" if it exists), rendered first, then written as one step (`atomic_write_files`);
    every record is read
    whole first (`read_records`), and ``out`` must not lie inside one (`check_outputs`)."""
    records = read_records(records_root)
    check_outputs([Path(out) / name for name in (*FIGURES, "report.md")], (), "--out",
                  within=[run.path for run in records.runs.values()])
    reading = Path(out) / READING
    text, figures = render(records, design, reading.read_text(encoding="utf-8") if reading.is_file() else None)
    return atomic_write_files({**{Path(out) / name: png(fig) for name, fig in figures.items()},
                               Path(out) / "report.md": text})
