"""What every Hydra entry point shares: where the repository is, and how a user error ends a
run (one line on stderr, exit code 2, no traceback, no half-written run directory)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from robustnlu.errors import RobustNLUError

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[1]


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
        parent.rmdir()
        parent = parent.parent


def run_or_exit(task: Callable[[DictConfig], T], cfg: DictConfig) -> T:
    """Run ``task(cfg)``; a `RobustNLUError` prints ``error: <message>`` and exits with 2."""
    try:
        return task(cfg)
    except RobustNLUError as err:
        discard_run_dir(Path(HydraConfig.get().runtime.output_dir))
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


__all__ = ["REPO_ROOT", "discard_run_dir", "repo_root", "run_or_exit"]
