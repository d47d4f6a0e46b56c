"""Files that are not readable robustnlu checkpoints, given where a checkpoint is expected
(`robustnlu.checkpoint.read_checkpoint`): ``python -m robustnlu.predict``, ``robustnlu.evaluate``,
``efficiency.init_from`` and ``resume=true`` each end with one ``error:`` line naming the file and
what is wrong, exit code 2, and leave nothing behind (a resumed run's directory stays as it was)."""

from __future__ import annotations

import json

import pytest
import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf

from integration_helpers import FAST, compose_config, jsonl_overrides, run_cli, shipped_lines, write_snips_sample_jsonl
from robustnlu.checkpoint import CHECKPOINT_FORMAT, FORMAT_KEY
from robustnlu.predict import main as predict_main
from robustnlu.train import build_trainer, prepare


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A real checkpoint of a one-batch training run (tiny encoder)."""
    tmp = tmp_path_factory.mktemp("run")
    sample = write_snips_sample_jsonl(tmp / "data", n_train=32, n_eval=8)
    cfg = compose_config([*FAST, *jsonl_overrides(sample), "trainer.max_epochs=1", "+trainer.limit_train_batches=1",
                          f"paths.cache_dir={tmp / 'cache'}"], tmp / "out")
    pl.seed_everything(0, verbose=False)
    parts = prepare(cfg)
    trainer = build_trainer(cfg)
    trainer.fit(parts.module, datamodule=parts.datamodule)
    return tmp / "out" / "checkpoints" / "last.ckpt"


class Foreign(torch.nn.Module):
    """A module pickled whole, as other programs save models."""


def write_foreign(kind: str, path, checkpoint):
    good = checkpoint.read_bytes()
    if kind == "text":
        path.write_text("play the latest album by adele\n")
    elif kind == "json":
        path.write_text(json.dumps({"state_dict": {}, "hyper_parameters": {}}))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif kind == "pickled_module":
        torch.save(Foreign(), path)
    elif kind == "tensor_dict":
        torch.save({"encoder.weight": torch.zeros(2, 2)}, path)
    elif kind == "other_lightning":
        torch.save({"state_dict": {"layer.weight": torch.zeros(2)}, "hyper_parameters": {"lr": 0.1},
                    "pytorch-lightning_version": pl.__version__}, path)
    elif kind == "other_format":
        ckpt = torch.load(checkpoint, weights_only=True)
        torch.save({**ckpt, FORMAT_KEY: CHECKPOINT_FORMAT + 1}, path)
    return path


NOT_TORCH = "not a readable robustnlu checkpoint: not a whole torch.save file (a zip archive): another kind of file, or one cut short"
#: kind → what the error line says
PROBLEMS = {
    "text": NOT_TORCH,
    "json": NOT_TORCH,
    "empty": "empty file, not a robustnlu checkpoint",
    "truncated": NOT_TORCH,
    # not torch's advice to load it with weights_only=False, which would run code from the file
    "pickled_module": "not a readable robustnlu checkpoint: it holds objects other than tensors, numbers, strings and "
                      "containers, which are not loaded (torch.load(weights_only=True))",
    "tensor_dict": "not a robustnlu checkpoint: a torch file without a training run's state_dict and hyper_parameters",
    "other_lightning": "not a robustnlu checkpoint: its hyper_parameters lack model, method, optimizer, vocab",
    "other_format": f"a robustnlu checkpoint of format {CHECKPOINT_FORMAT + 1}; this robustnlu reads formats 1 to {CHECKPOINT_FORMAT}",
}


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_the_real_checkpoint_predicts(checkpoint, capsys):
    assert predict_main(["--ckpt", str(checkpoint), "play", "some", "music"]) == 0
    assert capsys.readouterr().out.startswith("intent: ")


@pytest.mark.parametrize("kind", sorted(PROBLEMS))
def test_predict_names_the_file_and_the_problem(kind, checkpoint, tmp_path, capsys):
    path = write_foreign(kind, tmp_path / f"{kind}.ckpt", checkpoint)
    assert predict_main(["--ckpt", str(path), "play", "some", "music"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_error_line(captured.err).startswith(f"error: {path}: {PROBLEMS[kind]}")


def test_a_missing_checkpoint(tmp_path, capsys):
    assert predict_main(["--ckpt", str(tmp_path / "nowhere.ckpt"), "play"]) == 2
    assert one_error_line(capsys.readouterr().err) == f"error: {tmp_path / 'nowhere.ckpt'}: no such checkpoint file"


def test_cli_evaluate_and_init_from(checkpoint, tmp_path):
    text = write_foreign("text", tmp_path / "notes.ckpt", checkpoint)
    proc = run_cli([f"ckpt={text}"], cwd=tmp_path, module="robustnlu.evaluate")
    assert proc.returncode == 2
    assert one_error_line(proc.stderr).startswith(f"error: {text}: not a readable robustnlu checkpoint")
    assert not (tmp_path / "outputs").exists()

    topv2 = tmp_path / "topv2"
    topv2.mkdir()
    for domain in ("weather", "alarm"):
        for split, n in (("train", 40), ("eval", 10), ("test", 10)):
            lines = shipped_lines(f"topv2/{domain}_{split}.tsv")
            (topv2 / f"{domain}_{split}.tsv").write_text("\n".join(lines[: n + 1]) + "\n")
    truncated = write_foreign("truncated", tmp_path / "source.ckpt", checkpoint)
    run_dir = tmp_path / "adapt"
    proc = run_cli([*FAST, "dataset=topv2_weather", f"dataset.path={topv2}", "efficiency=topv2",
                    "efficiency.sources=[alarm]", "efficiency.mode=adapt", f"efficiency.init_from={truncated}",
                    f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr).startswith(f"error: {truncated}: not a readable robustnlu checkpoint")
    assert not run_dir.exists()


def test_cli_resume_keeps_the_run_directory(checkpoint, tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    last = write_foreign("other_lightning", run_dir / "checkpoints" / "last.ckpt", checkpoint)
    (run_dir / "status.json").write_text('{"state": "interrupted"}')
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=32, n_eval=8)
    overrides = [*FAST, *jsonl_overrides(sample), "resume=true", f"paths.cache_dir={tmp_path / 'cache'}"]
    # the settings the run was started with, as a killed run has them: the checkpoint is what is refused
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(compose_config(overrides, run_dir), resolve=True))
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = run_cli([*overrides, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr).startswith(
        f"error: resume=true: {last}: not a robustnlu checkpoint: its hyper_parameters lack")
    # untouched; only Hydra's own records of the command (.hydra/, the job log) are added
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and ".hydra" not in p.parts
             and p.suffix != ".log"}
    assert after == before
