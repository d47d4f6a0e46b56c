"""``python -m robustnlu.report RUN_OR_SWEEP_DIR... --out report/``: the study report of a sweep
(core paper section 5, Appendix D Tables 10-14, Figures 1 and 2).

Finds the runs recursively under the given directories (a run directory holds ``results.json``;
one with only ``status.json`` is listed as failed or unfinished) and writes under ``--out``:
table10_metrics.{md,csv} (metrics per scenario and method, mean ± std over the models, and the
valid → test drop), relative_change.{md,csv} (relative change to ERM and the paired approximate
randomization tests), significance_counts.{md,csv} (scenarios significantly better / worse than
ERM per method), fig1a_drop.png, fig1bc_counts.png and report.md tying them together.

With ``--wandb`` the report is also logged to Weights & Biases, after it is written: a run of
job type ``report`` (project ``--wandb-project``, default robustnlu) holding the report files as
one artifact of type ``report`` (``--wandb-artifact``, default study-report) and the three tables
as W&B tables. Offline by default (``--wandb-mode offline``): the run is written under
``<out>/wandb/offline-run-*`` and uploaded later with ``wandb sync <that folder>`` (printed);
``--wandb-mode online`` needs ``wandb login`` (without it: a one-line error, exit status 2, the
report itself already written). The artifact holds the report files only, never
``<out>/wandb/`` itself.

Each of a method's models is tested against the ERM model of the same seed (utterances paired by
uid); the decision rule and the family-wise error are described in
`robustnlu.analysis.statistics` and in report.md. Deterministic given --seed. A directory without any
run, a run whose results.json or predictions cannot be read whole, or an ``--out`` inside a run
directory: a one-line error, exit status 2, nothing written.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path
from typing import Any

from robustnlu.analysis.runs import MIN_CLUSTER_SIZE, run_dirs_under
from robustnlu.errors import RobustNLUError, entry_point
from robustnlu.extras import require
from robustnlu.io import check_outputs


TABLES = ("table10_metrics", "relative_change", "significance_counts")


def _cell(value: str) -> Any:
    """A CSV cell as a W&B table cell: a number where it is one, None for empty / NaN."""
    if value == "":
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return None if math.isnan(number) else number


def _csv_table(path: Path) -> Any:
    import wandb

    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    return wandb.Table(columns=rows[0], data=[[_cell(v) for v in row] for row in rows[1:]],
                       allow_mixed_types=True)


def log_to_wandb(out: Path, files: list[Path], *, mode: str, project: str, artifact_name: str,
                 config: dict[str, Any], summary: dict[str, Any]) -> Path:
    """Log the written report as a W&B run of job type ``report``: the files as one artifact
    (type ``report``), the CSV tables as W&B tables, ``summary`` as the run summary. The run's
    own files go to ``<out>/wandb/``; only ``files`` are added to the artifact (by name, so the
    artifact never includes the W&B folder). Returns the run's folder (``wandb sync`` it)."""
    import wandb

    run = wandb.init(project=project, job_type="report", dir=str(out), mode=mode, config=config,
                     name=artifact_name)
    try:
        run_dir = Path(run.dir).parent  # <out>/wandb/{offline-,}run-<time>-<id>
        artifact = wandb.Artifact(artifact_name, type="report",
                                  description="robustnlu study report: tables, figures and report.md",
                                  metadata=config)
        for path in files:
            artifact.add_file(str(path), name=Path(path).name)
        run.log_artifact(artifact)
        by_name = {Path(p).name: Path(p) for p in files}
        run.log({name: _csv_table(by_name[f"{name}.csv"]) for name in TABLES if f"{name}.csv" in by_name})
        run.summary.update(summary)
    finally:
        run.finish()
    return run_dir


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m robustnlu.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path,
                        help="run directories or sweep directories (searched recursively)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the tables, figures and report.md")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    parser.add_argument("--rounds", type=int, default=10_000, help="approximate randomization shuffles (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every randomization test (default 0)")
    parser.add_argument("--rule", choices=("any", "majority", "all"), default="any",
                        help="how many of a scenario's k paired tests must be significant (default any; "
                             "see robustnlu.analysis.statistics)")
    parser.add_argument("--min-cluster-size", type=int, default=MIN_CLUSTER_SIZE,
                        help="worst-cluster COMBINED over the clusters of at least this many test utterances "
                             f"(default {MIN_CLUSTER_SIZE})")
    wb = parser.add_argument_group("Weights & Biases")
    wb.add_argument("--wandb", action="store_true",
                    help="also log the report as a W&B artifact (type report) in a run of job type report")
    wb.add_argument("--wandb-mode", choices=("offline", "online"), default="offline",
                    help="offline (default: written under <out>/wandb/, upload later with wandb sync) "
                         "or online (needs wandb login)")
    wb.add_argument("--wandb-project", default="robustnlu", help="W&B project (default robustnlu)")
    wb.add_argument("--wandb-artifact", default="study-report", help="artifact name (default study-report)")
    args = parser.parse_args(argv)
    if args.wandb:
        require("wandb", "wandb", "--wandb")  # MissingExtra: one error line (entry_point)
    import matplotlib

    matplotlib.use("Agg")
    from robustnlu.analysis.study import FILES, build_study, write_report

    check_outputs([args.out / name for name in FILES], (), "--out", within=run_dirs_under(args.dirs))
    study = build_study(args.dirs, alpha=args.alpha, rounds=args.rounds, seed=args.seed, rule=args.rule,
                        min_cluster_size=args.min_cluster_size)
    written = write_report(study, args.out)
    n_scenarios = len({r.scenario for r in study.runs})
    print(f"{len(study.runs)} runs in {n_scenarios} scenarios, "
          f"{len(study.incomplete)} failed or unfinished; wrote {len(written)} files to {args.out} "
          f"(see {args.out / 'report.md'})")
    if args.wandb:
        config = {"dirs": [str(d) for d in args.dirs], "alpha": args.alpha, "rounds": args.rounds,
                  "seed": args.seed, "rule": args.rule}
        summary = {"n_runs": len(study.runs), "n_incomplete": len(study.incomplete),
                   "n_scenarios": n_scenarios}
        import wandb.errors

        try:
            run_dir = log_to_wandb(args.out, written, mode=args.wandb_mode, project=args.wandb_project,
                                   artifact_name=args.wandb_artifact, config=config, summary=summary)
        except wandb.errors.Error as err:  # e.g. online without `wandb login`
            raise RobustNLUError(f"W&B: {err} (the report itself is in {args.out})") from err
        if args.wandb_mode == "offline":
            print(f"W&B: offline run with artifact {args.wandb_artifact!r} in {run_dir}; upload it with\n"
                  f"  wandb sync {run_dir}")
        else:
            print(f"W&B: logged artifact {args.wandb_artifact!r} to project {args.wandb_project!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
