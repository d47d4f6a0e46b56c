"""Length buckets (``data.pad_to_multiple_of``) and ``trainer.compile``: buckets pad the token and
word dimensions up to a multiple, never past ``max_length``, and leave every per-example loss and
prediction as dynamic padding gives them; a compiled run (backend ``aot_eager``: graph capture and
autograd tracing without inductor's code generation) trains as the eager run, compiles no more
graphs than its batches have shapes, writes checkpoints that an uncompiled model loads, and resumes;
without buckets or under DDP it is refused in one line."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
import torch._dynamo

from integration_helpers import FAST, compose_config, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.config_schema import check_config
from robustnlu.data.collate import Collator, EncodedUtterance
from robustnlu.errors import ConfigError
from robustnlu.module import SLUModule
from robustnlu.train import build_trainer, prepare, train_and_record

BUCKETS = ["data.pad_to_multiple_of=16"]
COMPILED = [*BUCKETS, "trainer.compile.enabled=true", "trainer.compile.backend=aot_eager"]


def utterance(n_tokens: int, n_words: int) -> tuple[int, EncodedUtterance]:
    return 0, EncodedUtterance(input_ids=list(range(1, n_tokens + 1)), word_index=list(range(1, n_words + 1)),
                               tag_ids=[0] * n_words, intent_id=0, group=-1)


def test_buckets_round_both_dimensions_up_to_the_multiple_but_not_past_max_length():
    collate = Collator(pad_token_id=0, pad_to_multiple_of=8, max_length=20)
    batch = collate([utterance(5, 3), utterance(11, 9)])
    assert batch["input_ids"].shape == (2, 16) and batch["attention_mask"].shape == (2, 16)  # 11 -> 16
    assert batch["word_index"].shape == batch["word_mask"].shape == batch["slot_labels"].shape == (2, 16)  # 9 -> 16
    assert batch["attention_mask"].sum(1).tolist() == [5, 11] and batch["word_mask"].sum(1).tolist() == [3, 9]
    longest = collate([utterance(19, 4)])
    assert longest["input_ids"].shape == (1, 20) and longest["word_index"].shape == (1, 8)  # 24 capped at 20
    assert collate.shape_count() == 9  # buckets 8, 16, 20 for each dimension
    assert Collator(0).shape_count() is None and Collator(0)([utterance(11, 9)])["input_ids"].shape == (1, 11)


@pytest.fixture(scope="module")
def workloads(tmp_path_factory):
    from bench.workload import compose_config as bench_config, load_workload

    out = tmp_path_factory.mktemp("compose")
    return {crf: load_workload(bench_config(out, ["encoder=tiny", f"model.crf={str(crf).lower()}"]), 2)
            for crf in (False, True)}


@pytest.mark.parametrize("crf", [False, True])
def test_buckets_keep_every_per_example_loss_and_prediction(workloads, crf):
    """A real SNIPS batch, dynamic padding against buckets of 16 (padding longer in both dimensions)."""
    workload = workloads[crf]
    module = workload.fresh_module().eval()
    (dynamic, _), (bucketed, _) = workload.batches(None), workload.batches(None, 16)
    assert bucketed["input_ids"].size(1) % 16 == 0 and bucketed["word_index"].size(1) % 16 == 0
    assert bucketed["input_ids"].size(1) > dynamic["input_ids"].size(1)
    assert bucketed["word_index"].size(1) > dynamic["word_index"].size(1)
    with torch.no_grad():
        outputs = [module.model(b) for b in (dynamic, bucketed)]
        a, b = (module.model.task_losses(o, batch) for o, batch in zip(outputs, (dynamic, bucketed), strict=True))
        decoded = [module.model.decode(o, batch["word_mask"]) for o, batch in zip(outputs, (dynamic, bucketed), strict=True)]
    torch.testing.assert_close(b.slot, a.slot, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b.intent, a.intent, rtol=1e-5, atol=1e-6)
    assert decoded[0] == decoded[1]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_snips_sample_jsonl(tmp_path_factory.mktemp("snips"), n_train=240, n_eval=40)


def config(sample, out: Path, *extra: str):
    return compose_config([*FAST, *jsonl_overrides(sample), "+trainer.limit_train_batches=5", "trainer.max_epochs=2",
                           "trainer.log_every_n_steps=1", f"paths.cache_dir={out.parent / 'cache'}", *extra], out)


def test_compile_without_buckets_is_refused_in_one_line(sample, tmp_path):
    cfg = config(sample, tmp_path / "run", "trainer.compile.enabled=true")
    with pytest.raises(ConfigError, match=r"^trainer.compile.enabled: needs length buckets, data.pad_to_multiple_of "
                                          r"\(e.g. 16\): with static shapes every distinct batch shape compiles a graph "
                                          r"of its own \(got true\)$"):
        check_config(cfg, "config")
    check_config(config(sample, tmp_path / "run", *COMPILED), "config")
    done = run_cli([*FAST, *jsonl_overrides(sample), "trainer.compile.enabled=true", f"hydra.run.dir={tmp_path / 'cli'}"],
                   cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: trainer.compile.enabled: needs length buckets, data.pad_to_multiple_of (e.g. 16): with static shapes "
        "every distinct batch shape compiles a graph of its own (got true)"]


def test_compile_is_refused_under_ddp(sample, tmp_path):
    cfg = config(sample, tmp_path / "run", "trainer=ddp", *COMPILED)
    parts = prepare(cfg)
    parts.module.trainer = build_trainer(cfg)  # two processes, not launched
    with pytest.raises(ConfigError, match=r"^trainer.compile.enabled: compiles the model of one process, not under "
                                          r"DDP; train on one device or without it \(got true with 2 processes\)$"):
        parts.module.setup("fit")


class StepRecorder(pl.Callback):
    """Each training step's loss and its batch's (token, word) shape."""

    def __init__(self):
        self.losses: list[float] = []
        self.shapes: set[tuple[int, ...]] = set()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))
        self.shapes.add((*batch["input_ids"].shape, batch["word_index"].size(1)))


class StopAfterFirstEpoch(pl.Callback):
    """A run interrupted after its first epoch (its last.ckpt written), with the schedule of all its epochs."""

    def on_train_epoch_end(self, trainer, pl_module):
        trainer.should_stop = True


def train(cfg, resume_from: Path | None = None, *callbacks: pl.Callback) -> tuple[dict, StepRecorder, int]:
    """results.json's record of a run of ``cfg`` (or, with ``resume_from``, only its fit continued from
    that checkpoint), its steps and the number of graphs dynamo compiled meanwhile."""
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    torch._dynamo.reset()
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    recorder = StepRecorder()
    parts = prepare(cfg)
    if resume_from is None:
        results = train_and_record(cfg, parts._replace(callbacks=[recorder, *callbacks]), Path(cfg.paths.output_dir), time.time())
    else:
        results = {}
        build_trainer(cfg, extra_callbacks=[recorder]).fit(parts.module, datamodule=parts.datamodule,
                                                           ckpt_path=resume_from)
    return results, recorder, torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs


@pytest.mark.slow
def test_a_compiled_run_trains_checkpoints_and_resumes_as_the_eager_run(sample, tmp_path):
    eager, eager_steps, eager_graphs = train(config(sample, tmp_path / "eager", *BUCKETS))
    compiled, steps, graphs = train(config(sample, tmp_path / "compiled", *COMPILED))
    assert eager["compile"] is None and compiled["compile"] == {"mode": "default", "backend": "aot_eager"}
    assert eager_graphs == 0 and 1 <= graphs <= len(steps.shapes)
    assert len(steps.losses) == 10
    assert steps.losses == pytest.approx(eager_steps.losses, rel=1e-4)
    for split in ("valid", "test"):
        assert compiled["metrics"][split] == pytest.approx(eager["metrics"][split], rel=1e-4)

    # the checkpoints are those of the uncompiled model: its keys, loadable without compiling
    for name in ("eager", "compiled"):
        best = tmp_path / name / json.loads((tmp_path / name / "results.json").read_text())["best_checkpoint"]
        keys = list(torch.load(best, weights_only=True, map_location="cpu")["state_dict"])
        assert not any("_orig_mod" in k for k in keys)
        if name == "eager":
            eager_keys = keys
    assert keys == eager_keys
    loaded = SLUModule.from_checkpoint(best)
    assert loaded.torch_compile is None and loaded.compiled_forward is None

    # stopped after one epoch, then resumed from its last checkpoint: the second epoch's losses of the straight run
    first = tmp_path / "first"
    train(config(sample, first, *COMPILED, "keep_last_checkpoint=true"), None, StopAfterFirstEpoch())
    _, resumed, _ = train(config(sample, tmp_path / "resumed", *COMPILED), resume_from=first / "checkpoints" / "last.ckpt")
    assert resumed.losses == pytest.approx(steps.losses[5:], rel=1e-4)
