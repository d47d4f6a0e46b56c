"""Robustness to noise in the layout of Krone et al. (paper 002), Table 4.

A `NoiseScore` is one model on one control / treatment pair (a dataset and a noise type): intent
accuracy, slot F1 (seqeval semantics) and frame accuracy on the original utterances ("Orig.")
and on their noisy versions ("Noisy"). Comparing a baseline with an augmented model gives, per
cell and metric (digest A.7, in points):

- drop = base noisy − base orig;      gain = aug noisy − base noisy;
- residual = aug noisy − aug orig;    clean cost = aug orig − base orig;

and the paper's headline numbers are the unweighted means of drop and gain over the cells
(−13.5 IC / −18.9 SL and +11.5 / +17.3 over its 12 cells).

    python -m robustnlu.analysis.robustness BASE_RUN [AUG_RUN]
    python -m robustnlu.analysis.robustness SWEEP_DIR

prints a run's tables from ``<run>/robustness.json``; with two runs, the effects of the second
(augmented) relative to the first (baseline) for the cells both have. A sweep directory (e.g.
``python -m robustnlu -m augment=none,misspelling 'suite=[noisy_nlu]'``, whose job folders are
named alike but for their hash) is sorted by what each finished run recorded: the one trained
without augmentation (results.json's ``augment`` is null) is the baseline, and every other one,
in job order, is compared with it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from robustnlu.errors import CommandLineParser, DataError, entry_point
from robustnlu.metrics.registry import METRICS, NOISE_EFFECTS
from robustnlu.metrics.robustness import NoiseScore, pct, read_suites, score_table, signed
from robustnlu.rundir import RunDir, sweep_runs
from robustnlu.tables import markdown_lines

EFFECTS = ("drop", "gain", "residual", "clean_cost")


def effects(base: NoiseScore, aug: NoiseScore, metric: str) -> dict[str, float]:
    """Drop, gain, residual and clean cost of one cell (fractions; ×100 for points)."""
    if base.cell != aug.cell:
        raise ValueError(f"cells differ: {base.cell} vs {aug.cell}")
    return {
        "drop": base.treatment[metric] - base.control[metric],
        "gain": aug.treatment[metric] - base.treatment[metric],
        "residual": aug.treatment[metric] - aug.control[metric],
        "clean_cost": aug.control[metric] - base.control[metric],
    }


def mean_effects(pairs: Sequence[tuple[NoiseScore, NoiseScore]], metric: str) -> dict[str, float]:
    """The unweighted mean of each effect over the cells (the paper's averages)."""
    cells = [effects(b, a, metric) for b, a in pairs]
    return {e: sum(c[e] for c in cells) / len(cells) for e in EFFECTS}


def match_cells(base: Sequence[NoiseScore], aug: Sequence[NoiseScore]) -> list[tuple[NoiseScore, NoiseScore]]:
    """(base, aug) for every cell both have, in the base's order. ValueError naming the first cell
    the two scored on different numbers of utterance pairs: the effects subtract scores of the same
    utterances (a synthetic suite noises the run's own split, seeded by the run's seed, so runs of
    another seed or split are scored on other utterances)."""
    by_cell = {s.cell: s for s in aug}
    pairs = [(b, by_cell[b.cell]) for b in base if b.cell in by_cell]
    for b, a in pairs:
        if b.n != a.n:
            raise ValueError(f"{b.dataset} {b.noise}: {a.n} utterance pairs, but {b.n} in the baseline's: the two runs "
                             "were scored on different utterances (another seed or split?); compare runs scored on "
                             "the same ones")
    return pairs


def effects_table(pairs: Sequence[tuple[NoiseScore, NoiseScore]]) -> str:
    """Markdown: per cell, base and augmented Orig. / Noisy and the four effects for IC and SL,
    then the unweighted means of the effects (the paper's headline numbers)."""
    head = ["dataset", "noise"]
    for label in (METRICS[m].abbrev for m in NOISE_EFFECTS):
        head += [f"{label} base orig", f"{label} base noisy", f"{label} aug orig", f"{label} aug noisy"]
        head += [f"{label} {e.replace('_', ' ')}" for e in EFFECTS]
    rows = []
    for b, a in pairs:
        cols = [b.dataset, b.noise]
        for m in NOISE_EFFECTS:
            cols += [pct(b.control[m]), pct(b.treatment[m]), pct(a.control[m]), pct(a.treatment[m])]
            cols += [signed(v) for v in effects(b, a, m).values()]
        rows.append(cols)
    if pairs:
        cols = ["mean", f"{len(pairs)} cells"]
        for m in NOISE_EFFECTS:
            cols += ["", "", "", ""] + [signed(v) for v in mean_effects(pairs, m).values()]
        rows.append(cols)
    return "\n".join(markdown_lines(head, rows))


def load_scores(run_dir: Path) -> dict[str, list[NoiseScore]]:
    """``<run_dir>/robustness.json``: suite name → its scores."""
    path = RunDir(run_dir).robustness_file
    if not path.is_file():
        raise DataError(path, None, "no robustness results (train with suite=[...] or run python -m robustnlu.evaluate)")
    return {suite: [NoiseScore.from_dict(d) for d in entry["scores"]] for suite, entry in read_suites(path).items()}


def augmentation(run: RunDir) -> str:
    """The noise a finished run's training split was augmented with (results.json's ``augment``),
    ``none`` without augmentation."""
    record = run.results().get("augment")
    if record is None:
        return "none"
    try:
        return str(record["noise"]["name"])
    except (KeyError, TypeError):
        raise DataError(run.results_file, None, "augment must be null or name its noise (augment.noise.name)") from None


def sweep_comparison(sweep: Path) -> list[tuple[Path, str]]:
    """(run directory, heading label) of a sweep directory's finished runs (`sweep_runs`): its one
    run trained without augmentation (the baseline) first, then the augmented ones in job order."""
    runs = [(run, augmentation(run)) for run in sweep_runs(sweep)]
    if not runs:
        raise DataError(sweep, None, "neither a run directory nor a sweep of finished runs")
    baselines = [pair for pair in runs if pair[1] == "none"]
    if len(baselines) != 1:
        raise DataError(sweep, None, f"{len(baselines)} finished runs trained without augmentation (augment=none), "
                                     "not one baseline: name the runs, BASE_RUN AUG_RUN")
    augmented = [pair for pair in runs if pair[1] != "none"]
    return [(run.path, f"{run.path} (augment={noise})") for run, noise in [*baselines, *augmented]]


@entry_point
def main(argv: Sequence[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.analysis.robustness", description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="a run directory with robustness.json, or a sweep directory: its run "
                                                "trained without augmentation is the baseline of every other run")
    parser.add_argument("aug", type=Path, nargs="?", help="a second (augmented) run to compare with the first")
    args = parser.parse_args(argv)
    if args.aug is None and args.base.is_dir() and not RunDir(args.base).is_run():
        runs = sweep_comparison(args.base)
    else:
        runs = [(path, str(path)) for path in (args.base, args.aug) if path is not None]
    (base_path, base_label), *augmented = runs
    base = load_scores(base_path)
    scored = [(path, label, load_scores(path)) for path, label in augmented]
    tables = []  # built before anything is printed: a pair of runs that cannot be compared stops it
    for suite, scores in base.items():
        tables.append(f"\n## {suite}: {base_label}\n\n{score_table(scores)}")
        for path, label, aug in scored:
            if suite in aug:
                try:
                    pairs = match_cells(scores, aug[suite])
                except ValueError as err:
                    raise DataError(RunDir(path).robustness_file, None, f"suite {suite}, {err}") from None
                tables.append(f"\n## {suite}: {label} vs {base_label} (points)\n\n{effects_table(pairs)}")
    print("\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
