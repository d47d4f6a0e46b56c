"""docs/studies.md's worked example, done as written (~3 min beside a training on 2 cores: slow):
its ``my_study.py`` (the doc's code block, verbatim) trains the user's method, `python -m
robustnlu.reproduce` the ERM record it is compared with, and the doc's `python -m robustnlu.report`
command compares the two with the paired test. The tiny encoder on a small SNIPS cut with a
SeqDrift split computed on it stands in for the real encoder and the canonical splits (training
overrides after each job's own, as docs/studies.md says for a quick try)."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from integration_helpers import FAST, REPO, SMALL_DRIFT, cli_env, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.analysis.significance import approximate_randomization
from robustnlu.metrics.registry import relative_change
from robustnlu.rundir import RunDir

DOC = REPO / "docs" / "studies.md"
SCENARIO = "snips-slot_context-full-iid"


def code_blocks(language: str) -> list[str]:
    return [code for lang, code in re.findall(r"```(\w+)\n(.*?)```", DOC.read_text(), re.S) if lang == language]


def shell(command: str, cwd) -> subprocess.CompletedProcess:
    """``command`` in bash, ``python`` being this interpreter (`cli_env`: importing this checkout)."""
    env = cli_env(PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_docs_study_is_compared_with_the_reproductions_erm_records_by_the_paired_test(tmp_path):
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=600, n_eval=60)
    tiny = [o for o in FAST if "progress" not in o] + ["trainer.max_epochs=1", *jsonl_overrides(data),
                                                       *SMALL_DRIFT[1:], "drift.clusters=compute"]
    (python,) = code_blocks("python")
    (tmp_path / "my_study.py").write_text(python)
    erm, mine = f"{SCENARIO}-erm-seed0", f"{SCENARIO}-topic_cvar-seed0"
    records = tmp_path / "reproduction" / "records"  # stands in for docs/reproduction/records
    overrides = shlex.join(tiny)

    listed = shell("python my_study.py --list", tmp_path)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert listed.stdout.splitlines() == [f"to run    mine  snips-{kind}-full-{v}-topic_cvar-seed{s}" for s in (0, 1)
                                          for kind in ("slot_value", "slot_context") for v in ("iid", "ood")]
    baseline = run_cli(["--only", erm, "--records", str(records), "--runs", str(tmp_path / "reproduction" / "runs"),
                        *tiny], cwd=tmp_path, module="robustnlu.reproduce")
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    study = shell(f"python my_study.py --only {mine} {overrides}", tmp_path)
    assert study.returncode == 0, study.stderr[-3000:]
    assert (tmp_path / "my-study" / "records" / mine / "results.json").is_file()

    (compare,) = [b for b in code_blocks("bash") if "python -m robustnlu.report" in b]
    assert compare.startswith("R=docs/reproduction/records\n")
    # as written, with R the records above (which hold no TopK record: its pattern expands to nothing)
    report = shell(f"shopt -s nullglob\nR={records}\n" + compare.split("\n", 1)[1], tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    rows = {r["method"]: r for r in csv.DictReader((tmp_path / "my-study" / "report" / "relative_change.csv").open())}
    row = rows["topic_cvar"]
    assert row["pairs"] == f"{mine}~{erm}"  # paired with the ERM record of the same seed
    ours, theirs = RunDir(tmp_path / "my-study" / "records" / mine), RunDir(records / erm)
    test = approximate_randomization(ours.predictions("test"), theirs.predictions("test"), "combined", 10_000, 0)
    assert row["combined_p_values"] == f"{test.p_value:.6g}"
    change = relative_change(100 * ours.results()["metrics"]["test"]["combined"],
                             100 * theirs.results()["metrics"]["test"]["combined"])
    assert float(row["combined_rel_change_pct"]) == pytest.approx(change, abs=1e-4)
    assert json.loads((ours.meta_file).read_text())["part"] == "mine"
