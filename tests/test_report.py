"""`python -m robustnlu.report` on a small real sweep: tiny encoder, 1 epoch, 2 scenarios (slot
context drift with i.i.d. vs o.o.d. validation) × 2 methods (erm, topk) × 2 seeds, nested in
sub-folders, plus a failed run."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import lzma
import math
import shutil
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

from integration_helpers import (  # noqa: E402
    FAST, REPO, SMALL_DRIFT, compose_config, file_bytes, jsonl_overrides, run_cli, write_snips_sample_jsonl)
from robustnlu.analysis import figures, statistics, study as st  # noqa: E402
from robustnlu.analysis.study_tables import counts_table, relative_change_table, scenario_table  # noqa: E402
from robustnlu.analysis.runs import (  # noqa: E402
    Run, StudyError, check_one_setting, discover, other_settings, trained_config)
from robustnlu.analysis.significance import (  # noqa: E402
    SignificanceResult,
    approximate_randomization,
    family_wise_error,
)
from robustnlu.metrics.registry import TESTED, relative_change  # noqa: E402
from robustnlu.plotting import png  # noqa: E402
from robustnlu.report import incomplete_group, main  # noqa: E402
from robustnlu.rundir import RunDir  # noqa: E402
from robustnlu.scenario import Scenario  # noqa: E402
from robustnlu.train import run  # noqa: E402
from test_cli import read_wandb_records  # noqa: E402
from test_sweep import _multirun  # noqa: E402

VALIDATIONS = ("iid", "ood")
METHODS = ("erm", "topk")
SEEDS = (1, 2)
ROUNDS, SEED = 300, 7


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    sample = write_snips_sample_jsonl(root / "data", n_train=600, n_eval=60)
    for validation in VALIDATIONS:
        for method in METHODS:
            for seed in SEEDS:
                out = root / "sweep" / validation / f"{method}-{seed}"
                cfg = compose_config([*FAST, *jsonl_overrides(sample), *SMALL_DRIFT, f"method={method}",
                                      f"seed={seed}", f"validation={validation}", "trainer.max_epochs=1",
                                      "data.batch_size=128", "~callbacks.early_stopping",
                                      "+trainer.num_sanity_val_steps=0", f"paths.cache_dir={root / 'cache'}"], out)
                run(cfg)
    failed = root / "sweep" / "ood" / "topk-3"
    failed.mkdir()
    (failed / "status.json").write_text(json.dumps({"state": "failed", "error": "RuntimeError: out of memory"}))
    shutil.copy(root / "sweep" / "ood" / "topk-1" / "config.yaml", failed)  # as a run that failed training has it
    return root / "sweep"


@pytest.fixture(scope="module")
def report(sweep, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report"
    rc = main([str(sweep), "--out", str(out), "--rounds", str(ROUNDS), "--seed", str(SEED)])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def study(sweep):
    return st.build_study([sweep], rounds=ROUNDS, seed=SEED)


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_table_and_figure_is_written(report):
    assert sorted(p.name for p in report.iterdir()) == sorted(st.FILES)
    for name in st.FILES:
        assert (report / name).stat().st_size > 0
    text = (report / "report.md").read_text()
    for name in st.FILES[:-1]:
        assert f"({name})" in text  # linked from report.md


@pytest.mark.parametrize("name", ["fig1a_drop.png", "fig1bc_counts.png"])
def test_figures_are_non_blank_pngs(report, name):
    image = mpimg.imread(report / name)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert float(np.var(image[..., :3])) > 0


def test_figures_have_one_bar_per_scenario_method_and_direction(study):
    drop = figures.plot_drop(study.stats)
    assert len(drop.axes) == 1  # one dataset
    assert len(drop.axes[0].patches) == len(VALIDATIONS) * len(METHODS)
    heights = sorted(p.get_height() for p in drop.axes[0].patches)
    assert heights == pytest.approx(sorted(s.stats["drop/combined"][0] for s in study.stats))
    counts = figures.plot_counts(study.counts)
    assert [ax.get_title().split(" (")[0] for ax in counts.axes] == [
        "all scenarios", "full vs partial drift", "i.i.d. vs o.o.d. validation"]
    # one non-ERM method: worse + better bar per group value (all: 1 value, full only, iid and ood)
    assert [len(ax.patches) for ax in counts.axes] == [2, 2, 4]


def test_counts_without_a_method_tested_against_erm_say_so_without_warnings():
    """A report of one run, or of ERM alone: no bars, so no legend (matplotlib warned on stderr
    for each empty one) but a line saying why each panel is empty; no empty Markdown table."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        counts = figures.plot_counts([])
        png(counts)
    assert [[t.get_text() for t in ax.texts] for ax in counts.axes] == [["no method tested against ERM"]] * 3
    md, csv_text = counts_table([])
    assert (md, csv_text.splitlines()) == ("No method was tested against ERM.\n", [
        "method,metric,group,value,scenarios_tested,sig_better_than_erm,sig_worse_than_erm,same_as_erm"])


def test_a_report_at_another_cluster_floor_names_it_in_its_csv_columns(sweep):
    study = st.build_study([sweep], rounds=ROUNDS, seed=SEED, min_cluster_size=5)
    header = scenario_table(study.stats)[1].splitlines()[0].split(",")
    assert "worst_group_min5/combined_mean" in header and "worst_group_min10/combined_mean" not in header


def test_tables_hold_one_row_per_scenario_and_method(report, sweep):
    for name in ("table10_metrics.csv", "relative_change.csv"):
        rows = read_csv(report / name)
        assert [(r["validation"], r["method"]) for r in rows] == [(v, m) for v in VALIDATIONS for m in METHODS]
        assert all(r["n_models"] == "2" and r["drift"] == "slot_context" and r["amount"] == "full" for r in rows)
    assert len((report / "table10_metrics.md").read_text().strip().splitlines()) == 2 + 4
    rows = read_csv(report / "table10_metrics.csv")
    for row in rows:
        results = [json.loads((sweep / row["validation"] / f"{row['method']}-{s}" / "results.json").read_text())
                   for s in SEEDS]
        combined = [100 * r["metrics"]["test"]["combined"] for r in results]
        assert float(row["combined_mean"]) == pytest.approx(np.mean(combined), abs=1e-4)
        assert float(row["combined_std"]) == pytest.approx(np.std(combined, ddof=1), abs=1e-4)
        drops = [100 * (r["metrics"]["valid"]["combined"] - r["metrics"]["test"]["combined"]) for r in results]
        assert float(row["drop/combined_mean"]) == pytest.approx(np.mean(drops), abs=1e-4)
        assert "worst_group_min10/combined_mean" in row and "drop/combined_mean" in row
    rel = {(r["validation"], r["method"]): r for r in read_csv(report / "relative_change.csv")}
    table = {(r["validation"], r["method"]): r for r in rows}
    for v in VALIDATIONS:
        erm, topk = float(table[(v, "erm")]["combined_mean"]), float(table[(v, "topk")]["combined_mean"])
        assert float(rel[(v, "topk")]["combined_rel_change_pct"]) == pytest.approx(100 * (topk - erm) / erm, abs=1e-3)
        assert float(rel[(v, "erm")]["combined_rel_change_pct"]) == 0.0
        assert rel[(v, "topk")]["k_tests"] == "2"
        assert float(rel[(v, "topk")]["family_wise_error"]) == pytest.approx(family_wise_error(0.05, 2), abs=1e-3)
    counts = read_csv(report / "significance_counts.csv")
    by_group = {(r["group"], r["value"]): r for r in counts}
    assert {(r["method"], r["metric"]) for r in counts} == {("topk", "combined")}
    assert by_group[("all", "all")]["scenarios_tested"] == "2"
    assert by_group[("validation", "iid")]["scenarios_tested"] == by_group[("validation", "ood")]["scenarios_tested"] == "1"
    for r in counts:
        assert (int(r["sig_better_than_erm"]) + int(r["sig_worse_than_erm"]) + int(r["same_as_erm"])
                == int(r["scenarios_tested"]))
    header = next(line for line in (report / "significance_counts.md").read_text().splitlines() if line.startswith("|"))
    assert header.startswith("| method | all scenarios | dataset = jsonl | drift = slot_context | amount = full |")
    assert header.endswith("| validation = iid | validation = ood |")


@pytest.mark.parametrize("validation", VALIDATIONS)
def test_significance_equals_a_direct_test_of_the_same_seed_pair(study, report, sweep, validation):
    comparison = next(c for c in study.comparisons if c.method == "topk" and c.scenario.validation == validation)
    assert [(p.run.seed, p.baseline.seed, p.by_seed) for p in comparison.pairs] == [(s, s, True) for s in SEEDS]
    for metric in TESTED:
        tests = comparison.verdicts[metric].tests
        for seed, result in zip(SEEDS, tests, strict=True):
            direct = approximate_randomization(RunDir(sweep / validation / f"topk-{seed}").predictions(),
                                               RunDir(sweep / validation / f"erm-{seed}").predictions(),
                                               metric, ROUNDS, SEED)
            assert result == direct
    row = next(r for r in read_csv(report / "relative_change.csv")
               if r["validation"] == validation and r["method"] == "topk")
    assert [float(p) for p in row["combined_p_values"].split(";")] == pytest.approx(
        [t.p_value for t in comparison.verdicts["combined"].tests], rel=1e-5)
    assert row["combined_decision"] == comparison.verdicts["combined"].decision


def test_failed_run_and_pairing_rule_are_reported(report, sweep):
    text = (report / "report.md").read_text()
    assert str(sweep / "ood" / "topk-3") in text and "RuntimeError: out of memory" in text
    assert "8 finished runs in 2 scenarios" in text and "1 failed or unfinished" in text
    assert "ERM model of the same seed" in text and f"{ROUNDS} shuffles, seed {SEED}" in text
    assert f"k = 2: {family_wise_error(0.05, 2):.3f}" in text


def test_report_is_deterministic_given_the_seed(report, sweep, tmp_path):
    assert main([str(sweep / "iid"), str(sweep / "ood"), "--out", str(tmp_path), "--rounds", str(ROUNDS),
                 "--seed", str(SEED)]) == 0
    for name in ("table10_metrics.csv", "relative_change.csv", "significance_counts.csv"):
        assert (tmp_path / name).read_text() == (report / name).read_text()


def test_a_directory_without_runs_is_an_error_and_nothing_is_written(sweep, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "out"
    assert main([str(sweep), str(empty), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(empty) in err
    assert not out.exists()


def test_an_out_the_system_refuses_to_create_is_one_error_line(sweep, capsys):
    """/proc takes no new folder (the check before the work cannot know): the write's error, one line."""
    assert main([str(sweep), "--out", "/proc/robustnlu-test", "--rounds", "10"]) == 2
    assert capsys.readouterr().err == "error: --out: cannot write /proc/robustnlu-test: No such file or directory\n"


def _wandb_env(tmp_path):
    """W&B's own folders (artifact staging, cache, settings) inside the test's tmp dir."""
    return {f"WANDB_{k}_DIR": str(tmp_path / "wandb-home" / k.lower()) for k in ("DATA", "CACHE", "CONFIG")}


def test_report_is_logged_as_an_offline_wandb_artifact(sweep, tmp_path):
    """~15 s: the real CLI with --wandb (offline by default), the run files read back with
    `wandb leet inspect`: the runs logged no W&B run, so one report run per scenario (their
    default group) under <out>/wandb/, of job type report, each with the report files as one
    artifact of type report (not the W&B folder inside --out) and its scenario's rows of the CSV
    tables as W&B tables (tests/test_dashboard.py: a sweep logged with W&B)."""
    out = tmp_path / "report"
    proc = run_cli([str(sweep), "--out", str(out), "--rounds", str(ROUNDS), "--seed", str(SEED), "--wandb"],
                   cwd=tmp_path, module="robustnlu.report", env=_wandb_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == sorted([*st.FILES, "wandb"])
    run_dirs = sorted((out / "wandb").glob("offline-run-*"))
    assert len(run_dirs) == len(VALIDATIONS)
    groups = set()
    for run_dir in run_dirs:
        assert f"wandb sync {run_dir}" in proc.stdout
        (run_file,) = run_dir.glob("*.wandb")
        records = read_wandb_records(run_file)
        run_record = next(r["run"] for r in records if "run" in r)
        assert run_record["job_type"] == "report" and run_record["project"] == "robustnlu"
        config = run_record["config"]["update"]
        assert config["report.rounds"] == ROUNDS and config["runs"] == []  # no W&B runs to name
        validation = config["validation.kind"]
        groups.add(run_record["run_group"])
        assert run_record["run_group"] == config["scenario"] == f"jsonl-slot_context-full-{validation}"
        artifacts = {r["artifact"]["name"]: r["artifact"] for r in records if "artifact" in r}
        report_artifact = artifacts["study-report"]
        assert report_artifact["type"] == "report"
        manifest = {e["path"]: e for e in report_artifact["manifest"]["contents"]}
        assert sorted(manifest) == sorted(st.FILES)  # the report files, flat; nothing from wandb/
        for name, entry in manifest.items():
            data = (out / name).read_bytes()
            assert int(entry["size"]) == len(data)
            assert entry["digest"] == base64.b64encode(hashlib.md5(data).digest()).decode()
        history = {}
        for r in records:
            history.update(r.get("history", {}).get("item", {}))
        for name in ("table10_metrics", "relative_change", "significance_counts"):
            rows = read_csv(out / f"{name}.csv")
            if name != "significance_counts":  # per scenario; the counts are the study's
                rows = [r for r in rows if r["validation"] == validation]
            assert history[f"{name}._type"] == "table-file"
            assert history[f"{name}.nrows"] == len(rows) > 0
            table = json.loads((run_dir / "files" / history[f"{name}.path"]).read_text())
            assert table["columns"] == list(read_csv(out / f"{name}.csv")[0])
        assert history["table10_metrics.nrows"] == len(METHODS)
        summary = {}
        for r in records:
            summary.update(r.get("summary", {}).get("update", {}))
        # the failed run is in the o.o.d. scenario's group (its config.yaml), not in every group
        assert summary["n_runs"] == len(METHODS) * len(SEEDS)
        assert summary["n_incomplete"] == {"iid": 0, "ood": 1}[validation]
    assert groups == {f"jsonl-slot_context-full-{v}" for v in VALIDATIONS}


def test_report_online_without_login_is_a_one_line_error_after_the_report(sweep, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "report"
    env = {**_wandb_env(tmp_path), "NETRC": str(tmp_path / "no-netrc")}
    proc = run_cli([str(sweep / "iid"), "--out", str(out), "--rounds", "10", "--wandb", "--wandb-mode", "online"],
                   cwd=tmp_path, module="robustnlu.report", env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: W&B: ") and "wandb login" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (out / "report.md").is_file()


# ------------------------------------------------------------------ rules, without training


def fake(path, seed):
    return Run(path=Path(path), results={"seed": seed, "method": "m"})


def test_pairing_falls_back_to_sorted_order_for_a_seed_without_erm():
    erm = [fake("e1", 1), fake("e2", 2)]
    pairs = statistics.pair_models([fake("m2", 2), fake("m3", 3), fake("m1", 1)], erm)
    assert [(p.run.seed, p.baseline.seed, p.by_seed) for p in pairs] == [(1, 1, True), (2, 2, True), (3, 1, False)]
    pairs = statistics.pair_models([fake("m1", 1), fake("m3", 3)], erm)
    assert [(p.run.seed, p.baseline.seed, p.by_seed) for p in pairs] == [(1, 1, True), (3, 2, False)]
    assert statistics.pair_models([fake("m1", 1)], []) == []


def result(difference, p, metric="combined"):
    return SignificanceResult(metric, 0.5 + difference, 0.5, difference, p, 100, 10)


@pytest.mark.parametrize("rule, tests, expected", [
    ("any", [result(0.1, 0.01), result(0.05, 0.3)], "better"),
    ("any", [result(0.1, 0.01), result(-0.05, 0.01)], "same"),  # significant both ways
    ("any", [result(0.1, 0.3), result(0.05, 0.3)], "same"),
    ("majority", [result(0.1, 0.01), result(0.05, 0.3)], "same"),  # 1 of 2 is not > k / 2
    ("majority", [result(0.1, 0.01), result(0.05, 0.01), result(0.05, 0.3)], "better"),
    ("all", [result(0.1, 0.01), result(0.05, 0.02)], "better"),
    ("all", [result(0.1, 0.01), result(0.05, 0.3)], "same"),
])
def test_decision_rule(rule, tests, expected):
    assert statistics.decide("combined", 1.0, tests, 0.05, rule).decision == expected


def test_decision_follows_the_direction_of_the_mean_and_semer_is_lower_better():
    worse = [result(-0.1, 0.01), result(-0.2, 0.01)]
    assert statistics.decide("combined", -2.0, worse, 0.05, "all").decision == "worse"
    assert statistics.decide("combined", 2.0, worse, 0.05, "any").decision == "same"
    semer = [result(-0.1, 0.01, "semer")]  # A has lower SEMER: better
    assert statistics.decide("semer", -3.0, semer, 0.05, "any").decision == "better"
    assert math.isnan(relative_change(1.0, 0.0))


class NoFiles:
    def predictions(self, split):
        return []


class FakeRun(Run):
    """A run of the given results and no prediction files (the paired tests are replaced)."""

    dir = property(lambda self: NoFiles())


def fake_run(path, method, seed, scores):
    """A `FakeRun` whose valid and test metrics are ``scores``."""
    return FakeRun(path=Path(path), results={"seed": seed, "method": method, "metrics": {"test": scores,
                                                                                          "valid": scores}})


def test_the_change_to_erm_uses_the_erm_models_of_the_same_seeds(monkeypatch):
    """While a study is incomplete (ERM has run seeds 0 and 1, the method only seed 0), the method's
    change is to ERM's seed-0 model, not to ERM's mean over both seeds. The paired tests are not what
    is checked here: they are replaced by a no-difference result (the fake runs have no predictions)."""

    def run_with(path, method, seed, combined):
        return fake_run(path, method, seed, {"combined": combined})

    monkeypatch.setattr(statistics, "paired_counts", lambda a, b: None)
    monkeypatch.setattr(statistics, "approximate_randomization", lambda *a: result(0.0, 1.0))
    erm = [run_with("e0", "erm", 0, 0.80), run_with("e1", "erm", 1, 0.90)]
    grouped = {"scenario": {"erm": erm, "m": [run_with("m0", "m", 0, 0.84)]}}
    comparisons = statistics.compare_to_baseline(statistics.scenario_stats(grouped), rounds=10)
    m = next(c for c in comparisons if c.method == "m")
    assert m.changes["combined"] == pytest.approx(100 * (84 - 80) / 80)  # +5 %, not 84 vs 85: -1.2 %
    # with both seeds run, the change is to ERM's mean over both
    grouped["scenario"]["m"].append(run_with("m1", "m", 1, 0.94))
    comparisons = statistics.compare_to_baseline(statistics.scenario_stats(grouped), rounds=10)
    m = next(c for c in comparisons if c.method == "m")
    assert m.changes["combined"] == pytest.approx(100 * (89 - 85) / 85)
    assert next(c for c in comparisons if c.method == "erm").changes["combined"] == 0.0


def test_a_significant_gain_over_an_erm_mean_of_0_is_better_not_same(monkeypatch):
    """ERM at 0 slot F1 (e.g. an early checkpoint): the relative change is undefined, but a method
    above it with significant tests is better, as the tests and the means say."""

    def run_with(path, method, seed, slot_f1):
        return fake_run(path, method, seed, {"combined": 0.3, "slot_f1": slot_f1})

    monkeypatch.setattr(statistics, "paired_counts", lambda a, b: None)
    monkeypatch.setattr(statistics, "approximate_randomization",
                        lambda counts, _, metric, *a: result(0.2 if metric == "slot_f1" else 0.0,
                                                             0.001 if metric == "slot_f1" else 1.0, metric))
    grouped = {"scenario": {"erm": [run_with("e0", "erm", 0, 0.0)], "m": [run_with("m0", "m", 0, 0.2)]}}
    m = next(c for c in statistics.compare_to_baseline(statistics.scenario_stats(grouped), rounds=10)
             if c.method == "m")
    assert math.isnan(m.changes["slot_f1"])
    assert (m.verdicts["slot_f1"].decision, m.verdicts["slot_f1"].n_better) == ("better", 1)


SCENARIO = Scenario.of("snips", "slot_value", False, "iid")


def compared(monkeypatch, runs):
    """The comparisons of fake runs of `SCENARIO` (method → runs) whose every paired test finds no
    difference (p = 1; the fake runs have no predictions)."""
    monkeypatch.setattr(statistics, "paired_counts", lambda a, b: None)
    monkeypatch.setattr(statistics, "approximate_randomization", lambda counts, _, metric, *a: result(0.0, 1.0, metric))
    stats = statistics.scenario_stats({SCENARIO: runs})
    return stats, statistics.compare_to_baseline(stats, rounds=10)


def md_cells(md, method):
    """The header and ``method``'s row of a Markdown table, as {column: cell}."""
    lines = [line for line in md.splitlines() if line.startswith("|")]
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return dict(zip(split[0], next(row for row in split[2:] if method in row), strict=True))


@pytest.mark.parametrize("erm_seeds, bound, shown", [
    ((1, 2, 3), "1-(1-alpha)^k", "0.143"),  # three ERM models: 1 − 0.95³ = 0.142625
    ((1,), "min(1,k*alpha)", "0.150 (union bound: tests share an ERM model)"),  # m2, m3 ~ e1 too: 3 · 0.05
])
def test_tests_that_share_an_erm_model_get_the_union_bound(monkeypatch, erm_seeds, bound, shown):
    """Three models of a method; with one ERM model (seed 1) all three are tested against it, so the
    three tests are not independent and 1 − (1 − alpha)^k is no bound of their family-wise error;
    the union bound k · alpha is, for any dependence."""
    erm = [fake_run(f"e{s}", "erm", s, {"combined": 0.5}) for s in erm_seeds]
    stats, comparisons = compared(monkeypatch, {"erm": erm, "m": [fake_run(f"m{s}", "m", s, {"combined": 0.6})
                                                                   for s in (1, 2, 3)]})
    m = next(c for c in comparisons if c.method == "m")
    assert m.k == 3 and [p.baseline.seed for p in m.pairs] == ([1, 2, 3] if len(erm) == 3 else [1, 1, 1])
    md, csv_text = relative_change_table(comparisons, stats, 0.05)
    assert md_cells(md, "m")["family-wise error"] == shown
    row = next(r for r in csv.DictReader(csv_text.splitlines()) if r["method"] == "m")
    assert (row["family_wise_error"], row["family_wise_error_bound"]) == (shown[:5], bound)
    text = st._report_md(st.Study([], [], [], stats, comparisons, [], 0.05, 10, 0, "any"), "", "", "")
    assert f"k = 3: {shown[:5]}" in text
    if len(erm) == 1:
        assert "k = 3: 0.143" not in text and "union (Bonferroni) bound min(1, k · alpha)" in text
        assert m.family_wise_error(0.4) == 1.0  # 3 · 0.4, capped
    else:
        assert m.family_wise_error(0.4) == pytest.approx(1 - 0.6 ** 3)  # 0.784


def test_family_wise_error_bounds():
    assert family_wise_error(0.05, 3) == pytest.approx(0.142625)
    assert family_wise_error(0.05, 3, independent=False) == pytest.approx(0.15)
    assert family_wise_error(0.3, 4, independent=False) == 1.0  # 1.2, capped


def test_a_change_from_an_erm_mean_of_0_says_so(monkeypatch):
    """ERM at 0 slot F1: relative_change.md's cell words it as the compare command does, "n/a:
    from 0" (with the decision's mark), not an empty cell; the CSV's number is empty (undefined)."""
    def run_with(path, method, seed, slot_f1):
        return fake_run(path, method, seed, {"combined": 0.3, "slot_f1": slot_f1})

    stats, comparisons = compared(monkeypatch, {"erm": [run_with("e0", "erm", 0, 0.0)],
                                                "m": [run_with("m0", "m", 0, 0.2)]})
    md, csv_text = relative_change_table(comparisons, stats, 0.05)
    assert md_cells(md, "m")["slot F1 %"] == md_cells(md, "erm")["slot F1 %"] == "n/a: from 0"
    assert md_cells(md, "m")["COMBINED %"] == "+0.00"  # 30 vs 30
    row = next(r for r in csv.DictReader(csv_text.splitlines()) if r["method"] == "m")
    assert (row["slot_f1_rel_change_pct"], row["combined_rel_change_pct"]) == ("", "0.0000")


def test_the_counts_headers_name_the_group_and_what_is_counted():
    counts = [{"method": "topk", "metric": "combined", "group": "all", "value": "all", "scenarios": 2, "better": 1,
               "worse": 0, "same": 1},
              {"method": "topk", "metric": "combined", "group": "validation", "value": "iid", "scenarios": 1,
               "better": 1, "worse": 0, "same": 0},
              {"method": "topk", "metric": "combined", "group": "validation", "value": "ood", "scenarios": 1,
               "better": 0, "worse": 0, "same": 1}]
    md, csv_text = counts_table(counts)
    assert md == ("Scenarios in which a method is significantly better / worse than ERM on COMBINED, of the n "
                  "scenarios tested (better / worse of n), per group of scenarios (column: group = value).\n\n"
                  "| method | all scenarios | validation = iid | validation = ood |\n|---|---|---|---|\n"
                  "| topk | 1 / 0 of 2 | 1 / 0 of 1 | 0 / 0 of 1 |\n")
    assert csv_text.splitlines() == [
        "method,metric,group,value,scenarios_tested,sig_better_than_erm,sig_worse_than_erm,same_as_erm",
        "topk,combined,all,all,2,1,0,1", "topk,combined,validation,iid,1,1,0,0", "topk,combined,validation,ood,1,0,0,1"]


# ------------------------------------------------------------------ damaged input, misplaced output

RECORD = Path(__file__).parent / "analysis" / "reproduction_record"


def erm_and_topk(root: Path) -> Path:
    """Two runs of one scenario and seed, copies of a real record (50 test utterances): the
    report pairs TopK with ERM and reads both runs' test predictions."""
    for method in ("erm", "topk"):
        shutil.copytree(RECORD, root / method)
        results = json.loads((RECORD / "results.json").read_text())
        (root / method / "results.json").write_text(json.dumps({**results, "method": method}))
    return root


def test_a_report_of_two_sound_runs_is_written(tmp_path):
    """The control of the tests below: the same runs, undamaged, give a report."""
    sweep = erm_and_topk(tmp_path / "sweep")
    proc = run_cli([str(sweep), "--out", str(tmp_path / "out"), "--rounds", "10"], cwd=tmp_path, module="robustnlu.report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(st.FILES)


def test_predictions_cut_short_are_one_error_line_and_nothing_is_written(tmp_path):
    sweep = erm_and_topk(tmp_path / "sweep")
    xz = sweep / "topk" / "predictions" / "test.jsonl.xz"
    xz.write_bytes(xz.read_bytes()[:-4])  # the xz footer cut: all 50 lines decompress, then the stream ends
    before = file_bytes(sweep)
    proc = run_cli([str(sweep), "--out", str(tmp_path / "out"), "--rounds", "10"], cwd=tmp_path, module="robustnlu.report")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {xz}: cannot be read past line 50 (cut short or corrupt?): EOFError: Compressed "
                           "file ended before the end-of-stream marker was reached\n")
    assert not (tmp_path / "out").exists() and file_bytes(sweep) == before


def test_a_copy_of_a_run_beside_it_is_one_error_line_not_a_second_model(tmp_path):
    """A backup of a sweep under the folder reported on: its runs are the same models again (each
    records the folder it trained in), which would double n, shrink the std and double the tests."""
    sweep = erm_and_topk(tmp_path / "study" / "sweep")
    shutil.copytree(sweep, tmp_path / "study" / "sweep-backup")
    proc = run_cli([str(tmp_path / "study"), "--out", str(tmp_path / "out"), "--rounds", "10"], cwd=tmp_path,
                   module="robustnlu.report")
    assert proc.returncode == 2
    trained = json.loads((RECORD / "results.json").read_text())["config"]["paths"]["output_dir"]
    assert proc.stderr == (f"error: {sweep / 'erm'}: the same run as {tmp_path / 'study' / 'sweep-backup' / 'erm'} "
                           f"(both record training in {trained}: a copy?); "
                           "give the report one of them\n")
    assert not (tmp_path / "out").exists()


def erm_seeds(root: Path, **changed: object) -> Path:
    """ERM runs of seeds 0 and 1 in one scenario, copied from the real record as a run folder is
    copied by hand (no Hydra record of their overrides); seed 1's results.json with the config
    settings ``changed`` (dotted keys)."""
    for seed in (0, 1):
        run = root / f"erm-{seed}"
        shutil.copytree(RECORD, run)
        results = json.loads((run / "results.json").read_text())
        for key, value in changed.items() if seed == 1 else ():
            *parents, last = key.split(".")
            node = results["config"]
            for part in parents:
                node = node[part]
            node[last] = value
        (run / "results.json").write_text(json.dumps({**results, "seed": seed}))
    return root


def without_config(run: Path) -> dict:
    """``run``'s results.json written again without its ``config``; returns that config."""
    results = json.loads((run / "results.json").read_text())
    config = results.pop("config")
    (run / "results.json").write_text(json.dumps(results))
    return config


def test_runs_of_one_method_with_other_settings_are_one_error_line(tmp_path):
    """Two ERM seeds copied by hand (no Hydra record of their overrides) whose configs say they
    trained with learning rates 1e-4 and 1e-3 are no models of one method: their mean is refused,
    naming the setting and both values. With the same settings but the seed and where they wrote
    and cached (settings that change nothing) they are two models."""
    assert json.loads((RECORD / "results.json").read_text())["config"]["optimizer"]["lr"] == 1e-4
    sweep = erm_seeds(tmp_path / "sweep", **{"optimizer.lr": 1e-3})
    proc = run_cli([str(sweep), "--out", str(tmp_path / "out"), "--rounds", "10"], cwd=tmp_path,
                   module="robustnlu.report")
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert proc.stderr.startswith(f"error: {sweep / 'erm-1'}: erm in scenario ")
    assert proc.stderr.endswith(f" trained with other settings than {sweep / 'erm-0'} (optimizer.lr: 0.0001 vs 0.001); "
                                "report them separately\n")

    same = erm_seeds(tmp_path / "same", **{"paths.cache_dir": "/elsewhere/cache", "seed": 1})
    study = st.build_study([same], rounds=10)
    assert [s.n for s in study.stats] == [2] and study.uncompared == []


@pytest.mark.parametrize(("key", "value"), [("trainer.limit_val_batches", 5), ("method.extra", 1)])
def test_a_setting_only_one_run_has_is_a_setting_they_differ_in(tmp_path, capsys, key, value):
    """Seed 1 trained with ``+<key>=<value>`` on its command line, a key seed 0's config lacks: not
    pooled as one setting (the key missing from one config shown as ``<absent>``)."""
    assert key.split(".")[-1] not in json.loads((RECORD / "results.json").read_text())["config"][key.split(".")[0]]
    sweep = erm_seeds(tmp_path / "sweep", **{key: value})
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--rounds", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {sweep / 'erm-1'}: erm in scenario ") and len(err.splitlines()) == 1
    assert err.endswith(f" trained with other settings than {sweep / 'erm-0'} ({key}: <absent> vs {value}); "
                        "report them separately\n")
    assert not out.exists()


def test_a_run_without_results_config_is_compared_by_its_config_yaml(tmp_path):
    sweep = erm_seeds(tmp_path / "sweep", **{"trainer.max_epochs": 9})
    config = without_config(sweep / "erm-1")
    (sweep / "erm-1" / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(StudyError, match=r"\(trainer\.max_epochs: 1 vs 9\); report them separately$"):
        st.build_study([sweep], rounds=10)


def test_runs_whose_settings_cannot_be_compared_are_pooled_and_named_in_the_report(tmp_path):
    """A run that records no config (a results.json written by hand, no config.yaml) beside a run of
    its method and scenario: pooled, and report.md says which run could not be compared."""
    sweep = erm_seeds(tmp_path / "sweep", **{"optimizer.lr": 1e-3})
    without_config(sweep / "erm-1")
    study = st.build_study([sweep], rounds=10)
    assert [s.n for s in study.stats] == [2] and [r.path for r in study.uncompared] == [sweep / "erm-1"]
    st.write_report(study, tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    section = text.split("### Runs whose settings could not be compared\n", 1)[1].split("\n## ", 1)[0]
    assert [line for line in section.splitlines() if line.startswith("- ")] == [
        f"- `{sweep / 'erm-1'}` (erm, {study.runs[0].scenario.name})"]


def test_a_sweeps_jobs_that_left_no_status_json_are_listed_as_incomplete(tmp_path):
    """A sweep of four ERM seeds (its multirun.yaml): seeds 0 and 1 finished, seed 2's job died
    before it wrote status.json (its folder holds Hydra's record only), seed 3's never started (no
    folder). Both are listed with why, in the state ``python -m robustnlu.sweep status`` gives them;
    seed 2's W&B group is read from Hydra's config, seed 3 has none."""
    sweep = tmp_path / "sweep"
    _multirun(sweep, ["method=erm", "seed=0,1,2,3"])
    for seed in (0, 1, 2):
        job = sweep / f"erm-seed{seed}"
        if seed < 2:
            shutil.copytree(RECORD, job)
            results = json.loads((job / "results.json").read_text())
            (job / "results.json").write_text(json.dumps({**results, "seed": seed}))
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["method=erm", f"seed={seed}"]))
    (sweep / "erm-seed2" / ".hydra" / "config.yaml").write_text(
        "dataset: {name: snips}\ndrift: {kind: slot_value, partial: true}\nvalidation: {kind: ood}\n"
        "scenario: ${scenario_name:${dataset.name},${drift.kind},${oc.select:drift.partial,false},${validation.kind}}\n"
        "paths: {output_dir: '${hydra:runtime.output_dir}'}\nlogger: {wandb: {group: '${scenario}'}}\n")
    study = st.build_study([sweep], rounds=10)
    assert [s.n for s in study.stats] == [2]
    assert [(r.path, r.state, r.error) for r in study.incomplete] == [
        (sweep, "missing", "no job folder: never started (seed=3)"),
        (sweep / "erm-seed2", "interrupted", "started, its process is gone before status.json")]
    assert [incomplete_group(r) for r in study.incomplete] == [None, "snips-slot_value-partial-ood"]
    st.write_report(study, tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert "2 failed or unfinished runs." in text
    assert f"| `{sweep / 'erm-seed2'}` | interrupted | started, its process is gone before status.json |" in text


def test_runs_of_one_scenario_on_different_splits_are_one_error_line(tmp_path):
    """Runs whose scenario reads the same but whose SeqDrift split differs (other drift settings,
    another data file) are no models of one scenario: their mean would mix test sets. Two ERM
    seeds, so that no paired test reads both. The split key alone does not tell (it also names
    where the clustering came from): under another key the same utterances are two models."""
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        shutil.copytree(RECORD, sweep / f"erm-{seed}")
    other = sweep / "erm-1"
    results = json.loads((other / "results.json").read_text())
    key = results["drift"]["split_key"]
    results["drift"]["split_key"] = "0" * 64
    (other / "results.json").write_text(json.dumps({**results, "seed": 1}))
    assert main([str(sweep), "--out", str(tmp_path / "same"), "--rounds", "10"]) == 0
    assert read_csv(tmp_path / "same" / "table10_metrics.csv")[0]["n_models"] == "2"

    test = other / "predictions" / "test.jsonl.xz"
    test.write_bytes(lzma.compress(b"".join(lzma.decompress(test.read_bytes()).splitlines(keepends=True)[1:])))
    proc = run_cli([str(sweep), "--out", str(tmp_path / "out"), "--rounds", "10"], cwd=tmp_path,
                   module="robustnlu.report")
    assert proc.returncode == 2
    label = Run(other, results).scenario.name
    assert proc.stderr == (f"error: {other}: another split of scenario {label} than {sweep / 'erm-0'} "
                           f"(split key 000000000000 vs {key[:12]}, other valid or test utterances or clusters: "
                           "other drift or data settings); report them separately\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("inside", ["topk", "topk/predictions"])
def test_an_out_folder_inside_a_run_directory_is_refused_before_any_work(tmp_path, inside):
    sweep = erm_and_topk(tmp_path / "sweep")
    before = file_bytes(sweep)
    out = sweep / inside
    proc = run_cli([str(sweep), "--out", str(out)], cwd=tmp_path, module="robustnlu.report")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: --out: {out / st.FILES[0]} lies inside {sweep / 'topk'}, a run directory this "
                           "command reads: choose another --out\n")
    assert file_bytes(sweep) == before


def test_the_committed_erm_records_of_either_adamw_kernel_are_one_setting():
    """docs/studies.md's recipe pools the committed ERM records of seeds 0 and 1: seed 0's ran
    AdamW's loop (from before ``optimizer.fused``, read as ``false``), seed 1's the fused kernel
    (``auto``); the kernel, the same update to float rounding, may differ within a mean, as the
    seed does, and nothing else does."""
    records = REPO / "docs" / "reproduction" / "records"
    runs, incomplete = discover(sorted(records.glob("snips-*-full-*-erm-seed[01]")))
    assert (len(runs), incomplete) == (8, [])
    assert {run.results.get("optimizer_fused") for run in runs} == {None, True}  # seed 0's predates the field
    assert check_one_setting(runs) == []
    seed0, seed1 = (next(r for r in runs if r.path.name.endswith(f"-seed{s}")) for s in (0, 1))
    config = trained_config(seed1)
    assert other_settings(config, trained_config(seed0)) == {}
    lr = config["optimizer"]["lr"]
    assert other_settings({**config, "optimizer": {**config["optimizer"], "lr": lr * 10}}, trained_config(seed0)) == {
        "optimizer.lr": (lr, lr * 10)}
