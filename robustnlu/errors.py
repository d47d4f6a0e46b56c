"""User-facing errors: one line that names the file, the line and the problem, and how every
entry point reports them: ``error: <message>`` on stderr, exit status 2 (`report`); a command
line argparse refuses included (`CommandLineParser`)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, ParamSpec

P = ParamSpec("P")
USER_ERROR = 2  # the exit status of every user error


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


def first_line(err: BaseException) -> str:
    """An exception on one line: its class and its message's first line (the class alone for an
    exception without a message, e.g. Lightning's SIGTERMException)."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def yaml_problem(err: Exception) -> tuple[str | None, int | None, str]:
    """A YAML file's parse error on one line: the file PyYAML names and the 1-based line of the
    problem (None, None without a mark), and the problem (the whole message, its whitespace
    collapsed, where it states none)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    return (mark.name, mark.line + 1, problem) if mark else (None, None, problem)


def report(err: RobustNLUError | str) -> int:
    """Print ``error: <message>`` (one line) on stderr; returns the exit status of a user error."""
    print(f"error: {err}", file=sys.stderr, flush=True)
    return USER_ERROR


def entry_point(main: Callable[P, int]) -> Callable[P, int]:
    """For the argparse entry points (``sys.exit(main())``): ``main`` returns the exit status; a
    `RobustNLUError` raised anywhere in it is reported (`report`) and the status is 2; output into
    a pipe whose reader has stopped (``python -m robustnlu.sweep status DIR | head``) ends it
    quietly with status 1 (Python's documented recipe for SIGPIPE). The Hydra apps have
    `robustnlu.cli.run_or_exit` (which also discards the run directory)."""

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            status = main(*args, **kwargs)
            sys.stdout.flush()  # here rather than at exit, so that a closed pipe is caught below
            return status
        except RobustNLUError as err:
            return report(err)
        except BrokenPipeError:  # what reads the output stopped (`... | head`): no traceback, as for cat or ls
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush writes nowhere
            return 1

    return run


def exit_with_error(err: RobustNLUError | str) -> NoReturn:
    """End the process on a user error where no entry point can return a status (a Hydra
    callback, the sweeper): `report`, then exit with status 2."""
    sys.exit(report(err))


class CommandLineParser(argparse.ArgumentParser):
    """The argparse parser of every entry point: a usage error (an unknown option, a missing or
    invalid argument, a ``parser.error`` of the command's own) is one line, ``error: <prog>:
    <argparse's message> (see <prog> --help)``, exit status 2, where argparse prints its usage
    and then the error. ``--help`` prints the full help as ever. Subparsers are of this class too
    (``add_subparsers`` makes them of the parser's own class unless told otherwise)."""

    def error(self, message: str) -> NoReturn:
        exit_with_error(f"{self.prog}: {message} (see {self.prog} --help)")


class NonFiniteLoss(RobustNLUError):
    """A NaN or infinite per-example loss stopped training (``trainer.on_nonfinite=stop``); the
    run directory stays: its ``checkpoints/last.ckpt`` holds the state before the bad batch."""

    keeps_run_dir = True


class ResumeError(RobustNLUError):
    """A run directory holds an earlier run this invocation may not continue (with ``resume=true``:
    e.g. a ``last.ckpt`` that is not a readable checkpoint, other settings) or start over (without
    it). The directory is the user's earlier run: it is never removed."""

    keeps_run_dir = True


class RunWriteError(RobustNLUError):
    """A run could not write its files (a full disk, a quota, a read-only or forbidden folder).
    The run directory stays, with ``status.json`` saying failed and why: ``resume=true`` continues
    from its last complete checkpoint once there is room."""

    keeps_run_dir = True
