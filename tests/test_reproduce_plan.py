"""The reproduction's plan (`robustnlu.reproduce.plan`, `chosen_k`, `parts`) on synthetic records:
which k each TopK method gets, which runs wait for it, the order, and what counts as recorded."""

from __future__ import annotations

import json

import pytest

from robustnlu import reproduce
from robustnlu.reproduce import K_GRID, K_SEARCH_SCENARIO, Run, chosen_k, k_search_runs, parts, plan


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


def test_the_plan_before_the_k_search_holds_no_topk_run_after_it_each_run_once(tmp_path):
    before = plan(tmp_path)
    assert {r.method for r in before} == {"erm", "group_dro", "topk", "topk_group", "topk_ae"}
    assert all(r.part in ("A", "k", "C", "D", "E") for r in before)
    assert not [r for r in before if r.method in reproduce.K_METHODS and r.part != "k"]  # they wait for k
    # first SNIPS' full-drift ERM of seed 0, then the k search
    assert [r.name for r in before[:4]] == [f"snips-{d}-full-{v}-erm-seed0" for d in ("slot_value", "slot_context")
                                            for v in ("iid", "ood")]
    assert [r.part for r in before[4:4 + 3 * len(K_GRID)]] == ["k"] * 3 * len(K_GRID)

    k_search(tmp_path, {m: {k: 0.9 + k / 100 for k in K_GRID} for m in reproduce.K_METHODS})
    after = plan(tmp_path)
    names = [r.name for r in after]
    assert len(names) == len(set(names))
    part_a, k_runs, part_b, part_c, part_d, part_e = parts(tmp_path)
    assert (len(part_a), len(k_runs), len(part_b), len(part_c), len(part_d), len(part_e)) == (32, 12, 24, 8, 3, 32)
    # Part D's runs are Part E's (same names), and Part B's 3 seed-0 runs on the k-search scenario with
    # the chosen k are k-search runs: each is trained once
    assert {r.name for r in part_d} <= {r.name for r in part_e} and len(after) == 32 + 12 + 24 - 3 + 8 + 32
    assert all(r.k == 16 for r in after if r.method in reproduce.K_METHODS and r.part != "k")
    order = [r.part for r in after]
    assert order.index("E") > max(i for i, p in enumerate(order) if p in ("A", "B", "k"))
    assert order.index("C") > max(i for i, p in enumerate(order) if p in ("D", "E"))
    first_e = [r for r in after if r.part in ("D", "E")][:4]  # Part D's scenario completed first
    assert {r.scenario for r in first_e} == {K_SEARCH_SCENARIO} and {r.seed for r in first_e} == {0}
    assert all(r.plateau for r in part_e) and not any(r.plateau for r in part_b)
    assert "trainer.max_epochs=15" in Run(K_SEARCH_SCENARIO, "erm", 0, plateau=True).budget()


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
