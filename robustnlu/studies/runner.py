"""A study: an ordered list of named training jobs (`Job`: a name, the overrides of ``python -m
robustnlu``), trained resumably, each finished job kept as a compact record. `main` is its command
line; a study's own module calls it with its `Study` (the core paper's:
`robustnlu.studies.seqdrift_dro.plan`, ``python -m robustnlu.reproduce``; your own:
docs/studies.md).

Where things go. Job ``<name>`` trains in ``<runs>/<name>/`` with ``resume=true``, so an
interrupted job continues from its last checkpoint. Once it has finished, its record is written to
``<records>/<name>/`` (`write_record`): ``results.json``, ``metrics.csv`` (the per-epoch curve),
``predictions/{valid,test}.jsonl.xz`` and ``meta.json`` (the overrides it ran with, its part of the
study, where it trained, its wall time from results.json, when it finished, its `job_hash`); its
checkpoints are then deleted. ``--commit`` git-commits each record as it lands.

How a job is launched: as a sweep job, through the job list sweeper
(hydra_plugins/robustnlu_plugins/job_list_sweeper.py): ``python -m robustnlu -m
hydra/sweeper=joblist hydra.sweeper.jobs_file=<runs>/.jobs/<hash>.json hydra.sweep.dir=<runs>
resume=true``, the list holding each job's overrides and ``hydra.sweep.subdir=<name>``. The
command line's ``hydra.*`` / ``hydra/*`` overrides go to that command (``hydra/launcher=slurm
hydra.launcher.partition=cpu``), its other overrides into every job after the job's own. One
launch holds one job (``--batch 1``, the default): each finished job is recorded (and committed)
before the next starts. With a launcher that runs jobs side by side, ``--batch N`` launches N
ready jobs together (one Slurm job array) and records them when the launch returns.

Why a joblist sweep per job, not a ``python -m robustnlu`` run per job: both are one process per
job, so a crash or a leak stays in its job; but a sweep job is what every launcher runs (the same
path locally and on Slurm), and a sweep job refused for a bad value leaves its error line in its
folder (``status.json``), where a single run leaves nothing. So a job's state is read from its
folder alone (`job_state`), whoever launched it and however long ago.

What is recorded: every invocation first harvests, i.e. records each job whose folder holds a
finished run of that job (its results.json, and the identity of the overrides it was started with,
`robustnlu.sweep_jobs.job_hash`, equal to the job's with this invocation's overrides), so jobs
finished on Slurm, or by an invocation stopped before recording them, are recorded without
training. Then every job to run is composed and checked with this invocation's overrides: where
they break a job that composes alone, one ``error:`` line, exit status 2, nothing trained (a job
whose own overrides do not compose is launched and fails as a job). Then the first ready job is
launched, its folder harvested, and the plan made again (a plan may depend on records, e.g. a k
chosen on a search's), until every job has been tried once; a failed job is reported with its
error line and the plan goes on (exit status 1 at the end).

A job's state (`job_state`, ``--list``): ``recorded``; ``finished`` (not recorded yet: the next
run records it); ``failed`` (with status.json's error line); ``running`` (a live process holds its
folder: left alone); ``interrupted`` (resumed by the next run); ``other`` (its folder holds a
finished run of other overrides: neither recorded nor run; move it away); ``to run``.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustnlu.cli import compose_run_config
from robustnlu.errors import CommandLineParser, ConfigError, entry_point
from robustnlu.hardware import cpu_model
from robustnlu.io import atomic_write_compressed, atomic_write_json, atomic_write_text, json_text
from robustnlu.rundir import RunDir
from robustnlu.sweep import one_line, quoted
from robustnlu.sweep_state import job_state as folder_state
from robustnlu.sweep_jobs import job_hash, parse_overrides

#: every job runs without a progress bar: its output is the study's log
QUIET = ("~callbacks.progress_bar", "trainer.enable_progress_bar=false")
#: the settings of a launch that are the runner's: where each job's folder is, which jobs run
OWN_HYDRA = ("hydra.sweep", "hydra/sweeper", "hydra.sweeper", "hydra.run", "hydra.mode")
#: the states a run launches
TO_LAUNCH = ("to run", "failed", "interrupted")
#: a job's name: one folder name
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
#: the folder of ``<runs>`` that holds the job lists launched
JOBS_DIR = ".jobs"


@dataclass(frozen=True)
class Job:
    """One job: its name (its folders'), its overrides of ``python -m robustnlu`` and the part of
    the study it belongs to (shown by ``--list``, kept in meta.json)."""

    name: str
    overrides: tuple[str, ...]
    part: str = ""


@dataclass(frozen=True)
class Study:
    """What `main` runs: a name (in messages and commit messages), the plan (the records folder ->
    the jobs ready to run, in order) and the default folders."""

    name: str
    plan: Callable[[Path], list[Job]]
    records: Path
    runs: Path
    #: every job name the study may plan, those that wait on records included (what ``--only``
    #: accepts); None: the plan's
    names: Callable[[Path], Iterable[str]] | None = None


@dataclass(frozen=True)
class State:
    """A job's state (see the module docstring), a failed job's error line and a note."""

    state: str
    error: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Setup:
    """Where an invocation keeps runs and records, and the overrides it adds to each job and launch."""

    records: Path
    runs: Path
    #: training overrides, after each job's own
    overrides: tuple[str, ...] = ()
    #: ``hydra.*`` overrides of every launch (launcher, its settings)
    hydra: tuple[str, ...] = ()

    def job_overrides(self, job: Job) -> list[str]:
        return [*job.overrides, *QUIET, *self.overrides]


def checked_plan(study: Study, records: Path) -> list[Job]:
    """``study``'s plan; `ConfigError` for a job name that is not one folder name or repeats."""
    jobs = study.plan(records)
    seen: set[str] = set()
    for job in jobs:
        if not NAME.fullmatch(job.name) or job.name in seen:
            raise ConfigError(f"{study.name}: job name {job.name!r} " +
                              ("repeats" if job.name in seen else "is not a folder name ([A-Za-z0-9_.+-])"))
        seen.add(job.name)
    return jobs


def job_state(job: Job, setup: Setup) -> State:
    """What became of ``job`` (see the module docstring)."""
    if RunDir(setup.records / job.name).finished():
        return State("recorded")
    run = RunDir(setup.runs / job.name)
    if not run.path.exists():
        return State("to run")
    state, error, note = folder_state(run)
    if state != "finished":
        return State(state, error, note)
    try:
        same = run.job_hash() == job_hash(setup.job_overrides(job))
    except ValueError as err:  # overrides Hydra cannot parse
        raise ConfigError(f"{job.name}: {err}") from None
    if not same:
        return State("other", note=f"{run.path} holds a finished run of other overrides: move it away to run this job")
    return State("finished", note="not recorded yet: the next run records it")


# ---------------------------------------------------------------------------- records
def machine(host: str | None, results: dict[str, Any]) -> dict[str, Any]:
    """Where a run trained, as meta.json says it: this machine's CPU and cores if it trained here
    (``host``, from its status.json), else that host and, for a CPU run, the CPU its results.json
    names."""
    if host in (None, platform.node()):
        return {"cpu": cpu_model(), "cores": os.cpu_count()}
    device = results.get("device") or {}
    return {"host": host, **({"cpu": device["name"]} if device.get("accelerator") == "cpu" else {})}


def write_record(job: Job, run: RunDir, record: Path) -> dict[str, Any]:
    """The compact record of ``job``'s finished ``run`` in ``record``; ``results.json`` last (a
    record with it is complete). Returns its meta.json."""
    results = run.results()
    for split in ("valid", "test"):
        atomic_write_compressed(record / "predictions" / f"{split}.jsonl.xz",
                                run.predictions_file(split).read_bytes())
    shutil.copyfile(run.metrics_csv, record / "metrics.csv")
    status = run.status() or {}
    meta = {"command": " ".join(["-m", "robustnlu", *(run.overrides() or [])]), "part": job.part,
            **machine(status.get("host"), results), "wall_time_s": results.get("wall_time_s"),
            "finished": status.get("time") or time.strftime("%Y-%m-%dT%H:%M:%S%z"), "job_hash": run.job_hash()}
    atomic_write_json(RunDir(record).meta_file, meta)
    shutil.copyfile(run.results_file, RunDir(record).results_file)
    return meta


def commit(record: Path, message: str) -> bool:
    """``git add`` + ``git commit`` of ``record`` alone (other staged changes stay staged)."""
    for attempt in range(5):
        add = subprocess.run(["git", "add", str(record)], cwd=record, capture_output=True, text=True)
        done = add.returncode == 0 and subprocess.run(
            ["git", "commit", "-q", "-m", message, "--", str(record)], cwd=record, capture_output=True, text=True
        ).returncode == 0
        if done:
            return True
        time.sleep(2 + 3 * attempt)  # another git command holds the index lock
    print(f"could not commit {record}; it stays in the work tree", flush=True)
    return False


def harvest(study: Study, jobs: Sequence[Job], setup: Setup, do_commit: bool) -> None:
    """Record every job of ``jobs`` whose folder holds its finished run, and delete that run's
    checkpoints; with ``do_commit``, commit each record."""
    for job in jobs:
        if job_state(job, setup).state != "finished":
            continue
        run, record = RunDir(setup.runs / job.name), setup.records / job.name
        try:
            meta = write_record(job, run, record)
        except OSError as err:
            print(f"{job.name}: could not record {run.path}: {err}", flush=True)
            continue
        shutil.rmtree(run.path / "checkpoints", ignore_errors=True)
        where = meta.get("cpu") or meta.get("host")
        print(f"{job.name}: recorded in {record} ({meta['wall_time_s']} s on {where})", flush=True)
        if do_commit:
            commit(record, f"{study.name}: record {job.name} ({meta['wall_time_s']:.0f} s on {where})")


# ---------------------------------------------------------------------------- launching
def check_overrides(jobs: Sequence[Job], setup: Setup) -> None:
    """Compose each job's config with ``setup``'s overrides; `ConfigError` naming the job where
    they break a job that composes alone."""
    for job in jobs:
        try:
            compose_run_config(setup.job_overrides(job))
        except ConfigError as err:
            try:
                compose_run_config(Setup(setup.records, setup.runs).job_overrides(job))
            except ConfigError:
                continue  # the job's own: it fails as a job, with its error line in its folder
            raise ConfigError(f"{job.name}: {err}") from None


def launch(jobs: Sequence[Job], setup: Setup) -> int:
    """One joblist sweep of ``jobs``, each into ``<runs>/<name>/`` with ``resume=true``; its exit status."""
    listed = [[*setup.job_overrides(job), f"hydra.sweep.subdir={quoted(job.name)}"] for job in jobs]
    text = json_text({"jobs": listed})
    jobs_file = setup.runs / JOBS_DIR / f"{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}.json"
    atomic_write_text(jobs_file, text)
    command = ["-m", "robustnlu", "-m", "hydra/sweeper=joblist", f"hydra.sweeper.jobs_file={quoted(str(jobs_file))}",
               f"hydra.sweep.dir={quoted(str(setup.runs))}", *setup.hydra, "resume=true"]
    for job in jobs:
        print(f"+ {job.name}: {' '.join(setup.job_overrides(job))}")
    print("+ python " + " ".join(command), flush=True)
    return subprocess.run([sys.executable, *command]).returncode


def run_study(study: Study, setup: Setup, only: set[str] | None, batch: int, do_commit: bool) -> int:
    """Harvest, check, then launch each job to run in turn (see the module docstring)."""

    def selected() -> list[Job]:  # anew after each launch: a record may release jobs (a chosen k)
        return [j for j in checked_plan(study, setup.records) if only is None or j.name in only]

    checked: set[str] = set()

    def check(jobs: list[Job]) -> None:  # each job once: those the plan releases later too
        check_overrides([j for j in jobs if j.name not in checked], setup)
        checked.update(j.name for j in jobs)

    harvest(study, selected(), setup, do_commit)
    check([j for j in selected() if job_state(j, setup).state in TO_LAUNCH])
    tried: list[str] = []
    failed: list[str] = []
    while True:
        ready = [j for j in selected() if j.name not in tried and job_state(j, setup).state in TO_LAUNCH]
        if not ready:
            break
        jobs = ready[:batch]
        check(jobs)
        rc = launch(jobs, setup)
        tried += [j.name for j in jobs]
        harvest(study, selected(), setup, do_commit)
        for job in jobs:
            state = job_state(job, setup)
            if state.state != "recorded":
                failed.append(job.name)
                error = f": {one_line(state.error)}" if state.error else ""
                print(f"{job.name}: {state.state} (exit {rc}){error}; the plan goes on", flush=True)
    states = {j.name: job_state(j, setup).state for j in selected()}
    left = {s: [n for n, t in states.items() if t == s] for s in ("running", "other")}
    print(f"{sum(s == 'recorded' for s in states.values())} of {len(states)} planned jobs recorded"
          + (f"; failed: {failed}" if failed else "")
          + (f"; running elsewhere (left alone): {left['running']}" if left["running"] else "")
          + (f"; not run, their folder holds another run: {left['other']}" if left["other"] else ""))
    return 1 if failed or left["other"] else 0


def print_list(jobs: Sequence[Job], setup: Setup) -> None:
    """Each job's state, part and name; its error line and note below it."""
    states = [job_state(job, setup) for job in jobs]
    width = max([len("recorded"), *(len(s.state) for s in states)])
    for job, state in zip(jobs, states):
        print(f"{state.state:<{width}}  {job.part}  {job.name}")
        if state.error:
            print(f"{'':<{width}}  error: {one_line(state.error).removeprefix('error: ')}")
        if state.note and state.state != "finished":
            print(f"{'':<{width}}  ({state.note})")


def split_overrides(overrides: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(training overrides, ``hydra.*`` overrides) of the command line; `ConfigError` for one that
    does not parse or that sets what the runner sets (`OWN_HYDRA`)."""
    try:
        parsed = parse_overrides(overrides)
    except ValueError as err:  # Hydra's message and a line pointing to its grammar's page
        raise ConfigError(str(err).splitlines()[0]) from None
    training, hydra = [], []
    for line, override in zip(overrides, parsed):
        key = override.key_or_group
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            if any(key == own or key.startswith(own + ".") for own in OWN_HYDRA):
                raise ConfigError(f"{line}: the study sets {key} itself (each job's folder is <runs>/<name>/)")
            hydra.append(line)
        else:
            training.append(line)
    return tuple(training), tuple(hydra)


@entry_point
def main(study: Study, argv: Sequence[str] | None = None, **parser_options: Any) -> int:
    """The command line of ``study`` (``parser_options``: argparse's prog, description, epilog)."""
    parser = CommandLineParser(**parser_options)
    parser.add_argument("--commit", action="store_true", help="git-commit each record as it lands")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME", help="run only these jobs")
    parser.add_argument("--list", action="store_true", help="print each job's state, then exit")
    parser.add_argument("--records", type=Path, default=study.records, help=f"default: {study.records}")
    parser.add_argument("--runs", type=Path, default=study.runs, help=f"default: {study.runs}")
    parser.add_argument("--batch", type=int, default=1, metavar="N",
                        help="jobs per launch (default 1: each recorded before the next starts; more for a "
                             "launcher that runs them side by side, hydra/launcher=slurm)")
    parser.add_argument("overrides", nargs="*", help="overrides of every job (after its own); hydra.* ones: of "
                                                     "every launch (hydra/launcher=slurm ...)")
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    only = args.only
    if only is not None:  # `--only NAME... key=value`: the overrides after the names
        args.overrides = [o for o in only if not NAME.fullmatch(o)] + args.overrides
        only = [o for o in only if NAME.fullmatch(o)]
    training, hydra = split_overrides(args.overrides)
    setup = Setup(args.records.absolute(), args.runs.absolute(), training, hydra)
    if args.batch < 1:
        raise ConfigError(f"--batch must be >= 1, got {args.batch}")
    if only is not None:
        known = set(study.names(setup.records)) if study.names else {j.name for j in study.plan(setup.records)}
        if unknown := [name for name in only if name not in known]:
            raise ConfigError(f"--only: no job of the study is named {', '.join(unknown)} (--list prints them)")
    if args.list:
        print_list([j for j in checked_plan(study, setup.records) if only is None or j.name in only], setup)
        return 0
    return run_study(study, setup, None if only is None else set(only), args.batch, args.commit)
