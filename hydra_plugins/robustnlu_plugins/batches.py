"""How robustnlu's sweepers launch their jobs: batch after batch, every batch whatever failed
before it, then the first failure raised (Hydra prints it, exit status 1). Hydra's basic sweeper
raises at the first batch with a failed job instead, so that one bad point of a sweep launched
``max_batch_size`` jobs at a time would leave every later job unlaunched."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper

log = logging.getLogger(__name__)


def launch_batches(sweeper: Sweeper, batches: Sequence[Sequence[Sequence[str]]]) -> list[Sequence[JobReturn]]:
    """Each batch of job overrides through ``sweeper.launcher``, the jobs numbered in a row."""
    returns: list[Sequence[JobReturn]] = []
    index = 0
    for batch in batches:
        sweeper.validate_batch_is_legal(batch)
        returns.append(sweeper.launcher.launch(batch, initial_job_idx=index))
        index += len(batch)
    failed = [result for results in returns for result in results if result.status == JobStatus.FAILED]
    log.info(f"{index} job(s) launched, {len(failed)} failed")
    if failed:
        _ = failed[0].return_value  # Hydra prints the job's overrides and raises its error
    return returns
