"""`bench.grid_cost`: the SNIPS grid's GPU-hours, projected from a device check's summary, checked
against hand-computed values; the epochs of Part E's records read from the committed records."""

from __future__ import annotations

import json

import pytest

from bench.device_check import format_table
from bench.gpu_readme import grid_sentence
from bench.grid_cost import grid_projection, part_e_mean_epochs
from integration_helpers import REPO

RECORDS = REPO / "docs" / "reproduction" / "records"
SUMMARY = {
    "cli_epoch_s": [30.0, 50.0],  # median 40 s
    "throughput": {"minilm_b32": {"ours_examples_per_s": 3000.0}, "bert_base_b32": {"ours_examples_per_s": 1000.0}},
    "packing": {"k1": {"speedup_vs_k1": 1.0}, "k2": {"speedup_vs_k1": 1.8}, "k4": {"speedup_vs_k1": 2.5},
                "k8": {"speedup_vs_k1": 2.4}},
}


def part_e_epochs() -> list[int]:
    """Independently of the plan: every committed run to its plateau (``-plateau``) of ERM and the
    TopK methods on SNIPS' full-drift scenarios (Part F's Group-DRO is not Part E)."""
    return [json.loads((d / "results.json").read_text())["epochs_trained"]
            for d in sorted(RECORDS.glob("snips-*-full-*-plateau"))
            if "-group_dro-" not in d.name and (d / "results.json").is_file()]


def test_part_e_s_mean_epochs_are_those_of_its_committed_records():
    epochs = part_e_epochs()
    assert len(epochs) >= 16  # seed 0 is complete
    mean, n = part_e_mean_epochs(RECORDS)
    assert n == len(epochs) and mean == pytest.approx(sum(epochs) / len(epochs))
    assert 1 <= mean <= 15


def test_the_grid_s_hours_by_hand(tmp_path):
    """64 runs (8 scenarios x 4 methods x 2 seeds); MiniLM's epoch 40 s (the median), BERT-base's
    40 x 3000 / 1000 = 120 s; at 100 epochs: 64 x 100 x 40 / 3600 = 71.1 h and 213.3 h; packed at
    the best K (4, x2.5): 28.4 h. Without Part E records, only the paper's 100 epochs."""
    grid = grid_projection(SUMMARY, cut_epochs=False, records=tmp_path)
    assert grid == {
        "runs": 64, "epoch_s": {"minilm": 40.0, "bert_base": 120.0}, "epochs": {"paper_max": 100},
        "packing_k": 4, "packing_speedup": 2.5,
        "gpu_hours": {"minilm": {"paper_max": pytest.approx(64 * 100 * 40 / 3600)},
                      "bert_base": {"paper_max": pytest.approx(64 * 100 * 120 / 3600)}},
        "gpu_hours_packed": {"minilm": {"paper_max": pytest.approx(64 * 100 * 40 / 3600 / 2.5)}}}


def test_the_grid_at_part_e_s_epochs_from_the_committed_records():
    epochs = part_e_epochs()
    mean = sum(epochs) / len(epochs)
    grid = grid_projection(SUMMARY, cut_epochs=False, records=RECORDS)
    assert grid["part_e_records"] == len(epochs) and grid["epochs"]["part_e_mean"] == pytest.approx(mean)
    assert grid["gpu_hours"]["bert_base"]["part_e_mean"] == pytest.approx(64 * mean * 120 / 3600)


def test_no_projection_from_cut_epochs_or_without_an_epoch_or_bert_base(tmp_path):
    assert grid_projection(SUMMARY, cut_epochs=True, records=tmp_path) == {
        "runs": 64, "reason": "the CLI run's epochs were cut to a few batches"}
    assert grid_projection({**SUMMARY, "cli_epoch_s": []}, cut_epochs=False, records=tmp_path) == {
        "runs": 64, "reason": "the CLI stage measured no epoch"}
    alone = grid_projection({**SUMMARY, "throughput": {}, "packing": {}}, cut_epochs=False, records=tmp_path)
    assert alone["epoch_s"] == {"minilm": 40.0} and alone["packing_k"] == 1 and alone["packing_speedup"] == 1.0


def test_the_device_check_s_table_prints_the_grid(tmp_path):
    grid = grid_projection(SUMMARY, cut_epochs=False, records=tmp_path)
    summary = {"device": "GPU", "torch": "2.11", "matmul_bf16_tflops": 800.0, "throughput": {}, "packing": {},
               "cli_epoch_s": SUMMARY["cli_epoch_s"], "grid": grid}
    table = format_table({"mode": "cuda", "wall_s": 400.0, "summary": summary, "stages": {}})
    assert table.splitlines()[-1] == ("SNIPS grid (64 runs), GPU-hours at 100 epochs (paper_max): minilm 71.1; "
                                      "bert_base 213.3; minilm packed K=4: 28.4")
    summary["grid"] = grid_projection(SUMMARY, cut_epochs=True, records=tmp_path)
    table = format_table({"mode": "cpu", "wall_s": 400.0, "summary": summary, "stages": {}})
    assert table.splitlines()[-1] == "SNIPS grid (64 runs): not projected: the CLI run's epochs were cut to a few batches"


def test_the_readme_s_sentence_gives_the_grid_s_hours(tmp_path):
    """The README's sentence (`bench.gpu_readme`): the hand-computed hours above, one decimal; with
    Part E's records, at both epoch counts, the paper's first."""
    assert grid_sentence(grid_projection(SUMMARY, cut_epochs=False, records=tmp_path)) == (
        "The SNIPS grid (64 runs: 8 scenarios × ERM and the three TopK methods × 2 seeds) on one GPU, in GPU-hours "
        "at the paper's budget of 100 epochs: MiniLM 71.1; BERT-base 213.3; MiniLM with 4 runs per GPU (2.50× the "
        "aggregate of one): 28.4 (`bench/grid_cost.py`).")
    epochs = part_e_epochs()
    mean = sum(epochs) / len(epochs)
    sentence = grid_sentence(grid_projection(SUMMARY, cut_epochs=False, records=RECORDS))
    assert (f"at the paper's budget of 100 epochs and at the {mean:.1f} epochs Part E's {len(epochs)} runs took to "
            f"their plateau: MiniLM 71.1 and {64 * mean * 40 / 3600:.1f}; BERT-base 213.3 and "
            f"{64 * mean * 120 / 3600:.1f};") in sentence
    assert grid_sentence(grid_projection(SUMMARY, cut_epochs=True, records=tmp_path)) == (
        "The SNIPS grid's cost (64 runs): not projected: the CLI run's epochs were cut to a few batches.")
