"""The user's command on the device through the CLI: ``python -m robustnlu +experiment=snips_slot_context
method=topk_ae trainer.max_epochs=2`` (TopK-AE: the objective with its own optimiser, whose resume on
CUDA once failed), killed with SIGKILL as its second epoch starts (as a preempted job is), resumed
with ``resume=true`` to the end, then ``python -m robustnlu.predict`` with its best checkpoint on the
test utterances. The wall time of each epoch comes from `EpochClock`, a callback added to both runs.

Each command runs in a child process (`bench.memory.run_child`: also its peak RSS) from the
repository root, so ``bench.cli_run``'s callbacks are importable by the run.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from bench.memory import run_child

USER_COMMAND = ["+experiment=snips_slot_context", "method=topk_ae", "trainer.max_epochs=2"]


class EpochClock(pl.Callback):
    """Appends one JSON line per training epoch to ``path``: the process, the epoch, and the wall
    clock (``time.time()``) at its start, at its validation's start and at its end (after the
    validation, before the epoch's checkpoints are written)."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.row: dict[str, Any] = {}

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.row = {"pid": os.getpid(), "epoch": trainer.current_epoch, "start": time.time()}

    def on_validation_start(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking and self.row:
            self.row["valid_start"] = time.time()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.row["end"] = time.time()
        with open(self.path, "a") as f:
            f.write(json.dumps(self.row) + "\n")


class KillAtEpoch(pl.Callback):
    """SIGKILL to the own process as epoch ``epoch`` starts: everything of the epoch before, its
    ``last.ckpt`` included, is done; no Python clean-up runs."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGKILL)


def _tail(child: dict[str, Any]) -> str:
    return child["output"][-2500:]


def epoch_rows(path: Path) -> list[dict[str, Any]]:
    """The clock's rows as durations; ``session`` counts the processes (1: the killed run, 2: the resumed)."""
    rows, pids = [], []
    for line in path.read_text().splitlines() if path.exists() else []:
        row = json.loads(line)
        if row["pid"] not in pids:
            pids.append(row["pid"])
        valid_start = row.get("valid_start", row["end"])
        rows.append({"session": pids.index(row["pid"]) + 1, "epoch": row["epoch"], "epoch_s": row["end"] - row["start"],
                     "train_s": valid_start - row["start"], "valid_s": row["end"] - valid_start})
    return rows


def cli_stage(overrides: list[str], device: str, work: Path, deadline: float, record) -> dict[str, Any]:
    """Train (killed at epoch 1), resume, predict, in ``work``; each command stops at ``deadline``
    (``time.monotonic``). ``record(result)`` after each."""
    run_dir, clock = work / "run", work / "epochs.jsonl"
    common = [*USER_COMMAND, *overrides, "~callbacks.progress_bar", "trainer.enable_progress_bar=false",
              f"hydra.run.dir={run_dir}", f"paths.cache_dir={work / 'cache'}",
              "+callbacks.clock._target_=bench.cli_run.EpochClock", f"+callbacks.clock.path={clock}"]
    result: dict[str, Any] = {"command": "python -m robustnlu " + " ".join(USER_COMMAND), "overrides": common[3:]}

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left < 5:
            raise TimeoutError("out of the stage's time")
        return left

    killed = run_child(["robustnlu", *common, "+callbacks.kill._target_=bench.cli_run.KillAtEpoch",
                        "+callbacks.kill.epoch=1"], timeout_s=remaining())
    result["train"] = {"returncode": killed["returncode"], "wall_s": killed["wall_s"], "killed_at_epoch": 1,
                       "last_checkpoint_written": (run_dir / "checkpoints" / "last.ckpt").exists()}
    record(result)
    if killed["timed_out"]:
        raise TimeoutError(f"the training run outlasted the stage's time:\n{_tail(killed)}")
    if killed["returncode"] != -signal.SIGKILL or not result["train"]["last_checkpoint_written"]:
        raise RuntimeError(f"the run was to be killed as epoch 1 started (exit {killed['returncode']}):\n{_tail(killed)}")

    resumed = run_child(["robustnlu", *common, "resume=true", "+resume_override=[callbacks.kill]"], timeout_s=remaining())
    result["resume"] = {"returncode": resumed["returncode"], "wall_s": resumed["wall_s"],
                        "peak_rss_bytes": resumed["peak_rss_bytes"]}
    result["epochs"] = epoch_rows(clock)  # kept whatever fails after them
    record(result)
    if resumed["returncode"] != 0:
        raise RuntimeError(f"resume=true failed (exit {resumed['returncode']}):\n{_tail(resumed)}")
    record_file = json.loads((run_dir / "results.json").read_text())
    result["resume"].update(
        resumed_from=record_file["resumed_from"], epochs_trained=record_file["epochs_trained"],
        fit_time_s=record_file["fit_time_s"], precision=record_file["precision"], device=record_file["device"],
        combined={split: 100 * record_file["metrics"][split]["combined"] for split in ("valid", "test")})
    record(result)

    test_rows = [json.loads(line) for line in (run_dir / "predictions" / "test.jsonl").read_text().splitlines()]
    utterances, predicted = work / "test-utterances.txt", work / "predicted.jsonl"
    utterances.write_text("".join(" ".join(row["tokens"]) + "\n" for row in test_rows))
    best = run_dir / record_file["best_checkpoint"]
    child = run_child(["robustnlu.predict", "--ckpt", str(best), "--file", str(utterances), "--out", str(predicted),
                       "--device", device], timeout_s=remaining())
    result["predict"] = {"returncode": child["returncode"], "timed_out": child["timed_out"], "wall_s": child["wall_s"],
                         "device": device, "utterances": len(test_rows)}
    record(result)
    if child["timed_out"]:
        raise TimeoutError(f"robustnlu.predict outlasted the stage's time ({child['wall_s']:.1f} s):\n{_tail(child)}")
    if child["returncode"] != 0:
        raise RuntimeError(f"robustnlu.predict failed (exit {child['returncode']}):\n{_tail(child)}")
    rows = [json.loads(line) for line in predicted.read_text().splitlines()]
    result["predict"]["predictions"] = len(rows)
    result["predict"]["same_intent_as_the_run"] = (
        sum(r["intent"] == t["pred_intent"] for r, t in zip(rows, test_rows, strict=True)) / len(rows))
    record(result)
    return result
