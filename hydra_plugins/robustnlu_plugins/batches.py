"""How robustnlu's sweepers launch their jobs: every job's config composed first, then batch after
batch, every batch whatever failed before it, then the first failure raised (Hydra prints it, exit
status 1). Hydra's basic sweeper composes each batch's configs just before launching it and raises
at the first batch with a failed job instead, so that one bad point of a sweep launched
``max_batch_size`` jobs at a time would leave every later job unlaunched, and a config that does not
compose would end the sweep after it had written ``multirun.yaml`` and run the batches before."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper

log = logging.getLogger(__name__)


def launch_batches(sweeper: Sweeper, batches: Sequence[Sequence[Sequence[str]]],
                   before: Callable[[], None] | None = None) -> list[Sequence[JobReturn]]:
    """Each batch of job overrides through ``sweeper.launcher``, the jobs numbered in a row, once
    every job's config composes (`Sweeper.validate_batch_is_legal`: Hydra's error for the first that
    does not, before anything is written); ``before``: what the sweeper writes then, before the
    first launch (the product sweeper's ``multirun.yaml``)."""
    for batch in batches:
        sweeper.validate_batch_is_legal(batch)
    if before is not None:
        before()
    returns: list[Sequence[JobReturn]] = []
    index = 0
    for batch in batches:
        returns.append(sweeper.launcher.launch(batch, initial_job_idx=index))
        index += len(batch)
    failed = [result for results in returns for result in results if result.status == JobStatus.FAILED]
    log.info(f"{index} job(s) launched, {len(failed)} failed")
    if failed:
        _ = failed[0].return_value  # Hydra prints the job's overrides and raises its error
    return returns
