"""The console progress bar of a training run: Lightning's rich bar with the training loss, read
from the device at most once every ``refresh_s`` seconds instead of once every step.

A value logged with ``self.log(..., prog_bar=True)`` is read on the host by Lightning after every
training step (``_ResultCollection.metrics`` makes it a number for the bar), whether a bar is shown
or not: on a GPU the host then waits for the step's kernels once a step, which the next step's
launches would otherwise overlap. `SLUModule.training_step` logs its loss without ``prog_bar`` and
`LossProgressBar` shows the latest step's value, read when ``refresh_s`` has passed since the last
read (``refresh_s=0``: every step, as Lightning's own bar).
"""

from __future__ import annotations

import math
import time
from typing import Any

from pytorch_lightning.callbacks import RichProgressBar

from robustnlu.module import STEP_LOSS


class LossProgressBar(RichProgressBar):
    """`RichProgressBar` (its arguments are ``**kwargs``) that adds `STEP_LOSS` to the metrics shown."""

    def __init__(self, refresh_s: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.refresh_s = refresh_s
        self._loss: dict[str, float] = {}
        self._read_at = -math.inf

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        now = time.monotonic()
        loss = trainer.callback_metrics.get(STEP_LOSS)
        if loss is not None and now - self._read_at >= self.refresh_s:
            self._loss, self._read_at = {STEP_LOSS: float(loss)}, now
        return {**super().get_metrics(trainer, pl_module), **self._loss}
