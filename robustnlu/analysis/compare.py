"""``python -m robustnlu.analysis.compare RUN_OR_SWEEP_DIR...``: the test metrics of finished
runs side by side, each with its relative change to the first run (the baseline, e.g. ERM), as
the core paper's result tables report it (Tables 11-14: "%" columns = relative change to ERM).

A directory is a run directory (it holds ``results.json``) or a sweep directory whose
sub-directories are runs (a Hydra multirun's jobs, ``<sweep>/<scenario>-<method>-seed<seed>-<job hash>/``),
taken in the order of the sweep's job list (`robustnlu.rundir.sweep_runs`). A run is labelled by
its method and seed; runs that share those are told apart by the overrides they were started
with that differ among them (`run_labels`). A relative change from a baseline value of 0 is not
defined: its cell says so ("n/a: from 0", `robustnlu.metrics.registry.change_text`).
A results.json that lacks what the table shows (`robustnlu.analysis.runs.results_problem`), or
a run of another scenario than the first run's (a relative change compares scores on one test
set): one ``error:`` line naming it, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from robustnlu.analysis.runs import RESULTS_KEYS, Run, check_results
from robustnlu.errors import CommandLineParser, DataError, entry_point
from robustnlu.metrics.registry import COMPARE, METRICS, change_text, drop
from robustnlu.rundir import RunDir, sweep_runs
from robustnlu.sweep_jobs import shown_overrides, varying


def run_dirs(paths: list[Path]) -> list[RunDir]:
    """Run directories of ``paths``, expanding sweep directories (sub-directories in job order)."""
    found = []
    for path in paths:
        runs = sweep_runs(path)
        if not runs:
            raise DataError(path, None, "neither a run directory (no results.json) nor a sweep of finished runs")
        found += runs
    return found


def check_one_scenario(runs: list[Run]) -> None:
    """`DataError` naming the first run whose scenario (hence test set) is not the baseline's."""
    base = runs[0].scenario
    for run in runs[1:]:
        if run.scenario != base:
            raise DataError(run.dir.results_file, None,
                            f"scenario {run.scenario.name}, but the baseline {runs[0].path} is of "
                            f"{base.name}: relative changes compare runs on one test set")


def run_labels(runs: list[Run]) -> list[str]:
    """Each run's label in the table, ``<method> (seed <seed>)``. Runs that would share one get
    the overrides they were started with (`RunDir.overrides`) that differ among them, as typed
    (``erm (seed 0) optimizer.lr=0.005``); runs that still share one (started with the same
    overrides, or recorded none) get their directory."""
    labels = [f"{run.method} (seed {run.seed})" for run in runs]
    for label, n in Counter(labels).items():
        if n < 2:
            continue
        same = [i for i, other in enumerate(labels) if other == label]
        overrides = [runs[i].dir.overrides() or [] for i in same]
        keys = varying(overrides)
        for i, started in zip(same, overrides):
            labels[i] = " ".join(filter(None, [label, shown_overrides(started, keys) if keys else ""]))
    shared = Counter(labels)
    return [f"{label} {run.path}" if shared[label] > 1 else label for label, run in zip(labels, runs)]


#: what the table reads from a results.json: what every report reads, and each `COMPARE` test metric
COMPARED_KEYS = (*RESULTS_KEYS, *((f"metrics.test.{key}", float) for key in COMPARE))

#: width of a metric cell: "100.00 (+123.45%)" or "100.00 (n/a: from 0)", and a separating space
CELL = 21


def comparison_table(runs: list[dict[str, Any]], labels: list[str]) -> str:
    """One row per run: test metrics (%) and the valid → test COMBINED drop (points); below each
    metric of a non-baseline run, its relative change to the baseline (first run) in %."""
    base = runs[0]["metrics"]["test"]
    width = max(len(label) for label in labels) + 2
    head = f"{'run':<{width}}" + "".join(f"{METRICS[key].title:>{CELL}}" for key in COMPARE) + f"{'drop':>10}"
    lines = [head]
    for label, results in zip(labels, runs, strict=True):
        test, valid = results["metrics"]["test"], results["metrics"]["valid"]
        cells = []
        for key in COMPARE:
            cell = f"{100 * test[key]:.2f}"
            if results is not runs[0]:
                cell += f" ({change_text(test[key], base[key])})"
            cells.append(f"{cell:>{CELL}}")
        lines.append(f"{label:<{width}}" + "".join(cells) + f"{100 * drop(valid, test):>+10.2f}")
    return "\n".join(lines)


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.analysis.compare", description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="run directories or sweep directories")
    args = parser.parse_args(argv)
    found = [Run(d.path, d.results()) for d in run_dirs(args.dirs)]
    check_results(found, COMPARED_KEYS)
    check_one_scenario(found)
    runs = [r.results for r in found]
    labels = run_labels(found)
    first = runs[0]
    print(f"{first['dataset']}, drift {first['drift']['kind']}; test metrics in %, "
          f"(relative change to {labels[0]}), drop = valid - test COMBINED in points")
    print(comparison_table(runs, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
