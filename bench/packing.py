"""How many of our training runs one device should hold: K training processes at once, for K in
``ks``, and their aggregate examples/s.

``max(ks)`` worker processes (``python -m bench.packing``) start once, each loads the workload
(`bench.workload`: SNIPS batches, a fresh `SLUModule`) and trains it in the Lightning loop of
`bench.loops` (``conf/trainer``: precision ``auto``, the fused AdamW) over its batches, cycled. A
worker warms up, says it is ready, then waits between steps for a command on its standard input:
``run SECONDS`` trains for that long and answers with its examples/s (examples of the steps done
in the window ÷ the window, the device synchronised at both ends); ``quit`` ends its run. For
each K the parent sends ``run`` to K workers at once (the others wait idle) and records each
one's examples/s; the aggregate is their sum. Answers are JSON lines prefixed with `TAG`.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TAG = "@@packing "
REPO = Path(__file__).resolve().parents[1]


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(TAG + json.dumps(message) + "\n")
    sys.stdout.flush()


def worker(overrides: list[str], n_batches: int, warmup: int, threads: int) -> None:
    import pytorch_lightning as pl
    import torch

    from torch.utils.data import DataLoader

    from bench.loops import build_bench_trainer
    from bench.workload import compose_config, load_workload

    torch.set_num_threads(threads)

    class Controller(pl.Callback):
        def __init__(self):
            self.step = 0
            self.window: float | None = None  # seconds of the timed window in progress
            self.started = self.examples = self.steps = 0

        def _sync(self) -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            self.step += 1
            if self.step <= warmup:
                return
            if self.window is not None:
                if time.perf_counter() - self.started < self.window:
                    return
                self._sync()
                seconds = time.perf_counter() - self.started
                _send({"examples": self.examples, "steps": self.steps, "seconds": seconds,
                       "examples_per_s": self.examples / seconds,
                       "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None})
                self.window = None
            if self.step == warmup + 1:
                _send({"ready": True, "pid": os.getpid()})
            command = sys.stdin.readline().split()
            if not command or command[0] == "quit":
                trainer.should_stop = True
                return
            self._sync()
            self.window, self.examples, self.steps = float(command[1]), 0, 0
            self.started = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if self.window is not None:
                self.examples += int(batch["input_ids"].size(0))
                self.steps += 1

    with tempfile.TemporaryDirectory(prefix="robustnlu-packing-") as tmp:
        cfg = compose_config(Path(tmp), overrides)
        device = torch.device("cuda" if torch.cuda.is_available() and cfg.trainer.accelerator != "cpu" else "cpu")
        workload = load_workload(cfg, n_batches)
        batches = workload.batches(None)
        module = workload.fresh_module()
        controller = Controller()
        trainer = build_bench_trainer(cfg, [controller], device, tmp)
        cycled = batches * (1_000_000 // len(batches) + 1)  # references only: more steps than the windows take
        trainer.fit(module, train_dataloaders=DataLoader(cycled, batch_size=None, shuffle=False))
    _send({"done": True})


class Worker:
    """One worker process and a thread that reads its answers into a queue."""

    def __init__(self, overrides: list[str], n_batches: int, warmup: int, threads: int, log: Path):
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.packing", "--n-batches", str(n_batches), "--warmup", str(warmup),
             "--threads", str(threads), *overrides],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith(TAG):
                self.answers.put(json.loads(line[len(TAG):]))
        self.answers.put(None)  # the process ended

    def answer(self, deadline: float) -> dict[str, Any]:
        try:
            got = self.answers.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"worker {self.proc.pid} did not answer in time") from None
        if got is None:
            self.log.flush()
            tail = Path(self.log.name).read_text()[-2500:]
            raise RuntimeError(f"worker {self.proc.pid} ended (exit {self.proc.wait()}); its log ends:\n{tail}")
        return got

    def command(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.command("quit")
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def measure_packing(overrides: list[str], ks: list[int], window_s: float, n_batches: int, warmup: int,
                    deadline: float, log_dir: Path, record) -> dict[str, Any]:
    """The K-processes table (module docstring); stops at ``deadline`` (``time.monotonic``),
    keeping what was measured. ``record(result)`` is called after every K."""
    k_max = max(ks)
    threads = max(1, (os.cpu_count() or 1) // k_max)
    result: dict[str, Any] = {"overrides": overrides, "ks": ks, "window_s": window_s, "warmup_steps": warmup,
                              "torch_threads_per_process": threads, "table": []}
    started = time.monotonic()
    workers = [Worker(overrides, n_batches, warmup, threads, log_dir / f"packing-worker-{i}.log") for i in range(k_max)]
    try:
        for w in workers:
            if not w.answer(deadline).get("ready"):
                raise RuntimeError("a worker answered before it was ready")
        result["start_up_s"] = time.monotonic() - started
        for k in ks:
            if time.monotonic() + window_s + 30 > deadline:
                result["skipped"] = f"K >= {k}: out of the stage's time"
                break
            for w in workers[:k]:
                w.command(f"run {window_s}")
            runs = [w.answer(time.monotonic() + window_s + 60) for w in workers[:k]]
            rates = [r["examples_per_s"] for r in runs]
            result["table"].append({"k": k, "processes": runs, "aggregate_examples_per_s": sum(rates)})
            record(result)
    finally:
        for w in workers:
            w.stop()
    base = result["table"][0]["aggregate_examples_per_s"] if result["table"] else None
    for row in result["table"]:
        row["speedup_vs_k1"] = row["aggregate_examples_per_s"] / base if base and ks[0] == 1 else None
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.packing", description=__doc__)
    parser.add_argument("--n-batches", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("overrides", nargs="*", help="config overrides (encoder, data.batch_size, ...)")
    args = parser.parse_args(argv)
    worker(args.overrides, args.n_batches, args.warmup, args.threads)


if __name__ == "__main__":
    main()
