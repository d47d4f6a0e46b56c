"""``python -m robustnlu.report RUN_OR_SWEEP_DIR... --out report/``: the study report of a sweep
(core paper section 5, Appendix D Tables 10-14, Figures 1 and 2).

Finds the runs recursively under the given directories (a run directory holds ``results.json``;
one with only ``status.json`` is listed as failed or unfinished, and so is a job of a sweep below
that holds neither: `robustnlu.analysis.runs.jobs_without_status`) and writes under ``--out``:
table10_metrics.{md,csv} (metrics per scenario and method, mean ± std over the models, and the
valid → test drop), relative_change.{md,csv} (relative change to ERM and the paired approximate
randomization tests), significance_counts.{md,csv} (scenarios significantly better / worse than
ERM per method), fig1a_drop.png, fig1bc_counts.png and report.md tying them together. Below a folder holding an HPO
search's ``best_params.json`` (``python -m robustnlu.hpo``) the models of its method and scenario
are the runs it chose, its best settings × 2 seeds, and its other trials are left out (counted in
report.md; `robustnlu.analysis.searches`).

With ``--wandb`` the report is also logged to Weights & Biases, after it is written, beside the
runs it summarises: one run of job type ``report`` per W&B group of the runs (the group each run
logged into, by default its scenario: conf/logger/wandb.yaml), named ``<group>-report``, in the
runs' project (``--wandb-project`` to choose another; robustnlu for runs logged without W&B). Its
summary counts the group's runs, scenarios and failed or unfinished runs (`incomplete_group`). Its
config names the runs (``runs``: their W&B names) and carries the study's axes they share under
the training runs' keys (``scenario``, ``dataset.name``, ``drift.kind``, ...: `AXES`), so a
dashboard grouped by group or by an axis shows the report's tables next to the runs: the group's
rows of table10_metrics and relative_change, and significance_counts whole; the report files are
an artifact of type ``report`` (``--wandb-artifact``, default study-report; the same files in every
group). Offline by default (``--wandb-mode offline``): when the runs logged into one W&B folder
(a sweep's ``<sweep dir>/wandb/``) the report's runs go there too, so that ``wandb sync`` of that
folder uploads runs and report together; otherwise under ``<out>/wandb/``; the ``wandb sync``
command is printed. A report run writes its own ``run-*`` folder only: the folder's links to its
latest run (``latest-run``, ``debug.log``, ``debug-internal.log``, which every ``wandb.init``
points at its own run) stay the training runs'. ``--wandb-mode online`` needs ``wandb login``
(without it: a one-line error, exit status 2, the report itself already written). The artifact
holds the report files only, never a W&B folder.

Each of a method's models is tested against the ERM model of the same seed (utterances paired by
uid); the decision rule and the family-wise error are described in
`robustnlu.analysis.statistics` and in report.md. Deterministic given --seed. A directory without any
run, a run whose results.json or predictions cannot be read whole, a run found twice (a copy of it
beside it: one model counted as two), runs of one scenario on different splits (their means would mix
test sets), runs of one method and scenario trained with other settings than the seed (their mean is
no mean of one method's models: `robustnlu.analysis.runs.check_one_setting`; runs that record no
config are pooled and named in report.md), runs of one method and scenario of which an HPO search
chose some and not all, a directory inside an HPO search's sweep dir, or an ``--out`` inside a run
directory: a one-line error,
exit status 2, nothing written.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from robustnlu.analysis.runs import Incomplete, Run, run_dirs_under
from robustnlu.errors import CommandLineParser, RobustNLUError, entry_point
from robustnlu.extras import require
from robustnlu.io import check_outputs, writing
from robustnlu.metrics.registry import MIN_CLUSTER_SIZE


TABLES = ("table10_metrics", "relative_change", "significance_counts")
#: the tables whose rows are per scenario (their first columns name it), split among the groups
SCENARIO_TABLES = ("table10_metrics", "relative_change")
#: the study's axes, as keys of a training run's W&B config (`robustnlu.dashboard.run_config`)
AXES = ("scenario", "dataset.name", "drift.kind", "drift.partial", "validation.kind")


def _cell(value: str) -> Any:
    """A CSV cell as a W&B table cell: an integer or a float where it is one (a count stays a
    count: ``n_models`` 2, not 2.0), None for empty / NaN."""
    if value == "":
        return None
    for number in (int, float):
        try:
            parsed = number(value)
        except ValueError:
            continue
        return None if isinstance(parsed, float) and math.isnan(parsed) else parsed
    return value


def _read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def _wandb_logger(run: Run) -> dict[str, Any]:
    """The run's ``logger.wandb`` config, {} if it logged without W&B."""
    return (run.results.get("config", {}).get("logger") or {}).get("wandb") or {}


def wandb_groups(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """The runs by the W&B group each logged into (``logger.wandb.group`` of its config), for a
    run logged without W&B its scenario's name (the group conf/logger/wandb.yaml gives); sorted."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[_wandb_logger(run).get("group") or run.scenario.name].append(run)
    return dict(sorted(groups.items()))


def incomplete_group(run: Incomplete) -> str | None:
    """The W&B group of a run that did not finish, as `wandb_groups` tells a finished run's, from the
    config its folder records (`RunDir.started_config`); None where it records none (a job that
    made no folder, one refused before Hydra wrote its config)."""
    config = run.dir.started_config() if run.dir else None
    if config is None:
        return None
    try:
        return OmegaConf.select(config, "logger.wandb.group") or OmegaConf.select(config, "scenario")
    except OmegaConfBaseException:  # an interpolation that resolves only inside Hydra's job
        return None


def shared_axes(runs: Sequence[Run]) -> dict[str, Any]:
    """The `AXES` whose value (in the runs' config) every one of ``runs`` shares."""
    values = [{key: OmegaConf.select(OmegaConf.create(run.results.get("config", {})), key) for key in AXES}
              for run in runs]
    return {key: values[0][key] for key in AXES
            if values[0][key] is not None and all(v[key] == values[0][key] for v in values)}


def wandb_folder(runs: Sequence[Run], out: Path) -> Path:
    """Where the report's W&B runs go (into ``<folder>/wandb/``): where the runs' own W&B runs
    are (`RunDir.wandb_save_dir`, found again in a sweep moved since) when that is one folder
    outside every run directory, e.g. a sweep's; else ``out``."""
    save_dirs = [run.dir.wandb_save_dir() for run in runs]
    folders = {d.resolve() for d in save_dirs if d is not None}
    if len(folders) != 1 or None in save_dirs:
        return out
    (folder,) = folders
    run_dirs = [d.resolve() for d in run_dirs_under([run.path for run in runs])]
    inside = any(folder == d or d in folder.parents for d in run_dirs)  # a single run's own wandb/
    return out if inside or not folder.is_dir() else folder


def wandb_project(runs: Sequence[Run]) -> str:
    """The W&B project the runs logged into, if they all logged into one; else robustnlu."""
    projects = {_wandb_logger(run).get("project") for run in runs}
    return projects.pop() if len(projects) == 1 and None not in projects else "robustnlu"


def log_to_wandb(out: Path, files: list[Path], runs: Sequence[Run], incomplete: Sequence[Incomplete], *, mode: str,
                 project: str, artifact_name: str, config: dict[str, Any]) -> list[Path]:
    """Log the written report as one W&B run of job type ``report`` per W&B group of ``runs``
    (module docstring), in `wandb_folder`: the files as one artifact (type ``report``), the
    group's rows of the CSV tables as W&B tables, and the group's counts as the run summary: its
    runs, scenarios and runs of ``incomplete`` (those of its group: `incomplete_group`). Returns the
    runs' folders (``wandb sync`` them)."""
    import wandb

    by_name = {Path(p).name: Path(p) for p in files}
    tables = {name: _read_csv(by_name[f"{name}.csv"]) for name in TABLES if f"{name}.csv" in by_name}
    folder = wandb_folder(runs, out)
    unfinished = Counter(incomplete_group(run) for run in incomplete)
    folders = []
    for group, members in wandb_groups(runs).items():
        scenarios = {(s.dataset, s.drift, s.amount, s.validation) for s in (r.scenario for r in members)}
        names = [record["name"] for record in (r.dir.wandb_record() for r in members) if record]
        run = wandb.init(project=project, group=group, job_type="report", name=f"{group}-report",
                         dir=str(folder), mode=mode, config={**config, **shared_axes(members), "runs": names},
                         settings=wandb.Settings(symlink=False))  # the folder's latest-run links: module docstring
        try:
            folders.append(Path(run.dir).parent)  # <folder>/wandb/{offline-,}run-<time>-<id>
            artifact = wandb.Artifact(artifact_name, type="report",
                                      description="robustnlu study report: tables, figures and report.md",
                                      metadata=config)
            for path in files:
                artifact.add_file(str(path), name=Path(path).name)
            run.log_artifact(artifact)
            logged = {}
            for name, (head, *rows) in tables.items():
                if name in SCENARIO_TABLES:
                    rows = [row for row in rows if tuple(row[:4]) in scenarios]
                logged[name] = wandb.Table(columns=head, data=[[_cell(v) for v in row] for row in rows],
                                           allow_mixed_types=True)
            run.log(logged)
            run.summary.update({"n_runs": len(members), "n_scenarios": len(scenarios), "n_incomplete": unfinished[group]})
        finally:
            run.finish()
    return folders


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.report", description=__doc__,
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
                    help="also log the report to W&B: per W&B group of the runs, a run of job type report "
                         "with the group's tables and the report files as an artifact (type report)")
    wb.add_argument("--wandb-mode", choices=("offline", "online"), default="offline",
                    help="offline (default: written beside the runs' W&B files when they share one folder, "
                         "else under <out>/wandb/; upload later with wandb sync) or online (needs wandb login)")
    wb.add_argument("--wandb-project", default=None,
                    help="W&B project (default: the runs' project; robustnlu if they logged into none or several)")
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
    with writing("--out"):  # what check_outputs cannot foresee (a folder the system refuses, a full disk)
        written = write_report(study, args.out)
    n_scenarios = len({r.scenario for r in study.runs})
    uncompared = f", {len(study.uncompared)} pooled without their settings compared" if study.uncompared else ""
    print(f"{len(study.runs)} runs in {n_scenarios} scenarios, "
          f"{len(study.incomplete)} failed or unfinished{uncompared}; wrote {len(written)} files to {args.out} "
          f"(see {args.out / 'report.md'})")
    if study.searches:
        print(f"{len(study.searches)} HPO search(es): pooled only the runs each one's best_params.json chose; "
              f"{study.left_out} other runs below them (trials not chosen) left out")
    if args.wandb:
        # under report.*: a training run's config has its own seed
        config = {"report.dirs": [str(d) for d in args.dirs], "report.alpha": args.alpha,
                  "report.rounds": args.rounds, "report.seed": args.seed, "report.rule": args.rule}
        project = args.wandb_project or wandb_project(study.runs)
        import wandb.errors

        try:
            run_dirs = log_to_wandb(args.out, written, study.runs, study.incomplete, mode=args.wandb_mode,
                                    project=project, artifact_name=args.wandb_artifact, config=config)
        except wandb.errors.Error as err:  # e.g. online without `wandb login`
            raise RobustNLUError(f"W&B: {err} (the report itself is in {args.out})") from err
        if args.wandb_mode == "offline":
            print(f"W&B: {len(run_dirs)} offline report runs with artifact {args.wandb_artifact!r} in project "
                  f"{project!r}; upload them with\n" + "\n".join(f"  wandb sync {d}" for d in run_dirs))
        else:
            print(f"W&B: logged {len(run_dirs)} report runs with artifact {args.wandb_artifact!r} "
                  f"to project {project!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
