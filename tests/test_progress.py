"""`LossProgressBar`: the console shows the training loss without a host read of it every step."""

from __future__ import annotations

import pytorch_lightning as pl
import pytest

from integration_helpers import FAST, compose_config, jsonl_overrides, write_snips_sample_jsonl
from robustnlu.module import STEP_LOSS
from robustnlu.progress import LossProgressBar
from robustnlu.train import build_trainer, prepare


class ShownAfterEachStep(pl.Callback):
    """After each training step: the loss the bar shows and the step's logged loss."""

    def __init__(self, bar: LossProgressBar):
        self.bar, self.rows = bar, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        shown = self.bar.get_metrics(trainer, pl_module).get(STEP_LOSS)
        self.rows.append((shown, float(trainer.callback_metrics[STEP_LOSS]), float(outputs["loss"])))


@pytest.mark.parametrize("refresh_s", [0.0, 3600.0])
def test_the_bar_shows_the_step_loss_read_once_per_refresh(tmp_path, refresh_s):
    """``refresh_s=0``: every step's own loss, as Lightning's bar shows a prog_bar metric; an hour:
    the first step's loss all epoch long (read once). The loss is logged without ``prog_bar``, so
    Lightning itself reads nothing for the bar."""
    sample = write_snips_sample_jsonl(tmp_path / "data")
    quiet = [o for o in FAST if "progress_bar" not in o]
    cfg = compose_config([*quiet, *jsonl_overrides(sample), "trainer.max_epochs=1", "+trainer.limit_train_batches=4",
                          "+trainer.limit_val_batches=1", f"callbacks.progress_bar.refresh_s={refresh_s}"], tmp_path / "run")
    parts = prepare(cfg)
    trainer = build_trainer(cfg)
    (bar,) = [c for c in trainer.callbacks if isinstance(c, LossProgressBar)]
    probe = ShownAfterEachStep(bar)
    trainer.callbacks.append(probe)
    trainer.fit(parts.module, datamodule=parts.datamodule)
    assert trainer.progress_bar_metrics == {}  # nothing logged with prog_bar=True
    shown, logged, returned = zip(*probe.rows)
    assert len(shown) == 4 and logged == returned
    assert list(shown) == (list(logged) if refresh_s == 0 else [logged[0]] * 4)
    assert len(set(logged)) == 4  # four different losses: the two settings are told apart
