"""Unit tests of the run directory's ownership (robustnlu/rundir_claim.py), its lock
(robustnlu/runlock.py), the settings a resume compares (robustnlu/resume.py) and the model
selection of a moved run directory. The CLI cases are in tests/test_run_dir_safety.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from robustnlu.errors import ConfigError
from robustnlu.resume import RelocatableModelCheckpoint
from robustnlu.rundir_check import changed_settings, flatten
from robustnlu.rundir_claim import CLAIMS, claim, undo, unclaim
from robustnlu.runlock import LOCK_NAME, acquire, holder, release


@pytest.fixture(autouse=True)
def no_claims_left():
    yield
    for path in list(CLAIMS):
        unclaim(path)


def test_a_new_folder_is_removed_with_the_parents_it_needed_and_no_other(tmp_path):
    (tmp_path / "keep").mkdir()
    run = tmp_path / "keep" / "a" / "b" / "run"
    found = claim(run, exclusive=True, before_creation=True)
    assert run.is_dir() and found.created == [run, run.parent, run.parent.parent]
    assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()
    (run / ".hydra").mkdir()
    (run / "config.yaml").write_text("x: 1\n")
    undo(run, keep=False)
    assert (tmp_path / "keep").is_dir() and not (tmp_path / "keep" / "a").exists()


def test_a_parent_another_job_wrote_into_meanwhile_stays(tmp_path):
    run = tmp_path / "sweep" / "job0"
    claim(run, exclusive=False, before_creation=True)
    (tmp_path / "sweep" / "job1").mkdir()  # a parallel job of the same sweep
    undo(run, keep=False)
    assert not run.exists() and (tmp_path / "sweep" / "job1").is_dir()


def test_an_existing_run_keeps_everything_but_what_the_invocation_added_and_gets_its_hydra_files_back(tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (run / "__main__.log").write_text("first session\n")
    (run / "status.json").write_text('{"state": "running"}')
    claim(run, exclusive=True, before_creation=True)
    (run / ".hydra" / "overrides.yaml").write_text("- seed=5\n")  # what Hydra does next
    (run / ".hydra" / "hydra.yaml").write_text("new\n")
    (run / "__main__.log").write_text("first session\nsecond\n")
    (run / "new.txt").write_text("added\n")
    undo(run, keep=False)
    assert sorted(p.name for p in run.rglob("*")) == [".hydra", "__main__.log", "overrides.yaml", "status.json"]
    assert (run / ".hydra" / "overrides.yaml").read_text() == "- seed=0\n"
    assert (run / "__main__.log").read_text() == "first session\n"


def test_a_job_folder_of_unknown_history_is_removed_only_if_it_holds_nothing_but_hydras_files(tmp_path):
    job = tmp_path / "job"
    (job / ".hydra").mkdir(parents=True)
    (job / "robustnlu.log").write_text("")
    undo(job, keep=False)  # never claimed: a job of a launcher in another process
    assert not job.exists()
    (job / ".hydra").mkdir(parents=True)
    (job / "mine.txt").write_text("the user's")
    undo(job, keep=False)
    assert (job / "mine.txt").is_file()


def test_a_job_folder_another_live_process_holds_is_refused_and_left_as_it_was(tmp_path):
    """A sweep launched again while a job of the earlier launch still prepares its data (its folder
    holds only Hydra's files and that job's lock): the second claim is refused, nothing removed."""
    job = tmp_path / "job"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (job / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(ConfigError, match="is in use by process"):
        claim(job, exclusive=True, before_creation=False)
    assert sorted(p.name for p in job.rglob("*")) == sorted([".hydra", LOCK_NAME, "overrides.yaml"])


def test_a_folder_with_files_that_is_not_a_run_is_refused_and_left_as_it_was(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(5):
        (docs / f"f{i}").write_text("")
    with pytest.raises(ConfigError, match=r"holds files \(f0, f1, f2 and 2 more\) and is not a robustnlu run"):
        claim(docs, exclusive=True, before_creation=True)
    assert sorted(p.name for p in docs.iterdir()) == [f"f{i}" for i in range(5)]
    claim(docs, exclusive=False, before_creation=True)  # the other apps may write beside files


def test_a_lock_alone_accepts_a_folder_of_files_but_not_one_another_live_process_holds(tmp_path):
    """``lock=True`` without ``exclusive`` (the SeqDrift app, whose job writes its split into its
    folder again): the folder's files are no reason to refuse it, a live holder is; the lock is
    released at the end, and an error removes it with what the invocation added."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "split.json").write_text("{}")  # an earlier launch's split
    claim(job, exclusive=False, before_creation=True, lock=True)
    assert holder(job)["pid"] == os.getpid()
    unclaim(job)
    assert sorted(p.name for p in job.iterdir()) == ["split.json"]
    claim(job, exclusive=False, before_creation=True, lock=True)
    (job / "stats.json").write_text("{}")
    undo(job, keep=False)
    assert sorted(p.name for p in job.iterdir()) == ["split.json"]
    (job / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(ConfigError, match=f"is in use by process {os.getppid()}"):
        claim(job, exclusive=False, before_creation=False, lock=True)
    assert sorted(p.name for p in job.iterdir()) == [LOCK_NAME, "split.json"]
    claim(tmp_path / "free", exclusive=False, before_creation=True)  # the other apps take no lock
    assert holder(tmp_path / "free") is None


def test_the_lock_names_a_live_holder_takes_over_a_dead_ones_and_is_released_only_by_its_owner(tmp_path, capsys):
    host = socket.gethostname()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": host}))
    with pytest.raises(ConfigError, match=f"is in use by process {os.getppid()} on {host}"):
        acquire(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": dead.pid, "host": host}))
    acquire(tmp_path)
    assert f"taking over the lock of process {dead.pid}" in capsys.readouterr().err
    assert holder(tmp_path)["pid"] == os.getpid()
    acquire(tmp_path)  # its own lock: taken again without a word
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": host}))
    release(tmp_path)  # not ours: stays
    assert holder(tmp_path)["pid"] == os.getppid()


def test_a_lock_of_an_earlier_instance_of_this_slurm_job_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "node-that-died", "slurm_job_id": "4242"}))
    acquire(tmp_path)
    assert holder(tmp_path) | {"since": None} == {"pid": os.getpid(), "host": socket.gethostname(),
                                                  "slurm_job_id": "4242", "since": None}


def test_changed_settings_leave_out_where_a_run_writes_and_how_it_logs():
    stored = {"paths": {"output_dir": "/a/run"}, "logger": {"csv": {"save_dir": "/a/run"}}, "seed": 0,
              "callbacks": {"model_checkpoint": {"dirpath": "/a/run/checkpoints"}, "last_checkpoint": {"every_minutes": 10}},
              "optimizer": {"lr": 1e-4, "betas": [0.9, 0.999]}}
    current = {"paths": {"output_dir": "/b/moved"}, "logger": {"wandb": {"project": "p"}}, "seed": 0,
               "callbacks": {"model_checkpoint": {"dirpath": "/b/moved/checkpoints"}, "last_checkpoint": {"every_minutes": 1}},
               "optimizer": {"lr": 1e-4, "betas": [0.9, 0.99]}, "resume": True}
    assert changed_settings(stored, current) == {"optimizer.betas": ([0.9, 0.999], [0.9, 0.99])}
    assert flatten({"a": {"b": {}}, "c": [1]}) == {"a.b": {}, "c": [1]}


def test_a_moved_run_directory_keeps_its_best_score_and_its_best_path_moves_with_it(tmp_path):
    old, new = str(tmp_path / "old" / "checkpoints"), str(tmp_path / "new" / "checkpoints")
    state = {"dirpath": old, "best_model_score": torch.tensor(0.75), "best_model_path": f"{old}/best-epoch001.ckpt",
             "best_k_models": {f"{old}/best-epoch001.ckpt": torch.tensor(0.75)}, "kth_best_model_path": "",
             "kth_value": torch.tensor(0.75), "last_model_path": "", "monitor": "valid/combined", "current_score": None}
    lightning = ModelCheckpoint(dirpath=new, monitor="valid/combined", mode="max")
    with pytest.warns(UserWarning, match="dirpath has changed"):
        lightning.load_state_dict(dict(state))
    assert lightning.best_model_score is None  # what made any later epoch "best"
    ours = RelocatableModelCheckpoint(dirpath=new, monitor="valid/combined", mode="max")
    ours.load_state_dict(dict(state))
    assert float(ours.best_model_score) == 0.75 and ours.best_model_path == f"{new}/best-epoch001.ckpt"
    assert list(ours.best_k_models) == [f"{new}/best-epoch001.ckpt"]


def test_an_unreadable_lock_is_waited_on_while_young_and_taken_over_when_old(tmp_path, monkeypatch, capsys):
    lock = tmp_path / LOCK_NAME
    lock.write_text("")  # created, not yet written
    monkeypatch.setattr("robustnlu.runlock.UNREADABLE_S", 0.3)
    started = time.monotonic()
    acquire(tmp_path)  # waits until it is old enough to be a dead writer's
    assert time.monotonic() - started >= 0.25
    assert holder(tmp_path)["pid"] == os.getpid()
    assert "taking over the lock of process ?" in capsys.readouterr().err
