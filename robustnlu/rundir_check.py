"""What a training run may do in its run directory, read from the folder's files alone: a new run
never writes over an earlier one (`refuse_earlier_run`), and a resumed run (``resume=true``,
`robustnlu.resume`) continues only with the settings it was started with (`check_settings`).

`check_run_dir` makes both checks. It needs neither torch nor Lightning, so ``python -m
robustnlu`` makes it before it imports the training code (`robustnlu.__main__.train`): a refused
folder is one ``error:`` line at once, not after seconds of imports. `robustnlu.train.run` makes
it too (a run started in-process).

A resumed run that trained its first epochs with one learning rate or method and the rest with
another would record settings no run trained with, so any difference in what determines the
result is refused, unless named in ``+resume_override=[key, ...]`` (then recorded in
results.json); `robustnlu.sweep_jobs.NEUTRAL_SETTINGS` may always differ.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from robustnlu.errors import DataError, ResumeError
from robustnlu.rundir import LAST_CHECKPOINT, RunDir
from robustnlu.rundir_claim import secondary_process
from robustnlu.sweep_jobs import changed_settings, shown_setting, under

def requeued() -> bool:
    """A Slurm job that was requeued (timeout, preemption, ``scontrol requeue``)."""
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0


def resumes(resume: bool) -> bool:
    """Whether a run continues what its folder holds: asked (``resume=true``) or a Slurm requeue
    (submitit requeues a job with the same overrides and run directory)."""
    return resume or requeued()


def finished(run: RunDir) -> bool:
    """The folder holds a finished run: its results.json, and status.json says finished (a run
    killed while writing its results has not)."""
    return run.finished() and (run.status() or {}).get("state") == "finished"


def check_run_dir(cfg: DictConfig) -> dict[str, dict[str, Any]] | None:
    """Refuse (`ResumeError`) a run in ``cfg.paths.output_dir`` that its folder does not allow: a
    new run over an earlier one (`refuse_earlier_run`), a resumed one with other settings than the
    run there was started with (`check_settings`). Returns what `check_settings` returns for a run
    that continues a finished run or a checkpoint, None for one that starts."""
    out_dir = Path(cfg.paths.output_dir)
    run = RunDir(out_dir)
    if not resumes(cfg.get("resume", False)):
        refuse_earlier_run(run)
        return None
    if not (finished(run) or run.last_checkpoint.is_file()):
        return None
    return check_settings(out_dir, OmegaConf.to_container(cfg, resolve=True), list(cfg.get("resume_override") or []))


def refuse_earlier_run(run: RunDir) -> None:
    """A new run (no ``resume=true``) never writes over an earlier one: a folder holding a
    finished run's ``results.json`` or an unfinished run's checkpoints is refused with
    `ResumeError` (the folder is kept as it is). A folder with only a failed job's record, or a
    run killed before its first checkpoint, has nothing to lose and is started in. Lightning's
    DDP processes after the first re-run the command once the first has started: not asked."""
    if secondary_process():
        return
    checkpoints = sorted(run.last_checkpoint.parent.glob("*.ckpt"))
    if run.finished():
        found = f"a finished run ({run.results_file.name}); resume=true returns its result"
    elif checkpoints:
        shown = LAST_CHECKPOINT if run.last_checkpoint in checkpoints else checkpoints[-1].relative_to(run.path)
        found = f"an unfinished run ({shown}); resume=true continues it"
    else:
        return
    raise ResumeError(f"hydra.run.dir: {run.path} holds {found}; a new run needs a new or empty folder")


def check_settings(out_dir: Path, current: dict[str, Any], allowed: list[str]) -> dict[str, dict[str, Any]]:
    """Refuse (`ResumeError`, one line listing the keys) to continue or return the run in
    ``out_dir`` with settings other than those it was started with (its ``config.yaml``), except
    the keys under ``allowed`` (``+resume_override``); returns those that changed,
    ``{key: {"stored": ..., "now": ...}}``, for results.json."""
    run = RunDir(out_dir)
    if not run.config_file.is_file():
        raise ResumeError(f"resume=true: {out_dir} has no {run.config_file.name} to tell which settings its run was "
                          "started with; it cannot be continued (start it afresh in a new folder)")
    try:
        stored = OmegaConf.to_container(run.config(), resolve=False)
    except DataError as err:
        raise ResumeError(f"resume=true: {err}; it cannot be continued") from None
    changed = changed_settings(stored, current)
    refused = {k: v for k, v in changed.items() if not under(k, allowed)}
    if refused:
        shown = "; ".join(f"{k}: {shown_setting(a)} -> {shown_setting(b)}" for k, (a, b) in list(refused.items())[:6])
        more = f" and {len(refused) - 6} more" if len(refused) > 6 else ""
        raise ResumeError(f"resume=true: {out_dir} was started with other settings ({shown}{more}); resume with its "
                          "settings (its config.yaml), or allow a key to change with +resume_override=[key,...]")
    return {k: {"stored": v[0], "now": v[1]} for k, v in changed.items()}
