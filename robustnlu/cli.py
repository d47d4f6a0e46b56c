"""What every Hydra entry point shares: where the repository is, and how a user error ends a
run (one line on stderr, exit code 2, no traceback, no half-written run directory).

In a multirun (``-m``: the basic sweeper, the Optuna sweeper ``hparams_search=<method>``, the
submitit launchers) a user error fails that job only: the job prints the same line and removes
its run dir, then raises `JobFailed` (an ordinary exception) instead of exiting, so Hydra records
a failed job and the sweep goes on. The basic sweeper runs the batch's other jobs, then prints
``Error executing job with overrides: [...]`` and the line once more, and exits with status 1;
the Optuna sweeper records the trial as FAIL (``max_failure_rate``) and goes on with the study."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig

from robustnlu.errors import RobustNLUError

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[1]


class JobFailed(RobustNLUError, CompactHydraException):
    """A job of a multirun stopped on a user error. A `CompactHydraException`: when the sweep
    re-raises it at the end, Hydra prints its one-line message rather than a traceback.
    ``str(err)`` is ``"error: <message>"``; the original error is its ``__cause__`` (in-process)."""


def repo_root(cfg: DictConfig) -> Path:
    """Where relative data paths are resolved: ``paths.root`` or the repository root."""
    return Path(cfg.paths.root) if cfg.paths.get("root") else REPO_ROOT


def discard_run_dir(run_dir: Path) -> None:
    """Remove the run dir Hydra created for a run that failed before writing any result, so
    bad input leaves no half-written output behind (and the parents it leaves empty)."""
    if (run_dir / "results.json").exists():
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    cwd = Path.cwd().resolve()
    parent = run_dir.resolve().parent
    while parent != cwd and cwd in parent.parents and not any(parent.iterdir()):
        try:
            parent.rmdir()
        except OSError:  # a parallel job of the same sweep just wrote into it
            break
        parent = parent.parent


def run_or_exit(task: Callable[[DictConfig], T], cfg: DictConfig) -> T:
    """Run ``task(cfg)``; a `RobustNLUError` prints ``error: <message>`` and exits with 2, or in
    a multirun raises `JobFailed` so that only this job fails (a `SystemExit` would end the sweep)."""
    try:
        return task(cfg)
    except RobustNLUError as err:
        hydra_cfg = HydraConfig.get()
        discard_run_dir(Path(hydra_cfg.runtime.output_dir))
        message = f"error: {err}"
        print(message, file=sys.stderr, flush=True)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            raise JobFailed(message) from err
        sys.exit(2)


__all__ = ["REPO_ROOT", "JobFailed", "discard_run_dir", "repo_root", "run_or_exit"]
