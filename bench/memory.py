"""Peak resident memory of a real ``python -m robustnlu`` training run, measured from outside."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def cli_args(train_batches: int, eval_batches: int, run_dir: Path, extra: Sequence[str] = ()) -> list[str]:
    return [
        "trainer.max_epochs=1",
        f"++trainer.limit_train_batches={train_batches}",
        f"++trainer.limit_val_batches={eval_batches}",
        f"++trainer.limit_test_batches={eval_batches}",
        "~callbacks.progress_bar",
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]


def run_child(argv: Sequence[str], timeout_s: float = 600) -> dict[str, Any]:
    """Run ``python -m <argv>`` in a child process from the repository root and return its exit
    code (``timed_out``: killed after ``timeout_s``), wall time, full output and peak RSS, as the
    child itself reads it (`bench.child`), so neither this process nor anything else on the
    machine is counted."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="robustnlu-bench-") as tmp:
        peak_file = Path(tmp) / "peak_rss"
        with open(Path(tmp) / "output.log", "w+b") as log:
            started = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "bench.child", str(peak_file), *argv],
                                    cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
            timed_out = False
            try:
                returncode = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                returncode, timed_out = proc.wait(), True
            wall = time.perf_counter() - started
            log.seek(0)
            output = log.read().decode(errors="replace")
        peak = int(peak_file.read_text()) if peak_file.exists() else 0
    return {"returncode": returncode, "timed_out": timed_out, "wall_s": wall, "output": output, "peak_rss_bytes": peak}


def peak_rss_of_training_run(train_batches: int, eval_batches: int, extra: Sequence[str] = (),
                             timeout_s: float = 600) -> dict[str, Any]:
    """`run_child` on the training CLI, in a temporary run directory removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="robustnlu-bench-rss-") as tmp:
        run_dir = Path(tmp) / "run"
        child = run_child(["robustnlu", *cli_args(train_batches, eval_batches, run_dir, extra)], timeout_s)
        results_written = (run_dir / "results.json").exists()
    return {
        "command": ["python", "-m", "robustnlu", *cli_args(train_batches, eval_batches, Path("<tmp>"), extra)],
        "returncode": child["returncode"],
        "results_written": results_written,
        "peak_rss_bytes": child["peak_rss_bytes"],
        "peak_rss_gb": child["peak_rss_bytes"] / 1e9,
        "wall_s": child["wall_s"],
        "output_tail": child["output"][-3000:] if child["returncode"] != 0 else "",
    }
