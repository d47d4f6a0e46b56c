"""Resuming a killed, timed-out or preempted run where it stopped (``resume=true``).

`LastCheckpoint` writes ``<run dir>/checkpoints/last.ckpt`` at the end of every epoch and, in
mid-epoch, every ``every_n_train_steps`` optimiser steps or ``every_minutes`` minutes. With
Lightning's own state (weights, optimiser and scheduler, loop progress, the best checkpoint and
early stopping) it holds what an exact continuation needs besides: the data position (epoch and
batches of it already trained, `SLUDataModule.state_dict`), the torch RNG states and the
objective's running state and own optimisers (`SLUModule.on_save_checkpoint`). A run resumed
from it trains on the batches the uninterrupted run had left, with the same random draws, and
ends with the same result (tests/test_kill_and_resume.py kills a run with SIGKILL to check that).

`resume_point` decides what a run with ``resume=true`` does in its run directory: return the
stored result of a run that finished, continue from ``last.ckpt``, or start (nothing there yet).
Either of the first two only with the settings the run was started with, and a new run never
over an earlier one: `robustnlu.rundir_check` refuses both from the folder's files, before
training's imports. `RelocatableModelCheckpoint` keeps the model selection of a run directory that
was moved between the kill and the resume.
`ResumableCSVLogger` keeps the per-epoch log (``csv/metrics.csv``) of the steps the checkpoint
holds, so a resumed run's log reads like the uninterrupted run's (Lightning's `CSVLogger`
deletes the file when it opens it).
A Slurm job requeued after a timeout or preemption (``SLURM_RESTART_COUNT`` > 0) resumes
without being asked (`robustnlu.rundir_check.resumes`).
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_fabric.loggers.logger import rank_zero_experiment
from pytorch_lightning.callbacks import Checkpoint, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger, WandbLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from robustnlu.checkpoint import read_checkpoint
from robustnlu.errors import DataError, ResumeError
from robustnlu.io import atomic_write_json, atomic_write_text
from robustnlu.rundir import LAST_CHECKPOINT, RunDir
from robustnlu.rundir_check import finished, resumes


class LastCheckpoint(Checkpoint):
    """``last.ckpt`` for resuming: after each epoch's validation and mid-epoch when due.

    A `Checkpoint` subclass, so Lightning calls it after the other callbacks (the best-model
    checkpoint and early stopping have updated their state for the epoch when it is saved).

    Its state in a checkpoint is the run's ``fit_time_s``: the seconds of ``trainer.fit`` up to
    the save, over every session of the run (a resumed run adds its own to the one it resumed
    from), so that a resumed run's record can say how long the sessions before took
    (`ResumePoint.fit_time_s`)."""

    def __init__(self, dirpath: str, every_n_train_steps: int | None = None, every_minutes: float | None = 10.0):
        if not every_n_train_steps and not every_minutes:
            raise ValueError("LastCheckpoint needs every_n_train_steps or every_minutes (mid-epoch saves)")
        self.path = Path(dirpath) / LAST_CHECKPOINT.name
        self.every_n_train_steps = every_n_train_steps
        self.every_minutes = every_minutes
        self.saved_at = time.monotonic()
        self.fit_started = time.monotonic()  # this session's trainer.fit (`setup`)
        self.fit_time_before = 0.0  # the sessions' before the resume, from last.ckpt (`load_state_dict`)

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            self.fit_started = time.monotonic()

    def state_dict(self) -> dict[str, float]:
        return {"fit_time_s": round(self.fit_time_before + time.monotonic() - self.fit_started, 1)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.fit_time_before = float(state_dict.get("fit_time_s", 0.0))

    def on_train_start(self, trainer, pl_module) -> None:
        self.saved_at = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx + 1 >= trainer.num_training_batches:
            return  # the epoch's last batch: the end-of-epoch checkpoint follows its validation
        due = bool(self.every_n_train_steps) and trainer.global_step % self.every_n_train_steps == 0
        due = due or (bool(self.every_minutes) and time.monotonic() - self.saved_at >= 60 * self.every_minutes)
        if trainer.strategy.broadcast(due):  # every process must take part in a save (rank 0's clock decides)
            self.save(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.save(trainer)

    def save(self, trainer) -> None:
        trainer.save_checkpoint(self.path)  # atomic (temporary file + rename): a kill leaves the previous one
        self.saved_at = time.monotonic()


@dataclass(frozen=True)
class ResumePoint:
    """What a run finds in its run directory: ``results`` of a run that finished there, or the
    ``checkpoint`` to continue from (with its global step and epoch), or neither."""

    results: dict[str, Any] | None = None
    checkpoint: Path | None = None
    global_step: int = 0
    epoch: int = 0
    #: the ``trainer.fit`` seconds of the sessions before, up to the checkpoint (`LastCheckpoint`);
    #: None for a checkpoint that does not record them
    fit_time_s: float | None = None

    def record(self) -> dict[str, Any] | None:
        """For results.json / status.json: where this run continued from (and, where its
        checkpoint records it, the fit time before it)."""
        if self.checkpoint is None:
            return None
        where = {"checkpoint": str(LAST_CHECKPOINT), "global_step": self.global_step, "epoch": self.epoch}
        return where if self.fit_time_s is None else {**where, "fit_time_s": self.fit_time_s}


class ResumableCSVLogger(CSVLogger):
    """Lightning's `CSVLogger` that continues a resumed run's ``metrics.csv``: it keeps the rows
    logged before ``resume_step`` (the global step of the checkpoint the run resumes from: the
    rows of the steps the resumed run does not train again) and appends to them. With
    ``resume_step=0`` (a run that starts) it starts a new file, as Lightning's does.

    Lightning's logger deletes the file when it opens it, so a run resumed in its third epoch
    logged only its last epochs, and the curve of the first two was lost."""

    def __init__(self, *args: Any, resume_step: int = 0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = ContinuedExperimentWriter(self.log_dir, self.resume_step)
        return self._experiment


class ContinuedExperimentWriter(ExperimentWriter):
    """The writer of `ResumableCSVLogger`: ``metrics.csv`` cut to the rows before
    ``keep_before_step``, which later rows are appended to (under the same header, which
    Lightning's writer widens when new metrics appear)."""

    def __init__(self, log_dir: str, keep_before_step: int):
        path = Path(log_dir) / self.NAME_METRICS_FILE
        header, rows = [], []
        if keep_before_step > 0 and path.is_file():
            with path.open(newline="") as file:
                reader = csv.DictReader(file)
                header = list(reader.fieldnames or [])
                rows = [row for row in reader if int(row["step"]) < keep_before_step]
        if rows:
            text = io.StringIO(newline="")
            writer = csv.DictWriter(text, fieldnames=header)  # the dialect of Lightning's writer
            writer.writeheader()
            writer.writerows(rows)
            atomic_write_text(path, text.getvalue())
        else:
            path.unlink(missing_ok=True)
        super().__init__(log_dir)
        self.metrics_keys = header

    def _check_log_dir_exists(self) -> None:
        """Lightning's deletes ``metrics.csv`` and warns that it does; `__init__` has decided."""


def resume_point(out_dir: Path, resume: bool) -> ResumePoint:
    """Where a run in ``out_dir`` starts: from scratch unless ``resume`` (or a Slurm requeue); a
    folder that `robustnlu.rundir_check.check_run_dir` has let the run into."""
    run = RunDir(out_dir)
    if not resumes(resume):
        return ResumePoint()
    if finished(run):
        return ResumePoint(results=run.results())
    last = run.last_checkpoint
    if not last.is_file():
        return ResumePoint()
    try:
        meta = read_checkpoint(last, mmap=True)
    except DataError as err:
        raise ResumeError(f"resume=true: {err} (move it away to start the run afresh)") from None
    clock = (meta.get("callbacks") or {}).get(LastCheckpoint.__qualname__) or {}
    return ResumePoint(checkpoint=last, global_step=int(meta["global_step"]), epoch=int(meta["epoch"]),
                       fit_time_s=clock.get("fit_time_s"))


def discard_last_checkpoint(out_dir: Path) -> None:
    """A finished run's ``last.ckpt`` (called once status.json says ``finished``): ``resume=true``
    returns the stored result of a finished run and never reads it; the weights-only best
    checkpoint is what validate, test, predict and evaluate load (``keep_last_checkpoint=true``
    keeps it)."""
    RunDir(out_dir).last_checkpoint.unlink(missing_ok=True)


def record_wandb_run(out_dir: Path, trainer) -> None:
    """``<run dir>/wandb.json``: the id, name and folder (``dir``) of the W&B run this run logs
    into (its files may live outside the run directory: a sweep's runs share ``<sweep
    dir>/wandb/``) and the run directory ``out_dir`` (``run_dir``), which a resumed run continues:
    the same W&B run in the same folder, found again relative to ``run_dir`` where the run
    directory has moved (`robustnlu.train.logger_options`). Written by the rank-0 process when
    the run starts, with ``logger=wandb`` only."""
    for lg in trainer.loggers:
        if isinstance(lg, WandbLogger) and trainer.is_global_zero:
            run = lg.experiment
            atomic_write_json(RunDir(out_dir).wandb_file, {"id": run.id, "name": run.name,
                                                           "dir": str(Path(run.dir).parent), "run_dir": str(out_dir)})


class RelocatableModelCheckpoint(ModelCheckpoint):
    """Lightning's `ModelCheckpoint`, which also restores the best model's score and path when the
    run directory was moved since the checkpoint was saved (Lightning's restores only the stale
    path then, so the first epoch after the resume became "best" whatever its score): the paths
    under the checkpoint's folder are read as under the new one. Its state is stored under
    Lightning's key (`state_key`), so that a checkpoint saved with either class resumes into the
    other with its best score."""

    def _generate_state_key(self, **kwargs: Any) -> str:
        return f"{ModelCheckpoint.__qualname__}{kwargs!r}"

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        before, now = state_dict.get("dirpath"), self.dirpath
        if before and now and before != now:
            def moved(path: Any) -> Any:
                return now + path[len(before):] if isinstance(path, str) and path.startswith(before) else path

            state_dict = {**state_dict, "dirpath": now,
                          **{k: moved(state_dict.get(k)) for k in ("best_model_path", "kth_best_model_path",
                                                                   "last_model_path") if k in state_dict},
                          "best_k_models": {moved(k): v for k, v in (state_dict.get("best_k_models") or {}).items()}}
        super().load_state_dict(state_dict)
