"""``hydra/sweeper=joblist`` (conf/hydra/sweeper/joblist.yaml): launch a given list of jobs, each
a list of task overrides, through the configured launcher (basic, or submitit: Slurm / local
processes). ``python -m robustnlu.sweep relaunch`` uses it to run only the jobs of a sweep that
have not finished, which a product of values (Hydra's basic sweeper) cannot express, and a study
(`robustnlu.studies.runner`) to launch its jobs, each into a folder of its own name.

- ``jobs_file``: a JSON file ``{"jobs": [[override, ...], ...]}``.
- The command line's own task overrides (e.g. ``resume=true``) are added to every job, replacing
  a job's override of the same key.
- ``max_batch_size``: jobs launched at a time (null: all in one batch; with hydra/launcher=slurm,
  one job array per batch), as for the basic sweeper; a failed job does not stop the later batches
  (`launch_batches`).
- It does not write ``multirun.yaml``: the sweep directory keeps the record of the sweep it
  relaunches (its job list).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.robustnlu_plugins.batches import launch_batches
from robustnlu.errors import ConfigError, exit_with_error


def read_jobs(path: str | Path) -> list[list[str]]:
    """The job list of ``jobs_file``; `ConfigError` naming the file if it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"hydra.sweeper.jobs_file: cannot read {path}: {err}") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list) or not all(isinstance(j, list) and all(isinstance(o, str) for o in j) for j in jobs):
        raise ConfigError(f"hydra.sweeper.jobs_file: {path} must hold {{\"jobs\": [[override, ...], ...]}}")
    return jobs


def with_overrides(job: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``job``'s overrides, those of a key that ``extra`` sets replaced by ``extra``'s."""
    parser = OverridesParser.create()
    keys = {o.key_or_group for o in parser.parse_overrides(list(extra))}
    kept = [o for o, parsed in zip(job, parser.parse_overrides(list(job))) if parsed.key_or_group not in keys]
    return kept + list(extra)


class JobListSweeper(Sweeper):
    """See the module docstring; the arguments are conf/hydra/sweeper/joblist.yaml's keys
    (``params``: accepted and unused, a config such as conf/grid/ may set it)."""

    def __init__(self, jobs_file: str | None, max_batch_size: int | None = None, params: Any = None) -> None:
        self.jobs_file = jobs_file
        self.max_batch_size = max_batch_size

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        try:
            if not self.jobs_file:
                raise ConfigError("hydra.sweeper.jobs_file: the list of jobs to launch is not given")
            size = self.max_batch_size
            if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
                raise ConfigError(f"hydra.sweeper.max_batch_size must be null or an integer >= 1, got {size!r}")
            jobs = [with_overrides(job, arguments) for job in read_jobs(self.jobs_file)]
        except ConfigError as err:
            exit_with_error(err)
        size = size or max(1, len(jobs))
        return launch_batches(self, [jobs[start:start + size] for start in range(0, len(jobs), size)])
