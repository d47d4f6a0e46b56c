"""Stages 3-4 over run directories (robustnlu.efficiency.study) and the plot (robustnlu.efficiency.plot)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robustnlu.efficiency.curve import UNREACHABLE, PowerLaw, fit_power_law
from robustnlu.efficiency.report import write_efficiency
from robustnlu.efficiency.study import EfficiencyError, build_efficiency, load_points, main
from robustnlu.errors import DataError

TRAIN_SIZE = 23032
PERCENTS = (0, 2, 12, 36, 100)  # the 0% (zero-shot) point plus 4 fitted percentages
ZERO_SHOT = 40.0
#: the curves the synthetic runs lie on exactly (per label and seed); "roberta" levels off at 88 %
TRUE = {
    "bert": {0: PowerLaw(-27.26, 0.35, 97.79), 1: PowerLaw(-25.0, 0.38, 97.0)},
    "roberta": {0: PowerLaw(-30.0, 0.30, 88.0), 1: PowerLaw(-28.0, 0.32, 87.5)},
}


def _run(path: Path, *, percent, seed, em, mode="joint", target="weather", forgetting=None):
    path.mkdir(parents=True)
    results = {"seed": seed, "method": "erm",
               "metrics": {"test": {"frame_acc": em / 100, "intent_acc": 0.99}, "valid": {"frame_acc": 0.5}},
               "efficiency": {"target": target, "percent": percent, "mode": mode,
                              "subset_size": int(round(percent / 100 * TRAIN_SIZE)),
                              "target_train_size": TRAIN_SIZE, "forgetting": forgetting}}
    (path / "results.json").write_text(json.dumps(results))
    (path / "checkpoints").mkdir()


def _sweep(root: Path, label: str, mode: str = "joint") -> Path:
    for seed, curve in TRUE[label].items():
        for p in PERCENTS:
            em = ZERO_SHOT if p == 0 else curve(p)
            forgetting = None
            if mode == "adapt":
                drop = {"frame_acc": 0.001 * p + 0.01 * seed}
                forgetting = {"before": {"frame_acc": 0.9}, "after": {"frame_acc": 0.9 - drop["frame_acc"]},
                              "drop": drop}
            _run(root / f"percent={p},seed={seed}", percent=p, seed=seed, em=em, mode=mode, forgetting=forgetting)
    # not an efficiency run (skipped) and a failed run without results.json (ignored)
    other = root / "plain"
    other.mkdir()
    (other / "results.json").write_text(json.dumps({"seed": 0, "metrics": {"test": {"frame_acc": 0.5}}}))
    (root / "failed").mkdir()
    (root / "failed" / "status.json").write_text('{"state": "failed"}')
    return root


@pytest.fixture
def sweeps(tmp_path):
    return _sweep(tmp_path / "bert_sweep", "bert"), _sweep(tmp_path / "roberta_sweep", "roberta", mode="adapt")


def test_load_points_reads_efficiency_runs_only(sweeps):
    runs = load_points([sweeps[0]])
    assert len(runs) == len(PERCENTS) * 2
    assert [(r.percent, r.seed) for r in runs] == [(p, s) for p in PERCENTS for s in (0, 1)]
    r = runs[-1]
    assert r.target == "weather" and r.mode == "joint" and r.target_train_size == TRAIN_SIZE
    assert r.metric == pytest.approx(TRUE["bert"][1](100.0))  # frame_acc in %
    assert runs[0].metric == pytest.approx(ZERO_SHOT)


def test_bad_json_names_the_file(tmp_path):
    bad = tmp_path / "sweep" / "run"
    bad.mkdir(parents=True)
    (bad / "results.json").write_text('{"seed": 0,')
    with pytest.raises(DataError, match=r"run/results.json:1: invalid JSON"):
        load_points([tmp_path / "sweep"])
    (bad / "results.json").write_text(json.dumps({"seed": 0, "efficiency": {"target": "weather", "percent": 5},
                                                  "metrics": {"test": {}}}))
    with pytest.raises(DataError, match="metrics.test.frame_acc"):
        load_points([tmp_path / "sweep"])


def test_study_end_to_end(sweeps, tmp_path):
    study = build_efficiency([("bert", [sweeps[0]]), ("roberta", [sweeps[1]])], reach=(80, 90), at=(10, 50))
    out = tmp_path / "out"
    written = write_efficiency(study, out)
    assert sorted(p.name for p in written) == ["efficiency.json", "efficiency.md", "efficiency.png"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary files left

    data = json.loads((out / "efficiency.json").read_text())
    assert [c["label"] for c in data["curves"]] == ["bert", "roberta"]
    for c in data["curves"]:
        true = TRUE[c["label"]]
        assert c["target"] == "weather" and c["target_train_size"] == TRAIN_SIZE
        got = sorted((p["percent"], p["seed"], p["metric"]) for p in c["points"])
        want = sorted((p, s, ZERO_SHOT if p == 0 else true[s](p)) for p in PERCENTS for s in true)
        assert [g[:2] for g in got] == [w[:2] for w in want]
        assert [g[2] for g in got] == pytest.approx([w[2] for w in want])
        assert c["fitted_range"] == [2, 100]  # the 0% point is not fitted
        # each seed's points lie on its curve exactly: the per-seed fits recover θ
        for seed, theta in c["seed_fits"].items():
            t = true[int(seed)]
            assert (theta["a"], theta["b"], theta["c"]) == pytest.approx((t.a, t.b, t.c), rel=1e-5)
        # the pooled fit is the fit on both seeds' x > 0 points, between the two seeds' curves
        xs = np.array([p for p in PERCENTS if p > 0] * 2, dtype=float)
        ys = np.concatenate([true[s](np.array([p for p in PERCENTS if p > 0], dtype=float)) for s in (0, 1)])
        ref = fit_power_law(xs, ys)
        assert (c["fit"]["a"], c["fit"]["b"], c["fit"]["c"]) == pytest.approx((ref.a, ref.b, ref.c), rel=1e-6)
        pooled = PowerLaw(c["fit"]["a"], c["fit"]["b"], c["fit"]["c"])
        for x in (2.0, 12.0, 100.0):
            assert min(true[0](x), true[1](x)) - 0.5 <= pooled(x) <= max(true[0](x), true[1](x)) + 0.5
        queries = {(q["kind"], q["asked"]): q for q in c["queries"]}
        assert len(queries) == 4
        at10 = queries[("metric_at_percent", 10.0)]
        assert at10["answer"] == pytest.approx(pooled(10.0)) and at10["samples"] == 2303
        r80 = queries[("percent_for_metric", 80.0)]
        assert r80["answer"] == pytest.approx(pooled.inverse(80.0))
        assert r80["samples"] == math.ceil(r80["answer"] / 100 * TRAIN_SIZE)
    bert, roberta = data["curves"]
    assert bert["queries"][1]["flags"] == [] and bert["forgetting"] == {} and bert["mode"] == "joint"
    r90 = roberta["queries"][1]  # roberta levels off below 90 %
    assert r90["flags"] == [UNREACHABLE] and r90["answer"] is None and r90["samples"] is None
    assert roberta["mode"] == "adapt"
    assert roberta["forgetting"]["12"]["frame_acc"] == pytest.approx(0.012 + 0.005)  # mean over seeds 0, 1

    md = (out / "efficiency.md").read_text()
    b80 = next(q for q in bert["queries"] if q["asked"] == 80)
    assert (f"Model bert requires {b80['answer']:.2f}% ({b80['samples']} samples) of target domain weather "
            f"to reach 80% exact match.") in md
    assert "Model roberta does not reach 90% exact match on target domain weather" in md
    assert "With 10% (2303 samples) of target domain weather, model bert reaches" in md
    assert "| 0 | 40.00 | 40.00 | 40.00 |" in md  # the points table: percent × seeds

    png = (out / "efficiency.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(out / "efficiency.png")
    assert img.shape[0] >= 400 and img.shape[1] >= 600 and img.std() > 0.01  # not a blank canvas


def _gids(fig, prefix):
    return sorted(a.get_gid() for a in fig.findobj(lambda a: (a.get_gid() or "").startswith(prefix)))


def test_figure_content_per_label(sweeps):
    from robustnlu.efficiency.plot import efficiency_figure

    study = build_efficiency([("bert", [sweeps[0]]), ("roberta", [sweeps[1]])], reach=(80, 90), at=(10, 50))
    fig = efficiency_figure([c.data for c in study.curves])
    ax = fig.axes[0]
    assert _gids(fig, "bert/") == ["bert/band", "bert/fit", "bert/points/seed0", "bert/points/seed1",
                                   "bert/query/metric_at_percent/10", "bert/query/metric_at_percent/50",
                                   "bert/query/percent_for_metric/80", "bert/query/percent_for_metric/90"]
    # roberta: no guide line for the unreachable 90 %
    assert "roberta/query/percent_for_metric/90" not in _gids(fig, "roberta/")
    assert len(_gids(fig, "roberta/query/")) == 3
    by_gid = {a.get_gid(): a for a in fig.findobj(lambda a: a.get_gid() is not None)}
    # per-seed points, the 0% point included as a marker; the fitted curve starts above 0
    offsets = by_gid["bert/points/seed0"].get_offsets()
    assert sorted(offsets[:, 0].tolist()) == list(PERCENTS)
    fit_x = by_gid["bert/fit"].get_xdata()
    assert fit_x.min() > 0 and fit_x.max() == 100
    assert by_gid["bert/fit"].get_color() != by_gid["roberta/fit"].get_color()  # one colour per label
    guide = by_gid["bert/query/percent_for_metric/80"]
    assert guide.get_linestyle() == ":" and guide.get_color() == "red"
    assert guide.get_xdata()[1] == pytest.approx(study.curves[0].data.fit.inverse(80))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("bert: h(x)") for t in legend) and any(t.startswith("roberta: h(x)") for t in legend)


def test_single_seed_has_no_band_and_too_few_points_no_fit(tmp_path):
    from robustnlu.efficiency.plot import efficiency_figure

    for p in (0, 2, 12, 100):
        _run(tmp_path / "one" / f"p{p}", percent=p, seed=0, em=50 + p / 4)
    for p in (0, 12, 100):
        _run(tmp_path / "two" / f"p{p}", percent=p, seed=0, em=50 + p / 4)
    study = build_efficiency([("one", [tmp_path / "one"]), ("two", [tmp_path / "two"])])
    one, two = study.curves
    assert one.data.fit is not None and len(one.data.seed_fits) == 1
    assert two.data.fit is None and two.data.answers == () and any(">= 3 distinct" in n for n in two.notes)
    fig = efficiency_figure([c.data for c in study.curves])
    assert "one/band" not in _gids(fig, "one/") and "one/fit" in _gids(fig, "one/")
    assert _gids(fig, "two/") == ["two/points/seed0"]


def test_user_errors(sweeps, tmp_path):
    with pytest.raises(EfficiencyError, match="no efficiency runs"):
        build_efficiency([("x", [sweeps[0] / "plain"])])  # results.json without "efficiency"
    with pytest.raises(EfficiencyError, match="mixes modes"):
        build_efficiency([("both", [sweeps[0], sweeps[1]])])
    dup = tmp_path / "dup"
    _run(dup / "a", percent=12, seed=0, em=80)
    _run(dup / "b", percent=12, seed=0, em=81)
    with pytest.raises(EfficiencyError, match="2 runs at 12% with seed 0"):
        build_efficiency([("dup", [dup])])
    with pytest.raises(EfficiencyError, match="x > 0"):
        build_efficiency([("bert", [sweeps[0]])], at=(0,))


def test_cli_writes_the_study_and_pools_repeated_labels(sweeps, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(sweeps[0]), str(sweeps[1]), "--out", str(out), "--label", "bert", "roberta",
                 "--reach", "80", "--at", "10"]) == 0
    printed = capsys.readouterr().out
    assert "Model bert requires" in printed and "2 curve(s) from 20 runs" in printed
    data = json.loads((out / "efficiency.json").read_text())
    assert [len(c["queries"]) for c in data["curves"]] == [2, 2]
    # two sweeps under one label form one curve: joint + adapt cannot be pooled
    assert main([str(sweeps[0]), str(sweeps[1]), "--out", str(tmp_path / "o2"), "--label", "m", "m"]) == 2
    assert "mixes modes" in capsys.readouterr().err and not (tmp_path / "o2").exists()


def test_cli_exit_2_for_a_directory_without_efficiency_runs(tmp_path):
    empty = tmp_path / "empty"
    (empty / "run").mkdir(parents=True)
    (empty / "run" / "results.json").write_text(json.dumps({"seed": 0, "metrics": {"test": {"frame_acc": 0.5}}}))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "robustnlu.efficiency.study", str(empty), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "no efficiency runs" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


def test_cli_an_out_the_system_refuses_to_create_is_one_error_line(sweeps, capsys):
    """/proc takes no new folder (the check before the work cannot know): the write's error, one line."""
    assert main([str(sweeps[0]), "--out", "/proc/robustnlu-test"]) == 2
    assert capsys.readouterr().err == "error: --out: cannot write /proc/robustnlu-test: No such file or directory\n"


def test_cli_label_count_mismatch(sweeps, tmp_path, capsys):
    assert main([str(sweeps[0]), "--out", str(tmp_path / "o"), "--label", "a", "b"]) == 2
    assert "--label" in capsys.readouterr().err and not (tmp_path / "o").exists()
