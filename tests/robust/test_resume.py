"""Checkpoint round trip of every method through Lightning: a run stopped after one epoch and
resumed with ``fit(ckpt_path=last)`` continues exactly as the uninterrupted run (same losses at
every later step, same objective state and own optimiser states at the end)."""

from __future__ import annotations

import copy

import pytest
import pytorch_lightning as pl
import torch

from integration_helpers import FAST, METHODS, SMALL_DRIFT, compose_config, jsonl_overrides, method_overrides, \
    write_snips_sample_jsonl
from robustnlu.train import build_trainer, prepare

#: 600 training utterances (minus the drift's test and valid share) in batches of 128 (581 = 4 × 128 + 69)
STEPS_PER_EPOCH = 5


class LossRecorder(pl.Callback):
    """Each step's loss, and the devices the module trained on."""

    def __init__(self):
        self.losses: dict[int, float] = {}
        self.devices: set[str] = set()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses[trainer.global_step] = float(outputs["loss"])
        self.devices.add(pl_module.device.type)


class StopAfterFirstEpoch(pl.Callback):
    """An interruption: the run ends after epoch 0's checkpoint, its config (and so its learning
    rate schedule) unchanged."""

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            trainer.should_stop = True


#: where the runs train: the CPU (FAST's), and a CUDA device (`make test-gpu`) with PyTorch's deterministic
#: kernels (``trainer.deterministic``: without them CUDA's atomic adds reorder sums from run to run)
ACCELERATORS = {"cpu": [], "cuda": ["trainer.accelerator=gpu", "trainer.deterministic=true"]}


def config(method: str, sample, cache, out, accelerator="cpu"):
    """The config of a test's three runs, composed once (`fit` sets each one's ``paths.output_dir``)."""
    overrides = [*FAST, *jsonl_overrides(sample), *SMALL_DRIFT, *method_overrides(method), "trainer.max_epochs=3",
                 "data.batch_size=128", "+trainer.limit_val_batches=1", f"paths.cache_dir={cache}",
                 *ACCELERATORS[accelerator]]
    return compose_config(overrides, out)


def fit(cfg, out, ckpt_path=None, interrupt=False):
    cfg = copy.deepcopy(cfg)
    cfg.paths.output_dir = str(out)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    parts = prepare(cfg)
    dm, module = parts.datamodule, parts.module
    recorder = LossRecorder()
    trainer = build_trainer(cfg)
    trainer.callbacks += [recorder, StopAfterFirstEpoch()] if interrupt else [recorder]
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return module, recorder


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_snips_sample_jsonl(tmp_path_factory.mktemp("snips"), n_train=600, n_eval=60)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One ``paths.cache_dir`` for the module: the drift split, the same for every method, is computed once."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("accelerator", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("method", METHODS)
def test_resumed_run_continues_like_the_uninterrupted_one(method, accelerator, sample, cache, tmp_path):
    cfg = config(method, sample, cache, tmp_path, accelerator)
    straight, straight_run = fit(cfg, tmp_path / "straight")
    fit(cfg, tmp_path / "stopped", interrupt=True)
    resumed, resumed_run = fit(cfg, tmp_path / "resumed",
                               ckpt_path=str(tmp_path / "stopped" / "checkpoints" / "last.ckpt"))
    assert straight_run.devices == resumed_run.devices == {accelerator}
    straight_losses, resumed_losses = straight_run.losses, resumed_run.losses
    assert max(straight_losses) == 3 * STEPS_PER_EPOCH
    later = sorted(k for k in straight_losses if k > STEPS_PER_EPOCH)
    assert later and sorted(resumed_losses) == later
    assert [resumed_losses[k] for k in later] == pytest.approx([straight_losses[k] for k in later], rel=1e-5)
    a, b = straight.objective.state_dict(), resumed.objective.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-5, atol=1e-6, msg=key)
    assert straight.objective.optimizer_states().keys() == resumed.objective.optimizer_states().keys()
