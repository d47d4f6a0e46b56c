"""``make bench`` runs end to end (``python -m bench --quick`` on the tiny encoder): the Lightning
loop, the plain loops, the peak-RSS CLI run and the bf16 / fp32 training runs, with every ratio
it prints recomputed from the per-run numbers it writes. The method step times and SeqDrift
clusterings (minutes here) are left out (``--skip``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from integration_helpers import REPO
from robustnlu.precision import BF16, FP32, resolve_precision


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    cmd = [sys.executable, "-m", "bench", "--quick", "--encoder", "tiny", "--skip", "methods,seqdrift",
           "--warmup", "1", "--steps", "2", "--repeats", "1", "--rss-steps", "3", "--max-wait", "0",
           "--max-retries", "0", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def test_the_loops_train_and_the_speed_ratios_are_those_of_the_runs(bench):
    stdout, results = bench
    assert "error" not in results
    runs = {(r["loop"], r["padding"], r["precision"], r["adamw"]): r for r in results["runs"]}
    bf16 = resolve_precision("auto", "cpu") == BF16
    assert results["settings"]["fused_adamw"] is True  # optimizer.fused=auto on the CPU
    assert set(runs) == {("plain", "dynamic", FP32, "fused"), ("lightning", "dynamic", FP32, "fused"),
                         ("plain", "fixed", FP32, "fused"), ("lightning", "dynamic", FP32, "loop")} | (
        {("lightning", "dynamic", BF16, "fused")} if bf16 else set())
    for run in runs.values():
        assert run["timed_steps"] == 2 and run["timed_examples"] == 2 * 32
        assert run["examples_per_s"] == pytest.approx(run["timed_examples"] / run["seconds"])
        assert 0 < run["final_loss"] < 20
    ratios = results["ratios"]
    ex = {key[:3]: run["examples_per_s"] for key, run in runs.items() if key[3] == "fused"}
    assert ratios["lightning_overhead"] == pytest.approx(ex["lightning", "dynamic", FP32] / ex["plain", "dynamic", FP32])
    assert ratios["dynamic_vs_fixed"] == pytest.approx(ex["plain", "dynamic", FP32] / ex["plain", "fixed", FP32])
    loop = runs["lightning", "dynamic", FP32, "loop"]  # same batches, same update: about the same loss
    assert ratios["fused_adamw_speedup"] == pytest.approx(ex["lightning", "dynamic", FP32] / loop["examples_per_s"])
    assert loop["final_loss"] == pytest.approx(runs["lightning", "dynamic", FP32, "fused"]["final_loss"], rel=1e-3)
    assert 0 < ratios["peak_rss_gb"] < 3 and results["memory"]["results_written"]
    if bf16:  # same batches, same initial weights: the bf16 run trains to about the same loss
        assert ratios["bf16_speedup_step"] == pytest.approx(ex["lightning", "dynamic", BF16] / ex["lightning", "dynamic", FP32])
        assert runs["lightning", "dynamic", BF16, "fused"]["final_loss"] == pytest.approx(
            runs["lightning", "dynamic", FP32, "fused"]["final_loss"], rel=0.02)
    for label in ("(a) Lightning / plain loop", "(b) dynamic / fixed-50", "(c) peak RSS", "(v) fused / loop AdamW"):
        assert label in stdout


@pytest.mark.skipif(resolve_precision("auto", "cpu") != BF16, reason="(s)-(u) are measured where bf16 is supported")
def test_the_bf16_and_fp32_training_runs_are_compared_side_by_side(bench):
    stdout, results = bench
    runs = results["precision_runs"]
    assert {p: r["precision"] for p, r in runs.items()} == {FP32: FP32, BF16: BF16}
    for run in runs.values():
        assert run["epochs"] == 1 and run["train_examples"] == 3 * 32  # --rss-steps batches of 32
        assert run["examples_per_s"] == pytest.approx(run["train_examples"] / run["fit_time_s"])
    ratios = results["ratios"]
    assert ratios["bf16_speedup_run"] == pytest.approx(runs[BF16]["examples_per_s"] / runs[FP32]["examples_per_s"])
    for split in ("valid", "test"):
        assert ratios[f"bf16_{split}_combined_diff"] == pytest.approx(
            abs(runs[BF16]["combined"][split] - runs[FP32]["combined"][split]))
        assert 0 <= runs[FP32]["combined"][split] <= 100
    for label in ("(r) bf16 / fp32 ex/s, Lightning loop", "(s) bf16 / fp32 ex/s, SNIPS training run",
                  "(t) |valid COMBINED", "(u) |test COMBINED", "SNIPS training runs: 32-true"):
        assert label in stdout
