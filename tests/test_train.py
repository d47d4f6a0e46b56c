"""End to end through the real Hydra configs: training writes an honest run record."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from seqeval.metrics import f1_score

from integration_helpers import FAST, compose_config, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.train import run


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_snips_sample_jsonl(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def trained(sample, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    cfg = compose_config([*FAST, *jsonl_overrides(sample)], out)
    return out, run(cfg)


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_run_directory_holds_results_predictions_config_and_checkpoints(trained, sample):
    out, results = trained
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["metrics"] == results["metrics"]
    for key in ("intent_acc", "slot_f1", "combined", "semer", "frame_acc", "ma_intent_combined"):
        assert 0.0 <= on_disk["metrics"]["test"][key] <= 1.0 or key == "semer"
    assert on_disk["sizes"] == {"train": 240, "valid": 60, "test": 60}
    assert on_disk["seed"] == 0 and on_disk["method"] == "erm"
    assert {"torch", "transformers", "pytorch-lightning", "robustnlu"} <= set(on_disk["versions"])
    assert on_disk["wall_time_s"] > 0
    cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("model name"))
    assert on_disk["device"] == {"accelerator": "cpu", "name": cpu, "processes": 1}
    assert (out / "config.yaml").is_file()
    with open(out / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    epoch_rows = [r for r in rows if r.get("train/slot_loss")]
    assert len(epoch_rows) == 6  # one per epoch (FAST trains 6)
    assert all(float(r["train/slot_loss"]) > 0 and float(r["train/intent_loss"]) > 0 for r in epoch_rows)
    # a finished run keeps its best checkpoint, weights only; last.ckpt (for resume=true) is gone
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [Path(on_disk["best_checkpoint"]).name]
    best = torch.load(out / on_disk["best_checkpoint"], weights_only=True, map_location="cpu")
    assert "optimizer_states" not in best and "lr_schedulers" not in best
    assert {k.split(".")[1] for k in best["state_dict"] if k.startswith("model.")} == {
        "encoder", "intent_classifier", "slot_classifier"}
    for split in ("valid", "test"):
        rows = read_jsonl(out / "predictions" / f"{split}.jsonl")
        gold = read_jsonl(sample[split])
        assert sorted(r["uid"] for r in rows) == sorted(g["uid"] for g in gold)
        assert all(len(r["pred_tags"]) == len(r["tokens"]) == len(r["gold_tags"]) for r in rows)


@pytest.mark.parametrize("split", ["valid", "test"])
def test_reported_metrics_equal_an_independent_recomputation_from_predictions(trained, split):
    out, results = trained
    rows = read_jsonl(out / "predictions" / f"{split}.jsonl")
    acc = sum(r["gold_intent"] == r["pred_intent"] for r in rows) / len(rows)
    f1 = f1_score([r["gold_tags"] for r in rows], [r["pred_tags"] for r in rows])
    m = results["metrics"][split]
    assert m["intent_acc"] == pytest.approx(acc)
    assert m["slot_f1"] == pytest.approx(f1)
    assert m["combined"] == pytest.approx((acc + f1) / 2)


def test_training_learned_something(trained):
    """Tiny random encoder, 240 utterances, 6 epochs: well above chance (1/7 intent accuracy,
    slot F1 0)."""
    _, results = trained
    assert results["metrics"]["valid"]["intent_acc"] > 0.3
    assert results["metrics"]["valid"]["slot_f1"] > 0.2


def test_checkpoints_load_without_pickled_code_and_hold_plain_hparams(trained):
    out, _ = trained
    best = json.loads((out / "results.json").read_text())["best_checkpoint"]
    ckpt = torch.load(out / best, weights_only=True, map_location="cpu")
    hp = ckpt["hyper_parameters"]
    assert hp["vocab"]["intents"] and hp["encoder_spec"]["kind"] == "tiny"
    assert "encoder" not in hp  # the module itself is never pickled into hparams


def test_same_seed_same_predictions(trained, sample, tmp_path):
    out, results = trained
    again = run(compose_config([*FAST, *jsonl_overrides(sample)], tmp_path))
    assert again["metrics"] == results["metrics"]
    assert (tmp_path / "predictions" / "test.jsonl").read_text() == (out / "predictions" / "test.jsonl").read_text()


def test_fit_resumes_from_last_checkpoint(sample, tmp_path):
    """A run stopped after 1 epoch, resumed with fit(ckpt_path=last), continues to epoch 2."""
    from robustnlu.train import build_trainer

    cfg = compose_config([*FAST, *jsonl_overrides(sample), "trainer.max_epochs=1", "keep_last_checkpoint=true"], tmp_path)
    run(cfg)
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["epoch"] == 0
    from robustnlu.module import SLUModule

    module = SLUModule.load_from_checkpoint(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    cfg2 = compose_config([*FAST, *jsonl_overrides(sample), "trainer.max_epochs=2"], tmp_path / "resumed")
    from robustnlu.data.datamodule import SLUDataModule
    from robustnlu.data.readers import load_corpus
    from robustnlu.model.encoders import load_tokenizer

    corpus = load_corpus(cfg2.dataset)
    dm = SLUDataModule(corpus, load_tokenizer(cfg2.encoder), corpus.vocab(), seed=0, **cfg2.data)
    trainer = build_trainer(cfg2)
    trainer.fit(module, datamodule=dm, ckpt_path=str(tmp_path / "checkpoints" / "last.ckpt"))
    assert trainer.current_epoch == 2 and trainer.global_step == 2 * 15  # 240 / 16 = 15 steps per epoch


def test_predict_cli_on_a_trained_checkpoint(trained, tmp_path):
    out, results = trained
    ckpt = str(out / results["best_checkpoint"])  # weights only
    one = run_cli(["--ckpt", ckpt, "play the latest album by adele"], cwd=tmp_path, module="robustnlu.predict")
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith("intent: ")
    vocab = torch.load(ckpt, weights_only=True)["hyper_parameters"]["vocab"]
    assert one.stdout.split()[1] in vocab["intents"]
    texts = tmp_path / "in.txt"
    texts.write_text("play adele\n\nbook a table for two in paris\n")
    many = run_cli(["--ckpt", ckpt, "--file", str(texts), "--out", str(tmp_path / "p.jsonl")],
                   cwd=tmp_path, module="robustnlu.predict")
    assert many.returncode == 0, many.stderr
    rows = read_jsonl(tmp_path / "p.jsonl")
    assert [r["text"] for r in rows] == ["play adele", "book a table for two in paris"]
    assert all(len(r["tags"]) == len(r["tokens"]) for r in rows)


def test_pretrained_encoder_trains_with_dropout_on(sample, tmp_path):
    """Hugging Face's from_pretrained returns eval-mode modules; fine-tuning must enable dropout."""
    from robustnlu.module import SLUModule

    enc = {"kind": "tiny", "hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64,
           "max_position_embeddings": 128}
    from robustnlu.model.encoders import build_encoder

    encoder = build_encoder(enc, vocab_size=100).eval()
    module = SLUModule(model={"dropout": 0.1, "crf": False, "intent_loss_scale": 1.0},
                       method={"_target_": "robustnlu.robust.erm.ERM", "name": "erm"},
                       optimizer={}, vocab={"intents": ["a"], "tags": ["O"]}, eval_intents=["a"],
                       encoder_spec=enc, encoder_config=encoder.config.to_dict(), encoder=encoder)
    assert all(m.training for m in module.model.modules())


def test_summary_table_drop_is_valid_minus_test_in_points():
    from robustnlu.train import SUMMARY_METRICS, summary_table

    valid = dict(zip(SUMMARY_METRICS, (0.9, 0.8, 0.85, 0.1, 0.7, 0.75)))
    test = dict(zip(SUMMARY_METRICS, (0.8, 0.6, 0.7, 0.3, 0.5, 0.65)))
    lines = summary_table({"valid": valid, "test": test}).splitlines()
    assert lines[0].split() == list(SUMMARY_METRICS)
    assert [float(x) for x in lines[3].split()[1:]] == [10.0, 20.0, 15.0, -20.0, 20.0, 10.0]


def test_status_file_says_finished(trained):
    out, results = trained
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "finished" and status["wall_time_s"] == results["wall_time_s"]
    assert status["pid"] > 0 and status["host"]


def test_status_file_says_failed_with_the_error(sample, tmp_path, monkeypatch):
    import robustnlu.train as train

    class Exploding:
        loggers = ()  # as a Trainer without loggers

        def fit(self, *args, **kwargs):
            raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(train, "build_trainer", lambda cfg, resume=None, extra_callbacks=(): Exploding())
    cfg = compose_config([*FAST, *jsonl_overrides(sample)], tmp_path)
    with pytest.raises(RuntimeError, match="simulated"):
        run(cfg)
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["state"] == "failed" and status["error"] == "RuntimeError: CUDA out of memory (simulated)"
    assert not (tmp_path / "results.json").exists()


@pytest.mark.gpu
def test_a_checkpoint_trained_on_cuda_predicts_the_same_on_the_cpu(sample, tmp_path):
    """Train on a GPU, predict on a laptop: the best checkpoint loads on the CPU (`read_checkpoint` maps
    it there) and predicts the test utterances as the run's own predictions/test.jsonl (`make test-gpu`);
    so does `Predictor` on the GPU (``python -m robustnlu.predict --device cuda``)."""
    from robustnlu.data.readers.jsonl import read_jsonl_file
    from robustnlu.predictor import Predictor

    results = run(compose_config([*FAST, *jsonl_overrides(sample), "trainer.accelerator=gpu"], tmp_path))
    assert results["device"] == {"accelerator": "cuda", "name": torch.cuda.get_device_name(0), "processes": 1}
    best = tmp_path / results["best_checkpoint"]
    assert {t.device.type for t in torch.load(best, weights_only=True)["state_dict"].values()} == {"cuda"}
    on_cpu = Predictor.from_checkpoint(best, "cpu")
    assert on_cpu.device.type == "cpu"
    utterances = [row.utterance for row in read_jsonl_file(Path(sample["test"]), "snips", "test")]
    by_uid = {row["uid"]: row for row in read_jsonl(tmp_path / "predictions" / "test.jsonl")}
    predicted = on_cpu.predict_utterances(utterances)
    assert [(intent, tags) for intent, tags in predicted] == [
        (by_uid[u.uid]["pred_intent"], by_uid[u.uid]["pred_tags"]) for u in utterances]
    on_cuda = Predictor.from_checkpoint(best, "cuda")
    assert on_cuda.device.type == "cuda"
    assert on_cuda.predict_utterances(utterances) == predicted
