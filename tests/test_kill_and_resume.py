"""A run killed with SIGKILL in mid-epoch and rerun with ``resume=true`` in its run directory
ends with the same result as the uninterrupted run (robustnlu/resume.py).
Everything runs through the CLI in subprocesses, the kill included."""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import time

import pytest
import torch
from omegaconf import OmegaConf

from integration_helpers import FAST, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.checkpoint import HYPER_PARAMETERS
from robustnlu.errors import ResumeError
from robustnlu.resume import LastCheckpoint, ResumePoint, resume_point
from robustnlu.rundir_check import check_run_dir

STEPS_PER_EPOCH = 15  # 240 training utterances in batches of 16
#: a learning rate at which 3 epochs of the tiny encoder learn something (with FAST's 5e-3 the
#: model predicts one intent for every test utterance, and equal predictions would prove little)
LEARNING = "optimizer.lr=2e-2"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_snips_sample_jsonl(tmp_path_factory.mktemp("data"))


def train(sample, run_dir, *extra):
    args = [*FAST, *jsonl_overrides(sample), "trainer.max_epochs=3", "callbacks.last_checkpoint.every_minutes=null",
            "trainer.log_every_n_steps=1",  # a metrics.csv row per step: the resumed log must have each once
            "callbacks.last_checkpoint.every_n_train_steps=4", f"paths.cache_dir={run_dir.parent / 'cache'}",
            f"hydra.run.dir={run_dir}", LEARNING, *extra]
    return run_cli(args, cwd=run_dir.parent)


def read(run_dir, name):
    path = run_dir / name
    return json.loads(path.read_text()) if name.endswith(".json") else path.read_text()


@pytest.fixture(scope="module")
def straight(sample, tmp_path_factory):
    """The uninterrupted run, which the killed and the full-disk run resume to: tests only read it."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    done = train(sample, run_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_result(sample, straight, tmp_path):
    killed = tmp_path / "killed"
    kill_step = STEPS_PER_EPOCH + 7  # epoch 1, batch 7: two steps after the mid-epoch checkpoint at step 20
    started = time.monotonic()
    dead = train(sample, killed, "+callbacks.kill._target_=integration_helpers.KillAtStep",
                 f"+callbacks.kill.step={kill_step}", "logger=wandb")
    killed_for = time.monotonic() - started
    assert dead.returncode == -signal.SIGKILL
    assert read(killed, "status.json")["state"] == "running" and not (killed / "results.json").exists()
    ckpt = torch.load(killed / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert ckpt["global_step"] == 20 and ckpt["epoch"] == 1
    assert ckpt["SLUDataModule"] == {"sampler_epoch": 1, "batches_done": 20 - STEPS_PER_EPOCH}
    fit_before = ckpt["callbacks"]["LastCheckpoint"]["fit_time_s"]  # trainer.fit up to the save at step 20
    assert 0 < fit_before < killed_for  # less than the killed process lived: its start-up is not fit time

    # the killing callback is a setting of the killed run only: named as one that may change
    resumed = train(sample, killed, "resume=true", "logger=wandb", "+resume_override=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    runs = sorted((killed / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and len({r.name.rsplit("-", 1)[1] for r in runs}) == 1  # one W&B run, continued
    a, b = read(straight, "results.json"), read(killed, "results.json")
    assert b["resumed_from"] == {"checkpoint": "checkpoints/last.ckpt", "global_step": 20, "epoch": 1,
                                 "fit_time_s": fit_before}
    assert a["resumed_from"] is None
    assert a["optimizer_fused"] is True and b["optimizer_fused"] is True  # optimizer.fused=auto on the CPU
    assert b["epochs_trained"] == a["epochs_trained"] and b["best_checkpoint"] == a["best_checkpoint"]
    for split in ("valid", "test"):
        assert b["metrics"][split] == pytest.approx(a["metrics"][split], rel=1e-6, abs=1e-9), split
        assert read(killed, f"predictions/{split}.jsonl") == read(straight, f"predictions/{split}.jsonl")
    predicted = [json.loads(line)["pred_intent"] for line in read(straight, "predictions/test.jsonl").splitlines()]
    assert len(set(predicted)) >= 3  # a model that tells utterances apart, not one intent for all
    assert read(killed, "status.json")["resumed_from"]["global_step"] == 20
    # the per-epoch log continues where the checkpoint stopped: every row of the uninterrupted run,
    # once (the killed run's rows of steps 20-21 are trained again; Lightning's logger kept only
    # the resumed part), with the same numbers, the means over the resumed epoch included
    logs = [list(csv.DictReader(io.StringIO(read(run, "csv/metrics.csv")))) for run in (straight, killed)]
    assert [(r["epoch"], r["step"]) for r in logs[1]] == [(r["epoch"], r["step"]) for r in logs[0]]
    assert len(logs[0]) > 3 * STEPS_PER_EPOCH and logs[0][0]["step"] == "0"
    for row_a, row_b in zip(*logs):
        assert {k for k, v in row_b.items() if v} == {k for k, v in row_a.items() if v}
        for key, value in row_a.items():
            if value and key not in ("epoch", "step"):
                assert float(row_b[key]) == pytest.approx(float(value), rel=1e-5, abs=1e-7), (row_a["step"], key)
    assert read(killed, "status.json")["state"] == "finished"
    # finished: last.ckpt removed (keep_last_checkpoint=false), the best checkpoints hold the same weights
    assert not (straight / "checkpoints" / "last.ckpt").exists() and not (killed / "checkpoints" / "last.ckpt").exists()
    final_a = torch.load(straight / a["best_checkpoint"], weights_only=True, map_location="cpu")
    final_b = torch.load(killed / b["best_checkpoint"], weights_only=True, map_location="cpu")
    assert final_b["global_step"] == final_a["global_step"] == (final_a["epoch"] + 1) * STEPS_PER_EPOCH
    for key, value in final_a["state_dict"].items():
        torch.testing.assert_close(final_b["state_dict"][key], value, rtol=1e-5, atol=1e-6, msg=key)

    # once finished, resume=true returns the stored result without training again
    before = (killed / "results.json").stat().st_mtime_ns
    again = train(sample, killed, "resume=true")
    assert again.returncode == 0 and "has finished" in again.stdout
    assert (killed / "results.json").stat().st_mtime_ns == before


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    torch.save({"global_step": 7, "epoch": 0, "state_dict": {}, "hyper_parameters": dict.fromkeys(HYPER_PARAMETERS)},
               tmp_path / "checkpoints" / "last.ckpt")  # what resume_point reads of a checkpoint
    return tmp_path


def test_a_run_stopped_by_ctrl_c_says_so_and_how_to_continue_it(sample, tmp_path):
    """~10 s: SIGINT (Ctrl-C) in epoch 1. Lightning shuts down and exits with 1 (a SystemExit whose
    context is the KeyboardInterrupt): status.json says interrupted by the KeyboardInterrupt, not
    "SystemExit: 1", and stderr says how to continue the run; that command (the same overrides)
    continues it from its last checkpoint to the end."""
    run_dir = tmp_path / "stopped"
    ctrl_c = ["+callbacks.signal._target_=integration_helpers.SignalAtStep", "+callbacks.signal.signame=SIGINT"]
    stopped = train(sample, run_dir, *ctrl_c, f"+callbacks.signal.step={STEPS_PER_EPOCH + 6}")
    assert stopped.returncode == 1
    assert read(run_dir, "status.json")["state"] == "interrupted"
    assert read(run_dir, "status.json")["error"] == "KeyboardInterrupt"
    hint = (f"{run_dir}: interrupted (KeyboardInterrupt); to continue it: python -m robustnlu <the same overrides> "
            f"resume=true hydra.run.dir={run_dir}")
    assert hint in stopped.stderr.splitlines()
    resumed = train(sample, run_dir, *ctrl_c, "+callbacks.signal.step=null", "+resume_override=[callbacks.signal]",
                    "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read(run_dir, "results.json")["resumed_from"]["global_step"] == 20  # the mid-epoch save after step 20


def settings(run_dir, resume):
    """A run config naming ``run_dir`` as `check_run_dir` reads it (no config.yaml there: a resume is refused)."""
    return OmegaConf.create({"paths": {"output_dir": str(run_dir)}, "resume": resume})


def test_without_resume_a_run_starts_from_scratch_only_where_no_checkpoint_is(run_dir, monkeypatch):
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    with pytest.raises(ResumeError, match=r"holds an unfinished run \(checkpoints/last.ckpt\); resume=true continues it"):
        check_run_dir(settings(run_dir, resume=False))
    with pytest.raises(ResumeError, match="has no config.yaml to tell which settings its run was started with"):
        check_run_dir(settings(run_dir, resume=True))
    assert resume_point(run_dir, resume=True) == ResumePoint(checkpoint=run_dir / "checkpoints" / "last.ckpt",
                                                            global_step=7, epoch=0)
    for resume in (False, True):  # nothing there yet: start
        assert check_run_dir(settings(run_dir / "elsewhere", resume)) is None
        assert resume_point(run_dir / "elsewhere", resume=resume) == ResumePoint()


def test_a_resumed_run_records_the_fit_time_of_the_sessions_before(run_dir):
    """The fit time a checkpoint records (LastCheckpoint's state) is the resumed run's
    ``resumed_from.fit_time_s``; a session resumed from it saves the sum of both, so over several
    resumes it adds up. A checkpoint that records none (written before the clock) gives None."""
    assert resume_point(run_dir, resume=True).record() == {"checkpoint": "checkpoints/last.ckpt", "global_step": 7,
                                                           "epoch": 0}
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    torch.save({**ckpt, "callbacks": {"LastCheckpoint": {"fit_time_s": 12.5}}}, run_dir / "checkpoints" / "last.ckpt")
    point = resume_point(run_dir, resume=True)
    assert point.fit_time_s == 12.5 and point.record()["fit_time_s"] == 12.5
    clock = LastCheckpoint(str(run_dir / "checkpoints"))
    clock.load_state_dict({"fit_time_s": 12.5})
    clock.fit_started = time.monotonic() - 3.0  # this session has been fitting for 3 s
    assert clock.state_dict()["fit_time_s"] == pytest.approx(15.5, abs=0.2)


def test_a_requeued_slurm_job_resumes_without_being_asked(run_dir, monkeypatch):
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert resume_point(run_dir, resume=False).global_step == 7
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # the first start of a job: a new run, refused over a checkpoint
    with pytest.raises(ResumeError, match="holds an unfinished run"):
        check_run_dir(settings(run_dir, resume=False))


def test_a_finished_run_is_not_resumed_but_an_unfinished_one_is(run_dir):
    (run_dir / "results.json").write_text(json.dumps({"metrics": {}}))
    (run_dir / "status.json").write_text(json.dumps({"state": "running"}))  # killed while writing its results
    assert resume_point(run_dir, resume=True).global_step == 7
    (run_dir / "status.json").write_text(json.dumps({"state": "finished"}))
    assert resume_point(run_dir, resume=True) == ResumePoint(results={"metrics": {}})


#: the trainer's epoch shorter than the sampler's (10 of 15 batches): the data position must follow
#: the trainer's epochs, not the sampler's
LIMITED = "+trainer.limit_train_batches=10"


@pytest.fixture(scope="module")
def limited_straight(sample, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("limited") / "straight"
    done = train(sample, run_dir, LIMITED)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


@pytest.mark.parametrize("kill", [
    ["+callbacks.kill._target_=integration_helpers.KillAtStep", "+callbacks.kill.step=11"],  # right after epoch 0's save
    ["+callbacks.kill._target_=integration_helpers.KillAtStep", "+callbacks.kill.step=13"],  # mid-epoch 1
    ["+callbacks.kill._target_=integration_helpers.KillInValidation", "+callbacks.kill.epoch=1",
     "+callbacks.kill.batch=0"],  # during epoch 1's validation
], ids=["after-epoch-0", "mid-epoch", "in-validation"])
def test_a_run_with_shortened_epochs_killed_anywhere_resumes_to_the_uninterrupted_result(sample, limited_straight,
                                                                                         tmp_path, kill):
    killed = tmp_path / "killed"
    assert train(sample, killed, LIMITED, *kill).returncode == -signal.SIGKILL
    resumed = train(sample, killed, LIMITED, "resume=true", "+resume_override=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = read(limited_straight, "results.json"), read(killed, "results.json")
    assert b["resumed_from"] is not None and a["epochs_trained"] == b["epochs_trained"] == 3
    assert b["best_checkpoint"] == a["best_checkpoint"]
    for split in ("valid", "test"):
        assert b["metrics"][split] == pytest.approx(a["metrics"][split], rel=1e-6, abs=1e-9), split
        assert read(killed, f"predictions/{split}.jsonl") == read(limited_straight, f"predictions/{split}.jsonl")


@pytest.fixture
def small_disk(tmp_path):
    """A 40 MB tmpfs (the tests run as root, as CI does)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_fails_in_one_line_with_a_true_status_and_resumes_from_the_last_complete_checkpoint(
        sample, small_disk, straight):
    run_dir, filler = small_disk / "run", small_disk / "filler"
    full = train(sample, run_dir, "+callbacks.fill._target_=integration_helpers.FillDiskAtStep",
                 "+callbacks.fill.step=6", f"+callbacks.fill.path={filler}")
    assert full.returncode == 2, full.stderr[-3000:]
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {run_dir}: cannot write ")
    assert "No space left on device; resume=true continues from the last complete checkpoint" in errors[0]
    status = read(run_dir, "status.json")
    assert status["state"] == "failed" and status["error"] == errors[0][len("error: "):]
    assert not list(run_dir.rglob("*.tmp"))  # no half-written checkpoint, under any name
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert last["global_step"] == 4  # the save of step 8 failed: the complete one of step 4 stays

    filler.unlink()
    resumed = train(sample, run_dir, "resume=true", "+resume_override=[callbacks.fill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = read(straight, "results.json"), read(run_dir, "results.json")
    assert b["resumed_from"]["global_step"] == 4
    for split in ("valid", "test"):
        assert b["metrics"][split] == pytest.approx(a["metrics"][split], rel=1e-6, abs=1e-9), split
