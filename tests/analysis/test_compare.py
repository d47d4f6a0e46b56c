"""`python -m robustnlu.analysis.compare`: relative changes by hand, sweep expansion, bad input."""

from __future__ import annotations

import json

import pytest
import yaml

from robustnlu.analysis.compare import main
from robustnlu.metrics.registry import relative_change


def write_run(folder, method, combined_test, combined_valid=0.9, dataset="snips", overrides=None, slot_f1=0.8):
    """A finished run's results.json; ``overrides``: the task overrides Hydra records in .hydra/."""
    metrics = {"combined": combined_test, "intent_acc": 0.9, "slot_f1": slot_f1, "semer": 0.1, "frame_acc": 0.7}
    folder.mkdir(parents=True)
    if overrides is not None:
        (folder / ".hydra").mkdir()
        (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "results.json").write_text(json.dumps({
        "dataset": dataset, "method": method, "seed": 0, "drift": {"kind": "slot_context", "partial": False, "validation": "iid"},
        "metrics": {"test": metrics, "valid": {**metrics, "combined": combined_valid}},
    }))


def test_relative_change_is_in_percent_of_the_baseline():
    assert relative_change(0.93, 0.90) == pytest.approx(3.3333333)
    assert relative_change(0.88, 0.80) == pytest.approx(10.0)


def test_sweep_directory_lists_jobs_in_order_with_relative_change(tmp_path, capsys):
    write_run(tmp_path / "sweep" / "1", "topk", 0.88)
    write_run(tmp_path / "sweep" / "0", "erm", 0.80)
    assert main([str(tmp_path / "sweep")]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith(("erm", "topk"))]
    assert rows[0].startswith("erm") and rows[1].startswith("topk")
    assert "88.00 (+10.00%)" in rows[1] and "(+" not in rows[0]
    assert rows[1].rstrip().endswith("+2.00")  # drop: valid 90.00 - test 88.00


def rows(capsys) -> list[str]:
    """The table's rows below its two header lines."""
    return capsys.readouterr().out.splitlines()[2:]


def test_runs_of_one_method_and_seed_are_told_apart_by_the_overrides_that_differ(tmp_path, capsys):
    """Two ERM runs of seed 0 that differ in the learning rate, and one in the batch size as well:
    each label names what differs among the three; TopK's, unique already, stays as it was."""
    common = ["+experiment=snips_slot_context", "method=erm", "encoder=tiny"]
    write_run(tmp_path / "a", "erm", 0.80, overrides=[*common, "optimizer.lr=0.005"])
    write_run(tmp_path / "b", "erm", 0.82, overrides=[*common, "optimizer.lr=0.0001"])
    write_run(tmp_path / "c", "erm", 0.84, overrides=[*common, "optimizer.lr=0.0001", "data.batch_size=16"])
    write_run(tmp_path / "d", "topk", 0.86, overrides=[*common[:1], "method=topk", "optimizer.lr=0.0001"])
    assert main([str(tmp_path / name) for name in "abcd"]) == 0
    labels = [row.split("  ")[0] for row in rows(capsys)]
    assert labels == ["erm (seed 0) optimizer.lr=0.005", "erm (seed 0) optimizer.lr=0.0001",
                      "erm (seed 0) optimizer.lr=0.0001 data.batch_size=16", "topk (seed 0)"]


def test_runs_with_the_same_overrides_are_told_apart_by_their_directory(tmp_path, capsys):
    write_run(tmp_path / "first" / "run", "erm", 0.80, overrides=["method=erm"])
    write_run(tmp_path / "again" / "run", "erm", 0.82, overrides=["method=erm"])
    assert main([str(tmp_path / "first" / "run"), str(tmp_path / "again" / "run")]) == 0
    labels = [row.split("  ")[0] for row in rows(capsys)]
    assert labels == [f"erm (seed 0) {tmp_path / 'first' / 'run'}", f"erm (seed 0) {tmp_path / 'again' / 'run'}"]


def test_a_change_from_a_baseline_of_0_says_it_is_not_defined(tmp_path, capsys):
    """ERM's slot F1 is 0: TopK's relative change to it is no number, and the cell says why."""
    write_run(tmp_path / "erm", "erm", 0.80, slot_f1=0.0)
    write_run(tmp_path / "topk", "topk", 0.88, slot_f1=0.0027)
    assert main([str(tmp_path / "erm"), str(tmp_path / "topk")]) == 0
    topk = rows(capsys)[1]
    assert "0.27 (n/a: from 0)" in topk and "88.00 (+10.00%)" in topk and "nan" not in topk


def test_runs_of_another_scenario_than_the_baseline_are_refused(tmp_path, capsys):
    write_run(tmp_path / "erm", "erm", 0.80)
    write_run(tmp_path / "topk", "topk", 0.88, dataset="atis")
    assert main([str(tmp_path / "erm"), str(tmp_path / "topk")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: {tmp_path / 'topk' / 'results.json'}: scenario atis-slot_context-full-iid, "
                            f"but the baseline {tmp_path / 'erm'} is of snips-slot_context-full-iid: "
                            "relative changes compare runs on one test set\n")


def test_a_directory_without_runs_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "neither a run directory" in capsys.readouterr().err


@pytest.mark.parametrize("results, problem", [
    ({}, "missing key 'dataset'"),
    ({"dataset": "snips", "method": "erm", "seed": 0, "drift": {"kind": "none"}, "metrics": {"test": {}}},
     "missing key 'metrics.valid'"),
    ({"dataset": "snips", "method": "erm", "seed": "0"}, "seed must be an integer, got '0'"),
])
def test_a_results_json_without_what_the_table_shows_is_one_error_line(tmp_path, capsys, results, problem):
    write_run(tmp_path / "sweep" / "0", "erm", 0.80)
    (tmp_path / "sweep" / "1").mkdir()
    bad = tmp_path / "sweep" / "1" / "results.json"
    bad.write_text(json.dumps(results))
    assert main([str(tmp_path / "sweep")]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {bad}: {problem}\n" and captured.out == ""
