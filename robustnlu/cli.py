"""What every Hydra entry point shares: where the repository is, and how a user error ends a
run (one line on stderr, exit code 2, no traceback, no half-written run directory; a run stopped
in mid-training by a non-finite loss keeps its resumable run directory, `NonFiniteLoss`).

In a multirun (``-m``: the basic sweeper, the Optuna sweeper ``hparams_search=<method>``, the
submitit launchers) a user error fails that job only: the job prints the same line and removes
its run dir, then raises `JobFailed` (an ordinary exception) instead of exiting, so Hydra records
a failed job and the sweep goes on. The basic sweeper runs the batch's other jobs, then prints
``Error executing job with overrides: [...]`` and the line once more, and exits with status 1;
the Optuna sweeper records the trial as FAIL (``max_failure_rate``) and goes on with the study."""

from __future__ import annotations

import os
import shutil
import subprocess
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
        if not err.keeps_run_dir:
            discard_run_dir(Path(hydra_cfg.runtime.output_dir))
        message = f"error: {err}"
        print(message, file=sys.stderr, flush=True)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            raise JobFailed(message) from err
        sys.exit(2)


def compose_run_config(overrides: list[str]) -> DictConfig:
    """The training config ``python -m robustnlu <overrides>`` would run, with its ``hydra``
    node (sweep dir, sweeper settings): for drivers that launch multiruns (robustnlu.hpo,
    robustnlu.efficiency) and must know where they will write."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def run_multirun(args: list[str]) -> None:
    """``python -m robustnlu -m <args>`` in a subprocess (printed first); a failure exits with its status."""
    cmd = [sys.executable, "-m", "robustnlu", "-m", *args]
    print("+ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, env=os.environ.copy()).returncode
    if rc != 0:
        raise SystemExit(rc)


__all__ = ["REPO_ROOT", "JobFailed", "compose_run_config", "discard_run_dir", "repo_root", "run_multirun", "run_or_exit"]
