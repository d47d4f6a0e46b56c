"""A run directory is owned (robustnlu/rundir_claim.py, robustnlu/runlock.py) and a resumed run
continues with the settings it was started with (robustnlu/rundir_check.py `check_settings`): no error
removes a folder or file the invocation did not make, no resume records settings it did not train
with, two processes never train in one folder; a folder refused for what it holds is refused before
the imports of training (`refused_at_once`). Through the CLI, as users meet it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from integration_helpers import FAST, another_hydra_apps_output, cli_env, jsonl_overrides, run_cli, write_snips_sample_jsonl
from test_usage_errors import TRAINING_ONLY, imported


def snapshot(folder):
    """Every file under ``folder`` with its bytes, and every sub-folder; but ``run.lock``: a killed
    run leaves its lock, which the next invocation takes over as stale (and then releases)."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))
            if p.name != "run.lock"}


def one_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Error executing job" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def refused_at_once(args, cwd) -> str:
    """The one error line of a run refused for what its folder holds, which came before the imports
    of training (`TRAINING_ONLY`, read with ``-X importtime``; `robustnlu.rundir_check`)."""
    proc = run_cli(args, cwd, {"PYTHONPROFILEIMPORTTIME": "1"})
    modules = imported(proc.stderr)
    assert "robustnlu.rundir_check" in modules  # the import lines are there to read
    assert sorted({m.split(".")[0] for m in modules} & TRAINING_ONLY) == []
    return one_error(proc)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_snips_sample_jsonl(tmp_path_factory.mktemp("data"), n_train=48, n_eval=16)


def small(sample, tmp_path, run_dir, *extra):
    return [*FAST, *jsonl_overrides(sample), "trainer.max_epochs=2", f"paths.cache_dir={tmp_path / 'cache'}",
            "callbacks.last_checkpoint.every_minutes=null", "callbacks.last_checkpoint.every_n_train_steps=1",
            f"hydra.run.dir={run_dir}", *extra]


@pytest.fixture(scope="module")
def killed_run(sample, tmp_path_factory):
    """A run killed in its second epoch (last.ckpt, status running), kept pristine: tests copy it."""
    root = tmp_path_factory.mktemp("killed")
    run_dir = root / "run"
    proc = run_cli(small(sample, root, run_dir, "+callbacks.kill._target_=integration_helpers.KillAtStep",
                         "+callbacks.kill.step=4"), cwd=root)
    assert proc.returncode < 0, proc.stderr[-3000:]
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and not (run_dir / "results.json").exists()
    return run_dir


@pytest.fixture(scope="module")
def finished_run(sample, tmp_path_factory):
    root = tmp_path_factory.mktemp("finished")
    proc = run_cli(small(sample, root, root / "run"), cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run"


def copy_of(run_dir, tmp_path):
    target = tmp_path / run_dir.name
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", str(run_dir), str(target)], check=True)
    return target


# --------------------------------------------------------------------------- folders never removed


@pytest.mark.parametrize("where", ["mydocs", "."])
def test_a_bad_value_into_a_folder_of_the_users_removes_nothing(sample, tmp_path, where):
    project = tmp_path / "project"
    (project / "mydocs").mkdir(parents=True)
    for name in ("notes.txt", "thesis.tex", "data.csv"):
        (project / "mydocs" / name).write_text(f"the user's {name}\n")
    (project / "setup.py").write_text("print('the user project')\n")
    before = snapshot(project)
    proc = run_cli(small(sample, tmp_path, where, "optimizer.lr=-1"), cwd=project)
    # refused for the folder before the value is looked at: a run never writes among the user's files
    assert "is not a robustnlu run directory" in one_error(proc)
    assert snapshot(project) == before  # nothing removed, nothing added (no .hydra/, no log)


def test_a_bad_value_into_an_empty_folder_that_existed_leaves_it(sample, tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_cli(small(sample, tmp_path, "empty", "optimizer.lr=-1"), cwd=tmp_path)
    assert one_error(proc) == "error: optimizer.lr: must be > 0 (got -1)"
    assert (tmp_path / "empty").is_dir() and list((tmp_path / "empty").iterdir()) == []


def test_a_new_run_into_a_folder_that_is_not_a_run_is_refused_before_anything_is_written(sample, tmp_path):
    docs = tmp_path / "mydocs"
    docs.mkdir()
    (docs / "a.txt").write_text("a\n")
    before = snapshot(docs)
    line = one_error(run_cli(small(sample, tmp_path, docs), cwd=tmp_path))
    assert line == (f"error: hydra.run.dir: {docs} holds files (a.txt) and is not a robustnlu run directory; a run "
                    "needs a new or empty folder, or its own run directory with resume=true")
    assert snapshot(docs) == before


def test_a_new_run_into_another_hydra_apps_output_is_refused_and_changes_nothing(sample, tmp_path):
    # Hydra would write the run's .hydra/ over the other app's record of its run
    other = another_hydra_apps_output(tmp_path / "other")
    before = snapshot(other)
    line = one_error(run_cli(small(sample, tmp_path, other), cwd=tmp_path))
    assert line == (f"error: hydra.run.dir: {other} holds files (.hydra/ of another Hydra app, other_app.log) and is not "
                    "a robustnlu run directory; a run needs a new or empty folder, or its own run directory with resume=true")
    assert snapshot(other) == before


@pytest.mark.parametrize(("earlier", "held"), [
    ("finished_run", "a finished run (results.json); resume=true returns its result"),
    ("killed_run", "an unfinished run (checkpoints/last.ckpt); resume=true continues it"),
])
def test_a_new_run_into_an_earlier_run_is_refused_and_changes_nothing(sample, tmp_path, request, earlier, held):
    # resume=true forgotten, or another run's command pointed at the folder: without the refusal it
    # trained from scratch there, over the finished run's results and the killed run's last.ckpt
    run_dir = copy_of(request.getfixturevalue(earlier), tmp_path)
    before = snapshot(run_dir)
    line = refused_at_once(small(sample, tmp_path, run_dir, "method=topk"), tmp_path)
    assert line == f"error: hydra.run.dir: {run_dir} holds {held}; a new run needs a new or empty folder"
    assert snapshot(run_dir) == before


def test_a_sweep_launched_again_without_resume_leaves_its_finished_jobs(sample, tmp_path):
    sweep = ["-m", *small(sample, tmp_path, tmp_path / "unused", "trainer.max_epochs=1"), "seed=0",
             f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    assert run_cli(sweep, cwd=tmp_path).returncode == 0
    (job,) = [p for p in (tmp_path / "sweep").iterdir() if p.is_dir()]
    kept = {k: v for k, v in snapshot(job).items() if not k.startswith(".hydra") and not k.endswith(".log")}
    again = run_cli(sweep, cwd=tmp_path)
    assert again.returncode == 1
    assert f"error: hydra.run.dir: {job} holds a finished run (results.json)" in again.stderr
    assert {k: v for k, v in snapshot(job).items() if k in kept} == kept


def test_a_sweep_into_a_folder_of_the_users_is_refused_before_anything_is_written(sample, tmp_path):
    docs = tmp_path / "mydocs"
    (docs / "figures").mkdir(parents=True)
    (docs / "notes.txt").write_text("the user's notes\n")
    (docs / "multirun.yaml").write_text("the user's own Hydra sweep\n")  # the sweeper wrote its own over it
    before = snapshot(docs)
    line = one_error(run_cli(["-m", *small(sample, tmp_path, "unused"), f"hydra.sweep.dir={docs}"], cwd=tmp_path))
    assert line == (f"error: hydra.sweep.dir: {docs} holds files (multirun.yaml of another Hydra app, notes.txt) and is "
                    "not a sweep directory; a sweep needs a new or empty folder, or its own sweep directory")
    assert snapshot(docs) == before


def test_a_bad_value_removes_the_folders_it_created_and_no_parent_that_existed(sample, tmp_path):
    (tmp_path / "outputs").mkdir()
    proc = run_cli(small(sample, tmp_path, "outputs/new/deeper/run", "optimizer.lr=-1"), cwd=tmp_path)
    one_error(proc)
    assert (tmp_path / "outputs").is_dir() and list((tmp_path / "outputs").iterdir()) == []


def test_a_folder_that_cannot_be_created_is_one_line(sample, tmp_path):
    proc = run_cli(small(sample, tmp_path, "/proc/robustnlu/run"), cwd=tmp_path)
    assert one_error(proc).startswith("error: hydra.run.dir: cannot create /proc/robustnlu/run: ")


@pytest.mark.parametrize("module", ["robustnlu", "robustnlu.seqdrift"])
def test_a_sweep_folder_that_cannot_be_created_is_one_line(tmp_path, module):
    proc = run_cli(["-m", "dataset=snips", "hydra.sweep.dir=/proc/robustnlu/sweep"], cwd=tmp_path, module=module)
    assert one_error(proc) == "error: hydra.sweep.dir: cannot create /proc/robustnlu/sweep: No such file or directory"


def test_resume_with_a_typo_leaves_the_killed_run_byte_for_byte(sample, killed_run, tmp_path):
    run_dir = copy_of(killed_run, tmp_path)
    before = snapshot(run_dir)
    proc = run_cli(small(sample, tmp_path, run_dir, "resume=true", "optimizer.lr=-1e-4"), cwd=tmp_path)
    assert one_error(proc) == "error: optimizer.lr: must be > 0 (got -0.0001)"
    assert snapshot(run_dir) == before  # last.ckpt, logs, .hydra/ and the Hydra log as they were


# --------------------------------------------------------------------------- resume never mixes settings


@pytest.mark.parametrize(("extra", "listed"), [
    (["optimizer.lr=1e-3"], "optimizer.lr: 0.005 -> 0.001"),
    (["method=topk"], "method._target_: 'robustnlu.robust.erm.ERM' -> 'robustnlu.robust.topk.TopK'"),
    (["seed=3"], "seed: 0 -> 3"),
])
def test_resume_with_other_settings_is_refused_naming_them_and_changes_nothing(sample, killed_run, tmp_path, extra,
                                                                                listed):
    run_dir = copy_of(killed_run, tmp_path)
    before = snapshot(run_dir)
    line = refused_at_once(small(sample, tmp_path, run_dir, "resume=true", *extra), tmp_path)
    assert line.startswith(f"error: resume=true: {run_dir} was started with other settings (")
    assert listed in line and line.endswith("allow a key to change with +resume_override=[key,...]")
    assert snapshot(run_dir) == before


def test_resume_with_another_dataset_is_refused_before_loading_the_checkpoint(sample, killed_run, tmp_path):
    run_dir = copy_of(killed_run, tmp_path)
    before = snapshot(run_dir)
    other = write_snips_sample_jsonl(tmp_path / "other", n_train=40, n_eval=16)
    line = refused_at_once(small(other, tmp_path, run_dir, "resume=true"), tmp_path)
    assert "dataset.train: " in line and "was started with other settings" in line
    assert snapshot(run_dir) == before


def test_a_finished_run_asked_with_other_settings_is_refused_and_not_rewritten(sample, finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    before = snapshot(run_dir)
    line = refused_at_once(small(sample, tmp_path, run_dir, "resume=true", "method=topk", "seed=1", "optimizer.lr=1e-3"),
                           tmp_path)
    for key in ("method._target_", "method.name", "optimizer.lr", "seed"):
        assert f"{key}: " in line
    assert snapshot(run_dir) == before
    same = run_cli(small(sample, tmp_path, run_dir, "resume=true"), cwd=tmp_path)
    assert same.returncode == 0 and "has finished" in same.stdout
    assert snapshot(run_dir) == before  # the stored result returned: .hydra/ and the log put back


def test_an_allowed_override_trains_on_and_is_recorded(sample, killed_run, tmp_path):
    run_dir = copy_of(killed_run, tmp_path)
    proc = run_cli(small(sample, tmp_path, run_dir, "resume=true", "trainer.max_epochs=3",
                         "+resume_override=[trainer.max_epochs,callbacks.kill]"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    # killed at step 4 before its save (callbacks run before checkpoints): continued from step 3
    assert results["epochs_trained"] == 3 and results["resumed_from"]["global_step"] == 3
    assert results["resume_overrides"] == {
        "callbacks.kill._target_": {"stored": "integration_helpers.KillAtStep", "now": "<absent>"},
        "callbacks.kill.step": {"stored": 4, "now": "<absent>"},
        "trainer.max_epochs": {"stored": 2, "now": 3}}


@pytest.fixture(scope="module")
def resumed_elsewhere(sample, killed_run, tmp_path_factory):
    """The killed run moved to another folder and resumed there, over the lock of a process that
    has ended (a killed run's own lock is one too; this one's pid is known): (the folder, the
    resume's CompletedProcess, that pid). What a moved run and a stale lock each do is a test of
    its own below."""
    root = tmp_path_factory.mktemp("elsewhere")
    run_dir = copy_of(killed_run, root / "moved")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run_dir / "run.lock").write_text(lock_of(dead.pid))
    proc = run_cli(small(sample, root, run_dir, "resume=true", "+resume_override=[callbacks.kill]"), cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir, proc, dead.pid


def test_a_moved_run_resumes_to_the_uninterrupted_result(finished_run, resumed_elsewhere):
    """The killed run's copy is its folder moved (the best score's reload: tests/test_rundir_claim.py);
    ``finished_run`` is the same run uninterrupted."""
    moved, proc, _ = resumed_elsewhere
    assert "dirpath has changed" not in proc.stderr and "weights_only" not in proc.stderr
    a, b = (json.loads((d / "results.json").read_text()) for d in (finished_run, moved))
    assert b["best_checkpoint"] == a["best_checkpoint"]
    for split in ("valid", "test"):
        assert b["metrics"][split] == pytest.approx(a["metrics"][split], rel=1e-6, abs=1e-9)


def test_a_run_checkpointed_by_lightnings_model_checkpoint_resumes_with_its_best_score(sample, finished_run, tmp_path):
    """Runs started before `RelocatableModelCheckpoint` named Lightning's class in config.yaml and
    stored its state under Lightning's key: resumed today, the class switch is no changed setting
    and the state is restored (else Lightning warns that the checkpoint's callback is missing and
    the first epoch after the resume becomes "best" whatever its score)."""
    run_dir = tmp_path / "run"
    lightning_class = "callbacks.model_checkpoint._target_=pytorch_lightning.callbacks.ModelCheckpoint"
    proc = run_cli(small(sample, tmp_path, run_dir, lightning_class, "+callbacks.kill._target_=integration_helpers.KillAtStep",
                         "+callbacks.kill.step=4"), cwd=tmp_path)
    assert proc.returncode < 0 and (run_dir / "checkpoints" / "last.ckpt").is_file(), proc.stderr[-3000:]
    proc = run_cli(small(sample, tmp_path, run_dir, "resume=true", "+resume_override=[callbacks.kill]"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "callbacks used to create the checkpoint need to be provided" not in proc.stderr
    a, b = (json.loads((d / "results.json").read_text()) for d in (finished_run, run_dir))
    assert b["resume_overrides"] == {"callbacks.kill._target_": {"stored": "integration_helpers.KillAtStep",
                                                                 "now": "<absent>"},
                                     "callbacks.kill.step": {"stored": 4, "now": "<absent>"}}
    assert b["best_checkpoint"] == a["best_checkpoint"]
    for split in ("valid", "test"):
        assert b["metrics"][split] == pytest.approx(a["metrics"][split], rel=1e-6, abs=1e-9)


# --------------------------------------------------------------------------- one process per folder


def lock_of(pid: int, host: str | None = None) -> str:
    return json.dumps({"pid": pid, "host": host or socket.gethostname(), "since": "2026-11-26T00:00:00+0000"})


def test_a_folder_locked_by_a_live_process_is_refused_naming_it(sample, killed_run, tmp_path):
    run_dir = copy_of(killed_run, tmp_path)
    (run_dir / "run.lock").write_text(lock_of(os.getpid()))  # this test's process: alive
    before = snapshot(run_dir)
    line = one_error(run_cli(small(sample, tmp_path, run_dir, "resume=true", "+resume_override=[callbacks.kill]"),
                             cwd=tmp_path))
    assert line.startswith(f"error: {run_dir} is in use by process {os.getpid()} on {socket.gethostname()} ")
    assert snapshot(run_dir) == before
    (run_dir / "run.lock").write_text(lock_of(1, "another-node"))  # another host: cannot be checked, refused
    assert "is in use by process 1 on another-node" in one_error(
        run_cli(small(sample, tmp_path, run_dir, "resume=true", "+resume_override=[callbacks.kill]"), cwd=tmp_path))


def test_the_lock_of_a_dead_process_is_taken_over_and_released_at_the_end(resumed_elsewhere):
    run_dir, proc, dead_pid = resumed_elsewhere
    assert f"taking over the lock of process {dead_pid}" in proc.stderr
    assert (run_dir / "results.json").is_file() and not (run_dir / "run.lock").exists()


def test_a_second_training_into_a_folder_in_use_is_refused_and_the_first_finishes(sample, tmp_path):
    run_dir, go = tmp_path / "run", tmp_path / "go"
    # the first run waits after its first step until the second has been answered: without that,
    # it could finish first, and the second would return its result instead of being refused
    held = ["trainer.max_epochs=4", "+callbacks.hold._target_=integration_helpers.HoldUntilFile",
            f"+callbacks.hold.path={go}"]
    first = subprocess.Popen([sys.executable, "-m", "robustnlu", *small(sample, tmp_path, run_dir, *held)],
                             cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (run_dir / "status.json").exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    second = run_cli(small(sample, tmp_path, run_dir, *held, "resume=true"), cwd=tmp_path)
    go.touch()
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    assert one_error(second).startswith(f"error: {run_dir} is in use by process {first.pid} on ")
    assert json.loads((run_dir / "status.json").read_text())["pid"] == first.pid
    assert json.loads((run_dir / "results.json").read_text())["epochs_trained"] == 4
