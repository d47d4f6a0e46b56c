"""The reproduction's plan (`robustnlu.studies.seqdrift_dro.plan`: `plan`, `chosen_k`, `parts`) on
synthetic records: which k each TopK method gets, which runs wait for it, the order, and what
counts as recorded."""

from __future__ import annotations

import json

import pytest

from robustnlu import reproduce
from robustnlu.studies.seqdrift_dro.plan import (
    K_GRID,
    K_METHODS,
    K_SEARCH_SCENARIO,
    PLATEAU_BUDGET,
    PlannedRun,
    chosen_k,
    k_search_runs,
    parts,
    plan,
)


def record(records, name: str, valid_combined: float = 0.5) -> None:
    path = records / name
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({"metrics": {"valid": {"combined": valid_combined}}}))


def k_search(records, scores: dict[str, dict[int, float]]) -> None:
    for run in k_search_runs():
        if run.k in scores.get(run.method, {}):
            record(records, run.name, scores[run.method][run.k])


def test_chosen_k_is_the_best_valid_combined_ties_to_the_smaller_k_and_none_while_incomplete(tmp_path):
    assert chosen_k(tmp_path, "topk") is None
    k_search(tmp_path, {"topk": {2: 0.90, 4: 0.93, 8: 0.93, 16: 0.91}, "topk_ae": {2: 0.8, 4: 0.7, 8: 0.95}})
    assert chosen_k(tmp_path, "topk") == 4  # 4 and 8 tie: the smaller
    assert chosen_k(tmp_path, "topk_ae") is None  # k=16 not recorded: no choice yet
    assert chosen_k(tmp_path, "topk_group") is None


def test_part_e_comes_after_the_study_part_d_s_scenario_first_and_before_part_c(tmp_path):
    k_search(tmp_path, {m: {k: 0.9 + k / 100 for k in K_GRID} for m in K_METHODS})
    after = plan(tmp_path)
    assert all(r.k == 16 for r in after if r.method in K_METHODS and r.part != "k")
    order = [r.part for r in after]
    assert order.index("E") > max(i for i, p in enumerate(order) if p in ("A", "B", "k"))
    first = [r for r in after if r.part in ("D", "E")][:4]  # Part D's scenario completed first
    assert {r.scenario for r in first} == {K_SEARCH_SCENARIO} and {r.seed for r in first} == {0}
    assert {r.method for r in first} == {"erm", *K_METHODS}
    seeds = [r.seed for r in after if r.part in ("D", "E")]
    assert seeds == sorted(seeds)  # seed 0's comparison complete before seed 1's first run
    part_e = parts(tmp_path)[5]
    assert all(r.plateau for r in part_e) and not any(r.plateau for r in parts(tmp_path)[2])
    assert set(PlannedRun(K_SEARCH_SCENARIO, "erm", 0, plateau=True).budget()) >= set(PLATEAU_BUDGET)


def test_list_marks_as_recorded_exactly_the_runs_of_the_records_folder_it_is_given(tmp_path, capsys):
    records, elsewhere = tmp_path / "records", tmp_path / "other"
    record(records, "atis-slot_value-full-iid-erm-seed1")
    record(elsewhere, "snips-slot_value-full-iid-erm-seed0")
    assert reproduce.main(["--list", "--records", str(records), "--runs", str(tmp_path / "runs")]) == 0
    lines = capsys.readouterr().out.splitlines()
    recorded = [line.split()[-1] for line in lines if line.startswith("recorded")]
    assert recorded == ["atis-slot_value-full-iid-erm-seed1"]
    assert any(line.split()[-1] == "snips-slot_value-full-iid-erm-seed0" for line in lines if line.startswith("to run"))


@pytest.mark.parametrize("complete", [False, True])
def test_a_record_without_results_is_not_recorded(tmp_path, capsys, complete):
    path = tmp_path / "atis-slot_value-full-iid-erm-seed1"
    (path / "predictions").mkdir(parents=True)
    (path / "meta.json").write_text("{}")
    if complete:
        (path / "results.json").write_text(json.dumps({"metrics": {}}))
    reproduce.main(["--list", "--records", str(tmp_path), "--only", path.name])
    assert capsys.readouterr().out.split()[0] == ("recorded" if complete else "to")
