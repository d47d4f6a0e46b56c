"""Behaviour pinned across refactors: fixed-seed tiny-encoder runs give the same results.json
metrics and the same predictions, byte for byte, as when tests/pinned/runs.json was written.

Two runs of the CLI, each as a user types it:
- every method (conf/method/*.yaml, found by glob) on a SeqDrift slot-context split of a SNIPS
  sample, 2 epochs, float32: metrics (overall and per group), sizes, epochs, skips and the sha256
  of the valid/test prediction files;
- the data-efficiency protocol in adapt mode with co-natural SGD on a TOPv2 cut: the source and
  the adapted run, and the source forgetting scores.

The pinned file is written by this module (``python tests/test_pinned_run.py --write``), only when
behaviour changes on purpose; the commit that rewrites it says why. The numbers are float32 on
this project's CPU build of torch (versions in the file); they are the same with the kernels of a
CPU without AVX-512 (checked: ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2). Another torch
build may differ in the last bits; the test names the first run and key that differ.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from integration_helpers import FAST, REPO, SMALL_DRIFT, jsonl_overrides, run_cli, write_snips_sample_jsonl, write_topv2_cut

PINNED = REPO / "tests" / "pinned" / "runs.json"
METHODS = sorted(p.stem for p in (REPO / "conf" / "method").glob("*.yaml"))
EPOCHS = ["trainer.max_epochs=2"]  # after FAST's 6: the last value wins


def summary(run_dir: Path) -> dict:
    """What a run leaves that must not change: its metrics and the sha256 of its prediction files."""
    results = json.loads((run_dir / "results.json").read_text())
    keep = ("method", "metrics", "sizes", "epochs_trained", "nonfinite_skips", "precision", "efficiency")
    out = {k: results.get(k) for k in keep}
    out["predictions"] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                          for p in sorted((run_dir / "predictions").glob("*.jsonl*"))}
    return out


def method_sweep(tmp: Path) -> dict:
    data = write_snips_sample_jsonl(tmp / "snips", n_train=600)
    sweep = tmp / "methods"
    proc = run_cli(["-m", *FAST, *EPOCHS, *jsonl_overrides(data), *SMALL_DRIFT, f"method={','.join(METHODS)}",
                    f"hydra.sweep.dir={sweep}"], cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {}
    for results in sorted(sweep.glob("*/results.json")):
        s = summary(results.parent)
        runs[s["method"]] = s
    return runs


def adapt_protocol(tmp: Path) -> dict:
    folder = write_topv2_cut(tmp / "topv2")
    sweep = tmp / "efficiency"
    proc = run_cli(["--mode", "adapt", "--percents", "25", "--seeds", "0", "target=weather",
                    f"dataset.path={folder}", "efficiency.sources=[alarm,timer]", *FAST, *EPOCHS,
                    "optimizer=conatural", "optimizer.fisher_samples=50", "optimizer.lr=0.05",
                    f"hydra.sweep.dir={sweep}"], cwd=tmp, module="robustnlu.efficiency")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (source,) = sweep.glob("source/*/results.json")
    (adapted,) = sweep.glob("adapt/*/*/results.json")
    runs = {"source": summary(source.parent), "adapt": summary(adapted.parent)}
    for run in runs.values():  # absolute paths of this temporary directory
        if run["efficiency"]:
            run["efficiency"].pop("init_from", None)
    return runs


def pinned_now(tmp: Path) -> dict:
    return {"methods": method_sweep(tmp), "efficiency_adapt": adapt_protocol(tmp)}


def first_difference(expected, actual, where: str = "") -> str | None:
    """The first key path where ``actual`` differs from ``expected`` (floats to 1e-9 relative)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            if key not in expected or key not in actual:
                return f"{where}/{key}: only in {'the pinned file' if key in expected else 'this run'}"
            found = first_difference(expected[key], actual[key], f"{where}/{key}")
            if found:
                return found
        return None
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        return None if actual == pytest.approx(expected, rel=1e-9, abs=1e-12) else f"{where}: {expected} -> {actual}"
    return None if expected == actual else f"{where}: {expected!r} -> {actual!r}"


def test_fixed_seed_runs_are_unchanged(tmp_path):
    pinned = json.loads(PINNED.read_text())
    now = pinned_now(tmp_path)
    assert set(now["methods"]) >= set(pinned["runs"]["methods"]), \
        "a pinned method no longer runs"
    difference = first_difference(pinned["runs"], now)
    assert difference is None, f"behaviour changed at {difference} (tests/pinned/runs.json)"


def write(tmp: Path) -> None:
    import torch

    PINNED.parent.mkdir(exist_ok=True)
    record = {"written_with": {"torch": torch.__version__, "python": sys.version.split()[0]}, "runs": pinned_now(tmp)}
    PINNED.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINNED}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_pinned_run.py --write")
    import tempfile

    sys.path.insert(0, str(REPO / "tests"))
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp))
