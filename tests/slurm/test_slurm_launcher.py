"""Hydra launchers end to end: a 2-job sweep through a real single-node Slurm
(`hydra/launcher=slurm`, started by tests/slurm/start_slurm.sh) and through parallel local
processes (`hydra/launcher=local`), each finding both runs' results.json; a Slurm job
signalled in mid-epoch as at a time limit, requeued by submitit and resumed from last.ckpt; and a
`trainer=ddp` job run as one Slurm task per device.

The Slurm tests (marker ``slurm``: ``make test-slurm``, not in ``make test``; CI runs both) need
root (they install slurm-wlm/munge with apt-get if missing and start the daemons); they skip,
with the reason, where that is impossible, unless ROBUSTNLU_REQUIRE_SLURM=1 (CI) turns the skip
into a failure. The daemons are left running (the script is idempotent;
`tests/slurm/start_slurm.sh stop` stops them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from integration_helpers import FAST, cli_env, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.rundir import RunDir

START_SCRIPT = Path(__file__).with_name("start_slurm.sh")
TINY_SWEEP = [*FAST, "trainer.max_epochs=1", "seed=1,2"]


def _skip_or_fail(reason: str):
    if os.environ.get("ROBUSTNLU_REQUIRE_SLURM") == "1":
        pytest.fail(f"ROBUSTNLU_REQUIRE_SLURM=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def slurm():
    """A running single-node Slurm (started here if needed)."""
    if os.geteuid() != 0:
        _skip_or_fail("starting Slurm needs root (run tests/slurm/start_slurm.sh as root first)")
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        _skip_or_fail("Slurm is not installed and apt-get is not available to install it")
    proc = subprocess.run(["bash", str(START_SCRIPT)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"start_slurm.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stderr


def _results(sweep_dir: Path) -> dict[int, dict]:
    """seed -> results.json of every job directory of a sweep."""
    found = {}
    for path in sorted(sweep_dir.glob("*/results.json")):
        results = json.loads(path.read_text())
        found[results["seed"]] = results
    return found


def _sweep(tmp_path: Path, launcher: list[str], env: dict[str, str] | None = None):
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=30)
    sweep_dir = tmp_path / "multirun"
    started = time.time()
    proc = run_cli(["-m", *TINY_SWEEP, *jsonl_overrides(sample), *launcher, f"hydra.sweep.dir={sweep_dir}"],
                   cwd=tmp_path, env=env)
    elapsed = time.time() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return sweep_dir, elapsed, proc


def _scontrol_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


@pytest.mark.slurm
def test_slurm_launcher_runs_a_two_job_sweep_as_slurm_jobs(slurm, tmp_path):
    sweep_dir, elapsed, proc = _sweep(tmp_path, [
        "hydra/launcher=slurm",
        "hydra.launcher.mem_gb=2",          # without it each job takes the whole node
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.timeout_min=20",
    ])
    print(f"2-job Slurm sweep: {elapsed:.0f} s (driver wall time)")

    results = _results(sweep_dir)
    assert sorted(results) == [1, 2]
    assert all(r["epochs_trained"] == 1 for r in results.values())

    # submitit's folders are named by Slurm job id (<array job>_<task>) and its logs say so
    job_dirs = sorted(p for p in (sweep_dir / ".submitit").iterdir() if p.is_dir())
    ids = [p.name for p in job_dirs if re.fullmatch(r"\d+_\d+", p.name)]
    assert len(ids) == 2, [p.name for p in job_dirs]
    for job_id in ids:
        out = (sweep_dir / ".submitit" / job_id / f"{job_id}_0_log.out").read_text()  # task 0's log
        assert f"JobEnvironment(job_id={job_id}" in out, out[-2000:]
    submission = next((sweep_dir / ".submitit").rglob("*_submission.sh")).read_text()
    assert "#SBATCH --mem=2GB" in submission and "#SBATCH --cpus-per-task=1" in submission
    assert "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK" in submission

    # Slurm itself: both jobs completed (kept by slurmctld for MinJobAge=300 s after the end).
    # The driver returns when the results are pickled; the job step may still be ending then.
    for job_id in ids:
        info = _wait_until_ended(job_id)
        if info:  # absent when a cluster purges finished jobs sooner
            assert info["JobState"] == "COMPLETED", (job_id, info)
            print(f"  job {job_id}: {info['StartTime']} -> {info['EndTime']} on {info.get('NodeList')}")


STEPS_PER_EPOCH = 8  # 120 training utterances in batches of 16


def _array_task_id(sweep_dir: Path, task: int) -> str | None:
    """The Slurm id (<array job>_<task>) of a sweep's job, from submitit's folder, once submitted."""
    found = sorted((sweep_dir / ".submitit").glob(f"*_{task}")) if (sweep_dir / ".submitit").is_dir() else []
    return found[0].name if found else None


def _wait_until_ended(job_id: str) -> dict[str, str]:
    """``scontrol show job`` once the job is neither running nor completing (at most ~60 s)."""
    info = _scontrol_job(job_id)
    for _ in range(60):
        if info.get("JobState") not in ("RUNNING", "COMPLETING"):
            break
        time.sleep(1)
        info = _scontrol_job(job_id)
    return info


@pytest.mark.slurm
def test_a_slurm_job_signalled_mid_epoch_is_requeued_and_resumes_to_the_uninterrupted_result(slurm, tmp_path):
    """Job 0 of a 2-job sweep gets SIGUSR2 (what Slurm sends `signal_delay_s` before the time
    limit, or on preemption) two steps after a mid-epoch last.ckpt; submitit requeues it
    (`scontrol requeue`); the requeued job (SLURM_RESTART_COUNT=1) resumes from last.ckpt without
    resume=true and ends where job 1, the same run left alone, ends. The driver waits throughout
    and returns both results. ~45 s (the requeued job is let go after 2 s, see below).
    Without that release it also passes, in ~3 minutes."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=30)
    sweep_dir = tmp_path / "multirun"
    signal_step = STEPS_PER_EPOCH + 6  # epoch 1, batch 6: two steps after the checkpoint at step 12
    args = [
        "-m", *FAST, "trainer.max_epochs=2", "seed=1", *jsonl_overrides(sample),
        "callbacks.last_checkpoint.every_minutes=null", "callbacks.last_checkpoint.every_n_train_steps=4",
        "+callbacks.signal._target_=integration_helpers.SignalAtStep",
        f"+callbacks.signal.step={signal_step},null",  # job 0: signalled; job 1: never
        "hydra/launcher=slurm", "hydra.launcher.mem_gb=2", "hydra.launcher.cpus_per_task=1",
        # submitit calls a signal a time-out (not a preemption) once the job has run
        # min(0.8 x limit, limit - 10 min): under a 10-minute limit always. So this requeue
        # counts against max_num_timeout (conf: 3); with 0 the job would fail instead.
        "hydra.launcher.timeout_min=9",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    env = cli_env()
    log_path = tmp_path / "driver.log"
    started = time.time()
    with log_path.open("w") as driver_log:
        driver = subprocess.Popen([sys.executable, "-m", "robustnlu", *args], cwd=tmp_path, env=env,
                                  stdout=driver_log, stderr=subprocess.STDOUT)
    job0, states, released, held_since = None, [], False, None
    try:
        while driver.poll() is None and time.time() - started < 480:
            time.sleep(0.5)
            job0 = job0 or _array_task_id(sweep_dir, 0)
            if job0 is None:
                continue
            info = _scontrol_job(job0)
            state = (info.get("JobState"), info.get("Reason"), info.get("Restarts"))
            if not states or states[-1][1:] != state:
                states.append((round(time.time() - started, 1), *state))
            # Slurm holds a requeued job (PENDING, reason BeginTime) for 121 s: let it go after 2 s
            # (not checked: the job may have started in between). Not at once: slurmd revokes the
            # requeued job's credential, and a start in the same second is refused ("Killing
            # non-startable batch JobId=…: Job credential revoked"; the job then FAILS).
            if info.get("JobState") == "PENDING" and info.get("Reason") == "BeginTime":
                held_since = held_since or time.time()
                if time.time() - held_since >= 2:
                    subprocess.run(["scontrol", "update", f"JobId={job0}", "StartTime=now"], capture_output=True)
                    released = True
    finally:
        if driver.poll() is None:  # timed out: stop the driver and its jobs
            driver.kill()
            if job0:
                subprocess.run(["scancel", job0.split("_")[0]])
    elapsed = time.time() - started
    print(f"Slurm requeue sweep: {elapsed:.0f} s (driver wall time); job {job0} (t, state, reason, restarts):"
          f" {states}; released from BeginTime: {released}")
    out = log_path.read_text()
    assert driver.returncode == 0, (states, out[-5000:])

    # submitit's log of job 0 (Slurm appends the requeued job's output to the same files)
    log = (sweep_dir / ".submitit" / job0 / f"{job0}_0_log.out").read_text()
    assert "Caught signal SIGUSR2" in log and "this job is timed-out" in log, log[-3000:]
    assert f"Requeued job {job0} (2 remaining timeouts)" in log, log[-3000:]
    assert log.count(f"Starting with JobEnvironment(job_id={job0}") == 2
    info = _wait_until_ended(job0)
    if info:  # absent when a cluster purges finished jobs sooner
        assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", info

    # job 0 is the signalled one (+callbacks.signal.step=<step>), job 1 the one left alone (null)
    runs = {0 if f"+callbacks.signal.step={signal_step}" in RunDir(path.parent).overrides() else 1: path.parent
            for path in sweep_dir.glob("*/results.json")}
    assert sorted(runs) == [0, 1], out[-3000:]
    resumed, straight = (json.loads((runs[n] / "results.json").read_text()) for n in (0, 1))
    assert resumed["resumed_from"].pop("fit_time_s") > 0  # the session before the requeue, up to its last.ckpt
    assert resumed["resumed_from"] == {"checkpoint": "checkpoints/last.ckpt", "global_step": 12, "epoch": 1}
    assert straight["resumed_from"] is None
    assert json.loads((runs[0] / "status.json").read_text())["state"] == "finished"
    assert resumed["epochs_trained"] == straight["epochs_trained"] == 2
    assert resumed["best_checkpoint"] == straight["best_checkpoint"]
    for split in ("valid", "test"):
        assert resumed["metrics"][split] == pytest.approx(straight["metrics"][split], rel=1e-6, abs=1e-9), split
        assert (runs[0] / "predictions" / f"{split}.jsonl").read_text() == \
            (runs[1] / "predictions" / f"{split}.jsonl").read_text()


#: what a DDP job's run directory holds: the same as a one-process run's (rank 1 writes none of
#: its own: config.yaml, csv/, checkpoints/, predictions/, results.json and status.json are rank 0's)
RUN_DIR_ENTRIES = {".hydra", "__main__.log", "checkpoints", "config.yaml", "csv", "predictions", "results.json",
                   "status.json"}


@pytest.mark.slurm
def test_a_ddp_job_runs_as_one_slurm_task_per_device(slurm, tmp_path):
    """`trainer=ddp` under -m: Slurm starts one task per device (tasks_per_node=2), submitit
    runs the job in each, Lightning takes rank and world size from Slurm (no re-executed command
    line). 2 CPU processes × 8 utterances train as 1 local process × 16 (dropout off), rank 0
    alone writes the record, both tasks end cleanly and the driver returns. ~30 s."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=30)
    common = [*FAST, *jsonl_overrides(sample), "encoder.dropout=0", "model.dropout=0", "trainer.max_epochs=3",
              "seed=1", "keep_last_checkpoint=true"]
    sweep_dir = tmp_path / "multirun"
    started = time.time()
    proc = run_cli(["-m", *common, "trainer=ddp", "data.batch_size=8", "hydra/launcher=slurm",
                    "hydra.launcher.tasks_per_node=2", "hydra.launcher.cpus_per_task=1",  # the node's 2 CPUs
                    "hydra.launcher.mem_gb=2", "hydra.launcher.timeout_min=20", f"hydra.sweep.dir={sweep_dir}"],
                   cwd=tmp_path)
    print(f"1-job DDP Slurm sweep: {time.time() - started:.0f} s (driver wall time)")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    # a one-job sweep is submitted as a plain job, not an array: its folder is the bare job id
    (job_id,) = [p.name for p in (sweep_dir / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name)]
    folder = sweep_dir / ".submitit" / job_id
    submission = (folder / f"{job_id}_submission.sh").read_text()
    assert "#SBATCH --ntasks-per-node=2" in submission
    logs = {rank: (folder / f"{job_id}_{rank}_log.out").read_text() for rank in (0, 1)}  # one per Slurm task
    for rank, log in logs.items():
        assert f"global_rank={rank}(2)" in log, log[-3000:]  # submitit's JobEnvironment of that task
        assert f"Initializing distributed: GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in log, log[-3000:]
        assert "Job completed successfully" in log and "Exiting after successful completion" in log, log[-3000:]
        assert (folder / f"{job_id}_{rank}_result.pkl").exists()
    assert "Starting with 2 processes" in logs[0] and "run directory:" in logs[0] and "run directory:" not in logs[1]
    info = _wait_until_ended(job_id)
    if info:  # absent when a cluster purges finished jobs sooner
        assert info["JobState"] == "COMPLETED" and info["NumTasks"] == "2", info

    (run_dir,) = [p.parent for p in sweep_dir.glob("*/results.json")]
    assert {p.name for p in run_dir.iterdir()} == RUN_DIR_ENTRIES
    assert sorted(p.name for p in (run_dir / "csv").iterdir()) == ["hparams.yaml", "metrics.csv"]
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    ddp = json.loads((run_dir / "results.json").read_text())
    assert ddp["epochs_trained"] == 3

    one = run_cli([*common, "data.batch_size=16", f"hydra.run.dir={tmp_path / 'one'}"], cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    single = json.loads((tmp_path / "one" / "results.json").read_text())
    assert ddp["sizes"] == single["sizes"]
    for split in ("valid", "test"):  # each process evaluated the whole split; rank 0 wrote it once
        rows = (run_dir / "predictions" / f"{split}.jsonl").read_text().splitlines()
        assert len(rows) == len({json.loads(r)["uid"] for r in rows}) == ddp["sizes"][split]
        for key in ("intent_acc", "slot_f1", "combined"):
            assert ddp["metrics"][split][key] == pytest.approx(single["metrics"][split][key], abs=0.02), (split, key)
    assert single["metrics"]["test"]["slot_f1"] > 0.1  # trained to something (not only the majority intent)
    x, y = (torch.load(d / "checkpoints" / "last.ckpt", weights_only=True) for d in (run_dir, tmp_path / "one"))
    assert x["global_step"] == y["global_step"] == 3 * STEPS_PER_EPOCH
    for key, value in y["state_dict"].items():
        torch.testing.assert_close(x["state_dict"][key], value, rtol=1e-3, atol=1e-3, msg=key)


def _arrays(sweep_dir: Path) -> set[str]:
    """The Slurm job arrays submitted for a sweep (submitit's folders are <array job>_<task>)."""
    return {p.name.split("_")[0] for p in (sweep_dir / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name)}


@pytest.mark.slurm
def test_a_slurm_sweeps_failed_job_is_recorded_and_relaunch_runs_the_missing_one_through_slurm(slurm, tmp_path):
    """A 2-job Slurm sweep, one job with a bad value: the Slurm job writes the failed job's record
    (status.json: failed, its error line, its overrides). One finished job's folder is then
    removed (as if it had never run); `python -m robustnlu.sweep relaunch` submits the missing and
    the failed job again as a Slurm job array with the sweep's launcher settings: the missing one
    trains, the failed one fails again with the same line. ~1-2 min."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=30)
    sweep_dir = tmp_path / "multirun"
    launcher = ["hydra/launcher=slurm", "hydra.launcher.mem_gb=2", "hydra.launcher.cpus_per_task=1",
                "hydra.launcher.timeout_min=20"]
    proc = run_cli(["-m", *FAST, "trainer.max_epochs=1", *jsonl_overrides(sample), "seed=1,2", "optimizer.lr=5e-3,-1",
                    *launcher, f"hydra.sweep.dir={sweep_dir}"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-5000:]

    def status() -> dict[str, dict]:
        out = run_cli(["status", "--json", str(sweep_dir)], cwd=tmp_path, module="robustnlu.sweep")
        assert out.returncode == 0, out.stderr[-3000:]
        jobs = [json.loads(line) for line in out.stdout.splitlines()]
        return {" ".join(sorted([o for o in j["overrides"] if o.startswith(("seed=", "optimizer.lr="))],
                                reverse=True)): j for j in jobs}

    jobs = status()
    assert {k: j["state"] for k, j in jobs.items()} == {
        "seed=1 optimizer.lr=0.005": "finished", "seed=1 optimizer.lr=-1": "failed",
        "seed=2 optimizer.lr=0.005": "finished", "seed=2 optimizer.lr=-1": "failed"}
    failed = RunDir(Path(jobs["seed=1 optimizer.lr=-1"]["folder"])).status()
    assert failed["error"] == "optimizer.lr: must be > 0 (got -1)"
    assert failed["slurm_job_id"]  # written in the Slurm job
    assert "optimizer.lr=-1" in failed["overrides"]
    kept = Path(jobs["seed=1 optimizer.lr=0.005"]["folder"])
    kept_results = (kept / "results.json").read_bytes(), (kept / "results.json").stat().st_mtime
    gone = Path(jobs["seed=2 optimizer.lr=0.005"]["folder"])
    shutil.rmtree(gone)
    assert status()["seed=2 optimizer.lr=0.005"]["state"] == "missing"
    arrays_before = _arrays(sweep_dir)

    proc = run_cli(["relaunch", str(sweep_dir)], cwd=tmp_path, module="robustnlu.sweep")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-5000:]  # the bad values fail again
    assert "4 jobs, 1 finished, 0 running, 0 queued (left alone), 3 to run again" in proc.stdout
    command = next(line for line in proc.stdout.splitlines() if line.startswith("+ cd "))
    assert " ".join(launcher) in command and "hydra/sweeper=joblist" in command and command.endswith("resume=true")
    jobs = status()
    assert {k: j["state"] for k, j in jobs.items()} == {
        "seed=1 optimizer.lr=0.005": "finished", "seed=1 optimizer.lr=-1": "failed",
        "seed=2 optimizer.lr=0.005": "finished", "seed=2 optimizer.lr=-1": "failed"}
    assert Path(jobs["seed=2 optimizer.lr=0.005"]["folder"]) == gone  # the same folder name again
    assert ((kept / "results.json").read_bytes(), (kept / "results.json").stat().st_mtime) == kept_results
    (new_array,) = _arrays(sweep_dir) - arrays_before  # one Slurm job array of the 3 relaunched jobs
    assert len([p for p in (sweep_dir / ".submitit").iterdir() if p.name.startswith(f"{new_array}_")]) == 3
    assert json.loads((gone / "status.json").read_text())["slurm_job_id"]  # trained as a Slurm job


@pytest.mark.slurm
def test_a_studys_jobs_run_as_one_slurm_job_array_and_are_recorded(slurm, tmp_path):
    """A 2-job study (`robustnlu.studies.runner`) with ``--batch 2 hydra/launcher=slurm``: one job
    array of both, each trained as a Slurm job in ``<runs>/<name>/`` and recorded when the launch
    returns. ~1-2 min."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=30)
    study = tmp_path / "my_study.py"
    study.write_text(
        "import sys\nfrom pathlib import Path\nfrom robustnlu.studies.runner import Job, Study, main\n"
        "jobs = [Job(f'seed{s}', (f'seed={s}',)) for s in (1, 2)]\n"
        "sys.exit(main(Study('slurm study', lambda records: jobs, Path('records'), Path('runs'))))\n")
    launcher = ["hydra/launcher=slurm", "hydra.launcher.mem_gb=2", "hydra.launcher.cpus_per_task=1",
                "hydra.launcher.timeout_min=20"]
    tiny = [o for o in FAST if "progress" not in o] + ["trainer.max_epochs=1", *jsonl_overrides(sample)]
    proc = subprocess.run([sys.executable, str(study), "--batch", "2", *tiny, *launcher], cwd=tmp_path,
                          env=cli_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert proc.stdout.count("+ python -m robustnlu -m hydra/sweeper=joblist") == 1
    assert "2 of 2 planned jobs recorded" in proc.stdout
    (array,) = _arrays(tmp_path / "runs")
    assert len([p for p in (tmp_path / "runs" / ".submitit").iterdir() if p.name.startswith(f"{array}_")]) == 2
    for name in ("seed1", "seed2"):
        assert RunDir(tmp_path / "runs" / name).status()["slurm_job_id"]  # trained as a Slurm job
        assert (tmp_path / "records" / name / "results.json").is_file()


def test_local_launcher_runs_a_two_job_sweep_in_parallel(tmp_path):
    # both jobs start at once: one thread each (they inherit the driver's environment)
    sweep_dir, elapsed, proc = _sweep(tmp_path, ["hydra/launcher=local"], env={"OMP_NUM_THREADS": "1"})
    print(f"2-job local sweep: {elapsed:.0f} s")

    results = _results(sweep_dir)
    assert sorted(results) == [1, 2]
    # job directories are named <scenario>-<method>-seed<seed>-<job hash> (conf/hydra/default.yaml)
    jobs = [next(sweep_dir.glob(f"jsonl-erm-seed{seed}-*")) for seed in (1, 2)]
    # in parallel: each job started (Hydra wrote its .hydra/config.yaml) before the other ended
    starts = [(job / ".hydra" / "config.yaml").stat().st_mtime for job in jobs]
    ends = [(job / "results.json").stat().st_mtime for job in jobs]
    assert max(starts) < min(ends), (starts, ends)
    assert len(list((sweep_dir / ".submitit").glob("*/*_log.out"))) == 2


def _driver(tmp_path: Path, args: list[str]) -> subprocess.Popen:
    """``python -m robustnlu`` with ``args``, started in ``tmp_path`` and left running (the sweep's
    driver), its output in ``tmp_path/driver.log``."""
    with (tmp_path / "driver.log").open("w") as driver_log:
        return subprocess.Popen([sys.executable, "-m", "robustnlu", *args], cwd=tmp_path, env=cli_env(),
                                stdout=driver_log, stderr=subprocess.STDOUT)


def _held_sweep(tmp_path: Path, seeds: str, *launcher: str) -> tuple[subprocess.Popen, Path, Path]:
    """A Slurm sweep over ``seeds`` ("1,2") of one-epoch runs on a small SNIPS sample, each held after
    its first step until the returned file exists; ``launcher``: more ``hydra.launcher.*`` overrides.
    The driver, the sweep folder and the file that lets the runs go."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=30)
    sweep_dir, go = tmp_path / "multirun", tmp_path / "go"
    args = ["-m", *FAST, "trainer.max_epochs=1", *jsonl_overrides(sample), f"seed={seeds}",
            "+callbacks.hold._target_=integration_helpers.HoldUntilFile", f"+callbacks.hold.path={go}",
            "hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=20", *launcher,
            f"hydra.sweep.dir={sweep_dir}"]
    return _driver(tmp_path, args), sweep_dir, go


def _stop(driver: subprocess.Popen, array: str | None) -> None:
    """A sweep's driver still running (a failed assertion) killed, and its Slurm job array cancelled."""
    if driver.poll() is None:
        driver.kill()
        if array:
            subprocess.run(["scancel", array])


def _jobs_by_seed(sweep_dir: Path, tmp_path: Path) -> dict[str, dict]:
    """``python -m robustnlu.sweep status --json``'s jobs, by their ``seed=`` override."""
    out = run_cli(["status", "--json", str(sweep_dir)], cwd=tmp_path, module="robustnlu.sweep")
    assert out.returncode == 0, out.stderr[-3000:]
    return {next(o for o in j["overrides"] if o.startswith("seed=")): j for j in map(json.loads, out.stdout.splitlines())}


@pytest.mark.slurm
def test_status_shows_a_job_pending_in_slurm_as_queued_and_relaunch_leaves_it_alone(slurm, tmp_path):
    """A 2-job Slurm sweep run one job at a time (array_parallelism=1): while job 0 trains (held
    after its first step until the test is done looking), job 1 waits in Slurm's queue with no
    folder yet. `status` says so (``queued``, not ``missing``) and `relaunch` leaves it alone (it
    used to submit it a second time). ~15 s."""
    driver, sweep_dir, go = _held_sweep(tmp_path, "1,2", "hydra.launcher.mem_gb=1", "hydra.launcher.array_parallelism=1")
    array = None
    try:
        started = time.time()
        while not list(sweep_dir.glob("*/run.lock")) and time.time() - started < 120:  # job 0 trains
            time.sleep(0.5)
        array = _array_task_id(sweep_dir, 1).split("_")[0]
        assert _scontrol_job(f"{array}_1").get("JobState") == "PENDING"
        jobs = _jobs_by_seed(sweep_dir, tmp_path)
        assert jobs["seed=1"]["state"] == "running"
        assert jobs["seed=2"]["state"] == "queued" and jobs["seed=2"]["folder"] is None, jobs["seed=2"]
        assert f"Slurm job {array}_1 PENDING" in jobs["seed=2"]["note"]
        proc = run_cli(["relaunch", str(sweep_dir)], cwd=tmp_path, module="robustnlu.sweep")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "2 jobs, 0 finished, 1 running, 1 queued (left alone), 0 to run again" in proc.stdout
        assert "nothing to relaunch" in proc.stdout and not (sweep_dir / ".relaunch").exists()
        go.touch()
        assert driver.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        _stop(driver, array)
    assert sorted(_results(sweep_dir)) == [1, 2]


@pytest.mark.slurm
def test_four_jobs_two_runs_per_gpu_are_two_slurm_jobs_of_two_tasks_each_job_in_its_own_folder(slurm, tmp_path):
    """``hydra.launcher.runs_per_gpu=2`` (CPU jobs here: the test Slurm has no GPU; what is checked is
    the packing, not a GPU's speed): 4 jobs make one array of 2 Slurm jobs, each with 2 tasks that
    train one job each at once. While the first pack trains (held after its first step) its jobs
    are ``running`` and the second pack's, pending in Slurm with no folder yet, ``queued``; at the
    end each job has its own finished run directory, recorded by its pack's Slurm job, and `status`
    shows the 4 finished. ~1-2 min."""
    driver, sweep_dir, go = _held_sweep(tmp_path, "1,2,3,4", "hydra.launcher.runs_per_gpu=2", "hydra.launcher.mem_gb=2")
    array = None
    try:
        started = time.time()
        while len(list(sweep_dir.glob("*/run.lock"))) < 2 and time.time() - started < 180:  # the first pack trains
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            time.sleep(0.5)
        array = _array_task_id(sweep_dir, 0).split("_")[0]
        assert _scontrol_job(f"{array}_1").get("JobState") == "PENDING"  # the node's 2 CPUs hold one pack
        jobs = _jobs_by_seed(sweep_dir, tmp_path)
        assert {seed: job["state"] for seed, job in jobs.items()} == {
            "seed=1": "running", "seed=2": "running", "seed=3": "queued", "seed=4": "queued"}, jobs
        assert f"Slurm job {array}_1 PENDING" in jobs["seed=3"]["note"] and jobs["seed=3"]["folder"] is None
        go.touch()
        assert driver.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        _stop(driver, array)

    assert _arrays(sweep_dir) == {array}
    packs = sorted(p.name for p in (sweep_dir / ".submitit").iterdir() if p.name.startswith(f"{array}_"))
    assert packs == [f"{array}_0", f"{array}_1"]
    assert "#SBATCH --ntasks-per-node=2" in (sweep_dir / ".submitit" / array / f"{array}_submission.sh").read_text()
    for pack in packs:
        folder = sweep_dir / ".submitit" / pack
        for task in (0, 1):  # one log and one result per task: each task trained one job
            log = (folder / f"{pack}_{task}_log.out").read_text()
            assert "Job completed successfully" in log, log[-3000:]
        info = _wait_until_ended(pack)
        if info:  # absent when a cluster purges finished jobs sooner
            assert info["JobState"] == "COMPLETED" and info["NumTasks"] == "2", info

    jobs = _jobs_by_seed(sweep_dir, tmp_path)
    assert {seed: job["state"] for seed, job in jobs.items()} == {f"seed={s}": "finished" for s in (1, 2, 3, 4)}
    runs = {seed: RunDir(Path(job["folder"])) for seed, job in jobs.items()}
    assert len({run.path for run in runs.values()}) == 4
    slurm_jobs = {seed: run.status()["slurm_job_id"] for seed, run in runs.items()}  # the Slurm job that trained it
    assert slurm_jobs["seed=1"] == slurm_jobs["seed=2"] != slurm_jobs["seed=3"] == slurm_jobs["seed=4"], slurm_jobs
    for run in runs.values():
        assert run.status()["state"] == "finished" and run.results()["epochs_trained"] == 1


@pytest.mark.slurm
def test_a_requeued_pack_resumes_its_unfinished_run_and_does_not_train_its_finished_one_again(slurm, tmp_path):
    """A pack of 2 runs (``runs_per_gpu=2``, one Slurm job): run A (1 epoch) finishes while run B
    (2 epochs) waits after its first step; B then gets SIGUSR2 (what Slurm sends every task
    ``signal_delay_s`` before the time limit) two steps after a mid-epoch last.ckpt. B's task
    requeues the Slurm job; the requeued job runs the pack again: B resumes from last.ckpt, A
    returns its stored result (its results.json untouched). ~1 min (the requeued job is let go
    after 2 s, as in the single-job requeue test)."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=30)
    sweep_dir = tmp_path / "multirun"
    go = tmp_path / "go"
    signal_step = STEPS_PER_EPOCH + 6  # epoch 1, batch 6: two steps after the checkpoint at step 12
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({"jobs": [
        ["trainer.max_epochs=1"],
        ["trainer.max_epochs=2", "+callbacks.hold._target_=integration_helpers.HoldUntilFile", f"+callbacks.hold.path={go}",
         "+callbacks.signal._target_=integration_helpers.SignalAtStep", f"+callbacks.signal.step={signal_step}"]]}))
    common = [o for o in FAST if not o.startswith("trainer.max_epochs=")]  # the command line's replace the jobs'
    args = ["-m", *common, "seed=1", *jsonl_overrides(sample), "callbacks.last_checkpoint.every_minutes=null",
            "callbacks.last_checkpoint.every_n_train_steps=4", "hydra/sweeper=joblist",
            f"hydra.sweeper.jobs_file={jobs_file}", "hydra/launcher=slurm", "hydra.launcher.runs_per_gpu=2",
            "hydra.launcher.mem_gb=2", "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=9",
            f"hydra.sweep.dir={sweep_dir}"]
    driver = _driver(tmp_path, args)
    pack, finished_a, held_since = None, None, None
    started = time.time()
    try:
        while driver.poll() is None and time.time() - started < 480:
            time.sleep(0.5)
            pack = pack or _array_task_id(sweep_dir, 0) or next(
                (p.name for p in (sweep_dir / ".submitit").glob("*") if re.fullmatch(r"\d+", p.name)), None) \
                if (sweep_dir / ".submitit").is_dir() else None
            done = [p for p in sweep_dir.glob("*/results.json")]
            if finished_a is None and done:
                (results_a,) = done
                finished_a = results_a, results_a.read_bytes(), results_a.stat().st_mtime
                go.touch()  # B trains on, to its signal
            info = _scontrol_job(pack) if pack else {}
            if info.get("JobState") == "PENDING" and info.get("Reason") == "BeginTime":  # requeued: let it go
                held_since = held_since or time.time()
                if time.time() - held_since >= 2:
                    subprocess.run(["scontrol", "update", f"JobId={pack}", "StartTime=now"], capture_output=True)
    finally:
        if driver.poll() is None:
            driver.kill()
            if pack:
                subprocess.run(["scancel", pack])
    out = (tmp_path / "driver.log").read_text()
    assert driver.returncode == 0, out[-5000:]

    folder = sweep_dir / ".submitit" / pack
    log_b = (folder / f"{pack}_1_log.out").read_text()  # task 1 runs B; Slurm appends the restart's output
    assert "Caught signal SIGUSR2" in log_b and f"Requeued job {pack}" in log_b, log_b[-3000:]
    for task in (0, 1):
        assert (folder / f"{pack}_{task}_log.out").read_text().count(f"Starting with JobEnvironment(job_id={pack}") == 2
    info = _wait_until_ended(pack)
    if info:  # absent when a cluster purges finished jobs sooner
        assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", info

    results_a, before, mtime = finished_a
    assert (results_a.read_bytes(), results_a.stat().st_mtime) == (before, mtime)  # not trained again
    (results_b,) = [p for p in sweep_dir.glob("*/results.json") if p != results_a]
    resumed = json.loads(results_b.read_text())
    assert resumed["resumed_from"].pop("fit_time_s") > 0
    assert resumed["resumed_from"] == {"checkpoint": "checkpoints/last.ckpt", "global_step": 12, "epoch": 1}
    assert resumed["epochs_trained"] == 2
    out = run_cli(["status", "--json", str(sweep_dir)], cwd=tmp_path, module="robustnlu.sweep")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [json.loads(line)["state"] for line in out.stdout.splitlines()] == ["finished", "finished"]
