"""``python -m robustnlu.sweep status|relaunch SWEEP_DIR``: what became of each job of a training
sweep (``python -m robustnlu -m ...``), and running again only what has not finished; ``status``
also for a SeqDrift sweep (``python -m robustnlu.seqdrift -m ...``).

``status`` lists the sweep's jobs, a job that never started too, each with its state (``finished``,
``failed`` with its error line, ``running``, ``queued`` with its previous attempt's error line
where it failed, ``interrupted``, ``missing``), its folder
and the overrides that tell it from the other jobs; the jobs of every sweep launched into the
directory, the latest's first (a sweep with other values into the same directory keeps the earlier
one's record, `robustnlu.sweep_jobs.keep_replaced`). How each app's states are read from the folders
and how a job's folder is found by the job's identity (the hash of its recorded task overrides) is
`robustnlu.sweep_state`'s. A folder that holds sweeps rather than jobs gets the status of each sweep
below it (`sweeps_in`; ``--json``: each job's object names its ``sweep``). The efficiency protocol's
sweeps are training sweeps: ``<sweep dir>``, or with ``--mode adapt`` ``<sweep dir>/source`` and
``<sweep dir>/adapt/seed<N>``, which ``status <sweep dir>`` lists in turn
(`robustnlu.efficiency.__main__`).

``relaunch`` runs the jobs of a training sweep that are failed, interrupted or missing — not the
finished ones, not those running or queued in Slurm — with the launcher and settings of the sweep
that asked for each (its ``hydra.*`` overrides: launcher, partition, ``hydra.sweep.subdir``, ...),
each with its own overrides plus ``resume=true``, into the same sweep directory and folders. It
writes the list to ``<sweep dir>/.relaunch/<time>.json`` (a new file: ``<time>.2.json`` where that
name is taken), prints the command and runs it (``--dry-run``: prints only); one command for each
set of settings where the directory's sweeps differ in them:
``python -m robustnlu -m hydra/sweeper=joblist ...``
(hydra_plugins/robustnlu_plugins/job_list_sweeper.py). It holds ``<sweep dir>/.relaunch/run.lock``
until its commands end (`relaunch_lock`): a second relaunch of the sweep meanwhile, which would
submit the same jobs, is refused. To add values to a sweep instead, launch it
again with them and ``resume=true`` (``seed=0,1`` then ``seed=0,1,2``): its finished jobs return
their stored results from their folders. A SeqDrift sweep is not relaunched: its command run again
into its sweep directory (``hydra.sweep.dir=<it>``) writes each job into its own folder again, the
splits already made taken from the cache.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from robustnlu.errors import CommandLineParser, ConfigError, entry_point
from robustnlu.io import atomic_create, json_text
from robustnlu.runlock import acquire, release
from robustnlu.sweep_jobs import EARLIER_DIR, Sweep, job_hash, parse_overrides, read_sweep, shown_overrides, under, varying
from robustnlu.sweep_state import STATES, TRAINING_CONFIG, Job, sweep_status, sweeps_in

#: what relaunch runs again
UNFINISHED = ("failed", "interrupted", "missing")
#: the folder of the job lists that relaunch writes
RELAUNCH_DIR = ".relaunch"


def one_line(text: str) -> str:
    """An error message on one line (a crash's message may span several)."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def print_status(path: Path, sweep: Sweep | None, jobs: list[Job]) -> None:
    """The table of ``status``: a summary line, then one line per job (state, folder, the overrides
    that tell it from the others), its error line and a note where there is one."""
    listed = [j for j in jobs if j.listed]
    others = [j for j in jobs if not j.listed]
    earlier = len({j.sweep.record for j in listed if j.sweep is not None and j.sweep.earlier})
    lists = f" and those of {earlier} earlier sweep(s) into it ({EARLIER_DIR}/)" if earlier else ""
    if sweep is None and not listed:
        source = "no multirun.yaml: the job folders found"
    elif not listed:
        source = f"{sweep.sweeper.rsplit('.', 1)[-1]} makes its jobs as it goes: the job folders found"
    elif sweep is not None and sweep.product:
        source = f"its multirun.yaml's job list{lists}"
    else:
        source = f"the job lists of {earlier} earlier sweep(s) into it ({EARLIER_DIR}/)"
    counted = listed or jobs  # without a job list: what the folders hold
    counts = {state: sum(j.state == state for j in counted) for state in STATES}
    print(f"{path}: {len(counted)} jobs ({source}): " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    keys = varying([j.overrides for j in listed]) if len(listed) > 1 else set()
    width = max([len(j.folder.name) for j in jobs if j.folder is not None] + [1])

    def show(job: Job, keys: set[str]) -> None:
        folder = job.folder.name if job.folder is not None else "-"
        print(f"  {job.state:<12} {folder:<{width}}  {shown_overrides(job.overrides, keys)}".rstrip())
        if job.error:
            print(f"  {'':<12} error: {one_line(job.error).removeprefix('error: ')}")
        if job.previous_error:
            print(f"  {'':<12} previous attempt's error: {one_line(job.previous_error).removeprefix('error: ')}")
        if job.note:
            print(f"  {'':<12} ({job.note})")

    for job in listed:
        show(job, keys)
    if others and listed:
        print(f"{len(others)} folder(s) of jobs not in the job list (a launch whose multirun.yaml is not kept):")
    for job in others:
        show(job, set())


# ---------------------------------------------------------------------------- relaunch
def quoted(value: str) -> str:
    """A value for a Hydra override, quoted where Hydra's grammar would read its characters."""
    if re.fullmatch(r"[\w./+-]*", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def relaunch_hydra_overrides(sweep: Sweep, path: Path) -> list[str]:
    """The sweep's ``hydra.*`` overrides for the relaunch: its launcher and settings kept; its sweep
    dir made absolute; its sweeper replaced by the job list (``max_batch_size`` kept); no
    ``hydra.mode`` (the relaunch passes ``-m``)."""
    kept = []
    for line, override in zip(sweep.hydra_overrides, parse_overrides(sweep.hydra_overrides)):
        key = override.key_or_group
        if key in ("hydra.sweep.dir", "hydra.mode", "hydra/sweeper") or (
                under(key, ("hydra.sweeper",)) and key != "hydra.sweeper.max_batch_size"):
            continue  # hydra.mode: Hydra's record of -m
        kept.append(line)
    return [*kept, f"hydra.sweep.dir={quoted(str(path.resolve()))}"]


def check_relaunchable(sweep: Sweep | None, path: Path) -> Sweep:
    """``sweep``, the sweep into ``path`` whose jobs are to be relaunched; `ConfigError` where relaunch
    cannot place them (a folder of sweeps or of jobs without a job list, a search, another app's
    sweep, job folders named by position), naming the sweep's record where it is an earlier sweep's."""
    if sweep is None:
        below = [p for p in sweeps_in(path) if p != path]
        if below:  # a folder of sweeps: the command that made them knows how they go together
            raise ConfigError(f"{path}: holds sweeps, not jobs ({', '.join(str(p.relative_to(path)) for p in below)}): "
                              "relaunch one of them, or run the command that made them again with resume=true and "
                              "hydra.sweep.dir=<this folder> (the efficiency protocol continues so)")
        raise ConfigError(f"{path}: no multirun.yaml, so the sweep's jobs are not known; launch the sweep again "
                          "with resume=true and hydra.sweep.dir=<this folder>")
    where = sweep.record if sweep.earlier else path
    if not sweep.product:
        raise ConfigError(f"{where}: a sweep of {sweep.sweeper} (not a product of values) decides its jobs as it "
                          "goes; run its command again to continue it (an Optuna search adds trials to its study)")
    if sweep.config_name != TRAINING_CONFIG:
        raise ConfigError(f"{where}: a sweep of the {sweep.config_name!r} app; relaunch runs training sweeps "
                          f"(python -m robustnlu -m ...): run its command again with hydra.sweep.dir={path}")
    if re.search(r"job[.:]num", sweep.subdir):
        raise ConfigError(f"{where}: its job folders are named by position (hydra.sweep.subdir={sweep.subdir}), so a "
                          "job launched again would take another job's folder; relaunch needs folders named by the "
                          "job (the default hydra.sweep.subdir, conf/hydra/default.yaml)")
    return sweep


def relaunch(path: Path, dry_run: bool) -> int:
    """Run the unfinished jobs of the sweep in ``path`` again (see the module docstring), holding
    its relaunch lock while it does (`relaunch_lock`; a dry run takes none: it runs nothing)."""
    check_relaunchable(read_sweep(path), path)
    with contextlib.nullcontext() if dry_run else relaunch_lock(path):
        return run_unfinished(path, dry_run)


def run_unfinished(path: Path, dry_run: bool) -> int:
    """Print the sweep's jobs that `relaunch` runs again and its command for them, and run it
    unless ``dry_run``: the exit status of the commands (0 where each succeeded)."""
    _, jobs = sweep_status(path)
    listed = [j for j in jobs if j.listed]
    todo, seen = [], set()
    for job in listed:
        key = job_hash(job.overrides)
        if job.state in UNFINISHED and key not in seen:
            seen.add(key)
            todo.append(job)
    counts = {state: sum(j.state == state for j in listed) for state in ("finished", "running", "queued")}
    keys = varying([j.overrides for j in listed]) if len(listed) > 1 else set()
    print(f"{path}: {len(listed)} jobs, {counts['finished']} finished, {counts['running']} running, "
          f"{counts['queued']} queued (left alone), {len(todo)} to run again")
    for job in todo:
        print(f"  {job.state:<12} {shown_overrides(job.overrides, keys)}")
    if not todo:
        print("nothing to relaunch")
        return 0
    groups: dict[tuple[Path, tuple[str, ...]], list[list[str]]] = {}  # (cwd, hydra overrides) -> their jobs
    for job in todo:
        sweep = check_relaunchable(job.sweep, path)
        cwd = sweep.cwd if sweep.cwd is not None and sweep.cwd.is_dir() else Path.cwd()
        overrides = [o for o, p in zip(job.overrides, parse_overrides(job.overrides)) if p.key_or_group != "resume"]
        groups.setdefault((cwd, tuple(relaunch_hydra_overrides(sweep, path))), []).append(overrides)
    stamp = time.strftime('%Y-%m-%d_%H-%M-%S')
    status = 0
    for number, ((cwd, hydra), overrides) in enumerate(groups.items(), 1):
        names = record_names(path.resolve() / RELAUNCH_DIR, stamp if len(groups) == 1 else f"{stamp}-{number}")
        jobs_file = next(names) if dry_run else atomic_create(
            names, json_text({"sweep": str(path.resolve()), "jobs": overrides}))
        cmd = [sys.executable, "-m", "robustnlu", "-m", *hydra, "hydra/sweeper=joblist",
               f"hydra.sweeper.jobs_file={quoted(str(jobs_file))}", "resume=true"]
        print(f"+ cd {shlex.quote(str(cwd))} && {shlex.join(cmd)}", flush=True)
        if not dry_run:
            status = subprocess.run(cmd, cwd=cwd, env=os.environ.copy()).returncode or status
    return status


def record_names(folder: Path, stem: str) -> Iterator[Path]:
    """The names a relaunch's job list may take in ``folder``: ``<stem>.json``, then
    ``<stem>.2.json``, ``<stem>.3.json``, ... (`robustnlu.io.atomic_create` takes the first free
    one: relaunches started in the same second keep a record each)."""
    yield folder / f"{stem}.json"
    for number in itertools.count(2):
        yield folder / f"{stem}.{number}.json"


@contextlib.contextmanager
def relaunch_lock(path: Path) -> Iterator[None]:
    """Hold the lock of ``<path>/.relaunch`` (`robustnlu.runlock`, as a run holds its folder) while
    a relaunch reads the jobs' states and runs them: a second relaunch meanwhile would find the jobs
    the first is submitting unfinished and submit them too, so it is refused in one line naming the
    process that holds it. A relaunch whose process is gone (killed) leaves a lock the next takes over;
    one that ran nothing leaves no folder."""
    folder = path.resolve() / RELAUNCH_DIR
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            acquire(folder)
            break
        except FileNotFoundError:  # removed meanwhile by a relaunch that ended with it empty
            continue
        except ConfigError as err:
            raise ConfigError(f"{path}: another relaunch of it is running: {err}") from None
    try:
        yield
    finally:
        release(folder)
        with contextlib.suppress(OSError):  # only where it is empty
            folder.rmdir()


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m robustnlu.sweep", description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="each job of the sweep and its state")
    status.add_argument("sweep_dir", type=Path)
    status.add_argument("--json", action="store_true", help="one JSON object per job instead of the table")
    again = commands.add_parser("relaunch", help="run again the jobs that are failed, interrupted or missing")
    again.add_argument("sweep_dir", type=Path)
    again.add_argument("--dry-run", action="store_true", help="print what would run and the command, run nothing")
    args = parser.parse_args(argv)
    if args.command == "relaunch":
        return relaunch(args.sweep_dir, args.dry_run)
    for path in sweeps_in(args.sweep_dir):
        sweep, jobs = sweep_status(path)
        if args.json:
            for job in jobs:
                print(json.dumps({"sweep": str(path), "state": job.state, "folder": str(job.folder) if job.folder else None,
                                  "overrides": job.overrides, "error": job.error,
                                  "previous_error": job.previous_error, "note": job.note, "listed": job.listed}))
        else:
            print_status(path, sweep, jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
