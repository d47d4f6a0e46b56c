"""`LossProgressBar`: the console shows the training loss without a host read of it every step."""

from __future__ import annotations

import pytorch_lightning as pl

from integration_helpers import FAST, compose_config, jsonl_overrides, write_snips_sample_jsonl
from robustnlu.module import STEP_LOSS
from robustnlu.progress import LossProgressBar
from robustnlu.train import build_trainer, prepare


class ShownAfterEachStep(pl.Callback):
    """After each training step: the loss the bar shows and the step's logged loss; after
    ``slow_down_after`` steps the bar's ``refresh_s`` becomes an hour."""

    def __init__(self, bar: LossProgressBar, slow_down_after: int):
        self.bar, self.slow_down_after, self.rows = bar, slow_down_after, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        shown = self.bar.get_metrics(trainer, pl_module).get(STEP_LOSS)
        self.rows.append((shown, float(trainer.callback_metrics[STEP_LOSS]), float(outputs["loss"])))
        if batch_idx + 1 == self.slow_down_after:  # from the next step on (the bar reads before this callback)
            self.bar.refresh_s = 3600.0


def test_the_bar_shows_the_step_loss_read_once_per_refresh(tmp_path):
    """``refresh_s=0`` (steps 1-2): every step's own loss, as Lightning's bar shows a prog_bar
    metric; then an hour (steps 3-4): step 2's loss, read no more. The loss is logged without
    ``prog_bar``, so Lightning itself reads nothing for the bar."""
    sample = write_snips_sample_jsonl(tmp_path / "data")
    quiet = [o for o in FAST if "progress_bar" not in o]
    cfg = compose_config([*quiet, *jsonl_overrides(sample), "trainer.max_epochs=1", "+trainer.limit_train_batches=4",
                          "+trainer.limit_val_batches=1", "callbacks.progress_bar.refresh_s=0"], tmp_path / "run")
    parts = prepare(cfg)
    trainer = build_trainer(cfg)
    (bar,) = [c for c in trainer.callbacks if isinstance(c, LossProgressBar)]
    probe = ShownAfterEachStep(bar, slow_down_after=2)
    trainer.callbacks.append(probe)
    trainer.fit(parts.module, datamodule=parts.datamodule)
    assert trainer.progress_bar_metrics == {}  # nothing logged with prog_bar=True
    shown, logged, returned = zip(*probe.rows)
    assert len(shown) == 4 and logged == returned
    assert list(shown) == [logged[0], logged[1], logged[1], logged[1]]
    assert len(set(logged)) == 4  # four different losses: a stale value would show
