"""The study runner (`robustnlu.studies.runner`): each job's state read from its folders (hand-made
folders), the command line's refusals, and a study trained end to end with the tiny encoder (~75 s
beside a training on 2 cores): every job launched as a joblist sweep job into ``<runs>/<name>/``, a
job refused for a bad value reported with its error line while the plan goes on, a job finished
outside the runner recorded without training, recorded jobs never launched again."""

from __future__ import annotations

import json
import lzma
import os
import socket

import pytest

from integration_helpers import FAST, cli_env, file_bytes, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.rundir import RunDir
from robustnlu.runlock import LOCK_NAME
from robustnlu.studies import runner
from robustnlu.studies.runner import QUIET, Job, Setup, Study
from robustnlu.sweep_jobs import job_hash

#: the tiny encoder, quiet (the runner adds QUIET itself), one epoch
TINY = [o for o in FAST if "progress" not in o] + ["trainer.max_epochs=1"]


def study_of(jobs: list[Job], tmp_path) -> Study:
    return Study("test study", lambda records: list(jobs), records=tmp_path / "records", runs=tmp_path / "runs")


def folder(path, results: bool = False, status: dict | None = None, overrides: list[str] | None = None) -> None:
    path.mkdir(parents=True)
    if results:
        (path / "results.json").write_text(json.dumps({"metrics": {}}))
    if status is not None:
        (path / "status.json").write_text(json.dumps({"host": socket.gethostname(), **status}))
    if overrides is not None:
        (path / ".hydra").mkdir()
        (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def test_list_tells_each_jobs_state_from_its_folders(tmp_path, capsys):
    jobs = [Job(f"j{i}", (f"seed={i}",), part="P") for i in range(7)]
    extra = ("optimizer.lr=1e-3",)
    runs, records = tmp_path / "runs", tmp_path / "records"
    folder(records / "j0", results=True)
    mine = [*jobs[1].overrides, *QUIET, *extra, "resume=true"]  # as the runner launched it
    folder(runs / "j1", results=True, status={"state": "finished"}, overrides=mine)
    folder(runs / "j2", results=True, status={"state": "finished"}, overrides=["seed=2", "optimizer.lr=5e-3"])
    folder(runs / "j3", status={"state": "failed", "error": "optimizer.lr: must be > 0 (got -1)"})
    folder(runs / "j4", status={"state": "running", "pid": 2 ** 22 + 1})  # its process is gone
    folder(runs / "j5", status={"state": "running"})
    (runs / "j5" / LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    assert runner.main(study_of(jobs, tmp_path), ["--list", *extra]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "recorded     P  j0",
        "finished     P  j1",
        "other        P  j2",
        f"             ({runs / 'j2'} holds a finished run of other overrides: move it away to run this job)",
        "failed       P  j3",
        "             error: optimizer.lr: must be > 0 (got -1)",
        "interrupted  P  j4",
        "             (its process is gone)",
        "running      P  j5",
        "to run       P  j6",
    ]
    setup = Setup(records, runs, extra)
    assert runner.job_state(jobs[1], setup).state == "finished"
    assert runner.job_state(jobs[1], Setup(records, runs)).state == "other"  # launched with other overrides


def test_the_record_of_a_run_trained_on_another_host_names_that_host_and_its_cpu(tmp_path):
    """meta.json says where a job trained from the run's own files (status.json's host, results.json's
    device), not from the machine that records it; the record's files are the run's, predictions compressed with xz."""
    run = tmp_path / "runs" / "j"
    overrides = ["seed=3", *QUIET, "resume=true"]
    folder(run, status={"state": "finished", "host": "node-7", "time": "2026-11-20T10:00:00+0000"},
           overrides=overrides)
    results = {"metrics": {}, "wall_time_s": 12.5, "device": {"accelerator": "cpu", "name": "Node CPU", "processes": 1}}
    (run / "results.json").write_text(json.dumps(results))
    (run / "csv").mkdir()
    (run / "csv" / "metrics.csv").write_text("epoch,valid/combined\n0,0.5\n")
    (run / "predictions").mkdir()
    for split in ("valid", "test"):
        (run / "predictions" / f"{split}.jsonl").write_text(f'{{"uid": "{split}-0"}}\n')
    record = tmp_path / "records" / "j"
    meta = runner.write_record(Job("j", ("seed=3",), "P"), RunDir(run), record)
    assert meta == json.loads((record / "meta.json").read_text()) == {
        "command": "-m robustnlu " + " ".join(overrides), "part": "P", "host": "node-7", "cpu": "Node CPU",
        "wall_time_s": 12.5, "finished": "2026-11-20T10:00:00+0000", "job_hash": job_hash(["seed=3"])}
    assert RunDir(record).results() == results and (record / "metrics.csv").read_text() == "epoch,valid/combined\n0,0.5\n"
    for split in ("valid", "test"):
        assert lzma.decompress((record / "predictions" / f"{split}.jsonl.xz").read_bytes()) == \
            f'{{"uid": "{split}-0"}}\n'.encode()


@pytest.mark.parametrize(("args", "line"), [
    (["--only", "j0", "nothing"], "error: --only: no job of the study is named nothing (--list prints them)"),
    (["hydra.sweep.dir=/elsewhere"], "error: hydra.sweep.dir=/elsewhere: the study sets hydra.sweep.dir itself "
                                     "(each job's folder is <runs>/<name>/)"),
    (["hydra/sweeper=basic"], "error: hydra/sweeper=basic: the study sets hydra/sweeper itself (each job's folder "
                              "is <runs>/<name>/)"),
    (["--batch", "0"], "error: --batch must be >= 1, got 0"),
    (["seed=[1"], "error: cannot parse the overrides ['seed=[1']: "),
])
def test_bad_input_is_one_error_line_and_nothing_written(tmp_path, capsys, args, line):
    assert runner.main(study_of([Job("j0", ("seed=0",))], tmp_path), args) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1
    assert not (tmp_path / "records").exists() and not (tmp_path / "runs").exists()


def test_a_plan_with_a_name_that_is_not_a_folder_name_is_refused(tmp_path, capsys):
    assert runner.main(study_of([Job("a/b", ("seed=0",))], tmp_path), ["--list"]) == 2
    assert capsys.readouterr().err == ("error: test study: job name 'a/b' is not a folder name "
                                       "([A-Za-z0-9_.+-])\n")


def test_a_study_trains_through_the_sweep_machinery_records_each_job_and_goes_on_after_a_failure(
        tmp_path, capfd, monkeypatch):
    """~75 s: a job refused for a bad value first, then one that trains; a job trained outside the
    runner (as on Slurm) is recorded without a launch; recorded jobs are never launched again."""
    monkeypatch.setenv("PYTHONPATH", cli_env()["PYTHONPATH"])  # the launches import this checkout
    monkeypatch.chdir(tmp_path)
    extra = [*TINY, *jsonl_overrides(write_snips_sample_jsonl(tmp_path / "data", n_train=48, n_eval=16))]
    jobs = [Job("bad", ("optimizer.weight_decay=-1",), "X"), Job("a", ("seed=0",), "X"), Job("b", ("seed=1",), "Y")]
    study = study_of(jobs, tmp_path)
    records, runs = tmp_path / "records", tmp_path / "runs"

    assert runner.main(study, ["--only", "bad", "a", *extra]) == 1
    out = capfd.readouterr().out
    assert out.count("+ python -m robustnlu -m hydra/sweeper=joblist") == 2  # one launch per job
    assert f"hydra.sweep.dir={runs}" in out and "resume=true" in out
    assert "bad: failed (exit 1): optimizer.weight_decay: must be >= 0 (got -1); the plan goes on" in out
    assert f"a: recorded in {records / 'a'}" in out
    assert "1 of 2 planned jobs recorded; failed: ['bad']" in out
    assert sorted(p.name for p in (records / "a").iterdir()) == ["meta.json", "metrics.csv", "predictions",
                                                                 "results.json"]
    assert sorted(p.name for p in (records / "a" / "predictions").iterdir()) == ["test.jsonl.xz", "valid.jsonl.xz"]
    meta = json.loads((records / "a" / "meta.json").read_text())
    overrides = RunDir(runs / "a").overrides()
    assert overrides == ["seed=0", *QUIET, *extra, "resume=true"]
    assert meta["job_hash"] == job_hash(overrides) == job_hash(["seed=0", *extra])
    assert meta["part"] == "X" and meta["command"] == " ".join(["-m", "robustnlu", *overrides])
    assert meta["cores"] == os.cpu_count() and meta["wall_time_s"] == RunDir(runs / "a").results()["wall_time_s"]
    assert not (runs / "a" / "checkpoints").exists() and not (records / "bad").exists()
    assert RunDir(runs / "bad").status()["error"] == "optimizer.weight_decay: must be >= 0 (got -1)"
    recorded = file_bytes(records)

    # b trained outside the runner, as a Slurm job finishing while the runner was away
    outside = run_cli(["seed=1", *QUIET, *extra, f"hydra.run.dir={runs / 'b'}"], cwd=tmp_path)
    assert outside.returncode == 0, outside.stderr[-3000:]
    assert runner.main(study, ["--only", "a", "b", *extra]) == 0
    out = capfd.readouterr().out
    assert "+ python" not in out and f"b: recorded in {records / 'b'}" in out
    assert "2 of 2 planned jobs recorded" in out
    assert json.loads((records / "b" / "meta.json").read_text())["part"] == "Y"
    assert {k: v for k, v in file_bytes(records).items() if k.startswith("a/")} == recorded  # a: not retrained

    assert runner.main(study, ["--list", *extra]) == 0
    assert capfd.readouterr().out.splitlines() == [
        "failed    X  bad", "          error: optimizer.weight_decay: must be >= 0 (got -1)",
        "recorded  X  a", "recorded  Y  b"]
