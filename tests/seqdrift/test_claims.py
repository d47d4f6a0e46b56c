"""The claim of a cache entry being computed (`robustnlu.io.compute_once`): a claim whose owner
ran on this host and has ended is taken over at once, with a warning; a live owner, and an owner
on another host until its heartbeat stops, are waited for; a late waiter never removes the claim
of a new owner."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from integration_helpers import SMALL_DRIFT, jsonl_overrides, run_cli, write_snips_sample_jsonl
from racers import cluster_until_killed
from robustnlu.io import atomic_write_text, compute_once, take_over

HOST = socket.gethostname()
STALE_S = 8.0  # long enough that a take-over by staleness is told apart from one at once


def ended_pid() -> int:
    """The pid of a process of this host that has ended (and been reaped)."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                              check=True).stdout)


def claimed(tmp_path, text: str) -> tuple[Path, Path]:
    """A result not computed yet, with a fresh claim that reads ``text``."""
    result = tmp_path / "entry"
    claim = Path(f"{result}.claim")
    claim.write_text(text)
    return result, claim


def compute_timed(result, **kw) -> tuple[str, float]:
    started = time.monotonic()
    value = compute_once(result, lambda: result.read_text() if result.is_file() else None, lambda: "computed here",
                         poll_s=0.02, **kw)
    return value, time.monotonic() - started


@pytest.mark.parametrize("whose", ["an ended process", "this pid, not holding it"])
def test_the_claim_of_an_ended_process_of_this_host_is_taken_over_at_once(whose, tmp_path, caplog):
    pid = ended_pid() if whose == "an ended process" else os.getpid()  # a rerun that got the dead owner's pid
    result, claim = claimed(tmp_path, f"{HOST} {pid}\n")
    with caplog.at_level(logging.WARNING, logger="robustnlu.io"):
        value, took = compute_timed(result, stale_s=STALE_S)
    assert value == "computed here" and took < STALE_S / 2
    assert not claim.exists() and sorted(p.name for p in tmp_path.iterdir()) == []
    (record,) = caplog.records
    assert record.getMessage() == f"taking over the claim {claim} on {result}: process {pid} of this host held it and has ended" + (
        " (its pid is this process's now)" if pid == os.getpid() else "")


def test_a_live_owner_is_waited_for(tmp_path, caplog):
    owner = subprocess.Popen(["sleep", "60"])
    try:
        result, claim = claimed(tmp_path, f"{HOST} {owner.pid}\n")

        def finish():  # what the owner does when it is done: the result, then the claim released
            time.sleep(1.5)
            atomic_write_text(result, "computed by the owner")
            claim.unlink()

        began = time.monotonic()
        threading.Thread(target=finish).start()
        with caplog.at_level(logging.INFO, logger="robustnlu.io"):
            value, _ = compute_timed(result, stale_s=STALE_S)
    finally:
        owner.kill()
        owner.wait()
    assert value == "computed by the owner" and time.monotonic() - began >= 1.5
    (record,) = caplog.records  # said once, not at every look
    assert record.getMessage() == f"waiting for {HOST} {owner.pid}, which is computing {result} (claim {claim})"


@pytest.mark.parametrize("text", [f"elsewhere {os.getpid()}\n", ""], ids=["another host", "being written"])
def test_a_claim_whose_owner_cannot_be_seen_is_taken_over_only_once_stale(text, tmp_path, caplog):
    """Another host's pid says nothing here (here it is even this process's), and an empty claim
    is one whose owner has not written it yet: only the heartbeat tells that they are dead."""
    result, claim = claimed(tmp_path, text)
    written = claim.stat().st_mtime
    with caplog.at_level(logging.WARNING, logger="robustnlu.io"):
        value, _ = compute_timed(result, stale_s=1.0)
    assert value == "computed here" and time.time() - written > 1.0
    (record,) = caplog.records
    assert record.getMessage().startswith(f"taking over the claim {claim} on {result}: not touched for ")


def test_a_late_waiter_leaves_a_new_owners_claim(tmp_path):
    """Two waiters saw the same dead claim; the first took it over and claimed anew. The second
    must not remove that new claim."""
    claim = tmp_path / "entry.claim"
    claim.write_text(f"{HOST} 2\n")
    take_over(claim, f"{HOST} 1\n")  # the dead claim it saw read this
    assert claim.read_text() == f"{HOST} 2\n"
    take_over(claim, f"{HOST} 2\n")
    assert sorted(tmp_path.iterdir()) == []  # removed, and nothing left beside it


def test_a_rerun_after_a_killed_clustering_takes_its_claim_over_at_once(tmp_path):
    """The user's case: `python -m robustnlu.seqdrift` killed while it clusters leaves its claim;
    the next run takes it over at once, not after the 120 s that a claim takes to go stale."""
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=600, n_eval=60)
    overrides = [*jsonl_overrides(data), *SMALL_DRIFT, f"paths.cache_dir={tmp_path / 'cache'}"]
    started = tmp_path / "clustering-started"
    killed = multiprocessing.get_context("spawn").Process(target=cluster_until_killed, args=((overrides, str(started)),))
    killed.start()
    deadline = time.monotonic() + 120
    while not started.exists() and killed.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "the clustering never started"
    os.kill(killed.pid, signal.SIGKILL)
    killed.join()
    (claim,) = (tmp_path / "cache" / "seqdrift" / "claims").glob("clusters-*.claim")
    assert claim.read_text() == f"{HOST} {killed.pid}\n"
    began = time.monotonic()
    proc = run_cli([*overrides, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert time.monotonic() - began < 60
    log = proc.stdout + proc.stderr
    assert f"taking over the claim {claim} on " in log and f"process {killed.pid} of this host held it and has ended" in log
    assert not claim.exists() and (tmp_path / "run" / "split.json").is_file()
