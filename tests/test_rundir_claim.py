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
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import ModelCheckpoint

from integration_helpers import CONF, another_hydra_apps_output, file_bytes
from robustnlu.errors import ConfigError
from robustnlu.resume import RelocatableModelCheckpoint
from robustnlu.rundir_claim import CLAIMS, RunDirOwnership, claim, undo, unclaim
from robustnlu.runlock import LOCK_NAME, acquire, holder, release
from robustnlu.seqdrift.artifact import SPLIT_FILE, STATS_FILE, STATS_TABLE_FILE
from robustnlu.seqdrift.entries import SUMS_FILE
from robustnlu.sweep_jobs import MULTIRUN_FILE, changed_settings, flatten

#: what ``python -m robustnlu.seqdrift`` writes into its folder besides Hydra's files
SEQDRIFT_FILES = (SPLIT_FILE, STATS_FILE, SUMS_FILE, STATS_TABLE_FILE)
#: what ``python -m robustnlu.noise`` writes into its folder besides Hydra's job log: nothing (its
#: noised copy goes to ``out_dir``; conf/noise_dataset.yaml saves no ``.hydra/`` record), as a
#: launch shows (tests/noise/test_cli.py)
NOISE_FILES = ()


@pytest.fixture(autouse=True)
def no_claims_left():
    yield
    for path in list(CLAIMS):
        unclaim(path)


def composed(config: str, *overrides: str) -> DictConfig:
    """The config of the robustnlu app ``config`` (conf/<config>.yaml) with Hydra's settings, as its
    Hydra app composes it (the one its ``.hydra/hydra.yaml`` and a sweep's ``multirun.yaml`` record)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config, overrides=list(overrides), return_hydra_config=True)


def owner(cfg: DictConfig) -> RunDirOwnership:
    """The `RunDirOwnership` callback of the app whose config is ``cfg`` (`composed`), as Hydra makes it."""
    return instantiate(cfg.hydra.callbacks.run_dir)


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
    (job / "__main__.log").write_text("")
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


def test_a_folder_holding_another_hydra_apps_record_is_refused_and_one_of_robustnlus_is_not(tmp_path):
    """``hydra.run.dir`` pointed at another tool's Hydra output: its ``.hydra/`` is no file of
    robustnlu's that a run may write over. Robustnlu's apps' records (Hydra's settings as Hydra
    saves them, composed here) and an empty ``.hydra/`` count as empty, as before."""
    other = another_hydra_apps_output(tmp_path / "other")
    before = file_bytes(other)
    assert sorted(before) == [".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "other_app.log"]
    with pytest.raises(ConfigError, match=r"holds files \(\.hydra/ of another Hydra app, other_app\.log\) and is not a robustnlu run"):
        claim(other, exclusive=True, before_creation=True)
    assert file_bytes(other) == before
    claim(other, exclusive=False, before_creation=True)  # the other apps may write beside files
    for config in ("config", "seqdrift"):
        ours = tmp_path / config
        (ours / ".hydra").mkdir(parents=True)
        settings = composed(config).hydra
        (ours / ".hydra" / "hydra.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create({"hydra": settings})))
        claim(ours, exclusive=True, before_creation=True)
    (tmp_path / "empty" / ".hydra").mkdir(parents=True)
    claim(tmp_path / "empty", exclusive=True, before_creation=True)
    (tmp_path / "cut" / ".hydra").mkdir(parents=True)
    (tmp_path / "cut" / ".hydra" / "config.yaml").write_text("lr: 0.1\n")  # no hydra.yaml: whose it is is unknown
    with pytest.raises(ConfigError, match=r"\(\.hydra/ of another Hydra app\)"):
        claim(tmp_path / "cut", exclusive=True, before_creation=True)


def refused(start, cfg, capsys) -> str:
    """What the owner's callback ``start`` (``on_run_start``, ``on_multirun_start``) printed as it
    refused ``cfg``'s folder: it exits with 2."""
    with pytest.raises(SystemExit) as ended:
        start(cfg)
    assert ended.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("app, outputs, log", [("seqdrift", SEQDRIFT_FILES, "seqdrift.log"),
                                               ("noise_dataset", NOISE_FILES, "__main__.log")])
def test_the_seqdrift_and_noise_apps_refuse_another_apps_output_and_a_users_files_and_write_their_own_folder_again(
        app, outputs, log, tmp_path, capsys):
    """conf/seqdrift.yaml's and conf/noise_dataset.yaml's callbacks claim the folder as training's
    does (`claim`, ``exclusive``): a folder holding another Hydra app's record, or a file of the
    user's, is one line, exit 2, and left as it was; a folder of an earlier launch (its ``outputs``,
    Hydra's record and log) is its own and is written again, as a sweep's job is when its sweep is
    launched again. The lock is taken and released, and a live holder is refused."""
    other = another_hydra_apps_output(tmp_path / "other")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("the user's\n")
    for folder, listed in ((other, ".hydra/ of another Hydra app, other_app.log"), (docs, "notes.txt")):
        before = file_bytes(folder)
        cfg = composed(app, f"hydra.run.dir={folder}")
        assert refused(owner(cfg).on_run_start, cfg, capsys) == (
            f"error: hydra.run.dir: {folder} holds files ({listed}) and is not a robustnlu run directory; a run "
            "needs a new or empty folder, or its own run directory\n")
        assert file_bytes(folder) == before
    earlier = tmp_path / "earlier"
    (earlier / ".hydra").mkdir(parents=True)
    cfg = composed(app, f"hydra.run.dir={earlier}")
    (earlier / ".hydra" / "hydra.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create({"hydra": cfg.hydra})))
    for name in (*outputs, log):
        (earlier / name).write_text("an earlier launch's\n")
    owner(cfg).on_run_start(cfg)
    assert holder(earlier)["pid"] == os.getpid()
    owner(cfg).on_run_end(cfg)
    assert holder(earlier) is None
    job = tmp_path / "job"  # a sweep's job launched again: its folder holds its own record and outputs
    (job / ".hydra").mkdir(parents=True)
    for name in outputs:
        (job / name).write_text("{}")
    settings = cfg.hydra.callbacks.run_dir
    claim(job, settings.exclusive, before_creation=False, outputs=settings.outputs)
    assert holder(job)["pid"] == os.getpid()
    unclaim(job)
    assert sorted(p.name for p in job.iterdir()) == sorted([".hydra", *outputs])
    (job / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(ConfigError, match=f"is in use by process {os.getppid()}"):
        claim(job, settings.exclusive, before_creation=False, outputs=settings.outputs)
    assert sorted(p.name for p in job.iterdir()) == sorted([".hydra", LOCK_NAME, *outputs])
    assert sorted(settings.outputs) == sorted(outputs)
    claim(tmp_path / "free", exclusive=False, before_creation=True)  # the other apps take no lock
    assert holder(tmp_path / "free") is None


def test_a_sweep_into_another_hydra_apps_multirun_is_refused_and_one_of_robustnlus_is_not(tmp_path, capsys):
    """Hydra's ``multirun.yaml`` is a sweep's own file only where a robustnlu sweep wrote it (its
    settings name `RunDirOwnership`): the sweeper would write its own over another app's. Refused
    before anything is written; each robustnlu app's record, as its sweeper writes it, is its own
    (the product sweeper keeps it as ``.multirun/<n>.yaml``)."""
    other = another_hydra_apps_output(tmp_path / "other", multirun=True)
    before = file_bytes(other)
    assert MULTIRUN_FILE in before and "0/.hydra/hydra.yaml" in before and "1/.hydra/hydra.yaml" in before
    for config in ("config", "seqdrift", "noise_dataset"):
        cfg = composed(config, f"hydra.sweep.dir={other}")
        assert refused(owner(cfg).on_multirun_start, cfg, capsys) == (
            f"error: hydra.sweep.dir: {other} holds files ({MULTIRUN_FILE} of another Hydra app) and is not a sweep "
            "directory; a sweep needs a new or empty folder, or its own sweep directory\n")
        assert file_bytes(other) == before
        ours = tmp_path / config
        ours.mkdir()
        cfg = composed(config, f"hydra.sweep.dir={ours}")
        (ours / MULTIRUN_FILE).write_text(OmegaConf.to_yaml(cfg))  # as the product sweeper writes it
        owner(cfg).on_multirun_start(cfg)
        assert sorted(p.name for p in ours.iterdir()) == [MULTIRUN_FILE]


def test_a_users_log_file_is_foreign_and_never_removed(tmp_path):
    """Only Hydra's job logs of robustnlu's apps (``__main__.log``, ``seqdrift.log``, ``evaluate.log``)
    are robustnlu's: a user's ``notes.log`` makes a folder one with files, stays where a job folder of
    unknown history is cleaned up, and stays where an error restores a resumable run's Hydra files."""
    notes = tmp_path / "notes"
    (notes / ".hydra").mkdir(parents=True)
    (notes / "notes.log").write_text("the user's\n")
    with pytest.raises(ConfigError, match=r"holds files \(notes\.log\) and is not a robustnlu run"):
        claim(notes, exclusive=True, before_creation=True)
    undo(notes, keep=False)  # never claimed: a job of a launcher in another process
    assert (notes / "notes.log").read_text() == "the user's\n"
    run = tmp_path / "run"
    run.mkdir()
    (run / "status.json").write_text('{"state": "interrupted"}')
    claim(run, exclusive=True, before_creation=True)
    (run / "__main__.log").write_text("Hydra's\n")
    (run / "notes.log").write_text("the user's, written meanwhile\n")
    undo(run, keep=True)
    assert sorted(p.name for p in run.iterdir()) == ["notes.log", "status.json"]


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
