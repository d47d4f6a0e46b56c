"""The study report of a sweep (core paper section 5, Appendix D Tables 10-14, Figures 1 and 2):
`python -m robustnlu.report` is the command line. One module per job:

- `robustnlu.analysis.runs`: the runs found under the given directories and their scenarios;
- `robustnlu.analysis.searches`: of an HPO search's runs, those it chose (its ``best_params.json``);
- `robustnlu.analysis.statistics`: means and std per scenario and method, the relative change to
  ERM, the paired approximate randomization tests (pairing and decision rules) and the counts;
- `robustnlu.analysis.study_tables`: Table 10, the relative changes and the counts (Markdown, CSV);
- `robustnlu.analysis.figures`: Figures 1a, 1b, 1c and 2;
- here: `build_study` (all of the above, writing nothing) and `write_report` (the files and
  report.md's prose).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustnlu.analysis.figures import plot_counts, plot_drop
from robustnlu.analysis.runs import (
    BASELINE,
    Incomplete,
    Run,
    StudyError,
    check_distinct,
    check_one_setting,
    check_one_split,
    check_results,
    discover,
    group_runs,
)
from robustnlu.analysis.searches import searches_in, select_chosen
from robustnlu.analysis.significance import family_wise_error
from robustnlu.analysis.statistics import (
    Comparison,
    MethodStats,
    compare_to_baseline,
    scenario_stats,
    significance_counts,
)
from robustnlu.analysis.study_tables import counts_table, relative_change_table, scenario_table
from robustnlu.io import atomic_write_files
from robustnlu.metrics.registry import MIN_CLUSTER_SIZE
from robustnlu.plotting import png


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
    #: runs pooled with others of their method and scenario whose settings could not be compared
    #: (`check_one_setting`)
    uncompared: list[Run] = field(default_factory=list)
    #: per HPO search read, what it chose and left out (`robustnlu.analysis.searches.select_chosen`)
    searches: list[str] = field(default_factory=list)
    #: how many runs below the searches' sweep dirs they did not choose (trials not chosen), left out
    left_out: int = 0


def build_study(paths: Sequence[Path], alpha: float = 0.05, rounds: int = 10_000, seed: int = 0,
                rule: str = "any", min_cluster_size: int = MIN_CLUSTER_SIZE) -> Study:
    """Everything the report shows; reads the run directories, writes nothing."""
    if not 0.0 < alpha < 1.0:
        raise StudyError(f"alpha must lie in (0, 1), got {alpha}")
    if rounds < 1:
        raise StudyError(f"rounds must be >= 1, got {rounds}")
    if min_cluster_size < 1:
        raise StudyError(f"min_cluster_size must be >= 1, got {min_cluster_size}")
    runs, incomplete, searches, left_out = select_chosen(searches_in(paths), *discover(paths))
    check_results(runs)
    check_distinct(runs)
    check_one_split(runs)
    uncompared = check_one_setting(runs)
    stats = scenario_stats(group_runs(runs), min_cluster_size)
    comparisons = compare_to_baseline(stats, alpha, rounds, seed, rule)
    return Study(list(map(Path, paths)), runs, incomplete, stats, comparisons, significance_counts(comparisons),
                 alpha, rounds, seed, rule, min_cluster_size, uncompared, searches, left_out)


FILES = ("table10_metrics.md", "table10_metrics.csv", "relative_change.md", "relative_change.csv",
         "significance_counts.md", "significance_counts.csv", "fig1a_drop.png", "fig1bc_counts.png", "report.md")


def _family_wise_errors(comparisons: Sequence[Comparison], alpha: float) -> list[str]:
    """report.md's sentences on the family-wise error of a scenario's k paired tests
    (`Comparison.family_wise_error`): per k, for independent tests and, where some share an ERM
    model, the union bound."""
    independent = sorted({c.k for c in comparisons if not c.shares_erm_model})
    shared = sorted({c.k for c in comparisons if c.shares_erm_model})
    sentences = []
    if independent:
        sentences.append("Family-wise error of the k paired tests per scenario, taken as independent as in the "
                         "core paper (section 5.2: 0.185 for k = 4), 1 − (1 − alpha)^k: "
                         + ", ".join(f"k = {k}: {family_wise_error(alpha, k):.3f}" for k in independent) + ".")
    if shared:
        sentences.append("Where two of a scenario's k tests are against one ERM model (paired by order, below) "
                         "they are not independent; the family-wise error is then bounded by the union "
                         "(Bonferroni) bound min(1, k · alpha), which holds for any dependence: "
                         + ", ".join(f"k = {k}: {family_wise_error(alpha, k, independent=False):.3f}"
                                     for k in shared) + ".")
    return sentences


def _report_md(study: Study, t10: str, rel: str, counts: str) -> str:
    tested = [c for c in study.comparisons if c.k]
    fwe = " ".join(_family_wise_errors(tested, study.alpha)) or "No tests (no ERM partner)."
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
    if study.searches:
        lines += ["HPO searches (`best_params.json` of `python -m robustnlu.hpo`): the models of each one's method "
                  "and scenario are the runs it chose (core paper section 5: the best settings × 2 seeds):", "",
                  *(f"- {line}" for line in study.searches), ""]
    if study.incomplete:
        lines += ["### Failed or unfinished runs", "", "| run directory | state | error |", "|---|---|---|"]
        lines += [f"| `{r.path}` | {r.state} | {(r.error or '').replace('|', '/')} |" for r in study.incomplete]
        lines.append("")
    if study.uncompared:
        lines += ["### Runs whose settings could not be compared", "",
                  "These runs record no config (neither in results.json nor in config.yaml), so the report "
                  "cannot tell whether they trained with the settings of the other runs of their method and "
                  "scenario; they are counted as models of it:", ""]
        lines += [f"- `{r.path}` ({r.method}, {r.scenario.name})" for r in study.uncompared]
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
        }[study.rule] + f" {fwe} Counts use COMBINED; ▲ / ▼ mark significantly better / worse.", "",
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
    """Every table, figure and ``report.md`` under ``out``, rendered first, then written as one
    step (`atomic_write_files`: none replaced unless every one is written); returns the paths
    (`FILES`)."""
    out = Path(out)
    t10_md, t10_csv = scenario_table(study.stats)
    rel_md, rel_csv = relative_change_table(study.comparisons, study.stats, study.alpha)
    cnt_md, cnt_csv = counts_table(study.counts)
    texts = {"table10_metrics.md": t10_md, "table10_metrics.csv": t10_csv, "relative_change.md": rel_md,
             "relative_change.csv": rel_csv, "significance_counts.md": cnt_md, "significance_counts.csv": cnt_csv,
             "report.md": _report_md(study, t10_md, rel_md, cnt_md)}
    figures = {"fig1a_drop.png": png(plot_drop(study.stats)), "fig1bc_counts.png": png(plot_counts(study.counts))}
    return atomic_write_files({out / name: content for name, content in {**figures, **texts}.items()})
