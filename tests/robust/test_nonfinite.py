"""A NaN or inf per-example loss never enters an objective's state (trainer.on_nonfinite,
`SLUModule.training_step`): for every method in conf/method/, a training batch whose first
utterance has an infinite intent loss leaves the objective's buffers and networks, its own
optimisers and the model exactly as they were (``skip``), or stops the run (``stop``)."""

from __future__ import annotations

import copy
import json

import pytest
import pytorch_lightning as pl
import torch

from integration_helpers import FAST, SMALL_DRIFT, NonFiniteLossAtStep, compose_config, jsonl_overrides, \
    method_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.errors import ConfigError, NonFiniteLoss
from robustnlu.train import build_trainer, prepare
from tests.robust.test_methods_end_to_end import METHODS

BAD_STEP = 1


def snapshot(trainer, module) -> dict:
    """Everything a training step may change: the objective's state dict (buffers and networks),
    its own optimisers, the model's weights and its optimiser's moments (not its learning rate:
    the schedule counts a dropped batch like any other)."""
    return copy.deepcopy({"objective": module.objective.state_dict(), "own": module.objective.optimizer_states(),
                          "model": module.model.state_dict(), "optimizer": trainer.optimizers[0].state_dict()["state"]})


def assert_same(a, b, path="") -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}/{i}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    else:
        assert a == b, path


class StateAroundStep(pl.Callback):
    """Snapshots before and after the training batch that follows ``step`` optimiser steps."""

    def __init__(self, step: int):
        self.step = step
        self.before = self.after = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.step:
            self.before = snapshot(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == self.step:
            self.after = snapshot(trainer, pl_module)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_snips_sample_jsonl(tmp_path_factory.mktemp("snips"), n_train=600, n_eval=60)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One ``paths.cache_dir`` for the module: the drift split of `sample` is computed once."""
    return tmp_path_factory.mktemp("cache")


def fit(method, sample, cache, out, on_nonfinite, watch_step):
    overrides = [*FAST, *jsonl_overrides(sample), *SMALL_DRIFT, *method_overrides(method), "trainer.max_epochs=1",
                 "data.batch_size=64", "+trainer.limit_train_batches=4", "+trainer.limit_val_batches=1",
                 f"trainer.on_nonfinite={on_nonfinite}", f"paths.cache_dir={cache}"]
    cfg = compose_config(overrides, out)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    parts = prepare(cfg)
    watch = StateAroundStep(watch_step)
    trainer = build_trainer(cfg)
    trainer.callbacks += [NonFiniteLossAtStep(BAD_STEP), watch]
    return parts.module, trainer, watch, lambda: trainer.fit(parts.module, datamodule=parts.datamodule)


@pytest.mark.parametrize("method", METHODS)
def test_a_skipped_batch_changes_no_state(method, sample, cache, tmp_path):
    module, trainer, watch, run_fit = fit(method, sample, cache, tmp_path / "run", "skip", BAD_STEP)
    with pytest.warns(UserWarning, match=r"non-finite loss in training batch 1 of epoch 0 after 1 optimizer steps"):
        run_fit()
    assert module.nonfinite_skips == 1
    assert watch.before is not None and watch.after is not None
    assert_same(watch.before, watch.after)
    # the batches after it train: the model moved
    assert not torch.equal(module.model.state_dict()["intent_classifier.linear.bias"],
                           watch.after["model"]["intent_classifier.linear.bias"])


@pytest.mark.parametrize("method", ["group_dro", "topic_cvar"])
def test_the_same_batch_without_the_guard_would_corrupt_the_state(method, sample, cache, tmp_path):
    """The guard is what protects the state: the objective fed the bad batch's losses directly
    turns its group weights / averages non-finite (0·inf in the membership products)."""
    module, trainer, watch, run_fit = fit(method, sample, cache, tmp_path / "run", "stop", BAD_STEP)
    captured = {}

    class Capture(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == BAD_STEP:
                output = pl_module.model(batch)
                captured["losses"] = pl_module.model.task_losses(output, batch)
    trainer.callbacks.insert(-1, Capture())  # after NonFiniteLossAtStep, which installs the hook
    with pytest.raises(NonFiniteLoss):
        run_fit()
    assert not torch.isfinite(captured["losses"].intent).all()
    module.objective(captured["losses"])
    state = torch.cat([b.flatten().double() for b in module.objective.buffers() if b is not None and b.is_floating_point()])
    assert not torch.isfinite(state).all()


@pytest.mark.parametrize("method", ["group_dro", "pdro"])
def test_stop_raises_before_the_objective_sees_the_batch(method, sample, cache, tmp_path):
    module, trainer, watch, run_fit = fit(method, sample, cache, tmp_path / "run", "stop", BAD_STEP)
    with pytest.raises(NonFiniteLoss, match=r"training batch 1 of epoch 0 after 1 optimizer steps: (s-\w+-\d+) "
                                            r"\(slot [0-9.e+-]+, intent inf\); batch uids: \1( s-\w+-\d+){63};"):
        run_fit()
    assert watch.before is not None
    assert_same(watch.before["objective"], module.objective.state_dict())
    assert_same(watch.before["own"], module.objective.optimizer_states())
    assert module.nonfinite_skips == 0


def test_an_unknown_policy_is_a_config_error(sample, cache, tmp_path):
    with pytest.raises(ConfigError, match=r"^trainer.on_nonfinite: expected one of stop, skip \(got ignore\)$"):
        fit("erm", sample, cache, tmp_path / "run", "ignore", BAD_STEP)


def test_cli_stop_leaves_a_resumable_run_and_skip_counts_the_batch(tmp_path):
    """Through ``python -m robustnlu``: ``stop`` prints one error line naming the step, the epoch
    and the uids, exits 2 and keeps the run dir, whose last.ckpt (the state before the bad batch)
    ``resume=true`` finishes; ``skip`` finishes the run and counts the dropped batch."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=160, n_eval=20)  # 5 batches of 32

    def train(run_dir, *extra):
        args = [*FAST, *jsonl_overrides(sample), "trainer.max_epochs=1", "data.batch_size=32",
                "callbacks.last_checkpoint.every_minutes=null", "callbacks.last_checkpoint.every_n_train_steps=1",
                f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}", *extra]
        return run_cli(args, cwd=tmp_path)
    poison = ["+callbacks.nonfinite._target_=integration_helpers.NonFiniteLossAtStep", "+callbacks.nonfinite.step=3",
              "+callbacks.nonfinite.value=nan"]

    stopped_dir = tmp_path / "stopped"
    stopped = train(stopped_dir, *poison)
    assert stopped.returncode == 2, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    errors = [line for line in stopped.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith("error: non-finite loss in training batch 3 of epoch 0 after 3 optimizer steps: s-")
    assert "intent nan); batch uids: s-" in errors[0]
    assert json.loads((stopped_dir / "status.json").read_text())["state"] == "failed"
    last = torch.load(stopped_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] == 3
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values() if v.is_floating_point())

    resumed = train(stopped_dir, "resume=true", "+resume_override=[callbacks.nonfinite]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    results = json.loads((stopped_dir / "results.json").read_text())
    assert results["resumed_from"]["global_step"] == 3 and results["nonfinite_skips"] == 0

    skipped = train(tmp_path / "skipped", *poison, "trainer.on_nonfinite=skip")
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    assert "skipped (1 so far, trainer.on_nonfinite=skip): non-finite loss in training batch 3 of epoch 0" in skipped.stderr
    assert json.loads((tmp_path / "skipped" / "results.json").read_text())["nonfinite_skips"] == 1


def test_skip_is_refused_under_ddp(sample, tmp_path):
    """Lightning cannot skip a step under DDP (training_step may not return None there)."""
    cfg = compose_config([*FAST, *jsonl_overrides(sample), "trainer=ddp", "trainer.on_nonfinite=skip",
                          f"paths.cache_dir={tmp_path / 'cache'}"], tmp_path / "run")
    parts = prepare(cfg)
    parts.module.trainer = build_trainer(cfg)  # two processes, not launched
    with pytest.raises(ConfigError, match=r"^trainer.on_nonfinite: skip drops a batch by returning no loss, which "
                                          r"Lightning does not support under DDP; use stop \(got skip with 2 processes\)$"):
        parts.module.setup("fit")


def test_a_non_finite_validation_loss_never_reaches_the_selection_criterion(sample, cache, tmp_path):
    """Greedy-Minmax gets per-example validation losses: a NaN one stops the run (whatever
    on_nonfinite says: a validation cannot be dropped) before the criterion is updated."""
    cfg = compose_config([*FAST, *jsonl_overrides(sample), *SMALL_DRIFT, "method=rpdro", "selection=greedy_minmax",
                          "selection.criterion.score=loss", "trainer.max_epochs=1", "trainer.on_nonfinite=skip",
                          "+trainer.limit_train_batches=2", "+trainer.num_sanity_val_steps=0",
                          f"paths.cache_dir={cache}"], tmp_path / "run")
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    parts = prepare(cfg)

    class NaNValidationLogits(pl.Callback):
        def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
            if batch_idx == 0:
                self.hook = pl_module.model.intent_classifier.register_forward_hook(
                    lambda module, args, logits: torch.where(torch.arange(len(logits))[:, None] == 0, float("nan"), logits))

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            if batch_idx == 0:
                self.hook.remove()

    trainer = build_trainer(cfg)
    trainer.callbacks.append(NaNValidationLogits())
    with pytest.raises(NonFiniteLoss, match=r"^non-finite validation loss or adversary log-weight at epoch 0 after 2 "
                                            r"optimizer steps, for the selection criterion: s-\w+-\d+; the run stopped"):
        trainer.fit(parts.module, datamodule=parts.datamodule)
    assert parts.module.selection.adversaries.numel() == 0 and parts.module.selection.incumbent_changes == 0
