"""`python -m robustnlu.reproduce` trains a run of the study end to end (the tiny encoder, a few
batches, on the real ATIS canonical split), keeps its compact record and no checkpoint, skips it
once recorded, and refuses a bad override before any run trains."""

from __future__ import annotations

import json
import lzma

import pytest

from integration_helpers import REPO, run_cli

RUN = "atis-slot_value-full-iid-erm-seed0"
SMALL = ["encoder=tiny", "trainer.max_epochs=1", "trainer.precision=32-true", "data.batch_size=16",
         "++trainer.limit_train_batches=3", "++trainer.limit_val_batches=2", "++trainer.limit_test_batches=2"]


def reproduce(tmp_path, *args: str):
    return run_cli(["--only", RUN, "--records", str(tmp_path / "records"), "--runs", str(tmp_path / "runs"), *args],
                   cwd=REPO, module="robustnlu.reproduce")


def test_a_run_is_recorded_without_checkpoints_and_skipped_once_recorded(tmp_path):
    first = reproduce(tmp_path, *SMALL)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"+ {RUN}: +experiment=atis_slot_value method=erm seed=0" in first.stdout
    assert "+ python -m robustnlu -m hydra/sweeper=joblist" in first.stdout  # launched as a sweep job
    record = tmp_path / "records" / RUN
    assert sorted(p.name for p in record.iterdir()) == ["meta.json", "metrics.csv", "predictions", "results.json"]
    results = json.loads((record / "results.json").read_text())
    assert results["scenario"] == {"dataset": "atis", "drift": "slot_value", "partial": False, "validation": "iid"}
    assert results["epochs_trained"] == 1 and results["precision"] == "32-true"
    meta = json.loads((record / "meta.json").read_text())
    assert meta["part"] == "A" and "trainer.max_epochs=5" in meta["command"] and "trainer.max_epochs=1" in meta["command"]
    test_rows = lzma.decompress((record / "predictions" / "test.jsonl.xz").read_bytes()).decode().splitlines()
    assert 0 < len(test_rows) < results["sizes"]["test"]  # limit_test_batches=2
    assert all({"uid", "pred_intent", "pred_tags"} <= set(json.loads(row)) for row in test_rows)
    assert not (tmp_path / "runs" / RUN / "checkpoints").exists()  # the record is what is kept

    again = reproduce(tmp_path, *SMALL)
    assert again.returncode == 0 and "+ python -m robustnlu" not in again.stdout
    assert "1 of 1 planned jobs recorded" in again.stdout


@pytest.mark.parametrize(("args", "line"), [
    (["trainer.max_epochs=-1"], f"error: {RUN}: trainer.max_epochs: must be >= 1 (got -1)"),
    (["--only", "atis-nothing"], "error: --only: no job of the study is named atis-nothing (--list prints them)"),
])
def test_a_bad_override_or_run_name_fails_once_before_any_training(tmp_path, args, line):
    proc = reproduce(tmp_path, *args)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line]
    assert "+ python -m robustnlu" not in proc.stdout
    assert not (tmp_path / "records").exists() and not (tmp_path / "runs").exists()
