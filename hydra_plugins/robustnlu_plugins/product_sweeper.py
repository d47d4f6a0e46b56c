"""``hydra/sweeper=product`` (conf/hydra/sweeper/product.yaml), robustnlu's sweeper when no search
is chosen (conf/hparams_search/none.yaml): Hydra's basic sweeper, every combination of the swept
values (``hydra.sweeper.params`` first, then the command line's), ``max_batch_size`` jobs at a
time and ``multirun.yaml`` written into the sweep directory as Hydra writes it, except that:

- a failed job does not stop the later batches;
- a sweep one of whose jobs' configs does not compose (an unknown key, a group option that does not
  exist) is refused before it writes anything: no sweep directory made, no ``multirun.yaml``
  written or replaced (`launch_batches`);
- the ``multirun.yaml`` of an earlier sweep into the same folder is kept where this sweep does not
  hold all its jobs (`robustnlu.sweep_jobs.keep_replaced`), so that ``python -m robustnlu.sweep
  status`` and ``relaunch`` list every job asked for in the folder."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from omegaconf import OmegaConf

from hydra_plugins.robustnlu_plugins.batches import launch_batches
from robustnlu.io import atomic_write_text
from robustnlu.sweep_jobs import EARLIER_DIR, MULTIRUN_FILE, keep_replaced

log = logging.getLogger(__name__)


class ProductSweeper(BasicSweeper):
    """See the module docstring; the arguments are Hydra's basic sweeper's."""

    def sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        self.overrides = self.split_arguments(parser.parse_overrides([*self._parse_config(), *arguments]),
                                              self.max_batch_size)
        batches = []
        while not self.is_done():
            batches.append(self.get_job_batch())
        return launch_batches(self, batches, before=functools.partial(self.record, batches))

    def record(self, batches: Sequence[Sequence[Sequence[str]]]) -> None:
        """The sweep directory, made, and its ``multirun.yaml``, the one there before kept if this
        sweep of ``batches`` does not hold all its jobs."""
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        kept = keep_replaced(sweep_dir, [job for batch in batches for job in batch])
        if kept is not None:
            log.info(f"{sweep_dir}: the {MULTIRUN_FILE} of the earlier sweep into it kept as {EARLIER_DIR}/{kept.name} "
                     "(python -m robustnlu.sweep status and relaunch list its jobs too)")
        atomic_write_text(sweep_dir / MULTIRUN_FILE, OmegaConf.to_yaml(self.config))
