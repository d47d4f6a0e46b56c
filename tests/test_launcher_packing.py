"""``hydra.launcher.runs_per_gpu`` (hydra_plugins/robustnlu_plugins/launchers.py): K sweep jobs to a
GPU with ``hydra/launcher=local``, each job on its own GPU slot, the next job on a freed slot; the
settings it refuses; a packed Slurm job's jobs read back from submitit's pickle.

This machine has no GPU: the jobs train on the CPU (``trainer.accelerator=cpu``) and the tests
check what the launcher gave each job (its ``CUDA_VISIBLE_DEVICES``, its torch threads) and when
each trained (the times each job records: `integration_helpers.RecordProcess`), not a GPU's speed.
The Slurm side runs in tests/slurm/test_slurm_launcher.py."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration_helpers import FAST, cli_env, jsonl_overrides, run_cli, write_snips_sample_jsonl

#: each job records what it was given, and holds after its first step until the test lets it go
#: (go/seed<seed>), so that the test decides when each job ends
CONTROLLED = ["+callbacks.record._target_=integration_helpers.RecordProcess",
              "+callbacks.record.path=${hydra:runtime.cwd}/records/seed${seed}.json",
              "+callbacks.hold._target_=integration_helpers.HoldUntilFile",
              "+callbacks.hold.path=${hydra:runtime.cwd}/go/seed${seed}"]


def _records(cwd: Path) -> dict[int, dict]:
    """seed -> what the job recorded (`integration_helpers.RecordProcess`), for the jobs that started."""
    return {int(p.stem.removeprefix("seed")): json.loads(p.read_text()) for p in (cwd / "records").glob("seed*.json")}


def _wait_until(what: str, condition, driver: subprocess.Popen, log: Path, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert driver.poll() is None, f"the sweep ended before {what}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)


def _release(cwd: Path, *seeds: int) -> None:
    for seed in seeds:
        (cwd / "go" / f"seed{seed}").touch()


def _most_at_once(records: dict[int, dict]) -> int:
    """The most jobs that were training at one time (from their start and end times)."""
    events = sorted([(r["start"], 1) for r in records.values()] + [(r["end"], -1) for r in records.values()])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def _start_sweep(cwd: Path, seeds: str, launcher: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    """``python -m robustnlu -m`` of the tiny training over ``seeds`` with the local launcher, in the background."""
    (cwd / "go").mkdir(parents=True)
    (cwd / "records").mkdir()
    sample = write_snips_sample_jsonl(cwd / "data", n_train=120, n_eval=30)
    args = ["-m", *FAST, "trainer.max_epochs=1", *jsonl_overrides(sample), f"seed={seeds}", *CONTROLLED,
            "hydra/launcher=local", *launcher, f"hydra.sweep.dir={cwd / 'packed'}"]
    log = cwd / "driver.log"
    with log.open("w") as out:
        driver = subprocess.Popen([sys.executable, "-m", "robustnlu", *args], cwd=cwd, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    return driver, log


def _results(sweep_dir: Path) -> dict[int, Path]:
    """seed -> the folder of the sweep's job that finished with it."""
    return {json.loads(p.read_text())["seed"]: p.parent for p in sweep_dir.glob("*/results.json")}


def test_two_runs_per_gpu_share_gpu_0_and_the_next_job_starts_on_a_freed_slot(tmp_path):
    """G=1, K=2, 3 jobs (~35 s): jobs 1 and 2 start on GPU 0; job 3 waits for a slot and
    starts when job 1 ends, while job 2 still trains (not batch after batch); every job sees GPU
    0 alone and cores / 2 torch threads. The jobs' results are those of the same 3 jobs run one
    after another in one process (Hydra's basic launcher), with the same threads."""
    env = cli_env()
    env.pop("OMP_NUM_THREADS", None)  # the launcher sets the threads (pytest-xdist's share would be kept)
    driver, log = _start_sweep(tmp_path, "1,2,3", ["hydra.launcher.gpus_per_node=1", "hydra.launcher.runs_per_gpu=2"],
                               env)
    try:
        _wait_until("jobs 1 and 2 training", lambda: {1, 2} <= set(_records(tmp_path)), driver, log)
        _release(tmp_path, 1)
        _wait_until("job 3 started", lambda: 3 in _records(tmp_path), driver, log)
        _release(tmp_path, 2, 3)
        assert driver.wait(timeout=300) == 0, log.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            driver.kill()
    records = _records(tmp_path)
    threads = max(1, (os.cpu_count() or 1) // 2)
    assert {s: (r["cuda_visible_devices"], r["omp_num_threads"], r["torch_threads"]) for s, r in records.items()} == {
        seed: ("0", str(threads), threads) for seed in (1, 2, 3)}
    assert records[1]["end"] < records[3]["start"] < records[2]["end"], records
    assert _most_at_once(records) == 2, records

    sample = {split: tmp_path / "data" / f"{split}.jsonl" for split in ("train", "valid", "test")}
    unpacked = run_cli(["-m", *FAST, "trainer.max_epochs=1", *jsonl_overrides(sample), "seed=1,2,3",
                        f"hydra.sweep.dir={tmp_path / 'unpacked'}"], cwd=tmp_path, env={"OMP_NUM_THREADS": str(threads)})
    assert unpacked.returncode == 0, unpacked.stderr[-3000:]
    packed, alone = _results(tmp_path / "packed"), _results(tmp_path / "unpacked")
    assert sorted(packed) == sorted(alone) == [1, 2, 3]
    for seed in (1, 2, 3):
        a, b = (json.loads((runs[seed] / "results.json").read_text()) for runs in (packed, alone))
        for split in ("valid", "test"):
            assert a["metrics"][split] == pytest.approx(b["metrics"][split], rel=1e-6, abs=1e-9), (seed, split)
            assert (packed[seed] / "predictions" / f"{split}.jsonl").read_text() == \
                (alone[seed] / "predictions" / f"{split}.jsonl").read_text(), (seed, split)


def test_two_runs_per_gpu_on_two_gpus_give_each_job_one_gpu_and_a_freed_gpu_to_the_next(tmp_path):
    """G=2, K=2, 5 jobs (~35 s): slots 0-3 on GPUs 0, 1, 0, 1 take jobs 1-4; job 5 waits until
    job 2 ends and takes its slot, GPU 1; at most 4 train at once. The driver's OMP_NUM_THREADS=2
    is kept (not replaced by cores / 4: 1 on a 2-core machine)."""
    driver, log = _start_sweep(tmp_path, "1,2,3,4,5", ["hydra.launcher.gpus_per_node=2", "hydra.launcher.runs_per_gpu=2"],
                               cli_env(OMP_NUM_THREADS="2"))
    try:
        _wait_until("jobs 1-4 training", lambda: {1, 2, 3, 4} <= set(_records(tmp_path)), driver, log)
        _release(tmp_path, 2)
        _wait_until("job 5 started", lambda: 5 in _records(tmp_path), driver, log)
        _release(tmp_path, 1, 3, 4, 5)
        assert driver.wait(timeout=300) == 0, log.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            driver.kill()
    records = _records(tmp_path)
    assert {s: r["cuda_visible_devices"] for s, r in records.items()} == {1: "0", 2: "1", 3: "0", 4: "1", 5: "1"}
    assert {(r["omp_num_threads"], r["torch_threads"]) for r in records.values()} == {("2", 2)}
    assert records[2]["end"] < records[5]["start"], records
    assert _most_at_once(records) == 4, records
    assert sorted(_results(tmp_path / "packed")) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("launcher, line", [
    (["hydra/launcher=local", "hydra.launcher.runs_per_gpu=0"], "error: hydra.launcher.runs_per_gpu: must be >= 1 (got 0)"),
    (["hydra/launcher=local", "hydra.launcher.runs_per_gpu=2"],
     "error: hydra.launcher.runs_per_gpu=2 shares GPUs between jobs: name the GPUs the sweep uses with "
     "hydra.launcher.gpus_per_node=<count> (got null); CPU jobs: runs_per_gpu=1 and "
     "hydra.sweeper.max_batch_size=<jobs at once>"),
    (["hydra/launcher=slurm", "trainer=ddp", "hydra.launcher.tasks_per_node=2", "hydra.launcher.runs_per_gpu=2"],
     "error: hydra.launcher.tasks_per_node=2 with hydra.launcher.runs_per_gpu=2: a packed run is one process "
     "(tasks_per_node > 1 is for a DDP run, which is not packed); set one of them to 1"),
    (["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=2", "hydra.launcher.runs_per_gpu=4"],
     "error: hydra.launcher.gpus_per_node=2 with hydra.launcher.runs_per_gpu=4: each Slurm job packs its runs onto "
     "one GPU; set gpus_per_node=1 (null: CPU jobs)"),
], ids=["k0", "local-no-gpus", "slurm-ddp", "slurm-two-gpus"])
def test_settings_a_packed_launch_cannot_run_are_one_error_line_before_anything_is_written(launcher, line, tmp_path):
    """~5 s each: refused when the launcher is set up, before the sweep writes its folder."""
    proc = run_cli(["-m", *FAST, "seed=1,2", *launcher, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == line
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_packed_slurm_jobs_sweep_jobs_are_read_back_from_submitits_pickle(tmp_path):
    """What ``python -m robustnlu.sweep status`` reads to call a job queued in Slurm: the overrides
    of every job of a pack (`robustnlu.sweep_state.submitted_jobs`), as of a one-job submission."""
    import submitit

    from hydra_plugins.robustnlu_plugins.launchers import Pack
    from robustnlu.sweep_state import submitted_jobs

    pack = [["seed=1", "method=erm"], ["seed=2", "method=erm"]]
    for first_argument, jobs in ((pack, pack), (pack[0], pack[:1])):
        path = tmp_path / "submitted.pkl"
        path.write_bytes(pickle.dumps(submitit.helpers.DelayedSubmission(Pack(None), first_argument, [0, 1], {})))
        assert submitted_jobs(pickle.loads(path.read_bytes()).args[0]) == jobs
