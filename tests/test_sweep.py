"""Sweeps that run for weeks: a job's folder is named by the job (robustnlu/sweep_jobs.py), and
``python -m robustnlu.sweep status|relaunch`` (robustnlu/sweep.py) tells what became of each job
of a sweep's job list and runs again only what has not finished.

The unit tests build sweep folders by hand; the integration tests train the tiny encoder: a
2-method × 2-seed sweep killed mid-way, relaunched, then launched again with a third seed (~2 min),
a sweep with other values into a copy of it as the kill left it (~15 s), and a sweep with a bad
value and a crash (~20 s); and run a SeqDrift sweep twice, its values in
either order (~15 s), and a SeqDrift job held while it reads, killed and run again (~15 s). The
efficiency protocol's sweeps: tests/efficiency/test_protocol.py."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.robustnlu_plugins.job_list_sweeper import read_jobs, with_overrides
from integration_helpers import CONF, FAST, SMALL_DRIFT, cli_env, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.efficiency.__main__ import SUBDIR
from robustnlu.errors import ConfigError
from robustnlu.rundir import RunDir, sweep_runs
from robustnlu.runlock import LOCK_NAME, holder
from robustnlu.seqdrift.artifact import STATS_TABLE_FILE
from robustnlu.sweep import main, relaunch
from robustnlu.sweep_state import sweep_status
from robustnlu.sweep_jobs import PRODUCT_SWEEPERS, job_hash, job_identity, keep_replaced, read_sweep


# ---------------------------------------------------------------------------- identity
def test_a_jobs_identity_is_its_overrides_whatever_their_order_spelling_and_neutral_settings():
    base = ["method=topk", "method.k=4", "seed=1", "optimizer.lr=1e-3", "+experiment=snips_slot_value"]
    same = ["optimizer.lr=0.001", "seed=1", "++experiment=snips_slot_value", "method.k=4", "method=topk",
            "resume=true", "paths.cache_dir=/elsewhere", "logger=wandb", "~callbacks.progress_bar",
            "callbacks.last_checkpoint.every_minutes=5", "keep_last_checkpoint=true"]
    assert job_hash(base) == job_hash(same) and len(job_hash(base)) == 8
    assert job_identity(base) == job_identity(same)
    others = (["method.k=5"], ["optimizer.lr=2e-3"], ["seed=2"], ["+model.crf=true"], ["~callbacks.early_stopping"])
    for other in others:
        changed = [o for o in base if o.split("=")[0] != other[0].split("=")[0]] + other
        assert job_hash(changed) != job_hash(base), other
    # a value as the basic sweeper passes it from a sweep is the value typed alone
    (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(["optimizer.lr=1e-3,2e-3"]), None)
    assert jobs[0] == ["optimizer.lr=0.001"] and job_hash(jobs[0]) == job_hash(["optimizer.lr=1e-3"])
    assert job_hash(["a={x: 1, y: [1, 2]}"]) == job_hash(["a={y: [1,2], x: 1}"])


def _subdir(overrides: list[str], config_name: str = "config") -> str:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    hydra_config = HydraConfig.instance()
    previous, hydra_config.cfg = hydra_config.cfg, None
    try:
        hydra_config.set_config(cfg)
        return str(cfg.hydra.sweep.subdir)
    finally:
        hydra_config.cfg = previous


def test_a_sweep_jobs_folder_is_named_by_scenario_method_seed_and_the_jobs_hash():
    one = ["method=topk", "seed=1", "optimizer.lr=1e-3", "drift=slot_context"]
    name = _subdir(one)
    assert name == f"snips-slot_context-full-iid-topk-seed1-{job_hash(one)}"
    assert _subdir([*reversed(one), "resume=true"]) == name
    assert _subdir([*one[:2], "optimizer.lr=2e-3", one[3]]) != name


def test_the_efficiency_protocols_and_a_seqdrift_sweeps_job_folders_are_named_by_the_job():
    """Their own hydra.sweep.subdir: the efficiency driver's (its mode, percentage and seed) and
    conf/seqdrift.yaml's (the scenario), each with the job's hash."""
    job = ["efficiency=topv2", "dataset=topv2_weather", "efficiency.percent=10", "seed=1"]
    assert _subdir([*job, SUBDIR]) == f"joint-10pct-seed1-{job_hash(job)}"
    assert _subdir([*reversed(job), SUBDIR]) == _subdir([*job, SUBDIR])
    job = ["dataset=atis", "drift=slot_value", "validation=ood", "drift.partial=true"]
    assert _subdir(job, "seqdrift") == f"atis-slot_value-partial-ood-{job_hash(job)}"
    assert _subdir([*reversed(job), "paths.cache_dir=elsewhere"], "seqdrift") == _subdir(job, "seqdrift")
    assert _subdir(["dataset=snips", "drift=none"], "seqdrift") == f"snips-{job_hash(['dataset=snips', 'drift=none'])}"


# ---------------------------------------------------------------------------- a sweep made by hand
def _multirun(sweep: Path, task: list[str], hydra: list[str] = (), params: dict | None = None,
              subdir: str = "${scenario}-${method.name}-seed${seed}-${job_hash:${hydra.overrides.task}}",
              sweeper: str = PRODUCT_SWEEPERS[0], cwd: Path | None = None, app: str = "config") -> None:
    sweep.mkdir(parents=True, exist_ok=True)
    record = {"hydra": {"overrides": {"task": list(task), "hydra": list(hydra)},
                        "sweeper": {"_target_": sweeper, "max_batch_size": None, "params": params},
                        "sweep": {"dir": str(sweep), "subdir": subdir},
                        "runtime": {"cwd": str(cwd or sweep.parent)}, "job": {"config_name": app}},
              "seed": 0}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(record))


def _job(sweep: Path, overrides: list[str], status: dict | None = None, results: bool = False,
         lock: dict | None = None, stats_table: bool = False) -> Path:
    folder = sweep / f"job-{job_hash(overrides)}"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if status is not None:
        (folder / "status.json").write_text(json.dumps(status))
    if results:
        (folder / "results.json").write_text(json.dumps({"seed": 0}))
    if stats_table:  # a SeqDrift job's last file
        (folder / STATS_TABLE_FILE).write_text("the statistics table\n")
    if lock is not None:
        (folder / LOCK_NAME).write_text(json.dumps(lock))
    return folder


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_job_list_is_the_basic_sweepers_product_with_its_params_first(tmp_path):
    _multirun(tmp_path / "s", ["method=erm,topk", "seed=0,1", "trainer.max_epochs=2"], params={"validation": "iid,ood"})
    jobs = read_sweep(tmp_path / "s").jobs()
    assert jobs == [[f"validation={v}", f"method={m}", f"seed={s}", "trainer.max_epochs=2"]
                    for v in ("iid", "ood") for m in ("erm", "topk") for s in (0, 1)]
    _multirun(tmp_path / "o", ["seed=0"], sweeper="hydra_plugins.robustnlu_plugins.optuna_sweeper.OptunaSweeper")
    assert read_sweep(tmp_path / "o").jobs() is None and read_sweep(tmp_path / "none") is None


def _states(sweep: Path) -> dict[str, tuple[str, str | None]]:
    return {" ".join(j.overrides): (j.state, j.error) for j in sweep_status(sweep)[1]}


def test_status_tells_each_job_of_the_list_finished_failed_running_interrupted_or_missing(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["seed=0,1,2,3,4,5"])
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    dead = {"pid": _dead_pid(), "host": socket.gethostname()}
    _job(sweep, ["seed=0"], {"state": "finished"}, results=True)
    _job(sweep, ["seed=1"], {"state": "failed", "error": "optimizer.lr: must be > 0 (got -1)", "overrides": ["seed=1"]})
    _job(sweep, ["seed=2"], {"state": "running"}, lock=me)
    _job(sweep, ["seed=3"], {"state": "running"}, lock=dead)  # SIGKILLed: its lock and status stay
    _job(sweep, ["seed=4"], {"state": "interrupted", "error": "SystemExit: -1"})
    _job(sweep, ["seed=7", "resume=true"], {"state": "finished"}, results=True)  # an earlier launch's job
    (sweep / "wandb").mkdir()  # not a job
    assert _states(sweep) == {"seed=0": ("finished", None), "seed=1": ("failed", "optimizer.lr: must be > 0 (got -1)"),
                              "seed=2": ("running", None), "seed=3": ("interrupted", None),
                              "seed=4": ("interrupted", "SystemExit: -1"), "seed=5": ("missing", None),
                              "seed=7 resume=true": ("finished", None)}
    assert [j.listed for j in sweep_status(sweep)[1]] == [True] * 6 + [False]
    assert main(["status", str(sweep)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("6 jobs (its multirun.yaml's job list): 1 finished, 1 failed, 1 running, "
                           "0 queued, 2 interrupted, 1 missing")
    failed = next(i for i, line in enumerate(out) if line.split()[0] == "failed")
    assert out[failed].split()[-1] == "seed=1"
    assert out[failed + 1].split(None, 1) == ["error:", "optimizer.lr: must be > 0 (got -1)"]
    assert out[-1].split() == ["finished", f"job-{job_hash(['seed=7'])}", "seed=7", "resume=true"]
    assert out[-2].startswith("1 folder(s) of jobs not in the job list")
    # a failed job's record without Hydra's .hydra/ (a job refused for a bad value) is found by its overrides
    (sweep / f"job-{job_hash(['seed=1'])}" / ".hydra" / "overrides.yaml").unlink()
    assert _states(sweep)["seed=1"][0] == "failed"


def test_status_into_a_pipe_its_reader_closed_ends_without_a_traceback(tmp_path):
    """``python -m robustnlu.sweep status DIR | head -1``: head closes the pipe before status has written."""
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["seed=0,1"])
    _job(sweep, ["seed=0"], {"state": "finished"}, results=True)
    proc = subprocess.Popen([sys.executable, "-m", "robustnlu.sweep", "status", str(sweep)], env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the command prints a line
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 1
    assert stderr == ""


@pytest.mark.parametrize("record,line", [
    ("hydra:\n  overrides: [seed=0,\n",
     "multirun.yaml:3: unreadable (ParserError: expected the node content, but found '<stream end>')"),
    ("hydra:\n  overrides:\n    task: [seed=range(]\n  job:\n    config_name: config\n  sweeper:\n    _target_: "
     + PRODUCT_SWEEPERS[0] + "\n",
     "multirun.yaml: cannot expand the sweep's overrides: cannot parse the overrides ['seed=range(']: no viable "
     "alternative at input 'range('; See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details"),
])
def test_status_of_a_sweep_whose_multirun_yaml_is_damaged_is_one_error_line(tmp_path, capsys, record, line):
    (tmp_path / "multirun.yaml").write_text(record)
    assert main(["status", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {tmp_path}/{line}"]


def test_status_of_a_jobs_folder_instead_of_its_sweep_is_one_error_line(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["seed=0,1"])
    job = _job(sweep, ["seed=0"], {"state": "finished"}, results=True)
    assert main(["status", str(job)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {job}: a run's folder, not a sweep directory (the folder of a sweep's job folders, "
        "its hydra.sweep.dir)"]


def test_a_job_whose_results_json_cannot_be_read_is_failed_naming_it_not_finished(tmp_path):
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["seed=0,1"])
    _job(sweep, ["seed=0"], {"state": "finished"}, results=True)
    cut = _job(sweep, ["seed=1"], {"state": "finished"}, results=True)
    (cut / "results.json").write_text('{"seed": 0, "metr')  # a copy cut short
    states = _states(sweep)
    assert states["seed=0"] == ("finished", None)
    assert states["seed=1"] == ("failed", f"{cut / 'results.json'}:1: invalid JSON: Unterminated string starting at")


@pytest.mark.parametrize("sweeper", [None, "hydra_plugins.robustnlu_plugins.optuna_sweeper.OptunaSweeper"])
def test_status_of_a_sweep_without_a_job_list_counts_the_jobs_its_folders_hold(tmp_path, capsys, sweeper):
    """An Optuna search (its trials decided as it goes) or a sweep whose multirun.yaml is gone."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    if sweeper is not None:
        _multirun(sweep, ["seed=0"], sweeper=sweeper)
    _job(sweep, ["optimizer.lr=1e-5"], {"state": "finished"}, results=True)
    _job(sweep, ["optimizer.lr=2e-5"], {"state": "finished"}, results=True)
    _job(sweep, ["optimizer.lr=3e-5"], {"state": "failed", "error": "x", "overrides": ["optimizer.lr=3e-5"]})
    assert main(["status", str(sweep)]) == 0
    summary = capsys.readouterr().out.splitlines()[0]
    assert summary.split(": ", 1)[1].startswith("3 jobs (")
    assert summary.endswith(": 2 finished, 1 failed, 0 running, 0 queued, 0 interrupted, 0 missing")


def test_status_tells_a_seqdrift_jobs_state_by_its_files_and_lock_and_refuses_apps_whose_jobs_record_none(
        tmp_path, capsys):
    """A SeqDrift job writes no status.json; it holds its folder's lock while it runs, as a
    training run does: finished once its statistics table is there (even where a later launch of
    it failed), failed where a failed launch left its record, running while a live process holds
    its lock, otherwise interrupted (its lock names a dead process, or it has none: its process is
    gone); relaunch leaves its sweep alone."""
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["dataset=snips", "validation=iid,ood", "drift=slot_value,slot_context", "drift.seed=0,1"],
              app="seqdrift")
    failed = {"state": "failed", "error": "dataset.train: no such file"}
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    dead = {"pid": _dead_pid(), "host": socket.gethostname()}
    _job(sweep, ["dataset=snips", "validation=iid", "drift=slot_value", "drift.seed=0"], stats_table=True)
    _job(sweep, ["dataset=snips", "validation=iid", "drift=slot_value", "drift.seed=1"], failed, stats_table=True)
    _job(sweep, ["dataset=snips", "validation=iid", "drift=slot_context", "drift.seed=0"], failed)
    _job(sweep, ["dataset=snips", "validation=iid", "drift=slot_context", "drift.seed=1"], lock=me)  # this process
    _job(sweep, ["dataset=snips", "validation=ood", "drift=slot_value", "drift.seed=0"], lock=dead)  # SIGKILLed
    _job(sweep, ["dataset=snips", "validation=ood", "drift=slot_value", "drift.seed=1"])  # killed before its lock
    _job(sweep, ["dataset=snips", "validation=ood", "drift=slot_context", "drift.seed=0"],
         lock={"pid": 1, "host": "another-node"})  # cannot be checked from here
    assert list(_states(sweep).values()) == [("finished", None), ("finished", None),
                                              ("failed", "dataset.train: no such file"), ("running", None),
                                              ("interrupted", None), ("interrupted", None), ("running", None),
                                              ("missing", None)]
    notes = [j.note for j in sweep_status(sweep)[1]]
    assert notes[3] is None and notes[4] == notes[5] == "started, its process is gone before stats.txt"
    assert notes[6] == "on another-node: not checked from here"
    shutil.rmtree(sweep / f"job-{job_hash(['dataset=snips', 'validation=iid', 'drift=slot_value', 'drift.seed=0'])}")
    assert _states(sweep)["dataset=snips validation=iid drift=slot_value drift.seed=0"] == ("missing", None)
    assert main(["status", str(sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(
        "8 jobs (its multirun.yaml's job list): 1 finished, 1 failed, 2 running, 0 queued, 2 interrupted, 2 missing")
    with pytest.raises(ConfigError) as refused:
        relaunch(sweep, dry_run=True)
    assert str(refused.value) == (f"{sweep}: a sweep of the 'seqdrift' app; relaunch runs training sweeps "
                                  f"(python -m robustnlu -m ...): run its command again with hydra.sweep.dir={sweep}")
    _multirun(tmp_path / "evaluate", ["checkpoint=a.ckpt,b.ckpt"], app="evaluate")
    with pytest.raises(ConfigError, match="a sweep of the 'evaluate' app; status reads the sweeps of python -m "
                                          "robustnlu and python -m robustnlu.seqdrift"):
        sweep_status(tmp_path / "evaluate")


def test_a_failed_job_queued_again_in_slurm_shows_its_error_as_its_previous_attempts(tmp_path, capsys, monkeypatch):
    """A job relaunched through Slurm and waiting there is ``queued``; the error its folder still
    records, and the traceback it left, are the attempt before's, not the queued job's: status shows
    them as such (``--json``: ``previous_error``, ``error`` null). Slurm's answer is given here
    (`slurm_queue`)."""
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["seed=0,1"])
    error = "RuntimeError: CUDA out of memory\n(the second line of its message)"
    crashed = _job(sweep, ["seed=0"], {"state": "failed", "error": error, "overrides": ["seed=0"],
                                       "traceback": "traceback.txt"})
    (crashed / "traceback.txt").write_text("Traceback (most recent call last):\n")
    _job(sweep, ["seed=1"], {"state": "failed", "error": "optimizer.lr: must be > 0 (got -1)", "overrides": ["seed=1"]})
    monkeypatch.setattr("robustnlu.sweep_state.slurm_queue", lambda path: {job_hash(["seed=0"]): ("1234", "PENDING")})
    assert main(["status", str(sweep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": 2 jobs (its multirun.yaml's job list): 0 finished, 1 failed, 0 running, 1 queued, "
                             "0 interrupted, 0 missing")
    assert [line.split() for line in lines[1:]] == [
        ["queued", f"job-{job_hash(['seed=0'])}", "seed=0"],
        "previous attempt's error: RuntimeError: CUDA out of memory; (the second line of its message)".split(),
        ["(Slurm", "job", "1234", "PENDING;", "previous", "attempt's", "traceback:", f"{crashed / 'traceback.txt'})"],
        ["failed", f"job-{job_hash(['seed=1'])}", "seed=1"],
        "error: optimizer.lr: must be > 0 (got -1)".split()]
    assert main(["status", "--json", str(sweep)]) == 0
    queued, failed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (queued["state"], queued["error"], queued["previous_error"]) == ("queued", None, error)
    assert queued["note"] == f"Slurm job 1234 PENDING; previous attempt's traceback: {crashed / 'traceback.txt'}"
    assert (failed["state"], failed["error"], failed["previous_error"]) == ("failed", "optimizer.lr: must be > 0 (got -1)",
                                                                            None)


def test_relaunch_runs_the_unfinished_jobs_with_the_sweeps_launcher_and_resume(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["method=erm,topk", "seed=0", "resume=false"],
              hydra=["hydra/launcher=slurm", "hydra.launcher.partition=gpu", f"hydra.sweep.dir={sweep}",
                     "hydra.sweeper.max_batch_size=2", "hydra.mode=MULTIRUN"])
    _job(sweep, ["method=erm", "seed=0", "resume=false"], {"state": "finished"}, results=True)
    running = _job(sweep, ["method=topk", "seed=0", "resume=false"], {"state": "running"},
                   lock={"pid": os.getpid(), "host": socket.gethostname()})
    assert relaunch(sweep, dry_run=True) == 0
    out = capsys.readouterr().out
    assert "1 running, 0 queued (left alone), 0 to run again" in out and "nothing to relaunch" in out
    assert relaunch(sweep, dry_run=False) == 0 and not (sweep / ".relaunch").exists()  # nothing run, nothing written
    (running / LOCK_NAME).unlink()  # its process is gone
    assert relaunch(sweep, dry_run=True) == 0
    out = capsys.readouterr().out
    command = next(line for line in out.splitlines() if line.startswith("+ cd "))
    assert command.startswith(f"+ cd {tmp_path} && {sys.executable} -m robustnlu -m hydra/launcher=slurm "
                              f"hydra.launcher.partition=gpu hydra.sweeper.max_batch_size=2 hydra.sweep.dir={sweep} "
                              "hydra/sweeper=joblist hydra.sweeper.jobs_file=")
    assert command.endswith(" resume=true") and "hydra.mode" not in command
    assert not (sweep / ".relaunch").exists()  # a dry run writes nothing
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({"jobs": [["method=topk", "seed=0"]]}))
    assert read_jobs(jobs_file) == [["method=topk", "seed=0"]]
    assert with_overrides(["method=topk", "resume=false", "seed=0"], ["resume=true"]) == \
        ["method=topk", "seed=0", "resume=true"]


def test_status_and_relaunch_list_the_jobs_of_every_sweep_launched_into_the_directory(tmp_path, capsys):
    """A sweep with other values into the same directory replaces its multirun.yaml: the product
    sweeper keeps the earlier one (`keep_replaced`) unless the new sweep holds all its jobs. Status
    lists the latest sweep's jobs, then the earlier one's it does not hold (one that never started
    too); relaunch runs each with the settings of the sweep that asked for it."""
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["method=erm", "seed=0,1"], hydra=["hydra/launcher=slurm", f"hydra.sweep.dir={sweep}"])
    first = (sweep / "multirun.yaml").read_bytes()
    assert keep_replaced(sweep, [["method=erm", f"seed={s}", "resume=true"] for s in (0, 1, 2)]) is None  # holds them
    assert not (sweep / ".multirun").exists()
    kept = keep_replaced(sweep, [["method=topk", "seed=0"]])
    assert kept == sweep / ".multirun" / "1.yaml" and kept.read_bytes() == first
    _multirun(sweep, ["method=topk", "seed=0,1"])  # the later sweep's record, with the default launcher
    _job(sweep, ["method=erm", "seed=0"], {"state": "finished"}, results=True)
    _job(sweep, ["method=topk", "seed=0"], {"state": "finished"}, results=True)
    assert _states(sweep) == {"method=topk seed=0": ("finished", None), "method=topk seed=1": ("missing", None),
                              "method=erm seed=0": ("finished", None), "method=erm seed=1": ("missing", None)}
    assert [j.listed for j in sweep_status(sweep)[1]] == [True] * 4
    assert main(["status", str(sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{sweep}: 4 jobs (its multirun.yaml's job list and those of 1 earlier sweep(s) into it (.multirun/)): "
        "2 finished, 0 failed, 0 running, 0 queued, 0 interrupted, 2 missing")
    assert relaunch(sweep, dry_run=True) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{sweep}: 4 jobs, 2 finished, 0 running, 0 queued (left alone), 2 to run again"
    commands = [line for line in out if line.startswith("+ cd ")]
    assert len(commands) == 2  # one per sweep: their launchers differ
    assert "hydra/launcher=slurm" not in commands[0] and "hydra/launcher=slurm" in commands[1]
    # a third sweep that holds the first one's jobs: it lists them, the kept record adds none
    keep_replaced(sweep, [["method=erm", "seed=0"]])
    _multirun(sweep, ["method=erm,topk", "seed=0,1"])
    assert [p.name for p in (sweep / ".multirun").iterdir()] == ["1.yaml", "2.yaml"]
    assert len(sweep_status(sweep)[1]) == 4
    assert main(["status", str(sweep)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(" 4 jobs (its multirun.yaml's job list): 2 finished, "
                                                             "0 failed, 0 running, 0 queued, 0 interrupted, 2 missing")


def test_relaunches_in_the_same_second_keep_a_record_each_and_one_held_by_another_process_is_refused(
        tmp_path, capsys, monkeypatch):
    """Each relaunch's job list is a file of its own even where two start in the same second (the
    second named with a suffix, never written over the first); while another live process holds
    the sweep's relaunch lock (it submits the jobs), a relaunch is refused in one line and submits
    nothing. The lock is this test's parent process's here; the commands are recorded, not run."""
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["method=erm", "seed=0,1"])
    submitted = []
    monkeypatch.setattr("robustnlu.sweep.subprocess.run",
                        lambda cmd, **_: submitted.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    monkeypatch.setattr("robustnlu.sweep.time.strftime", lambda _: "2026-01-01_00-00-00")
    records = sweep / ".relaunch"
    lock = records / LOCK_NAME
    records.mkdir()
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "since": "2026-01-01T00:00:00"}))
    assert main(["relaunch", str(sweep)]) == 2
    out, err = capsys.readouterr()
    assert err == (f"error: {sweep}: another relaunch of it is running: {records} is in use by process {os.getppid()} "
                   f"on {socket.gethostname()} (since 2026-01-01T00:00:00, {lock}); wait for it to end, or if that "
                   "process is gone, remove the lock file\n")
    assert out == "" and submitted == [] and [p.name for p in records.iterdir()] == [LOCK_NAME]
    lock.unlink()
    assert relaunch(sweep, dry_run=False) == 0 and relaunch(sweep, dry_run=False) == 0
    files = [Path(cmd[-2].removeprefix("hydra.sweeper.jobs_file=")) for cmd in submitted]
    assert [f.name for f in files] == ["2026-01-01_00-00-00.json", "2026-01-01_00-00-00.2.json"]
    assert sorted(p.name for p in records.iterdir()) == sorted(f.name for f in files)  # the lock released
    for file in files:
        assert json.loads(file.read_text()) == {"sweep": str(sweep), "jobs": [["method=erm", "seed=0"],
                                                                               ["method=erm", "seed=1"]]}


def test_a_replaced_record_kept_while_another_sweep_keeps_one_takes_the_next_number(tmp_path, monkeypatch):
    """Two sweeps that start into one directory at once both find n - 1 records kept: the one that
    writes n second takes n + 1, and the first one's record stays as it was. Here the other sweep's
    record appears between the count of the kept records and the write."""
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["method=erm", "seed=0,1"])
    replaced = (sweep / "multirun.yaml").read_bytes()
    (sweep / ".multirun").mkdir()
    others = sweep / ".multirun" / "1.yaml"
    others.write_text("the other sweep's record\n")
    monkeypatch.setattr("robustnlu.sweep_jobs.earlier_records", lambda path: [])  # counted before it appeared
    kept = keep_replaced(sweep, [["method=topk", "seed=0"]])
    assert kept == sweep / ".multirun" / "2.yaml" and kept.read_bytes() == replaced
    assert others.read_text() == "the other sweep's record\n"
    assert sorted(p.name for p in (sweep / ".multirun").iterdir()) == ["1.yaml", "2.yaml"]


@pytest.mark.parametrize("case,expected", [
    ("no multirun.yaml", "no multirun.yaml, so the sweep's jobs are not known"),
    ("optuna", "decides its jobs as it goes"),
    ("numbered folders", "named by position"),
])
def test_relaunch_refuses_sweeps_whose_jobs_it_cannot_place(tmp_path, case, expected):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    if case == "optuna":
        _multirun(sweep, ["seed=0"], sweeper="hydra_plugins.robustnlu_plugins.optuna_sweeper.OptunaSweeper")
    elif case == "numbered folders":
        _multirun(sweep, ["seed=0,1"], subdir="job${hydra.job.num}")
    with pytest.raises(ConfigError, match=expected):
        relaunch(sweep, dry_run=True)


def test_a_sweeps_finished_runs_come_in_its_job_list_order(tmp_path):
    """`compare` takes the first run of a sweep as the baseline: the job list's first, whatever the
    folder names sort as."""
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["method=topk,erm", "seed=0"])
    erm = _job(sweep, ["method=erm", "seed=0"], {"state": "finished"}, results=True)
    topk = _job(sweep, ["method=topk", "seed=0"], {"state": "finished"}, results=True)
    assert [r.path for r in sweep_runs(sweep)] == [topk, erm]
    _multirun(sweep, ["method=erm,topk", "seed=0"])
    assert [r.path for r in sweep_runs(sweep)] == [erm, topk]


# ---------------------------------------------------------------------------- real sweeps (tiny encoder)
def _status(sweep: Path) -> dict[str, tuple[str, str]]:
    """``python -m robustnlu.sweep status --json`` (its `main`, in this process): the job's swept
    overrides -> (state, folder name)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["status", "--json", str(sweep)]) == 0
    found = {}
    for line in out.getvalue().splitlines():
        job = json.loads(line)
        key = " ".join(o for o in job["overrides"] if o.startswith(("method=", "seed=")))
        found[key] = (job["state"], Path(job["folder"]).name if job["folder"] else None)
    return found


def _finished_files(folder: Path) -> dict[str, tuple[bytes, float]]:
    """What a finished run's result is: results.json (its bytes and mtime), predictions, checkpoints."""
    files = [folder / "results.json", *sorted((folder / "predictions").iterdir()),
             *sorted((folder / "checkpoints").iterdir())]
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime) for p in files}


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory) -> dict:
    """~30 s: a 2-method × 2-seed sweep (its ``overrides`` but the sweep dir) SIGKILLed while its
    third job trains: ``sweep``, and ``copy``, a copy of it as the kill left it."""
    root = tmp_path_factory.mktemp("killed")
    data = write_snips_sample_jsonl(root / "data", n_train=120, n_eval=30)
    sweep = root / "sweep"
    overrides = [*FAST, "trainer.max_epochs=3", *jsonl_overrides(data)]
    log = (root / "driver.log").open("w")
    driver = subprocess.Popen([sys.executable, "-m", "robustnlu", "-m", *overrides, f"hydra.sweep.dir={sweep}",
                               "method=erm,topk", "seed=0,1"],
                              cwd=root, env=cli_env(), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 400
    while time.time() < deadline and driver.poll() is None:
        done = list(sweep.glob("*/results.json"))
        training = [p for p in sweep.glob("*/status.json") if not (p.parent / "results.json").exists()
                    and json.loads(p.read_text() or "{}").get("state") == "running"]
        if len(done) == 2 and training:
            driver.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    driver.wait(timeout=60)
    assert driver.returncode == -signal.SIGKILL, (root / "driver.log").read_text()[-3000:]
    copy = tmp_path_factory.mktemp("killed_copy") / "sweep"
    shutil.copytree(sweep, copy)
    return {"sweep": sweep, "overrides": overrides, "copy": copy}


def test_a_killed_sweep_is_relaunched_and_extended_without_training_its_finished_jobs_again(killed_sweep):
    """~1 min: the `killed_sweep`; status; relaunch (only the interrupted and the missing job
    run); the same sweep with a third seed and resume=true (only the new seed's jobs train); every
    finished job keeps its folder and files."""
    sweep = killed_sweep["sweep"]
    common = [*killed_sweep["overrides"], f"hydra.sweep.dir={sweep}"]
    states = _status(sweep)
    assert {k: s for k, (s, _) in states.items()} == {
        "method=erm seed=0": "finished", "method=erm seed=1": "finished",
        "method=topk seed=0": "interrupted", "method=topk seed=1": "missing"}
    names = {k: f for k, (_, f) in states.items()}
    finished = {names[k]: _finished_files(sweep / names[k]) for k in ("method=erm seed=0", "method=erm seed=1")}
    hydra_records = {names[k]: (sweep / names[k] / ".hydra" / "config.yaml").stat().st_mtime
                     for k in ("method=erm seed=0", "method=erm seed=1")}

    proc = run_cli(["relaunch", str(sweep)], cwd=sweep.parent, module="robustnlu.sweep")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "4 jobs, 2 finished, 0 running, 0 queued (left alone), 2 to run again" in proc.stdout
    assert "hydra/sweeper=joblist" in proc.stdout and proc.stdout.count("resume=true: the run in") == 0
    states = _status(sweep)
    assert {s for s, _ in states.values()} == {"finished"}
    assert {k: f for k, (_, f) in states.items()}.items() >= {k: names[k] for k in names if names[k]}.items()
    for name, files in finished.items():  # not launched at all: not even Hydra's record was rewritten
        assert _finished_files(sweep / name) == files
        assert (sweep / name / ".hydra" / "config.yaml").stat().st_mtime == hydra_records[name]

    everything = {f: _finished_files(sweep / f) for _, f in states.values()}
    proc = run_cli(["-m", *common, "seed=0,1,2", "method=erm,topk", "resume=true"], cwd=sweep.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("has finished; its stored results.json is the result") == 4
    states = _status(sweep)
    assert len(states) == 6 and {s for s, _ in states.values()} == {"finished"}
    assert {f for _, f in states.values()} >= set(everything)  # the same folders
    for name, files in everything.items():
        assert _finished_files(sweep / name) == files  # not trained again: results, predictions, weights untouched
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")) == \
        sorted(f for _, f in states.values())


def test_a_sweep_with_other_values_into_the_directory_of_a_killed_one_keeps_its_jobs_that_never_started(
        killed_sweep, capsys):
    """~15 s: ``method=topk seed=2`` into (a copy of) the `killed_sweep`'s directory, whose
    ``method=topk seed=1`` never started: status still lists the first sweep's jobs, the one that
    never started as missing, and relaunch would run the interrupted and the missing one again."""
    sweep = killed_sweep["copy"]
    proc = run_cli(["-m", *killed_sweep["overrides"], f"hydra.sweep.dir={sweep}", "method=topk", "seed=2"],
                   cwd=sweep.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (sweep / ".multirun" / "1.yaml").is_file()
    assert {k: s for k, (s, _) in _status(sweep).items()} == {
        "method=topk seed=2": "finished", "method=erm seed=0": "finished", "method=erm seed=1": "finished",
        "method=topk seed=0": "interrupted", "method=topk seed=1": "missing"}
    assert main(["relaunch", "--dry-run", str(sweep)]) == 0  # in this process
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{sweep}: 5 jobs, 3 finished, 0 running, 0 queued (left alone), 2 to run again")


def test_a_sweep_with_a_bad_value_and_a_crash_shows_each_failed_job_with_its_error(tmp_path, capsys):
    """~20 s: optimizer.lr × trainer.val_check_interval, with lr -1 (refused by the schema: a user
    error) and val_check_interval 1000 (refused by Lightning's fit in an epoch of fewer batches: a crash). Each failed job leaves a
    record; status lists it as failed with its error line; the crash keeps its traceback."""
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=48, n_eval=16)
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", *FAST, "trainer.max_epochs=1", *jsonl_overrides(data), "optimizer.lr=5e-3,-1",
                    "++trainer.val_check_interval=1.0,1000", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode != 0
    capsys.readouterr()
    assert main(["status", str(sweep)]) == 0  # in this process
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("4 jobs (its multirun.yaml's job list): 1 finished, 3 failed, 0 running, "
                             "0 queued, 0 interrupted, 0 missing")
    lines += ["", ""]
    rows = {" ".join(line.split()[2:]): (line.split()[0], lines[i + 1].strip(), lines[i + 2].strip())
            for i, line in enumerate(lines[1:-2], 1) if line.split()[0] in ("finished", "failed")}
    assert rows["optimizer.lr=0.005 ++trainer.val_check_interval=1.0"][0] == "finished"
    for interval in ("1.0", "1000"):
        state, error, _ = rows[f"optimizer.lr=-1 ++trainer.val_check_interval={interval}"]
        assert (state, error) == ("failed", "error: optimizer.lr: must be > 0 (got -1)")
    state, error, note = rows["optimizer.lr=0.005 ++trainer.val_check_interval=1000"]
    assert state == "failed" and error.startswith("error: ValueError:") and "val_check_interval" in error
    assert note.startswith("(traceback: ") and note.endswith("traceback.txt)")

    for folder in sweep.iterdir():
        if not folder.is_dir():
            continue
        record = RunDir(folder).status()
        overrides = RunDir(folder).overrides()
        assert folder.name.endswith(job_hash(overrides))  # found by its recorded overrides, named by them
        if "optimizer.lr=-1" in overrides:  # refused before training: only the record is left
            assert sorted(p.name for p in folder.iterdir()) == ["status.json"]
            assert record["state"] == "failed" and record["error"] == "optimizer.lr: must be > 0 (got -1)"
            assert record["overrides"] == overrides
        elif "++trainer.val_check_interval=1000" in overrides:
            assert record["state"] == "failed" and record["traceback"] == "traceback.txt"
            text = (folder / "traceback.txt").read_text()
            assert text.startswith("Traceback") and "ValueError" in text


def test_a_seqdrift_sweeps_jobs_keep_their_folders_whatever_the_order_of_its_values(tmp_path):
    """~15 s: ``python -m robustnlu.seqdrift -m`` over two validations, then the same sweep into the
    same directory with the values the other way round: each job writes into the folder named by
    its scenario and hash both times (folders numbered by position would have swapped the jobs),
    and status finds both finished."""
    data = jsonl_overrides(write_snips_sample_jsonl(tmp_path / "data", n_train=600, n_eval=60))
    sweep = tmp_path / "sweep"

    def launch(values: str) -> dict[str, str]:
        """The sweep's job folders after it ran: the validation of the job each holds -> its name."""
        proc = run_cli(["-m", *data, *SMALL_DRIFT, "paths.cache_dir=cache", f"validation={values}",
                        f"hydra.sweep.dir={sweep}"], cwd=tmp_path, module="robustnlu.seqdrift")
        assert proc.returncode == 0, proc.stderr[-3000:]
        folders = [p for p in sweep.iterdir() if p.is_dir()]
        assert len(folders) == 2
        found = {}
        for folder in folders:
            overrides = RunDir(folder).overrides()
            assert folder.name.endswith(f"-{job_hash(overrides)}") and (folder / STATS_TABLE_FILE).is_file()
            (validation,) = [o.split("=", 1)[1] for o in overrides if o.startswith("validation=")]
            found[validation] = folder.name
        return found

    first = launch("iid,ood")
    assert {v: name.rsplit("-", 1)[0] for v, name in first.items()} == {
        "iid": "jsonl-slot_context-full-iid", "ood": "jsonl-slot_context-full-ood"}
    written = {v: (sweep / name / STATS_TABLE_FILE).stat().st_mtime_ns for v, name in first.items()}
    assert launch("ood,iid") == first
    assert all((sweep / name / STATS_TABLE_FILE).stat().st_mtime_ns > written[v] for v, name in first.items())
    _, jobs = sweep_status(sweep)
    assert [(j.state, j.folder.name) for j in jobs] == [("finished", first["ood"]), ("finished", first["iid"])]


def test_a_seqdrift_job_holds_its_lock_while_it_runs_so_status_tells_a_killed_one_from_a_running_one(tmp_path):
    """~15 s: a real ``python -m robustnlu.seqdrift -m`` job whose test file is a named pipe, held
    open and empty, so that the job waits in its read: status reads it running, by its lock (which
    names its pid); SIGKILLed there, interrupted (its lock names a dead process). The pipe replaced
    by the file and the sweep run again: the lock of the dead process is taken over, the job
    finishes, status reads it finished, and its folder holds the split's files and no lock."""
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=600, n_eval=60)
    rows = data["test"].read_bytes()
    data["test"].unlink()
    os.mkfifo(data["test"])
    sweep = tmp_path / "sweep"
    args = ["-m", *jsonl_overrides(data), *SMALL_DRIFT, "paths.cache_dir=cache", "validation=iid",
            f"hydra.sweep.dir={sweep}"]
    job = subprocess.Popen([sys.executable, "-m", "robustnlu.seqdrift", *args], cwd=tmp_path, env=cli_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    writer = None
    try:
        deadline = time.time() + 120
        while writer is None and job.poll() is None and time.time() < deadline:
            try:  # succeeds once the job has opened the pipe to read it: it then waits for rows
                writer = os.open(data["test"], os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.05)
        assert writer is not None, f"the job never read its test file (exit status {job.poll()})"
        (folder,) = [p for p in sweep.iterdir() if p.is_dir()]
        assert holder(folder) is not None and holder(folder)["pid"] == job.pid
        (running,) = sweep_status(sweep)[1]
        assert (running.state, running.note, running.folder) == ("running", None, folder)
    finally:
        job.kill()
        job.wait(timeout=60)
        if writer is not None:
            os.close(writer)
    (killed,) = sweep_status(sweep)[1]
    assert (killed.state, killed.folder) == ("interrupted", folder) and holder(folder)["pid"] == job.pid

    data["test"].unlink()
    data["test"].write_bytes(rows)
    proc = run_cli(args, cwd=tmp_path, module="robustnlu.seqdrift")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"taking over the lock of process {job.pid} on {socket.gethostname()}" in proc.stderr
    (done,) = sweep_status(sweep)[1]
    assert (done.state, done.folder) == ("finished", folder)
    assert sorted(p.name for p in folder.iterdir()) == [".hydra", "SHA256SUMS", "seqdrift.log", "split.json",
                                                        "stats.json", STATS_TABLE_FILE]
    (cached,) = (tmp_path / "cache" / "seqdrift").glob("*/split.json")
    assert cached.read_bytes() == (folder / "split.json").read_bytes()
    assert not list(tmp_path.rglob(LOCK_NAME))
