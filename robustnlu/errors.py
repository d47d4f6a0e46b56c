"""User-facing errors: one line that names the file, the line and the problem."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn


class RobustNLUError(Exception):
    """An error caused by the user's input or configuration, reported without a traceback."""


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


def exit_with_error(err: Exception | str) -> NoReturn:
    """End a command on a user error: ``error: <err>`` on stderr (one line), exit status 2."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    sys.exit(2)
