"""The lock file of a run directory, ``run.lock``: one process trains in a folder at a time.

The file holds the holder's pid and host (JSON) and is created with ``O_EXCL``, so of two
processes that start at once exactly one gets it. A lock whose holder is a process of this host
that no longer runs (killed, OOM, a crashed node's requeued job on the same host) is taken over
with a message, and so is one of an earlier instance of this Slurm job (a requeued job starts
anew, maybe on another node; Slurm runs one instance of a job at a time). A lock held by a live
process, or by another host (whose processes cannot be seen from here), is refused with one line
naming the holder; a command that reads a run's checkpoint (``python -m robustnlu.evaluate``,
``python -m robustnlu.predict``: `robustnlu.predictor.Predictor.from_checkpoint`) refuses one whose
lock is so held (`check_not_running`), since what it would read is half-trained. A file lock
(``flock``) would free itself when its holder dies, but it is unreliable on the network file
systems of clusters, where run directories live.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from robustnlu.errors import ConfigError
from robustnlu.io import pid_alive, take_over

LOCK_NAME = "run.lock"
#: a lock still unreadable after this many seconds is a holder's that died while writing it
UNREADABLE_S = 5.0


def parse(text: str) -> dict[str, Any]:
    """A lock's content; ``{}`` for one that is not a lock's JSON (being written, or cut short)."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def read_lock(lock: Path) -> tuple[str, dict[str, Any], float] | None:
    """The text of the lock file ``lock``, its content (`parse`) and its age in seconds; None where
    there is none."""
    try:
        text = lock.read_text(encoding="utf-8", errors="replace")
        age_s = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return None
    return text, parse(text), age_s


def holder(path: Path) -> dict[str, Any] | None:
    """The content of ``<path>/run.lock`` (`parse`), None where there is no lock."""
    read = read_lock(Path(path) / LOCK_NAME)
    return None if read is None else read[1]


def mine(found: dict[str, Any] | None) -> bool:
    """Whether a lock's content names this process."""
    return bool(found) and found.get("pid") == os.getpid() and found.get("host") == socket.gethostname()


def slurm_job() -> str | None:
    return os.environ.get("SLURM_JOB_ID")


def this_process() -> dict[str, Any]:
    """What names this process in a lock (and in an Optuna trial's record of the search that
    launched it): its pid, host and Slurm job, judged by `stale`."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "slurm_job_id": slurm_job()}


def stale(found: dict[str, Any], age_s: float) -> bool:
    """A lock of a dead process of this host or of an earlier instance of this Slurm job, or one
    that is unreadable after `UNREADABLE_S` (its holder was killed while writing it)."""
    if not found.get("pid"):
        return age_s > UNREADABLE_S
    if slurm_job() is not None and found.get("slurm_job_id") == slurm_job():
        return True
    return found.get("host") == socket.gethostname() and not pid_alive(int(found["pid"]))


def wait_or_remove(found: dict[str, Any], lock: Path) -> str:
    """The end of the line refusing a folder whose lock ``lock`` holds ``found``: since when, the
    file, and what the user can do."""
    return (f"(since {found.get('since', '?')}, {lock}); wait for it to end, or if that process is gone, remove the "
            "lock file")


def in_force(path: Path) -> dict[str, Any] | None:
    """The content of ``<path>/run.lock`` (`parse`) where it keeps other processes out, as `acquire`
    judges: held by another process that runs or cannot be seen from here (another host), or being
    written; None where there is no lock, or it is this process's or a stale one (`stale`)."""
    read = read_lock(Path(path) / LOCK_NAME)
    if read is None:
        return None
    _, found, age_s = read
    return None if mine(found) or stale(found, age_s) else found


def check_not_running(path: Path) -> None:
    """`ConfigError` naming ``path`` and the process that holds it where its lock is in force
    (`in_force`): the run in it is still running."""
    found = in_force(path)
    if found is not None:
        raise ConfigError(f"{path} is still running: process {found.get('pid', '?')} on {found.get('host', '?')} holds "
                          f"it {wait_or_remove(found, Path(path) / LOCK_NAME)}")


def acquire(path: Path) -> None:
    """Take ``<path>/run.lock`` for this process; `ConfigError` naming the holder if it is taken."""
    lock = Path(path) / LOCK_NAME
    record = json.dumps({**this_process(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode()
    for _ in range(100):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            read = read_lock(lock)
            if read is None:
                continue  # released meanwhile: try again
            text, found, age_s = read
            if not found and age_s <= UNREADABLE_S:
                time.sleep(0.1)  # being written by the process that just took it
                continue
            if mine(found):
                return
            if not stale(found, age_s):
                raise ConfigError(f"{path} is in use by process {found.get('pid')} on {found.get('host')} "
                                  f"{wait_or_remove(found, lock)}") from None
            print(f"note: {path}: taking over the lock of process {found.get('pid', '?')} on "
                  f"{found.get('host', '?')}, which is no longer running", file=sys.stderr, flush=True)
            take_over(lock, text)  # only that stale lock, never one another process took meanwhile
            continue
        with os.fdopen(fd, "wb") as file:
            file.write(record)
        return
    raise ConfigError(f"{path}: could not take the lock {lock} (other processes keep taking it)")


def release(path: Path) -> None:
    """Remove ``<path>/run.lock`` if this process holds it."""
    if mine(holder(path)):
        (Path(path) / LOCK_NAME).unlink(missing_ok=True)
