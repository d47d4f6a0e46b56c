"""Numbers (s)-(u): a real SNIPS training run in bf16-mixed beside the same run in float32.

Two runs of the training CLI (``python -m robustnlu``, embedded encoder, SNIPS, ERM), one with
``trainer.precision=32-true`` and one with ``bf16-mixed``, the same seed and the same epochs
(``--precision-epochs``, 1 by default; ``--quick``: a few batches), one after the other, in
child processes (`bench.memory.run_child`). From each run's results.json:

(s) end-to-end training throughput bf16 ÷ fp32: training examples ÷ ``fit_time_s`` (the whole
    ``trainer.fit``: data loading, optimizer steps, the epoch-end validation). Goal ≥ 1.4.
(t), (u) |COMBINED bf16 − COMBINED fp32| on valid and on test, in points. Goal ≤ 0.3.

(r), the same throughput ratio on the bench's fixed batches in the Lightning loop (alternated,
median of repeats), is measured with (a) in `bench.__main__.measure_speed`. Only where the
device supports bf16 (``trainer.precision=auto`` picks it, `robustnlu.precision`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from bench.memory import run_child
from robustnlu.precision import BF16, FP32

EVAL_BATCHES_QUICK = 2


def cli_args(precision: str, epochs: int, train_batches: int | None, run_dir: Path, extra: list[str]) -> list[str]:
    limits = [] if train_batches is None else [
        f"++trainer.limit_train_batches={train_batches}", f"++trainer.limit_val_batches={EVAL_BATCHES_QUICK}",
        f"++trainer.limit_test_batches={EVAL_BATCHES_QUICK}"]
    return [f"trainer.precision={precision}", f"trainer.max_epochs={epochs}", *limits, "~callbacks.progress_bar",
            "trainer.enable_progress_bar=false", f"hydra.run.dir={run_dir}", *extra]


def training_run(precision: str, epochs: int, train_batches: int | None, extra: list[str]) -> dict[str, Any]:
    """One CLI run; its precision, fit time, training examples per second and valid/test COMBINED."""
    with tempfile.TemporaryDirectory(prefix="robustnlu-bench-precision-") as tmp:
        run_dir = Path(tmp) / "run"
        child = run_child(["robustnlu", *cli_args(precision, epochs, train_batches, run_dir, extra)], timeout_s=6 * 3600)
        if child["returncode"] != 0 or not (run_dir / "results.json").exists():
            raise RuntimeError(f"`python -m robustnlu trainer.precision={precision}` failed "
                               f"(exit {child['returncode']}):\n{child['output'][-3000:]}")
        record = json.loads((run_dir / "results.json").read_text())
    batch = int(record["config"]["data"]["batch_size"])
    per_epoch = record["sizes"]["train"] if train_batches is None else min(record["sizes"]["train"], train_batches * batch)
    examples = per_epoch * record["epochs_trained"]
    return {
        "precision": record["precision"],
        "epochs": record["epochs_trained"],
        "train_examples": examples,
        "fit_time_s": record["fit_time_s"],
        "wall_s": child["wall_s"],
        "examples_per_s": examples / record["fit_time_s"],
        "combined": {split: 100 * record["metrics"][split]["combined"] for split in ("valid", "test")},
    }


def compare_precisions(args, results: dict[str, Any]) -> None:
    """Runs (s)-(u): fp32 first, then bf16-mixed; the ratios into ``results``."""
    train_batches = args.rss_steps if args.quick else None
    extra = [f"encoder={args.encoder}"]
    runs = {}
    for precision in (FP32, BF16):
        print(f"  CLI training run, {precision}, {args.precision_epochs} epoch(s)"
              + (f" of {train_batches} batches" if train_batches else "") + " ...", flush=True)
        runs[precision] = run = training_run(precision, args.precision_epochs, train_batches, extra)
        if run["precision"] != precision:
            raise RuntimeError(f"asked for trainer.precision={precision}, the run recorded {run['precision']}")
        print(f"  ... {run['examples_per_s']:.1f} ex/s (fit {run['fit_time_s']:.0f} s), COMBINED valid "
              f"{run['combined']['valid']:.2f} test {run['combined']['test']:.2f}", flush=True)
    results["precision_runs"] = runs
    fp32, bf16 = runs[FP32], runs[BF16]
    results["ratios"]["bf16_speedup_run"] = bf16["examples_per_s"] / fp32["examples_per_s"]
    for split in ("valid", "test"):
        results["ratios"][f"bf16_{split}_combined_diff"] = abs(bf16["combined"][split] - fp32["combined"][split])
