"""User-facing errors: one line that names the file, the line and the problem."""

from __future__ import annotations

from pathlib import Path


class RobustNLUError(Exception):
    """An error caused by the user's input or configuration, reported without a traceback."""

    #: whether the run directory stays when the error ends a run: False for bad input (nothing
    #: half-written is left), True for a stop in mid-training whose run directory can be resumed
    keeps_run_dir = False


class DataError(RobustNLUError):
    """Malformed input data. ``str(err)`` is ``"<file>:<line>: <problem>"``."""

    def __init__(self, path: str | Path, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {problem}")


class ConfigError(RobustNLUError):
    """An invalid configuration value (names the config key)."""


class NonFiniteLoss(RobustNLUError):
    """A NaN or infinite per-example loss stopped training (``trainer.on_nonfinite=stop``); the
    run directory stays: its ``checkpoints/last.ckpt`` holds the state before the bad batch."""

    keeps_run_dir = True


class ResumeError(RobustNLUError):
    """``resume=true`` found a run directory it cannot continue (e.g. a ``last.ckpt`` that is not
    a readable checkpoint). The directory is the user's earlier run: it is never removed."""

    keeps_run_dir = True
