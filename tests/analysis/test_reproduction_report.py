"""`python -m robustnlu.reproduce report` on fabricated records: a real record of a tiny-encoder run
(``reproduction_record/``, its predictions cut to 50 utterances) copied into every run the plan
names, with predictions varied deterministically per method and seed and results.json's test
metrics recomputed from them, so that the report's numbers can be recomputed independently."""

from __future__ import annotations

import json
import lzma
import re
import shutil
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from integration_helpers import file_bytes  # noqa: E402

from robustnlu import reproduce  # noqa: E402
from robustnlu.analysis.runs import Run  # noqa: E402
from robustnlu.analysis.statistics import MethodStats  # noqa: E402
from robustnlu.analysis.significance import (  # noqa: E402
    approximate_randomization,
    counts_array,
    metric_from_sums,
)
from robustnlu.metrics.registry import MIN_CLUSTER_SIZE  # noqa: E402
from robustnlu.rundir import read_predictions  # noqa: E402
from robustnlu.scenario import Scenario  # noqa: E402
from robustnlu.studies.seqdrift_dro import plan as study, report as reproduction  # noqa: E402
from robustnlu.studies.seqdrift_dro.tables import (  # noqa: E402
    adamw_kernels, at_plateau, disclosures_markdown, hardware_markdown, last_epoch_gain, valid_curve, valid_curves_markdown)

FIXTURE = Path(__file__).parent / "reproduction_record"
# rows (of 50) each method gets right: ERM 20%, TopK 60% (better), TopK-Group 20% on other rows, TopK-AE none
CORRECT = {"erm": (0, 2), "topk": (0, 6), "topk_group": (5, 2), "topk_ae": (0, 0), "group_dro": (3, 1)}
# the k search: valid COMBINED per (method, k); the chosen k is the best
K_VALID = {("topk", 2): 0.50, ("topk", 4): 0.60, ("topk", 8): 0.55, ("topk", 16): 0.52, ("topk_group", 2): 0.70,
           ("topk_group", 16): 0.69, ("topk_ae", 16): 0.33,
           ("topk_group", 4): 0.70, ("topk_group", 8): 0.40, ("topk_ae", 2): 0.30, ("topk_ae", 4): 0.31,
           ("topk_ae", 8): 0.35}
CHOSEN = {"topk": 4, "topk_group": 2, "topk_ae": 8}
# Part B records: TopK and TopK-Group in two full-drift scenarios, both seeds (TopK-AE: its k-search run only)
B_SCENARIOS = (("snips", "slot_context", False, "iid"), ("snips", "slot_value", False, "ood"))
# Part A records: every SNIPS full scenario of the comparison, one partial one and one ATIS one
A_SCENARIOS = B_SCENARIOS + (("snips", "slot_context", True, "iid"), ("atis", "slot_value", False, "iid"))
EPOCH_CURVE = (0.60, 0.70, 0.74, 0.75)
# Part D: trained on to epoch 8, the best valid at epoch 6 (early stopping 2 later); other rows right
PLATEAU_CURVE = (0.60, 0.70, 0.74, 0.75, 0.76, 0.78, 0.77, 0.775)
PLATEAU_ROWS = 5  # _vary's row offset for Part D runs
LAST_EPOCH_BUMP = 0.002  # seed 1's last epoch gains 0.2 points more than seed 0's


def _rows(split: str) -> list[dict]:
    return [json.loads(line) for line in lzma.decompress((FIXTURE / "predictions" / f"{split}.jsonl.xz")
                                                          .read_bytes()).decode().splitlines()]


def _vary(rows: list[dict], method: str, seed: int) -> list[dict]:
    offset, tenths = CORRECT[method]
    out = []
    for i, row in enumerate(rows):
        row = dict(row)
        if (i * 3 + offset + seed) % 10 < tenths:
            row["pred_intent"], row["pred_tags"] = row["gold_intent"], list(row["gold_tags"])
        out.append(row)
    return out


def _metrics(rows: list[dict], shift: float) -> dict[str, float]:
    sums = counts_array(rows).sum(axis=0)
    out = {m: metric_from_sums(m, sums, len(rows)) + shift for m in ("intent_acc", "slot_f1", "semer")}
    out["combined"] = (out["intent_acc"] + out["slot_f1"]) / 2
    out["ma_intent_combined"] = out["combined"] - 0.01
    return out


GPU = {"accelerator": "cuda", "name": "NVIDIA H100 80GB HBM3", "processes": 1}


def make_record(records: Path, run: study.PlannedRun, part: str) -> None:
    curve = PLATEAU_CURVE if run.plateau else EPOCH_CURVE
    base = json.loads((FIXTURE / "results.json").read_text())
    record = records / run.name
    (record / "predictions").mkdir(parents=True)
    s = run.scenario
    results = dict(base, dataset=s.dataset, method=run.method, seed=run.seed)
    results["drift"] = dict(base["drift"], kind=s.drift, partial=s.partial, validation=s.validation)
    results["config"] = dict(base["config"], method={"name": run.method, "k": run.k}
                             | ({"assignment": "bin"} if run.method == "topk_ae" else {}))
    groups = {k: v for k, v in base["metrics"]["test"].items() if k.startswith("group/")}
    scenario_shift = 0.01 * (A_SCENARIOS + B_SCENARIOS).index(
        (s.dataset, s.drift, s.partial, s.validation)) if run.part != "k" else 0.0
    for split in ("valid", "test"):
        rows = _vary(_rows(split), run.method, run.seed + PLATEAU_ROWS * run.plateau)
        with lzma.open(record / "predictions" / f"{split}.jsonl.xz", "wt") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in rows)
        # valid: shifted so that ERM's drop differs per scenario; the k search sets valid COMBINED
        results["metrics"] = results.get("metrics", {}) | {
            split: _metrics(rows, scenario_shift + run.seed * 0.003 if split == "valid" else 0.0)}
    if run.part == "k":
        results["metrics"]["valid"]["combined"] = K_VALID[(run.method, run.k)]
    results["metrics"]["test"].update(groups)
    results["epochs_trained"] = len(curve)
    results["best_checkpoint"] = f"checkpoints/best-epoch{int(np.argmax(curve)):03d}.ckpt"
    if run.seed == 1:  # seed 0's records are like those written before results.json said the AdamW kernel
        results["optimizer_fused"] = True
    if part == "C":  # trained on a GPU (results.json's device); the others like the fixture, before it said one
        results["device"] = GPU
    (record / "results.json").write_text(json.dumps(results))
    lines = ["epoch,step,valid/combined,train/loss_epoch"]
    lines += [f"{e},{10 * e + 9},{v + 0.01 * run.seed + LAST_EPOCH_BUMP * run.seed * (e == len(curve) - 1)},"
              f"\n{e},{10 * e + 9},,1.0" for e, v in enumerate(curve)]
    lines.append(f"{len(curve)},{10 * len(curve)},0.99,")  # the evaluation after training
    (record / "metrics.csv").write_text("\n".join(lines) + "\n")
    meta = json.loads((FIXTURE / "meta.json").read_text()) | {"part": part, "wall_time_s": 600.0 + 60 * run.seed}
    (record / "meta.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("records")
    for run in study.k_search_runs():
        make_record(root, run, "k")
    for seed in study.SEEDS:
        for scenario in A_SCENARIOS:
            make_record(root, study.PlannedRun(Scenario(*scenario), "erm", seed), "A")
        for scenario in B_SCENARIOS:
            for method in ("topk", "topk_group"):
                run = study.PlannedRun(Scenario(*scenario), method, seed, CHOSEN[method], part="B")
                if not (root / run.name).exists():  # the k-search run it equals
                    make_record(root, run, "B")
            make_record(root, study.PlannedRun(Scenario(*scenario), "group_dro", seed, part="C"), "C")
    for method in ("erm", "topk_group"):  # Part D: TopK-AE's run not recorded
        make_record(root, plateau_run(method), "D")
    return root


@pytest.fixture(scope="module")
def report(records, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert reproduce.main(["report", "--records", str(records), "--out", str(out)]) == 0
    return out


def results(records: Path, name: str) -> dict:
    return json.loads((records / name / "results.json").read_text())


def table_row(text: str, *first_cells: str) -> list[str]:
    """The cells of the one Markdown table row of ``text`` whose first cells are ``first_cells``."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    found = [r for r in rows if r[:len(first_cells)] == list(first_cells)]
    assert len(found) == 1, (first_cells, found)
    return found[0]


def section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def plateau_run(method: str) -> study.PlannedRun:
    return study.PlannedRun(study.K_SEARCH_SCENARIO, method, 0, CHOSEN.get(method), part="D", plateau=True)


def test_the_report_regenerates_byte_for_byte(records, report, tmp_path):
    assert sorted(p.name for p in report.iterdir()) == sorted(("report.md", *reproduction.FIGURES))
    again = tmp_path / "again"
    reproduction.write(records, study.report_design(records), again)
    for path in sorted(report.iterdir()):
        assert (again / path.name).read_bytes() == path.read_bytes(), path.name
    assert (report / "fig1a_drop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_status_lines_count_the_recorded_runs(report):
    text = (report / "report.md").read_text()
    # Part A: 2 seeds x 4 scenarios of 32; k search complete; Part B: topk and topk_group in 2 scenarios x 2
    # seeds (the seed-0 slot_context ones are k-search runs) of 24 (topk_ae's 8 minus its k-search run: 1)
    assert "- Part A (ERM, 8 scenarios of SNIPS and ATIS, 2 seeds): 8 of 32 runs recorded" in text
    assert "- k search: 12 of 12 runs recorded" in text
    assert "2 seeds): 9 of 24 runs recorded" in text
    assert "- Part C (Group-DRO on SNIPS' full-drift scenarios, 2 seeds; as compute allows): 4 of 8 runs recorded" in text
    assert "seed 0; as compute allows): 2 of 3 runs recorded" in text
    assert reproduction.PLACEHOLDER in section(text, "Reading")


def test_table10_is_ermss_mean_test_minus_valid(records, report):
    text = section((report / "report.md").read_text(), "Q1")
    for dataset, kind, partial, _ in A_SCENARIOS:
        amount = "partial" if partial else "full"
        names = [study.PlannedRun(Scenario(dataset, kind, partial, v), "erm", s).name for v in ("iid", "ood") for s in (0, 1)]
        runs = [results(records, n) for n in names if (records / n).exists()]
        row = table_row(text, dataset, kind, amount)
        assert row[3] == str(len(runs))
        for metric, column in (("intent_acc", 4), ("slot_f1", 6), ("combined", 8)):
            expected = np.mean([100 * (r["metrics"]["test"][metric] - r["metrics"]["valid"][metric]) for r in runs])
            assert row[column] == f"{expected:+.2f}"
    assert table_row(text, "snips", "slot_context", "full")[5] == "-2.0"  # the paper's Table 10 beside
    assert table_row(text, "snips", "slot_context", "full")[7] == "-2.7"


def _significant(records: Path, name: str, erm_name: str) -> tuple[bool, bool]:
    """(significantly better, significantly worse) on COMBINED by a direct test of the pair."""
    result = approximate_randomization(read_predictions(records / name / "predictions" / "test.jsonl.xz"),
                                       read_predictions(records / erm_name / "predictions" / "test.jsonl.xz"),
                                       "combined", rounds=10_000, seed=0)
    return result.p_value < 0.05 and result.difference > 0, result.p_value < 0.05 and result.difference < 0


@pytest.mark.parametrize("method", ["topk", "topk_group", "topk_ae", "group_dro"])
def test_tables_11_12_recomputed_from_the_records(records, report, method):
    text = section((report / "report.md").read_text(), "Q4")
    per_scenario = {}
    for scenario in B_SCENARIOS:
        names = {s: study.PlannedRun(Scenario(*scenario), method, s, CHOSEN.get(method)).name for s in study.SEEDS}
        names = {s: n for s, n in names.items() if (records / n).exists()}
        if names:
            per_scenario[scenario] = names
    paper_name = {"topk": "TOPK", "topk_group": "TOPK-GROUP", "topk_ae": "TOPK-AE-BIN", "group_dro": "GROUP-DRO"}[method]
    label = f"{method} (k={CHOSEN[method]})" if method in CHOSEN else method  # Group-DRO (Part C): no k
    row = table_row(text, f"{label} = {paper_name}")
    assert row[1] == str(len(per_scenario))
    better = worse = 0
    for column, key in ((3, "combined"), (5, "semer"), (7, "ma_intent_combined")):
        mine, erm = [], []
        for scenario, names in per_scenario.items():
            mine.append(np.mean([100 * results(records, n)["metrics"]["test"][key] for n in names.values()]))
            erm_names = [study.PlannedRun(Scenario(*scenario), "erm", s).name for s in names]  # the same seeds
            erm.append(np.mean([100 * results(records, n)["metrics"]["test"][key] for n in erm_names]))
        assert row[column] == f"{np.mean(mine):.2f}"
        assert row[column + 1] == f"{100 * (np.mean(mine) - np.mean(erm)) / np.mean(erm):+.2f}"
    for scenario, names in per_scenario.items():
        tests = [_significant(records, n, study.PlannedRun(Scenario(*scenario), "erm", s).name) for s, n in names.items()]
        change = (np.mean([results(records, n)["metrics"]["test"]["combined"] for n in names.values()])
                  - np.mean([results(records, study.PlannedRun(Scenario(*scenario), "erm", s).name)["metrics"]["test"]["combined"]
                             for s in names]))
        up, down = any(b for b, _ in tests), any(w for _, w in tests)
        better += change > 0 and up and not down
        worse += change < 0 and down and not up
    assert row[9] == f"{better} / {worse} of {len(per_scenario)}"
    expected = {"topk": (2, 0), "topk_group": (0, 0), "topk_ae": (0, 1), "group_dro": (0, 0)}[method]  # (CORRECT)
    assert (better, worse) == expected


def test_k_search_table_and_chosen_k(report):
    text = section((report / "report.md").read_text(), "The k search")
    for method, k in CHOSEN.items():
        row = table_row(text, method, f"{100 * K_VALID[(method, study.K_GRID[0])]:.2f}")
        assert row[-1] == str(k)
        assert row[1:1 + len(study.K_GRID)] == [f"{100 * K_VALID[(method, kk)]:.2f}" for kk in study.K_GRID]


def test_the_settings_count_the_runs_of_each_adamw_kernel(records, report):
    fused = sum(results(records, d.name).get("optimizer_fused", False) for d in records.iterdir())
    loop = sum(1 for _ in records.iterdir()) - fused
    assert fused and loop
    text = (report / "report.md").read_text()
    assert table_row(text, "AdamW kernel (fused or per-parameter loop)")[1] == f"fused ({fused}), loop ({loop})"


def test_erm_curve_leaves_out_the_evaluation_after_training(records):
    run = reproduction.read_records(records).runs[study.PlannedRun(Scenario("snips", "slot_value", False, "ood"), "erm", 1).name]
    assert valid_curve(run) == pytest.approx([100 * (v + 0.01) for v in EPOCH_CURVE[:-1]]
                                             + [100 * (EPOCH_CURVE[-1] + 0.01 + LAST_EPOCH_BUMP)])


def test_a_curve_with_epochs_lost_by_an_old_resume_leaves_them_blank(records, tmp_path):
    """A record of a run resumed in its third epoch before the CSV log kept earlier rows: its
    metrics.csv starts at epoch 2 (0-based). The curve has None there, not the later epochs
    shifted to the front, and the table leaves them blank and says why."""
    name = study.PlannedRun(Scenario("snips", "slot_value", False, "ood"), "erm", 1).name
    shutil.copytree(records / name, tmp_path / name)
    log = (tmp_path / name / "metrics.csv").read_text().splitlines()
    (tmp_path / name / "metrics.csv").write_text("\n".join([log[0], *[line for line in log[1:] if int(line.split(",")[0]) >= 2]]) + "\n")
    run = reproduction.read_records(tmp_path).runs[name]
    expected = [100 * (v + 0.01) for v in EPOCH_CURVE[2:-1]] + [100 * (EPOCH_CURVE[-1] + 0.01 + LAST_EPOCH_BUMP)]
    assert valid_curve(run)[:2] == [None, None] and valid_curve(run)[2:] == pytest.approx(expected)
    assert last_epoch_gain(valid_curve(run)) == pytest.approx(expected[-1] - expected[-2])
    assert last_epoch_gain([None, 95.0]) is None and last_epoch_gain([95.0]) is None
    table = valid_curves_markdown([run])
    assert table_row(table, name)[1:3] == ["", ""] and table_row(table, name)[3] == f"{expected[0]:.2f}"
    assert "lost the epochs trained before the resume" in table
    assert "lost the epochs" not in valid_curves_markdown([reproduction.read_records(records).runs[name]])


def test_the_per_scenario_table_gives_each_rows_adamw_kernel_per_seed_where_they_differ(report):
    """A row whose models all trained with one kernel names it; a row of mixed kernels names each
    seed's. In the report: every row's kernels are its records' (`optimizer_fused`)."""
    def row(*fused):
        return MethodStats(Scenario("snips", "slot_value", False, "iid"), "erm",
                           [Run(Path(f"r{seed}"), {"seed": seed, "optimizer_fused": f}) for seed, f in enumerate(fused)], {})
    assert [adamw_kernels(row(*f)) for f in ((True, True), (False,), (False, True))] == [
        "fused", "loop", "loop (seed 0), fused (seed 1)"]
    text = section((report / "report.md").read_text(), "Q4").split("### Per scenario", 1)[1].split("Relative change", 1)[0]
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0].rstrip(" |").endswith("| AdamW kernel")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    # the fixture: seed 0's records trained with the loop, seed 1's fused
    assert {row[5]: {row[-1] for row in rows if row[5] == n} for n in ("1", "2") for row in rows if row[5] == n} == {
        "1": {"loop"}, "2": {"loop (seed 0), fused (seed 1)"}}


def test_every_resumed_record_is_disclosed_with_its_wall_time_and_curve(records, tmp_path):
    """Three resumed records: one whose checkpoint recorded the fit time before the resume (its wall
    time adds it, in the disclosure and the hardware table), one that did not (its wall time is the
    session after the resume, said so), and one whose log also lost its first epochs. Each named
    with the epoch and step it continued from and what its log lacks; a run trained in one go is
    not named."""
    names = [study.PlannedRun(Scenario("snips", "slot_value", False, "ood"), "erm", s).name for s in (0, 1)]
    names.append(study.PlannedRun(Scenario("snips", "slot_context", False, "iid"), "erm", 0).name)
    for name in names:
        shutil.copytree(records / name, tmp_path / name)
    assert not any(results(tmp_path, n).get("resumed_from") for n in names)
    assert disclosures_markdown(reproduction.read_records(tmp_path)).count("was resumed") == 0
    hours = float(table_row(hardware_markdown(reproduction.read_records(tmp_path)), "A")[2])
    clocked, unclocked, lossy = names
    for name, epoch, step, fit in ((clocked, 6, 2541, 900.0), (unclocked, 6, 2541, None), (lossy, 1, 726, None)):
        where = {"checkpoint": "checkpoints/last.ckpt", "epoch": epoch, "global_step": step}
        record = results(tmp_path, name) | {"resumed_from": where | ({"fit_time_s": fit} if fit else {})}
        (tmp_path / name / "results.json").write_text(json.dumps(record))
    log = (tmp_path / lossy / "metrics.csv").read_text().splitlines()
    (tmp_path / lossy / "metrics.csv").write_text("\n".join([log[0], *[line for line in log[1:] if int(line.split(",")[0]) >= 2]]) + "\n")
    loaded = reproduction.read_records(tmp_path)
    lines = {line.split("`")[1]: line for line in disclosures_markdown(loaded).splitlines() if "was resumed" in line}
    after = "its wall time counts the training after the resume only"
    assert lines[clocked] == (f"- `{clocked}` was resumed from a checkpoint taken in epoch 7 (optimizer step 2541); its wall "
                              "time adds the 15.0 minutes its sessions before trained up to that checkpoint; its log is complete")
    assert lines[unclocked] == f"- `{unclocked}` was resumed from a checkpoint taken in epoch 7 (optimizer step 2541); {after}; its log is complete"
    assert lines[lossy] == f"- `{lossy}` was resumed from a checkpoint taken in epoch 2 (optimizer step 726); {after}; its log lacks epochs 1, 2"
    table = hardware_markdown(loaded)
    assert "The wall time of 2 of the 3 resumed records is their training after the resume only" in table
    assert float(table_row(table, "A")[2]) == pytest.approx(hours + 900 / 3600, abs=0.051)  # shown to 0.1 hour


def test_the_last_epoch_gains_of_every_method_compared(records, report):
    """Per method over its SNIPS runs of Parts A-C: 1 point (seed 0) or 1.2 points (seed 1) by construction."""
    text = section((report / "report.md").read_text(), "The k search")
    design = study.report_design(records)
    snips = [n for part in ("A", "B", "C") for n in set(design.parts[part]) if n.startswith("snips-")]
    for method in ("erm", "topk", "topk_group", "group_dro"):
        seeds = [results(records, n)["seed"] for n in snips
                 if (records / n).exists() and results(records, n)["method"] == method]
        gains = [100 * (EPOCH_CURVE[-1] - EPOCH_CURVE[-2]) + 100 * LAST_EPOCH_BUMP * s for s in seeds]
        assert table_row(text, method, str(len(gains)))[1:] == [str(len(gains)), f"{np.mean(gains):+.2f}", f"{min(gains):+.2f}",
                                               f"{max(gains):+.2f}"]


def test_part_d_recomputed_from_the_records(records, report):
    """Each method to its own plateau: its numbers, the paired test against ERM's Part D run
    (recomputed from the predictions) and its run at the fixed budget (the k-search record)."""
    text = section((report / "report.md").read_text(), "Part D")
    erm, group = results(records, plateau_run("erm").name), results(records, plateau_run("topk_group").name)
    assert table_row(text, "erm = ERM")[1:7] == ["8", "6", f"{100 * erm['metrics']['valid']['combined']:.2f}",
                                          f"{100 * erm['metrics']['test']['combined']:.2f}",
                                          f"{100 * erm['metrics']['test']['slot_f1']:.2f}", ""]
    row = table_row(text, "topk_group (k=2) = TOPK-GROUP")
    g, e = group["metrics"]["test"]["combined"], erm["metrics"]["test"]["combined"]
    assert row[6] == f"{100 * (g - e) / e:+.2f}" and g != pytest.approx(e)
    test = approximate_randomization(read_predictions(records / plateau_run("topk_group").name / "predictions" / "test.jsonl.xz"),
                                     read_predictions(records / plateau_run("erm").name / "predictions" / "test.jsonl.xz"),
                                     "combined", rounds=10_000, seed=0)
    assert row[7] == f"{test.p_value:.4f}"
    fixed = results(records, study.PlannedRun(study.K_SEARCH_SCENARIO, "topk_group", 0, 2).name)["metrics"]["test"]
    fixed_erm = results(records, study.PlannedRun(study.K_SEARCH_SCENARIO, "erm", 0).name)["metrics"]["test"]
    assert fixed["combined"] != pytest.approx(g)  # the fixed-budget run, not the Part D one
    assert row[8:] == [f"{100 * fixed['combined']:.2f}",
                       f"{100 * (fixed['combined'] - fixed_erm['combined']) / fixed_erm['combined']:+.2f}",
                       f"{100 * (EPOCH_CURVE[-1] - EPOCH_CURVE[-2]):+.2f}"]
    assert table_row(text, plateau_run("topk_ae").name)[1] == "not recorded"
    curve = table_row(text, plateau_run("topk_group").name)
    assert curve[1:] == [f"{100 * v:.2f}" for v in PLATEAU_CURVE] + [f"{100 * (PLATEAU_CURVE[-1] - PLATEAU_CURVE[-2]):+.2f}"]


def test_part_e_recomputed_from_the_records(records, report):
    """Part E holds Part D's runs (the same names): ERM and TopK-Group on the k-search scenario; its
    Q4 row, the same comparison at the fixed budget, its per-scenario tables and each run's plateau
    check."""
    text = section((report / "report.md").read_text(), "Part E")
    erm, group = results(records, plateau_run("erm").name), results(records, plateau_run("topk_group").name)
    g, e = group["metrics"]["test"]["combined"], erm["metrics"]["test"]["combined"]
    change = f"{100 * (g - e) / e:+.2f}"
    assert table_row(text, "topk_group (k=2) = TOPK-GROUP", "1", "1", f"{100 * g:.2f}")[4] == change
    fixed = results(records, study.PlannedRun(study.K_SEARCH_SCENARIO, "topk_group", 0, 2).name)["metrics"]["test"]
    fixed_erm = results(records, study.PlannedRun(study.K_SEARCH_SCENARIO, "erm", 0).name)["metrics"]["test"]
    budgets = table_row(text, "topk_group (k=2) = TOPK-GROUP", "1", "1", change)  # the two budgets' table
    assert budgets[5] == f"{100 * (fixed['combined'] - fixed_erm['combined']) / fixed_erm['combined']:+.2f}"
    best = int(np.argmax(PLATEAU_CURVE)) + 1
    gain = f"{100 * (PLATEAU_CURVE[-1] - PLATEAU_CURVE[-2]):+.2f}"
    assert table_row(text, plateau_run("erm").name)[1:] == [str(len(PLATEAU_CURVE)), str(best), gain, "yes: early-stopped"]
    assert table_row(text, plateau_run("topk_ae").name)[1] == "not recorded"
    assert sum(line.startswith("| snips-") and "-plateau | " in line for line in text.splitlines()) == 32 + 8  # E, F
    per_scenario, relative = text.split("Relative change to ERM (%)", 1)
    cells = ("snips", "slot_context", "full", "iid", "topk_group", "1")
    assert table_row(per_scenario, *cells)[8] == f"{100 * g:.2f}"  # test COMBINED, as in Q4's table
    assert table_row(relative, *cells)[8].split()[0] == change


@pytest.mark.parametrize(("epochs", "last_two", "verdict"), [
    (8, (0.70, 0.75), "yes: early-stopped"),  # fewer than the budget's epochs: early stopping ended it
    (15, (0.750, 0.7519), "yes: last change within ±0.2"),
    (15, (0.750, 0.7481), "yes: last change within ±0.2"),
    (15, (0.750, 0.7521), "no"),  # still learning when the epochs ran out
    (15, (None, 0.75), "unknown: its log lacks the last epochs"),
])
def test_the_plateau_criterion_per_run(tmp_path, epochs, last_two, verdict):
    values = [0.5] * (epochs - 2) + list(last_two)
    lines = ["epoch,step,valid/combined"] + [f"{e},{e},{v}" for e, v in enumerate(values) if v is not None]
    (tmp_path / "metrics.csv").write_text("\n".join(lines) + "\n")
    run = Run(tmp_path, {"epochs_trained": epochs})
    assert at_plateau(run, 15, 0.2) == verdict


def test_the_records_trained_or_logged_differently_are_named(records, report):
    text = section((report / "report.md").read_text(), "Records trained or logged differently")
    loop = sorted(p.name for p in records.iterdir() if not results(records, p.name).get("optimizer_fused"))
    assert loop and f"({len(loop)} records): " + ", ".join(f"`{n}`" for n in loop) in text


def test_drift_table_reads_split_stats(records, report):
    text = section((report / "report.md").read_text(), "The splits")
    splits = json.loads((FIXTURE / "results.json").read_text())["drift"]["split_stats"]["splits"]
    row = table_row(text, "snips", "slot_context", "full", "iid")
    assert row[4:10] == [str(splits["train"]["size"]), f"{splits['train']['percent_drift']:.1f}",
                         str(splits["valid"]["size"]), f"{splits['valid']['percent_drift']:.1f}",
                         str(splits["test"]["size"]), f"{splits['test']['percent_drift']:.1f}"]


def test_the_study_reports_the_worst_cluster_over_big_clusters(tmp_path):
    """The study (python -m robustnlu.report, robustnlu.analysis.runs) takes the same floor by
    default, from a results.json written before it held the measures (the committed records')."""
    test = {"combined": 0.7, "worst_group/combined": 0.0, "group/0/n": 2.0, "group/0/combined": 0.0,
            "group/1/n": 15.0, "group/1/combined": 0.6, "group/2/n": 11.0, "group/2/combined": 0.45}
    run = Run(tmp_path, {"metrics": {"test": test, "valid": {"combined": 0.75}}})
    assert run.value("worst_group_min10/combined") == 0.45
    assert run.value("worst_group_min10/combined", min_cluster_size=1) == 0.0
    assert run.value("worst_group_min10/combined", min_cluster_size=16) is None
    assert run.value("drop/combined") == pytest.approx(0.05)


def test_worst_cluster_table_counts_the_qualifying_clusters(report):
    text = section((report / "report.md").read_text(), "Worst cluster")
    test = json.loads((FIXTURE / "results.json").read_text())["metrics"]["test"]
    sizes = {k.split("/")[1]: v for k, v in test.items() if k.startswith("group/") and k.endswith("/n")}
    big = [test[f"group/{g}/combined"] for g, n in sizes.items() if n >= MIN_CLUSTER_SIZE]
    row = table_row(text, "snips", "slot_context full iid", "erm = ERM")
    assert row[4] == f"{100 * min(big):.2f}"
    assert row[5] == f"{len(big)} of {len(sizes)}"
    assert row[6] == f"{100 * min(test[f'group/{g}/combined'] for g in sizes):.2f}"


def test_no_records_is_a_one_line_error(tmp_path, capsys):
    assert reproduce.main(["report", "--records", str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert not (tmp_path / "out").exists()


def test_a_record_without_metrics_is_a_one_line_error(records, tmp_path, capsys):
    broken = tmp_path / "records"
    shutil.copytree(records, broken)
    name = study.PlannedRun(Scenario("snips", "slot_value", False, "ood"), "erm", 1).name
    data = results(broken, name)
    del data["metrics"]
    (broken / name / "results.json").write_text(json.dumps(data))
    assert reproduce.main(["report", "--records", str(broken), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"error: {broken / name / 'results.json'}: missing key 'metrics'\n"
    assert not (tmp_path / "out").exists()


def test_copied_real_record_reads_as_is(tmp_path):
    """The committed fixture is a real record of the driver, readable unchanged."""
    shutil.copytree(FIXTURE, tmp_path / "snips-slot_context-full-iid-erm-seed0")
    text, figures = reproduction.render(reproduction.read_records(tmp_path), study.report_design(tmp_path))
    assert "- Part A (ERM, 8 scenarios of SNIPS and ATIS, 2 seeds): 1 of 32 runs recorded" in text
    assert sorted(figures) == sorted(reproduction.FIGURES)


def test_the_plan_releases_part_b_with_the_chosen_k(records, tmp_path, capsys):
    """`parts` (shared by the plan and the report): 32 + 12 + 24 + 8 + 3 + 32 + 8 runs, 113 distinct
    (the k-search runs with the chosen k are Part B's seed-0 runs on the k-search scenario; Part D's
    runs are Part E's); without records, Part B waits."""
    part_a, k_runs, part_b, part_c, part_d, part_e, part_f = study.parts(records)
    assert [len(p) for p in (part_a, k_runs, part_b, part_c, part_d, part_e, part_f)] == [32, 12, 24, 8, 3, 32, 8]
    assert {r.k for r in part_b} == set(CHOSEN.values())
    assert {(r.method, r.k) for r in part_d} == {("erm", None), ("topk_group", 2), ("topk_ae", 8)}
    assert {(r.method, r.k) for r in part_e} == {("erm", None), *CHOSEN.items()}
    # Part F: Part C's runs at Part E's budget
    assert {r.name for r in part_f} == {f"{r.name}-plateau" for r in part_c} and all(r.plateau for r in part_f)
    names = [r.name for r in study.plan(records)]
    assert len(names) == len(set(names)) == 76 + 32 - 3 + 8
    assert set(names) == {r.name for r in part_a + k_runs + part_b + part_c + part_d + part_e + part_f}
    # as compute allows, last: Part D (Part B's open question), Part E (its answer over the DRO
    # comparison), Part C, Part F
    assert [r.part for r in study.plan(records)[-48:]] == ["D"] * 3 + ["E"] * 29 + ["C"] * 8 + ["F"] * 8
    # the DRO comparison's runs (SNIPS full drift, both seeds) before the rest of Part A
    planned = study.plan(records)
    last_b = max(i for i, r in enumerate(planned) if r.part == "B")
    assert all(r.scenario.dataset == "snips" and not r.scenario.partial for r in planned[:last_b + 1])
    assert [r.part for r in study.plan(tmp_path)].count("B") == 0
    # the others wait for their k
    assert [r.method for r in study.plan(tmp_path) if r.part in ("D", "E")] == ["erm"] * 8
    assert reproduce.main(["--list", "--records", str(records)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("recorded") for line in listed) == 8 + 12 + 9 - 3 + 4 + 2


def test_the_reading_is_kept_when_the_report_is_rebuilt(records, tmp_path):
    design = study.report_design(records)
    reproduction.write(records, design, tmp_path)
    assert reproduction.PLACEHOLDER in section((tmp_path / "report.md").read_text(), "Reading")
    (tmp_path / reproduction.READING).write_text("TopK agrees with the paper on 2 of 2 scenarios.\n")
    reproduction.write(records, design, tmp_path)
    reading = section((tmp_path / "report.md").read_text(), "Reading")
    assert reading.strip() == "TopK agrees with the paper on 2 of 2 scenarios."


def test_the_hardware_table_names_the_gpu_of_a_run_that_trained_on_one(report):
    text = section((report / "report.md").read_text(), "Hyper-parameters, hardware")
    cpu = json.loads((FIXTURE / "meta.json").read_text())["cpu"]
    part_a, part_c = table_row(text, "A"), table_row(text, "C")
    assert part_a[-1] == f"{cpu}, 2 cores ({part_a[1]})"  # every run of the part, on the fixture's CPU
    assert part_c[-1] == f"NVIDIA H100 80GB HBM3 x 1 ({part_c[1]})" and int(part_c[1]) > 0


def test_the_committed_report_is_what_the_committed_records_give(tmp_path):
    """docs/reproduction/: report.md and its figures are rebuilt byte for byte from the committed
    records and reading.md, so a change to a record or to the report's code
    comes with the regenerated report."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "reproduction"
    shutil.copy(docs / reproduction.READING, tmp_path)
    reproduction.write(docs / "records", study.report_design(docs / "records"), tmp_path)
    for name in ("report.md", *reproduction.FIGURES):
        assert (tmp_path / name).read_bytes() == (docs / name).read_bytes(), name


def readme_headline_table(first_columns: str) -> list[list[str]]:
    """The table of README's "What the reproduction found" whose header begins with
    ``first_columns``, as its body rows' cells."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    headline = readme[readme.index("**What the reproduction found**"):readme.index("**Versions.**")]
    lines = headline.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith(f"| {first_columns} |")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_readme_headline_quotes_the_fixed_budget_as_the_committed_report_has_it():
    """README's fixed-budget table: each method's COMBINED, change to ERM, the significance counts
    and the paper's Table 14 columns as the committed report's Q4 table has them."""
    report = section((Path(__file__).resolve().parents[2] / "docs" / "reproduction" / "report.md").read_text(), "Q4")
    rows = readme_headline_table("method | COMBINED %")
    assert [row[0] for row in rows] == [table_row(report, row[0])[0] for row in rows] and len(rows) == 4
    for row in rows:
        ours = table_row(report, row[0])
        assert row[1:4] == [ours[3], ours[4], ours[9]], row[0]
        assert row[4] == (f"{ours[13]}, {ours[15]}" if ours[13] else ""), row[0]


def test_the_readme_headline_quotes_part_e_as_the_committed_report_has_it():
    """README's Part E table: each method's scenarios, COMBINED, change to ERM and significance
    counts at plateau, its change and counts at the fixed budget over the same runs, and the
    paper's Table 14 columns, as the committed report's Part E tables have them."""
    part_e = section((Path(__file__).resolve().parents[2] / "docs" / "reproduction" / "report.md").read_text(),
                     "Part E")
    plateau, budgets = part_e.split("The same comparison at both budgets", 1)
    rows = readme_headline_table("method | scenarios")
    methods = [line.split("|")[1].strip() for line in plateau.splitlines() if line.startswith("| ")][1:]
    assert [row[0] for row in rows] == methods and methods[0] == "erm = ERM"  # every method the report has
    for row in rows:
        ours = table_row(plateau, row[0])
        assert row[1:5] == [ours[1], ours[3], ours[4], ours[9]], row[0]
        fixed = table_row(budgets, row[0])[5:7] if row[3] else None
        assert row[5] == (", ".join(fixed) if fixed else ""), row[0]
        assert row[6] == (f"{ours[13]}, {ours[15]}" if ours[13] else ""), row[0]


ATIS_ERM = study.PlannedRun(Scenario("atis", "slot_value", False, "iid"), "erm", 0).name  # in no comparison


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _without(key: str, *within: str):
    def drop(path: Path) -> None:
        data = json.loads(path.read_text())
        node = data
        for parent in within:
            node = node[parent]
        del node[key]
        path.write_text(json.dumps(data))
    return drop


@pytest.mark.parametrize("file, damage, problem", [
    ("results.json", lambda p: _cut(p, p.read_text().index('"metrics"')),
     ":1: invalid JSON: Expecting property name enclosed in double quotes"),
    ("results.json", _without("semer", "metrics", "test"), ": missing key 'metrics.test.semer'"),
    ("results.json", _without("epochs_trained"), ": missing key 'epochs_trained'"),
    ("predictions/valid.jsonl.xz", lambda p: _cut(p, -4),  # the xz footer: the 50 rows read, then the end
     ": cannot be read past line 50 (cut short or corrupt?): EOFError: Compressed file ended before the "
     "end-of-stream marker was reached"),
    ("metrics.csv", lambda p: _cut(p, -3), ":10: no line break at the end of the last line: the file is cut short"),
    ("meta.json", lambda p: _cut(p, -1), ":1: invalid JSON: Expecting ',' delimiter"),
])
def test_a_record_cut_short_is_one_error_line_naming_the_file(records, tmp_path, capsys, file, damage, problem):
    """Every file of every record is read whole, also of a record the report's tables do not compare
    (ATIS ERM: before, a cut predictions file, metrics.csv or a results.json without test SEMER gave a report)."""
    broken = tmp_path / "records"
    shutil.copytree(records, broken)
    path = broken / ATIS_ERM / file
    damage(path)
    before = file_bytes(broken)
    assert reproduce.main(["report", "--records", str(broken), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"error: {path}{problem}\n"
    assert not (tmp_path / "out").exists() and file_bytes(broken) == before


def test_an_out_folder_inside_a_record_is_refused(records, tmp_path, capsys):
    broken = tmp_path / "records"
    shutil.copytree(records, broken)
    before = file_bytes(broken)
    out = broken / ATIS_ERM
    assert reproduce.main(["report", "--records", str(broken), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"error: --out: {out / reproduction.FIGURES[0]} lies inside {out}, a run "
                                       "directory this command reads: choose another --out\n")
    assert file_bytes(broken) == before


def test_the_readme_counts_the_committed_records():
    """README's status line ("N of the plan's M runs recorded ... K of Part E's 32 ... J of Part
    F's 8") and the headline's Part E and Part F counts are the committed records' counts."""
    root = Path(__file__).resolve().parents[2]
    records = root / "docs" / "reproduction" / "records"
    readme = (root / "README.md").read_text()
    planned = {run.name for run in study.plan(records)}
    recorded = {name for name in planned if (records / name / "results.json").is_file()}
    part_e = study.report_design(records).parts["E"]
    e_recorded = sum((records / name / "results.json").is_file() for name in part_e)
    status = re.search(r"\*\*Status \([\d-]+\): (\d+) of the plan's (\d+) runs recorded.*?\(and (\d+) of Part E's "
                       r"(\d+)", readme, re.S)
    assert status is not None
    assert [int(g) for g in status.groups()] == [len(recorded), len(planned), e_recorded, len(part_e)]
    headline = re.search(r"\((\d+)\s+of\s+Part\s+E's\s+(\d+)\s+runs", readme)  # wrapped anywhere
    assert headline is not None and [int(g) for g in headline.groups()] == [e_recorded, len(part_e)]
    part_f = study.report_design(records).parts["F"]
    f_counts = re.findall(r"(\d+)\s+of\s+Part\s+F's\s+(\d+)", readme)  # the headline's and the status's
    f_recorded = sum((records / name / "results.json").is_file() for name in part_f)
    assert len(f_counts) == 2 and {(int(n), int(of)) for n, of in f_counts} == {(f_recorded, len(part_f))}
