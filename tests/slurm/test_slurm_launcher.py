"""Hydra launchers end to end: a 2-job sweep through a real single-node Slurm
(`hydra/launcher=slurm`, started by tests/slurm/start_slurm.sh) and through parallel local
processes (`hydra/launcher=local`), each finding both runs' results.json.

The Slurm test needs root (it installs slurm-wlm/munge with apt-get if missing and starts the
daemons); it skips, with the reason, where that is impossible, unless ROBUSTNLU_REQUIRE_SLURM=1
(CI) turns the skip into a failure. The daemons are left running (the script is idempotent;
`tests/slurm/start_slurm.sh stop` stops them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from integration_helpers import FAST, jsonl_overrides, run_cli, write_snips_sample_jsonl

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
        info = _scontrol_job(job_id)
        for _ in range(60):
            if info.get("JobState") not in ("RUNNING", "COMPLETING"):
                break
            time.sleep(1)
            info = _scontrol_job(job_id)
        if info:  # absent when a cluster purges finished jobs sooner
            assert info["JobState"] == "COMPLETED", (job_id, info)
            print(f"  job {job_id}: {info['StartTime']} -> {info['EndTime']} on {info.get('NodeList')}")


def test_local_launcher_runs_a_two_job_sweep_in_parallel(tmp_path):
    # both jobs start at once: one thread each (they inherit the driver's environment)
    sweep_dir, elapsed, proc = _sweep(tmp_path, ["hydra/launcher=local"], env={"OMP_NUM_THREADS": "1"})
    print(f"2-job local sweep: {elapsed:.0f} s")

    results = _results(sweep_dir)
    assert sorted(results) == [1, 2]
    # job directories are named <job number>-<scenario>-<method>-seed<seed> (conf/hydra/default.yaml)
    jobs = [sweep_dir / f"{n}-jsonl-none-False-iid-erm-seed{n + 1}" for n in (0, 1)]
    # in parallel: each job started (Hydra wrote its .hydra/config.yaml) before the other ended
    starts = [(job / ".hydra" / "config.yaml").stat().st_mtime for job in jobs]
    ends = [(job / "results.json").stat().st_mtime for job in jobs]
    assert max(starts) < min(ends), (starts, ends)
    assert len(list((sweep_dir / ".submitit").glob("*/*_log.out"))) == 2
