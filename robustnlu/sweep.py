"""``python -m robustnlu.sweep status|relaunch SWEEP_DIR``: what became of each job of a training
sweep (``python -m robustnlu -m ...``), and running again only what has not finished; ``status``
also for a SeqDrift sweep (``python -m robustnlu.seqdrift -m ...``).

``status`` lists the sweep's jobs — the job list Hydra's basic sweeper made from the sweep's
overrides (its ``multirun.yaml``, `robustnlu.sweep_jobs.Sweep.jobs`), so that a job that never
started is listed too — each with its state, its folder and the overrides that tell it from the
other jobs:

- ``finished``: its ``results.json`` is there;
- ``failed``: its ``status.json`` says so, with the error line (a job refused for a bad value
  leaves such a record; one that crashed also its ``traceback.txt``);
- ``running``: the process that holds its folder (``run.lock``) is alive — checked on this host,
  through ``squeue`` for a Slurm job elsewhere, otherwise not known and shown as running;
- ``interrupted``: started, but its process is gone (killed, timed out, the node lost) or a
  signal ended it; ``resume=true`` continues it from its ``last.ckpt``;
- ``missing``: no folder holds it (never started, or the sweep was ended before it).

A folder that holds sweeps rather than jobs gets the status of each sweep below it
(`sweeps_in`; ``--json``: each job's object names its ``sweep``). The efficiency protocol's
sweeps are training sweeps: ``<sweep dir>``, or with ``--mode adapt`` ``<sweep dir>/source``
and ``<sweep dir>/adapt/seed<N>``, which ``status <sweep dir>`` lists in turn
(`robustnlu.efficiency.__main__`). A
SeqDrift job computes a split and writes it into its folder (`seqdrift_job_state`): ``finished``
once its last file, the statistics table, is there; ``failed`` and ``missing`` as above. It holds
its folder's ``run.lock`` while it runs, as a training run does (conf/seqdrift.yaml,
`robustnlu.rundir_claim`), so ``running`` and ``interrupted`` are told apart the same way (`held`):
``interrupted`` is a job started whose process is gone before its statistics table; its command run
again makes it. Sweeps of the other apps (evaluate, noise: their jobs record neither their
overrides nor a state in their folders) are refused.

A job's folder is found by the job's identity (the hash of its recorded task overrides,
`robustnlu.sweep_jobs.job_hash`), not by the folder's name. Folders of jobs that are not in the
list (an earlier launch with other values into the same folder) are listed after it.

``relaunch`` runs the jobs of a training sweep that are failed, interrupted or missing — not the
finished ones, not those running — with the sweep's own launcher and settings (its ``hydra.*``
overrides: launcher, partition, ``hydra.sweep.subdir``, ...), each with its own overrides plus
``resume=true``, into the same sweep directory and folders. It writes the list to
``<sweep dir>/.relaunch/<time>.json``, prints the command and runs it (``--dry-run``: prints only):
``python -m robustnlu -m hydra/sweeper=joblist ...``
(hydra_plugins/robustnlu_plugins/job_list_sweeper.py). To add values to a sweep instead, launch it
again with them and ``resume=true`` (``seed=0,1`` then ``seed=0,1,2``): its finished jobs return
their stored results from their folders. A SeqDrift sweep is not relaunched: its command run again
into its sweep directory (``hydra.sweep.dir=<it>``) writes each job into its own folder again, the
splits already made taken from the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustnlu.errors import CommandLineParser, ConfigError, DataError, entry_point
from robustnlu.io import atomic_write_json, pid_alive
from robustnlu.rundir import RunDir
from robustnlu.runlock import holder
from robustnlu.seqdrift.artifact import STATS_TABLE_FILE
from robustnlu.sweep_jobs import MULTIRUN_FILE, Sweep, job_hash, override_key, parse_overrides, read_sweep, under

STATES = ("finished", "failed", "running", "interrupted", "missing")
#: what relaunch runs again
UNFINISHED = ("failed", "interrupted", "missing")
#: Slurm job states (``squeue -o %T``) of a job that has not ended
SLURM_ALIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                         "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT"})
#: what the state of a job in its folder is read as: (state, error line, note)
JobState = tuple[str, str | None, str | None]
#: the folder of the job lists that relaunch writes
RELAUNCH_DIR = ".relaunch"
#: the training app's config (``python -m robustnlu``): the sweeps relaunch knows how to run
TRAINING_CONFIG = "config"
#: the SeqDrift app's config (``python -m robustnlu.seqdrift``)
SEQDRIFT_CONFIG = "seqdrift"


@dataclass
class Job:
    """One job of a sweep: its task overrides, the folder that holds it and its state."""

    overrides: list[str]
    folder: Path | None
    state: str
    error: str | None = None
    note: str | None = None
    #: whether it is in the sweep's job list (False: a folder of a job the list does not hold)
    listed: bool = True


def slurm_alive(job_id: str) -> bool | None:
    """Whether Slurm job ``job_id`` has not ended (``squeue``); None where Slurm cannot be asked."""
    if not shutil.which("squeue"):
        return None
    try:
        proc = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return False if "Invalid job id" in proc.stderr else None  # purged from Slurm's memory: long ended
    states = set(proc.stdout.split())
    return bool(states & SLURM_ALIVE)


def alive(record: dict[str, Any]) -> bool | None:
    """Whether the process of a lock (pid, host, Slurm job id) runs: certain on this host and for
    a Slurm job Slurm can be asked about; None otherwise."""
    pid, host, slurm_job = record.get("pid"), record.get("host"), record.get("slurm_job_id")
    if host == socket.gethostname() and isinstance(pid, int):
        return pid_alive(pid)
    if slurm_job:
        return slurm_alive(str(slurm_job))
    return None


def read_status(run: RunDir) -> dict[str, Any]:
    """``status.json`` of ``run``, {} where there is none, state ``unreadable`` where it cannot be read."""
    try:
        return run.status() or {}
    except DataError as err:
        return {"state": "unreadable", "error": str(err)}


def failed_state(run: RunDir, status: dict[str, Any]) -> JobState:
    """A failed job's state, error line and where its traceback is, if it left one."""
    shown = status.get("traceback") and run.traceback_file.is_file()
    return "failed", status.get("error"), (f"traceback: {run.traceback_file}" if shown else None)


def held(run: RunDir) -> JobState | None:
    """``running`` where a process holds ``run``'s lock (`robustnlu.runlock`) and is alive
    (`alive`), or cannot be checked from here (with a note naming its host); None where there
    is no lock or its process is gone."""
    lock = holder(run.path)
    live = alive(lock) if lock else False
    if live:
        return "running", None, None
    if live is None:
        return "running", None, f"on {lock.get('host', '?')}: not checked from here"
    return None


def job_state(run: RunDir) -> JobState:
    """(state, error line, note) of the training job in ``run`` (see the module docstring)."""
    status = read_status(run)
    state = status.get("state")
    if run.finished() and state in (None, "finished"):
        return "finished", None, None
    running = held(run)
    if running is not None:
        return running
    error = status.get("error")
    if state == "failed":
        return failed_state(run, status)
    if state == "interrupted":
        return "interrupted", error, None
    if state == "unreadable":
        return "interrupted", error, "status.json unreadable"
    return "interrupted", None, ("its process is gone" if state == "running"
                                 else "started, its process is gone before status.json")


def seqdrift_job_state(run: RunDir) -> JobState:
    """(state, error line, note) of the SeqDrift job in ``run``: finished once it wrote its
    statistics table (its last file; a later launch of the same job that failed leaves the split
    there); running while a live process holds its lock (`held`, as for training); failed where
    the status.json a failed launch leaves says so (`robustnlu.cli.record_failed_job`; the app
    writes none itself); otherwise interrupted: started, and its process is gone."""
    if (run.path / STATS_TABLE_FILE).is_file():
        return "finished", None, None
    running = held(run)
    if running is not None:
        return running
    status = read_status(run)
    if status.get("state") == "failed":
        return failed_state(run, status)
    if status.get("state") == "unreadable":
        return "interrupted", status.get("error"), "status.json unreadable"
    return "interrupted", None, f"started, its process is gone before {STATS_TABLE_FILE}"


#: how a job's state is read from its folder, by app (its config's name, multirun.yaml's
#: ``hydra.job.config_name``): the sweeps status knows
JOB_STATES = {TRAINING_CONFIG: job_state, SEQDRIFT_CONFIG: seqdrift_job_state}


def job_folders(path: Path) -> dict[str, list[RunDir]]:
    """The job folders directly below ``path`` by `robustnlu.sweep_jobs.job_hash` of their
    recorded overrides (`RunDir.overrides`); folders that record none are not jobs (``wandb/``,
    ``.submitit/``)."""
    found: dict[str, list[RunDir]] = {}
    for folder in sorted(path.iterdir()):
        if folder.is_dir() and not folder.name.startswith("."):
            run = RunDir(folder)
            key = run.job_hash()
            if key is not None:
                found.setdefault(key, []).append(run)
    return found


def preferred(states: dict[RunDir, JobState]) -> RunDir:
    """Of several folders of one job (a folder renamed, an old naming scheme), by their states: a
    finished one, else the one changed last."""
    return max(states, key=lambda r: (states[r][0] == "finished", r.path.stat().st_mtime))


def sweep_status(path: Path) -> tuple[Sweep | None, list[Job]]:
    """The sweep in ``path`` and its jobs: the job list's in order, then the folders of jobs it does
    not hold (``listed=False``). Without a job list (no multirun.yaml, or a sweeper that makes its
    jobs as it goes: an Optuna search) the folders found, as not listed; without multirun.yaml
    they are taken for a training sweep's. `ConfigError` for a sweep of an app whose jobs it
    cannot read (`JOB_STATES`)."""
    if not path.is_dir():
        raise ConfigError(f"{path}: no such sweep directory")
    sweep = read_sweep(path)
    app = sweep.config_name if sweep is not None else TRAINING_CONFIG
    if app not in JOB_STATES:
        raise ConfigError(f"{path}: a sweep of the {app!r} app; status reads the sweeps of python -m robustnlu and "
                          "python -m robustnlu.seqdrift, whose jobs record their overrides and state in their folders")
    state_of = JOB_STATES[app]
    expected = sweep.jobs() if sweep is not None else None
    folders = job_folders(path)
    jobs: list[Job] = []
    first: dict[str, int] = {}
    for position, overrides in enumerate(expected or []):
        key = job_hash(overrides)
        if key in first:  # differs from an earlier job in settings that change nothing it computes
            jobs.append(Job(overrides, jobs[first[key]].folder, jobs[first[key]].state,
                            note="the same job as an earlier one of the list (they differ only in settings that do "
                                 "not change what a job computes, e.g. logger or paths): one folder holds both"))
            continue
        first[key] = position
        runs = folders.pop(key, [])
        if not runs:
            jobs.append(Job(overrides, None, "missing"))
            continue
        states = {run: state_of(run) for run in runs}
        run = preferred(states)
        state, error, note = states[run]
        if len(runs) > 1:
            others = ", ".join(r.path.name for r in runs if r != run)
            note = "; ".join(filter(None, [note, f"also in {others}"]))
        jobs.append(Job(overrides, run.path, state, error, note))
    for runs in folders.values():
        for run in runs:
            state, error, note = state_of(run)
            jobs.append(Job(run.overrides() or [], run.path, state, error, note, listed=False))
    return sweep, jobs


def sweeps_in(path: Path) -> list[Path]:
    """The sweeps ``status`` reads for ``path``: ``path`` itself where it is a sweep (its
    multirun.yaml, or job folders), else the sweeps below it (a folder that holds sweeps rather
    than jobs, such as the efficiency protocol's ``--mode adapt`` folder: ``source/``,
    ``adapt/seed<N>/``), in path order; ``path`` alone where there are none (an empty sweep)."""
    if not path.is_dir() or read_sweep(path) is not None or job_folders(path):
        return [path]
    return sorted(record.parent for record in path.rglob(MULTIRUN_FILE) if record.parent != path) or [path]


def varying(jobs: Sequence[Job]) -> set[str]:
    """The keys whose overrides are not the same in every job of ``jobs`` (what tells them apart)."""
    seen: dict[str, set[str]] = {}
    for job in jobs:
        lines = {override_key(o): o.input_line for o in parse_overrides(job.overrides)}
        for key in set(seen) | set(lines):
            seen.setdefault(key, set()).add(lines.get(key, ""))
    return {key for key, values in seen.items() if len(values) > 1}


def shown_overrides(job: Job, keys: set[str]) -> str:
    """The overrides of ``job`` among ``keys`` (all of them if ``keys`` is empty), as typed."""
    parsed = parse_overrides(job.overrides)
    return " ".join(o.input_line for o in parsed if not keys or override_key(o) in keys)


def one_line(text: str) -> str:
    """An error message on one line (a crash's message may span several)."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def print_status(path: Path, sweep: Sweep | None, jobs: list[Job]) -> None:
    """The table of ``status``: a summary line, then one line per job (state, folder, the overrides
    that tell it from the others), its error line and a note where there is one."""
    listed = [j for j in jobs if j.listed]
    others = [j for j in jobs if not j.listed]
    counts = {state: sum(j.state == state for j in listed) for state in STATES}
    if sweep is None:
        source = "no multirun.yaml: the job folders found"
    elif not sweep.basic:
        source = f"{sweep.sweeper.rsplit('.', 1)[-1]} makes its jobs as it goes: the job folders found"
    else:
        source = "its multirun.yaml's job list"
    print(f"{path}: {len(listed)} jobs ({source}): " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    keys = varying(listed) if len(listed) > 1 else set()
    width = max([len(j.folder.name) for j in jobs if j.folder is not None] + [1])

    def show(job: Job, keys: set[str]) -> None:
        folder = job.folder.name if job.folder is not None else "-"
        print(f"  {job.state:<12} {folder:<{width}}  {shown_overrides(job, keys)}".rstrip())
        if job.error:
            print(f"  {'':<12} error: {one_line(job.error).removeprefix('error: ')}")
        if job.note:
            print(f"  {'':<12} ({job.note})")

    for job in listed:
        show(job, keys)
    if others and listed:
        print(f"{len(others)} folder(s) of jobs not in the job list (an earlier launch with other values):")
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
    if sweep is None:
        below = [p for p in sweeps_in(path) if p != path]
        if below:  # a folder of sweeps: the command that made them knows how they go together
            raise ConfigError(f"{path}: holds sweeps, not jobs ({', '.join(str(p.relative_to(path)) for p in below)}): "
                              "relaunch one of them, or run the command that made them again with resume=true and "
                              "hydra.sweep.dir=<this folder> (the efficiency protocol continues so)")
        raise ConfigError(f"{path}: no multirun.yaml, so the sweep's jobs are not known; launch the sweep again "
                          "with resume=true and hydra.sweep.dir=<this folder>")
    if not sweep.basic:
        raise ConfigError(f"{path}: a sweep of {sweep.sweeper} (not Hydra's basic sweeper) decides its jobs as it "
                          "goes; run its command again to continue it (an Optuna search adds trials to its study)")
    if sweep.config_name != TRAINING_CONFIG:
        raise ConfigError(f"{path}: a sweep of the {sweep.config_name!r} app; relaunch runs training sweeps "
                          f"(python -m robustnlu -m ...): run its command again with hydra.sweep.dir={path}")
    if re.search(r"job[.:]num", sweep.subdir):
        raise ConfigError(f"{path}: its job folders are named by position (hydra.sweep.subdir={sweep.subdir}), so a "
                          "job launched again would take another job's folder; relaunch needs folders named by the "
                          "job (the default hydra.sweep.subdir, conf/hydra/default.yaml)")
    return sweep


def relaunch(path: Path, dry_run: bool) -> int:
    sweep = check_relaunchable(read_sweep(path), path)
    _, jobs = sweep_status(path)
    listed = [j for j in jobs if j.listed]
    todo, seen = [], set()
    for job in listed:
        key = job_hash(job.overrides)
        if job.state in UNFINISHED and key not in seen:
            seen.add(key)
            todo.append(job)
    running = [j for j in listed if j.state == "running"]
    keys = varying(listed) if len(listed) > 1 else set()
    print(f"{path}: {len(listed)} jobs, {sum(j.state == 'finished' for j in listed)} finished, "
          f"{len(running)} running (left alone), {len(todo)} to run again")
    for job in todo:
        print(f"  {job.state:<12} {shown_overrides(job, keys)}")
    if not todo:
        print("nothing to relaunch")
        return 0
    overrides = [[o for o, p in zip(job.overrides, parse_overrides(job.overrides)) if p.key_or_group != "resume"]
                 for job in todo]
    jobs_file = path.resolve() / RELAUNCH_DIR / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
    cwd = sweep.cwd if sweep.cwd is not None and sweep.cwd.is_dir() else Path.cwd()
    cmd = [sys.executable, "-m", "robustnlu", "-m", *relaunch_hydra_overrides(sweep, path), "hydra/sweeper=joblist",
           f"hydra.sweeper.jobs_file={quoted(str(jobs_file))}", "resume=true"]
    print(f"+ cd {shlex.quote(str(cwd))} && {shlex.join(cmd)}", flush=True)
    if dry_run:
        return 0
    atomic_write_json(jobs_file, {"sweep": str(path.resolve()), "jobs": overrides})
    return subprocess.run(cmd, cwd=cwd, env=os.environ.copy()).returncode


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
                                  "overrides": job.overrides, "error": job.error, "note": job.note,
                                  "listed": job.listed}))
        else:
            print_status(path, sweep, jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
