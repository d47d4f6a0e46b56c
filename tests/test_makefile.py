"""The Makefile's study targets end to end: ``make run``, ``make noise-study`` and ``make
efficiency-study`` run their own commands, with tiny settings appended through ``ARGS``, down to
the analysis each ends with, which must find the runs the target trained in its sweep directory.
``-o install`` and ``PY``: this interpreter, nothing installed; outputs in a temporary folder."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from integration_helpers import FAST, REPO, cli_env, write_topv2_cut

MAKEFILE = REPO / "Makefile"
pytestmark = pytest.mark.skipif(shutil.which("make") is None or not MAKEFILE.is_file(),
                                reason="needs make and the checkout's Makefile")

#: a few batches of the tiny encoder on the target's full dataset
TINY = [*FAST, "trainer.max_epochs=1", "+trainer.limit_train_batches=3"]


def make(target: str, tmp_path: Path, folder_variable: str, args: list[str]) -> tuple[list[str], Path]:
    """``make <target>`` with ``<folder_variable>=<tmp_path>/out`` and ``ARGS``: the lines its last
    command printed (make echoes each command before running it) and the output folder."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    env = {k: v for k, v in cli_env().items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # not an outer make's
    command = ["make", "-f", str(MAKEFILE), "-o", "install", target, f"PY={sys.executable}", f"{folder_variable}={out}",
               f"ARGS={shlex.join([f'paths.cache_dir={cache}', *args])}"]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith(f"{sys.executable} -m robustnlu"))
    return lines[last + 1:], out


def test_make_noise_study_compares_the_augmented_run_with_the_baseline(tmp_path):
    """The sweep's two job folders differ in their hash alone; the analysis tells them apart."""
    printed, sweep = make("noise-study", tmp_path, "NOISE_DIR", TINY)
    augment = {p.parent: json.loads(p.read_text())["augment"] for p in sweep.glob("*/results.json")}
    (plain,) = [run for run, record in augment.items() if record is None]
    (noised,) = [run for run, record in augment.items() if record is not None]
    base, aug = f"{plain} (augment=none)", f"{noised} (augment=misspelling)"
    headings = [line for line in printed if line.startswith("## ")]
    assert headings == [f"## noisy_nlu: {base}", f"## noisy_nlu: {aug} vs {base} (points)"]
    cells = [line for line in printed if line.startswith("| snips | misspelling |")]
    assert len(cells) == 2  # the baseline's scores, then the effects of augmentation
    assert any(line.startswith("| mean | 6 cells |") for line in printed)


def test_make_run_compares_topk_with_erm(tmp_path):
    printed, sweep = make("run", tmp_path, "RUN_DIR", TINY)
    assert printed[0].startswith("snips, drift slot_context; test metrics in %") and printed[1].startswith("run ")
    assert [line.split(" (seed")[0] for line in printed[2:]] == ["erm", "topk"]
    assert "(+" not in printed[2] and "%)" in printed[3]  # TopK's relative change to ERM
    methods = sorted(json.loads(p.read_text())["method"] for p in sweep.glob("*/results.json"))
    assert methods == ["erm", "topk"]


def test_make_efficiency_study_fits_and_queries_the_curve(tmp_path):
    """On a TOPv2 cut, 3 subsets (the fewest a fit takes), the driver's option after the overrides;
    the Makefile's command already deletes the progress bar (deleting it again does not compose)."""
    cut = write_topv2_cut(tmp_path / "topv2")
    overrides = [*(o for o in FAST if o != "~callbacks.progress_bar"), "trainer.max_epochs=1", f"dataset.path={cut}",
                 "efficiency.sources=[alarm,timer]"]
    printed, sweep = make("efficiency-study", tmp_path, "EFFICIENCY_DIR", [*overrides, "--percents", "10,30,100"])
    percents = sorted(json.loads(p.read_text())["efficiency"]["percent"] for p in sweep.glob("*/results.json"))
    assert percents == [10, 30, 100]
    (curve,) = json.loads((sweep / "efficiency" / "efficiency.json").read_text())["curves"]
    assert len(curve["points"]) == 3 and set(curve["fit"]) >= {"a", "b", "c"}
    assert any("exact match" in line for line in printed) and printed[-1].startswith("wrote ")
