"""What became of each job of a sweep, read from the folders of its sweep directory (`sweep_status`;
shown and acted on by ``python -m robustnlu.sweep``): each job of the sweep's job list — the list
Hydra's basic sweeper made from the sweep's overrides (its ``multirun.yaml``,
`robustnlu.sweep_jobs.Sweep.jobs`), so that a job that never started is listed too, then those of
the earlier sweeps into the same directory that it does not hold (their records kept in
``.multirun/``, `robustnlu.sweep_jobs.job_list`) — with its folder and its state:

- ``finished``: its ``results.json`` is there (one that cannot be read is ``failed``, naming it);
- ``failed``: its ``status.json`` says so, with the error line (a job refused for a bad value
  leaves such a record; one that crashed also its ``traceback.txt``);
- ``running``: the process that holds its folder (``run.lock``) is alive — checked on this host,
  through ``squeue`` for a Slurm job elsewhere, otherwise not known and shown as running;
- ``queued``: Slurm holds a job for it that waits to start (submitted behind others, or requeued
  after a time-out or preemption), whatever its folder says (`slurm_queue`); a job Slurm has
  started before it made its folder is ``running``;
- ``interrupted``: started, but its process is gone (killed, timed out, the node lost) or a
  signal ended it; ``resume=true`` continues it from its ``last.ckpt``;
- ``missing``: no folder holds it (never started, or the sweep was ended before it).

A SeqDrift job computes a split and writes it into its folder (`seqdrift_job_state`): ``finished``
once its last file, the statistics table, is there; ``failed`` and ``missing`` as above. It holds
its folder's ``run.lock`` while it runs, as a training run does (conf/seqdrift.yaml,
`robustnlu.rundir_claim`), so ``running`` and ``interrupted`` are told apart the same way (`held`):
``interrupted`` is a job started whose process is gone before its statistics table; its command run
again makes it. Sweeps of the other apps (evaluate, noise: their jobs record neither their
overrides nor a state in their folders) are refused (`JOB_STATES`).

A job's folder is found by the job's identity (the hash of its recorded task overrides,
`robustnlu.sweep_jobs.job_hash`), not by the folder's name. Folders of jobs that are in no list
(a launch whose record is not kept: by Hydra's own basic sweeper, or before records were kept)
come after it. A folder that holds
sweeps rather than jobs (the efficiency protocol's ``--mode adapt`` folder) is read as the sweeps
below it (`sweeps_in`).
"""

from __future__ import annotations

import pickle
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustnlu.errors import ConfigError, DataError
from robustnlu.io import pid_alive
from robustnlu.rundir import RunDir
from robustnlu.runlock import holder
from robustnlu.seqdrift.artifact import STATS_TABLE_FILE
from robustnlu.sweep_jobs import MULTIRUN_FILE, Sweep, job_hash, job_list, read_sweep, read_sweeps

STATES = ("finished", "failed", "running", "queued", "interrupted", "missing")
#: Slurm job states (``squeue -o %T``) of a job that has not ended
SLURM_ALIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                         "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT"})
#: those of a job that waits to start (submitted, or requeued after a time-out or preemption)
SLURM_WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
#: hydra-submitit-launcher's folder in a sweep directory (conf/hydra/launcher/slurm.yaml,
#: ``submitit_folder``): ``<Slurm job id>/<Slurm job id>_submitted.pkl`` per job, written at submission
SUBMITIT_DIR = ".submitit"
#: what the state of a job in its folder is read as: (state, error line, note)
JobState = tuple[str, str | None, str | None]
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
    #: the sweep whose job list holds it (its multirun.yaml, or an earlier sweep's kept record)
    sweep: Sweep | None = None
    #: the error line of its attempt before, where Slurm holds it again (`queued`): not its own
    previous_error: str | None = None


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


def slurm_queue(path: Path) -> dict[str, tuple[str, str]]:
    """The jobs of the sweep in ``path`` that Slurm holds and that have not ended, by
    `robustnlu.sweep_jobs.job_hash` of their overrides: (Slurm job id, its state). A job submitted
    and still pending, or requeued, has no folder or one its process left: only Slurm knows it will
    run. Slurm's own jobs (``squeue --me``) are matched to submitit's folders in
    `SUBMITIT_DIR` (named by job id), whose pickled submission holds the overrides of the job or
    jobs it runs (`submitted_jobs`). Empty where Slurm cannot be asked."""
    folder = path / SUBMITIT_DIR
    if not folder.is_dir() or not shutil.which("squeue"):
        return {}
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "--me", "-o", "%i %T"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else ():
        job_id, state = line.split()
        submitted = folder / job_id / f"{job_id}_submitted.pkl"
        if state not in SLURM_ALIVE or not re.fullmatch(r"\d+(_\d+)?", job_id) or not submitted.is_file():
            continue
        try:
            with submitted.open("rb") as file:
                jobs = submitted_jobs(pickle.load(file).args[0])
        except Exception:  # noqa: BLE001 - a submission of another tool or version: not a sweep job of ours
            continue
        found.update({job_hash(overrides): (job_id, state) for overrides in jobs})
    return found


def submitted_jobs(first_argument: Any) -> list[list[str]]:
    """The task overrides of the sweep jobs that one Slurm job runs, from the first argument of
    the launcher's call that submitit pickled: one job's overrides, or a pack's list of them (K
    jobs at once, ``hydra.launcher.runs_per_gpu``: hydra_plugins/robustnlu_plugins/launchers.py)."""
    jobs = list(first_argument)
    return [list(job) for job in jobs] if jobs and not isinstance(jobs[0], str) else [jobs]


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


#: how a job's note names the traceback its folder holds (`failed_state`)
TRACEBACK_NOTE = "traceback: "


def failed_state(run: RunDir, status: dict[str, Any]) -> JobState:
    """A failed job's state, error line and where its traceback is, if it left one."""
    shown = status.get("traceback") and run.traceback_file.is_file()
    return "failed", status.get("error"), (f"{TRACEBACK_NOTE}{run.traceback_file}" if shown else None)


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
        try:
            run.results()
        except DataError as err:  # damaged since (a copy cut short, an edit): what reads it fails
            return "failed", str(err), "results.json unreadable: move it away to train the job again"
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


def queued(job: Job, slurm: tuple[str, str] | None) -> Job:
    """``job`` as Slurm tells it where its folder does not (`slurm_queue`): a job that is failed,
    interrupted or missing there but that Slurm holds waiting to start (submitted behind others, or
    requeued after a time-out) is ``queued``; one without a folder that Slurm has started is
    ``running``. A started job with a folder is told by its folder: its lock once it holds it, its
    record (failed, interrupted) while its Slurm job is still ending. The error its folder records,
    and the traceback it names, are then its attempt before's (`Job.previous_error`), not the queued
    or running job's."""
    if slurm is None or job.state in ("finished", "running"):
        return job
    job_id, state = slurm
    if state in SLURM_WAITING or job.folder is None:
        note = job.note or ""
        if note.startswith(TRACEBACK_NOTE):
            note = f"previous attempt's {note}"
        job.note = "; ".join(filter(None, [f"Slurm job {job_id} {state}", note]))
        job.state = "queued" if state in SLURM_WAITING else "running"
        job.previous_error, job.error = job.error, None
    return job


def sweep_status(path: Path) -> tuple[Sweep | None, list[Job]]:
    """The sweep in ``path`` (its multirun.yaml) and its jobs: the job list of every sweep into
    ``path`` in order (`robustnlu.sweep_jobs.job_list`: the latest's, then the earlier ones' it does
    not hold), then the folders of jobs no list holds (``listed=False``). Without a job list (no
    multirun.yaml, or a sweeper that makes its jobs as it goes: an Optuna search) the folders
    found, as not listed; without multirun.yaml they are taken for a training sweep's. A job's
    state is read as its sweep's app reads it; `ConfigError` for a sweep of an app whose jobs it
    cannot read (`JOB_STATES`)."""
    if not path.is_dir():
        raise ConfigError(f"{path}: no such sweep directory")
    if RunDir(path).is_run():
        raise ConfigError(f"{path}: a run's folder, not a sweep directory (the folder of a sweep's job folders, "
                          "its hydra.sweep.dir)")
    sweeps = read_sweeps(path)
    for app in dict.fromkeys(s.config_name for s in sweeps):
        if app not in JOB_STATES:
            raise ConfigError(f"{path}: a sweep of the {app!r} app; status reads the sweeps of python -m robustnlu and "
                              "python -m robustnlu.seqdrift, whose jobs record their overrides and state in their folders")
    sweep = sweeps[0] if sweeps and not sweeps[0].earlier else None
    folders = job_folders(path)
    queue = slurm_queue(path)
    jobs: list[Job] = []
    first: dict[str, int] = {}
    for position, (listing, overrides) in enumerate(job_list(sweeps)):
        key = job_hash(overrides)
        if key in first:  # differs from an earlier job in settings that change nothing it computes
            jobs.append(Job(overrides, jobs[first[key]].folder, jobs[first[key]].state, sweep=listing,
                            note="the same job as an earlier one of the list (they differ only in settings that do "
                                 "not change what a job computes, e.g. logger or paths): one folder holds both"))
            continue
        first[key] = position
        runs = folders.pop(key, [])
        if not runs:
            jobs.append(queued(Job(overrides, None, "missing", sweep=listing), queue.get(key)))
            continue
        state_of = JOB_STATES[listing.config_name]
        states = {run: state_of(run) for run in runs}
        run = preferred(states)
        state, error, note = states[run]
        if len(runs) > 1:
            others = ", ".join(r.path.name for r in runs if r != run)
            note = "; ".join(filter(None, [note, f"also in {others}"]))
        jobs.append(queued(Job(overrides, run.path, state, error, note, sweep=listing), queue.get(key)))
    state_of = JOB_STATES[sweep.config_name if sweep is not None else TRAINING_CONFIG]
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
