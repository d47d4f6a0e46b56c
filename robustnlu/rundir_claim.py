"""Who owns a run directory: what an invocation may delete there, and one process at a time.

An entry point's run directory (``hydra.run.dir``, or a sweep job's folder) is claimed before
anything is written into it (`claim`): for a single run by `RunDirOwnership`, a Hydra callback
that runs before Hydra creates the folder; for a sweep's job at the start of its task
(`robustnlu.cli.run_or_exit`). The claim records what was there before, so that an error ends
the invocation without destroying anything it did not make (`undo`):

- a folder this invocation created (and the parents it created for it) is removed;
- a folder that existed is never removed: only the entries this invocation added are, and the
  files it overwrote there (Hydra's ``.hydra/`` record of the overrides, its log) are put back as
  they were — a refused ``resume=true`` leaves the run it was pointed at byte for byte as it was;
- where the state before is unknown (a sweep job started by a launcher in another process, after
  Hydra made its folder), the folder is removed only if it holds nothing but what Hydra and
  robustnlu write at a job's start (`OWN_ENTRIES`).

For training, the SeqDrift app and the noise app, the claim is exclusive (`exclusive=True`): an
existing folder with files that is not a robustnlu run is refused (one line, nothing written), among
them a folder that holds another Hydra app's ``.hydra/`` record (`another_apps_record`), which Hydra
would write over. A training run's own folder is one that holds a run (continued with
``resume=true``); the SeqDrift app writes its split anew into its folder each launch, so an earlier
launch's files (``outputs``) are its own; the noise app writes none there (its ``outputs`` are
empty). The invocation takes the lock file `run.lock` (pid and host; `robustnlu.runlock`): a second
process into the same folder is refused with a line naming the holder; a lock left by a dead process
on this host is taken over; ``python -m robustnlu.sweep status`` tells running jobs from those whose
process is gone by it. The lock is released when the invocation ends, however it ends: a finished
folder holds no ``run.lock``. A sweep's folder is refused likewise where it holds files no robustnlu
sweep writes there (`foreign_sweep_files`), a ``multirun.yaml`` of another Hydra app among them.
"""

from __future__ import annotations

import atexit
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from robustnlu.errors import ConfigError, exit_with_error
from robustnlu.rundir import HYDRA_SETTINGS, RunDir
from robustnlu.runlock import LOCK_NAME, acquire, release
from robustnlu.sweep_jobs import MULTIRUN_FILE

#: Hydra's job logs (``<hydra.job.name>.log``) of robustnlu's apps: training and the noise app run a
#: ``__main__`` module, the evaluation app is named by its file, the SeqDrift app names its job
#: (conf/seqdrift.yaml). Any other ``.log`` is a file of the user's.
JOB_LOGS = ("__main__.log", "evaluate.log", "seqdrift.log")

#: what Hydra (its ``.hydra/`` record, its job log) and robustnlu (the lock) write into a run
#: directory before the run itself writes anything: a folder holding only these counts as empty
#: (a ``.hydra/`` that another Hydra app wrote does not: `another_apps_record`)
OWN_ENTRIES = (".hydra", LOCK_NAME, *JOB_LOGS)


def own_entry(name: str) -> bool:
    """`OWN_ENTRIES` and the ``.pl_hydra_rank_<n>`` records of Lightning's DDP processes."""
    return name in OWN_ENTRIES or name.startswith(".pl_hydra")


def robustnlus_settings(settings_file: Path) -> bool:
    """Whether ``settings_file`` holds Hydra's settings of a robustnlu app (a run's
    ``.hydra/hydra.yaml``, a sweep's ``multirun.yaml``): they name `RunDirOwnership` as the owner
    of its folders (``hydra.callbacks.run_dir._target_``). False for a file that is missing or
    does not parse, or names another owner or none."""
    try:
        settings = yaml.safe_load(settings_file.read_text(encoding="utf-8"))
        owner = settings["hydra"]["callbacks"]["run_dir"]["_target_"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return False
    return owner == f"{RunDirOwnership.__module__}.{RunDirOwnership.__qualname__}"


def another_apps_record(path: Path) -> bool:
    """Whether ``path/.hydra`` is another Hydra app's record (``hydra.run.dir`` pointed at another
    tool's output), which Hydra would write over, rather than one of a robustnlu app (its
    ``hydra.yaml``: `robustnlus_settings`). A ``.hydra`` that is not a folder, or holds files but
    no such ``hydra.yaml``, is another app's; an empty one is nobody's."""
    record = path / ".hydra"
    if not record.exists():
        return False
    if not record.is_dir():
        return True
    return any(record.iterdir()) and not robustnlus_settings(path / HYDRA_SETTINGS)


@dataclass
class Claim:
    """What an invocation found in its run directory, to undo what it did there."""

    path: Path
    #: whether the folder existed before this invocation; None: unknown (a job of a remote launcher)
    existed: bool | None
    #: the folders this invocation created for it, deepest first (the run directory among them when new)
    created: list[Path] = field(default_factory=list)
    #: the names in the folder before
    entries: frozenset[str] = frozenset()
    #: files of Hydra's that the invocation may overwrite (``.hydra/*``, logs) and their bytes before
    saved: dict[Path, bytes] = field(default_factory=dict)
    locked: bool = False

    def restore(self) -> None:
        """Put back the Hydra files this invocation overwrote; remove the ones it added beside them."""
        hydra_dir = self.path / ".hydra"
        for path in sorted(hydra_dir.iterdir()) if hydra_dir.is_dir() and self.existed else ():
            if path not in self.saved and path.is_file():
                path.unlink()
        for path, data in self.saved.items():
            try:
                path.write_bytes(data)
            except OSError:  # the disk that failed the run may refuse this too: the run's files matter more
                pass
        for log in (self.path / name for name in JOB_LOGS) if self.existed else ():
            if log not in self.saved:
                log.unlink(missing_ok=True)

    def discard(self) -> None:
        """Remove what this invocation created: the folder if it made it (and the parents it made
        and that are empty), else only its new entries, with Hydra's overwritten files restored."""
        run = RunDir(self.path)
        if self.existed is None:
            if self.path.is_dir() and not run.is_run() and all(own_entry(p.name) for p in self.path.iterdir()):
                shutil.rmtree(self.path, ignore_errors=True)
            return
        if not self.existed:
            shutil.rmtree(self.path, ignore_errors=True)
            for parent in self.created:
                if parent != self.path:
                    try:
                        parent.rmdir()  # only if empty: a parallel job may have written into it
                    except OSError:
                        break
            return
        for path in self.path.iterdir() if self.path.is_dir() else ():
            if path.name not in self.entries:
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        self.restore()


#: the files a training sweep's folder holds beside its jobs' folders: Hydra's record of the sweep,
#: the Optuna sweeper's result, `robustnlu.hpo`'s and the efficiency protocol's records
SWEEP_FILES = (MULTIRUN_FILE, "optimization_results.yaml", "best_params.json", "protocol.json")


def first_few(names: list[str]) -> str:
    """The first three of ``names`` and how many more, for an error line."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def foreign_sweep_files(path: Path) -> list[str]:
    """The files directly in the folder ``path`` (if it exists) that no sweep writes there (`SWEEP_FILES`,
    `own_entry`): a folder of the user's rather than a sweep's, or another Hydra app's sweep, whose
    ``multirun.yaml`` does not hold a robustnlu app's settings (`robustnlus_settings`) and would be
    written over. Sub-folders are the sweep's jobs'."""
    if not path.is_dir():
        return []
    foreign = sorted(p.name for p in path.iterdir()
                     if not p.is_dir() and p.name not in SWEEP_FILES and not own_entry(p.name))
    record = path / MULTIRUN_FILE
    if record.exists() and not robustnlus_settings(record):
        foreign.insert(0, f"{MULTIRUN_FILE} of another Hydra app")
    return foreign


#: this process's claims, by absolute path
CLAIMS: dict[Path, Claim] = {}


def key(path: str | Path) -> Path:
    return Path(os.path.abspath(path))


def secondary_process() -> bool:
    """A process of a multi-process run other than the first (Lightning's DDP children re-run the
    command line with ``LOCAL_RANK``; Slurm's tasks have ``SLURM_PROCID``): the first owns the folder."""
    return any(int(os.environ.get(v) or 0) > 0 for v in ("LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


def claim(path: str | Path, exclusive: bool, before_creation: bool, outputs: Sequence[str] | None = None) -> Claim:
    """Claim ``path`` for this invocation (once; later calls return the first claim).
    ``before_creation``: the folder is looked at before anything made it (a single run), and
    created here; else it exists already and its history is unknown (a sweep's job).
    ``exclusive``: take its ``run.lock``, and refuse a non-empty folder that is not this app's run
    (a single run's folder holding another Hydra app's ``.hydra/`` among them:
    `another_apps_record`; a sweep's job finds the record its own Hydra just wrote): with
    ``outputs`` None (training) one that holds no run (`RunDir.is_run`), else one holding files
    other than the ``outputs`` an app that writes them anew each launch wrote there before (the
    SeqDrift app). Raises `ConfigError`, with nothing created, for a folder that cannot be
    created, so refused, or that another process holds."""
    path = key(path)
    if path in CLAIMS:
        return CLAIMS[path]
    exclusive = exclusive and not secondary_process()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"hydra.run.dir: {path} is a file, not a folder")
    found = Claim(path, path.is_dir() if before_creation else None)
    names = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
    foreign = [n for n in names if not own_entry(n) and n not in (outputs or ())]
    if exclusive and before_creation and another_apps_record(path):
        foreign.insert(0, ".hydra/ of another Hydra app")
    if exclusive and foreign and (outputs is not None or not RunDir(path).is_run()):
        raise ConfigError(f"hydra.run.dir: {path} holds files ({first_few(foreign)}) and is not a robustnlu run "
                          "directory; a run needs a new or empty folder, or its own run directory"
                          + (" with resume=true" if outputs is None else ""))
    if found.existed:
        found.entries = frozenset(names)
        found.saved = {p: p.read_bytes() for p in [*sorted(path.glob(".hydra/*")), *(path / n for n in JOB_LOGS)]
                       if p.is_file()}
    elif found.existed is False:
        missing = [p for p in (path, *path.parents) if not p.exists()]
        try:
            path.mkdir(parents=True)
        except OSError as err:
            raise ConfigError(f"hydra.run.dir: cannot create {path}: {err.strerror or err}") from None
        found.created = missing  # deepest first
    if exclusive:
        try:
            acquire(path)
        except ConfigError:
            if found.existed is not None:  # a sweep job's folder that another process holds is left alone
                found.discard()
            raise
        found.locked = True
    CLAIMS[path] = found
    return found


def undo(path: str | Path, keep: bool) -> None:
    """After an error ended the invocation: ``keep`` (a resumable run, a refused resume) restores
    Hydra's overwritten files only; otherwise `Claim.discard`. Releases the lock. A path never
    claimed is treated as a job of unknown history (`Claim.discard` with ``existed=None``)."""
    found = CLAIMS.pop(key(path), None) or Claim(key(path), None)
    if keep:
        found.restore()
    else:
        found.discard()
    if found.locked:
        release(found.path)


def unclaim(path: str | Path, restore: bool = False) -> None:
    """The end of an invocation that succeeded: release the lock; ``restore``: it changed nothing
    (a finished run's stored result returned), so Hydra's overwritten files are put back."""
    found = CLAIMS.pop(key(path), None)
    if found is not None:
        if restore:
            found.restore()
        if found.locked:
            release(found.path)


@atexit.register
def release_all() -> None:
    """A process that exits (``sys.exit`` on a user error skips Hydra's end callbacks) frees its locks."""
    for path in list(CLAIMS):
        found = CLAIMS.pop(path)
        if found.locked:
            release(found.path)


class RunDirOwnership(Callback):
    """Hydra callback (``hydra.callbacks``): claims a single run's folder before Hydra creates it
    (`claim`), so that an error removes only what this invocation made; ``exclusive``: the lock
    and the refusal of folders that are not this app's runs (training, the SeqDrift and noise
    apps); ``outputs``: the files an app writes anew into its folder each launch (the SeqDrift
    app's split; none for the noise app). A sweep's job reads the same settings (`robustnlu.cli.run_or_exit`)."""

    def __init__(self, exclusive: bool = False, outputs: Sequence[str] | None = None):
        self.exclusive = exclusive
        self.outputs = None if outputs is None else list(outputs)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            claim(config.hydra.run.dir, self.exclusive, before_creation=True, outputs=self.outputs)
        except ConfigError as err:  # Hydra turns a callback's exceptions into warnings: exit here
            exit_with_error(err)

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        unclaim(config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Whether the sweep's folder can be made, tried here so that one that cannot is one error line,
        not the sweeper's traceback. What the try made is removed again: the sweeper makes the folder
        when it launches, and a sweep it refuses before that (a bad Optuna setting) leaves nothing.
        ``exclusive``: a folder with files that no sweep writes is refused (`foreign_sweep_files`):
        the sweeper would write its ``multirun.yaml`` over one of the user's and the jobs' folders
        among the user's files."""
        path = Path(config.hydra.sweep.dir)
        foreign = foreign_sweep_files(path) if self.exclusive else []
        if foreign:
            exit_with_error(ConfigError(f"hydra.sweep.dir: {path.absolute()} holds files ({first_few(foreign)}) and is "
                                        "not a sweep directory; a sweep needs a new or empty folder, or its own sweep "
                                        "directory"))
        made = [p for p in (path, *path.parents) if not p.exists()]  # the deepest first
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            exit_with_error(ConfigError(f"hydra.sweep.dir: cannot create {path}: {err.strerror or err}"))
        for folder in made:
            folder.rmdir()
