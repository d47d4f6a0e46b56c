"""Checkpoints of format 1 (written before the group sources moved to ``robustnlu.groups`` and the
optimizer node got a ``_target_``) still load: `robustnlu.checkpoint.upgrade_format_1` on the
hyper-parameters a real format-1 TopK-AE checkpoint holds (robustnlu 68b8eca, copied below), and a
TopK-AE checkpoint rewritten in format 1's layout predicts exactly as the original."""

from __future__ import annotations

import copy

import pytest
import pytorch_lightning as pl
import torch

from integration_helpers import FAST, compose_config, jsonl_overrides, write_snips_sample_jsonl
from robustnlu.checkpoint import CHECKPOINT_FORMAT, FORMAT_KEY, read_checkpoint, upgrade_format_1
from robustnlu.module import SLUModule
from robustnlu.predictor import Predictor
from robustnlu.train import build_trainer, prepare

#: ``method`` and ``optimizer`` of checkpoints/best-epoch000.ckpt of ``python -m robustnlu
#: +experiment=snips_slot_context method=topk_ae encoder=tiny`` at robustnlu 68b8eca (format 1)
FORMAT_1_METHOD = {
    "_target_": "robustnlu.robust.topk_ae.TopKAE", "name": "topk_ae_bin",
    "adversary": {"_target_": "robustnlu.adversary.autoencoder.OnlineAutoencoder", "_partial_": True,
                  "latent_groups": 256, "dropout": 0.1, "beta": 0.3, "beta_weights": "diversity"},
    "k": 4, "assignment": "bin", "ae_lr": 0.0003, "ae_weight_decay": 0.01,
}
FORMAT_1_OPTIMIZER = {"name": "adamw", "lr": 0.0001, "weight_decay": 0.02, "warmup_steps": 0,
                      "betas": [0.9, 0.999], "eps": 1e-08}


def test_format_1_hyper_parameters_are_laid_out_as_format_2():
    up = upgrade_format_1({"method": copy.deepcopy(FORMAT_1_METHOD), "optimizer": dict(FORMAT_1_OPTIMIZER), "model": {}})
    assert "adversary" not in up["method"]
    assert up["method"]["groups"] == {**FORMAT_1_METHOD["adversary"],
                                      "_target_": "robustnlu.groups.autoencoder.OnlineAutoencoder"}
    assert up["optimizer"] == {"_target_": "robustnlu.optim.adamw.adamw", "_partial_": True, **FORMAT_1_OPTIMIZER}
    # a group source of the grouped methods (method.groups in both formats) and the learned adversaries
    grouped = {"_target_": "robustnlu.robust.topk_group.TopKGroup", "k": 4,
               "groups": {"_target_": "robustnlu.adversary.groups.SeqDriftClusters", "_partial_": True}}
    assert upgrade_format_1({"method": grouped, "optimizer": up["optimizer"]})["method"]["groups"]["_target_"] == \
        "robustnlu.groups.seqdrift_clusters.SeqDriftClusters"
    ratio = {"_target_": "robustnlu.robust.rpdro.RPDRO", "adversary": {"_target_": "robustnlu.adversary.ratio.RatioAdversary"}}
    assert upgrade_format_1({"method": ratio, "optimizer": up["optimizer"]})["method"] == ratio
    assert upgrade_format_1(up) == up  # format 2's layout passes unchanged


@pytest.fixture(scope="module")
def topk_ae_checkpoint(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    sample = write_snips_sample_jsonl(tmp / "data", n_train=32, n_eval=8)
    cfg = compose_config([*FAST, *jsonl_overrides(sample), "method=topk_ae", "trainer.max_epochs=1",
                          "+trainer.limit_train_batches=2", f"paths.cache_dir={tmp / 'cache'}"], tmp / "out")
    pl.seed_everything(0, verbose=False)
    parts = prepare(cfg)
    build_trainer(cfg).fit(parts.module, datamodule=parts.datamodule)
    return tmp / "out" / "checkpoints" / "last.ckpt"


def test_a_checkpoint_in_format_1_layout_loads_and_predicts_as_the_original(topk_ae_checkpoint, tmp_path):
    ckpt = torch.load(topk_ae_checkpoint, weights_only=True, map_location="cpu")
    assert ckpt[FORMAT_KEY] == CHECKPOINT_FORMAT
    old = copy.deepcopy(ckpt)
    del old[FORMAT_KEY]  # format 1 did not write the key
    method = old["hyper_parameters"]["method"]
    method["adversary"] = method.pop("groups")
    method["adversary"]["_target_"] = "robustnlu.adversary.autoencoder.OnlineAutoencoder"
    old["hyper_parameters"]["optimizer"] = {k: v for k, v in old["hyper_parameters"]["optimizer"].items()
                                            if k not in ("_target_", "_partial_", "fused")}
    path = tmp_path / "format1.ckpt"
    torch.save(old, path)
    assert read_checkpoint(path)["hyper_parameters"]["method"] == ckpt["hyper_parameters"]["method"]
    # the whole module (its objective's autoencoder too) loads from the upgraded hyper-parameters
    original, loaded = SLUModule.from_checkpoint(topk_ae_checkpoint), SLUModule.from_checkpoint(path)
    for (name, a), (_, b) in zip(original.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    original, loaded = Predictor.from_checkpoint(topk_ae_checkpoint), Predictor.from_checkpoint(path)
    texts = ["play some jazz by miles davis", "book a table for two in paris", "what is the weather tomorrow"]
    assert loaded.predict(texts) == original.predict(texts)
