"""Hyper-parameter search through our Optuna sweeper (hydra_plugins/robustnlu_plugins/;
conf/hparams_search/optuna.yaml, robustnlu/hpo.py; core paper section 5 "Hyperparameters", App. C,
Table 9): every method's search is λ, γ and the space its class declares."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from hydra_plugins.robustnlu_plugins.optuna_sweeper import (
    make_sqlite_folder,
    nothing_to_search,
    numbered_runs,
    search_space,
    sweep_overrides,
)
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from integration_helpers import (CONF, FAST, METHOD_NAMES, METHODS, cli_env, compose_config, jsonl_overrides,
                                 run_cli, write_snips_sample_jsonl)
from robustnlu import hpo
from robustnlu.analysis import study as st
from robustnlu.analysis.runs import Incomplete, StudyError
from robustnlu.analysis.searches import BEST_PARAMS, write_best_params
from robustnlu.errors import ConfigError
from robustnlu.report import main as report_main
from robustnlu.rundir import RunDir
from robustnlu.scenario import Scenario
from robustnlu.runlock import LOCK_NAME
from robustnlu.train import run

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # add_trial

LAMBDA_GAMMA = {"optimizer.lr": FloatDistribution(1e-5, 1e-4, log=True),             # Table 9 λ
                "model.intent_loss_scale": FloatDistribution(1e-2, 10.0, log=True)}  # Table 9 γ


def compose_search(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


@pytest.mark.parametrize("method", METHODS)
def test_search_config_composes_with_each_method_and_its_params_parse(method):
    cfg = compose_search(["+experiment=snips_slot_value", "drift.partial=true", "hparams_search=optuna",
                          f"method={method}"])
    assert cfg.hydra.runtime.choices.method == method
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_ == "hydra_plugins.robustnlu_plugins.optuna_sweeper.OptunaSweeper"
    assert sweeper.direction == "maximize"
    assert sweeper.sampler._target_ == "optuna.samplers.TPESampler" and sweeper.sampler.seed is not None
    assert sweeper.study_name == f"snips-slot_value-partial-iid-{METHOD_NAMES.get(method, method)}"
    assert sweeper.storage == "sqlite:///outputs/hpo/optuna.db"
    assert sweeper.n_trials == 8 and sweeper.n_jobs == 1 and sweeper.max_failure_rate > 0
    overrides = sweep_overrides(sweeper.params)  # the method's declared space: under params.method
    space, fixed = search_space(overrides)
    assert not fixed and list(space) == [o.split("=", 1)[0] for o in overrides]
    assert {k: space[k] for k in LAMBDA_GAMMA} == LAMBDA_GAMMA
    for key in space:  # every searched key is a key of the composed training config
        assert OmegaConf.select(cfg, key, default="<missing>") != "<missing>", key


def test_method_specific_search_spaces_are_table_9():
    def space(method):
        params = compose_search(["hparams_search=optuna", f"method={method}"]).hydra.sweeper.params
        return search_space(sweep_overrides(params))[0]

    assert space("erm") == LAMBDA_GAMMA
    assert space("topk")["method.k"] == IntDistribution(1, 16, log=True)
    assert space("topk_group")["method.k"] == IntDistribution(2, 16, log=True)
    for m in ("topk_ae", "topk_ae_prob", "topk_ae_bin"):
        s = space(m)
        assert s["method.k"] == IntDistribution(2, 16, log=True)
        assert s["method.ae_lr"] == FloatDistribution(1e-4, 1e-3, log=True)
        assert s["method.groups.beta"] == FloatDistribution(0.1, 1.0, log=True)
        assert s["method.groups.latent_groups"] == CategoricalDistribution((128, 256, 512))
    assert space("group_dro")["method.step_size"] == FloatDistribution(1e-4, 1.0, log=True)
    assert space("group_dro")["method.decay"] == CategoricalDistribution((1.0, 0.99))  # Table 9 "geometric decay"
    assert space("topic_cvar")["method.alpha"] == FloatDistribution(1e-4, 0.5)
    assert space("topic_cvar")["method.ema_step"] == FloatDistribution(1e-4, 0.5, log=True)
    # not in Table 9: the grids of Michel's thesis (5.4.4, 6.2.2, 5.4.6)
    assert space("nonparam_kl") == {**LAMBDA_GAMMA, "method.kappa": CategoricalDistribution((0.01, 0.1, 1.0, 10.0))}
    assert space("rpdro") == {**LAMBDA_GAMMA, "method.tau": CategoricalDistribution((0.001, 0.01, 0.1, 1.0))}
    assert space("pdro") == {**LAMBDA_GAMMA, "method.temperature": CategoricalDistribution((0.1, 0.01, 0.001)),
                             "method.window": CategoricalDistribution((1, 5, 10)),
                             "method.adversary_lr": CategoricalDistribution((1e-5, 1e-4, 1e-3))}
    # the order the seeded sampler draws the values in: the proposals of a study depend on it
    assert list(space("topk_ae")) == ["optimizer.lr", "model.intent_loss_scale", "method.k", "method.ae_lr",
                                      "method.groups.beta", "method.groups.latent_groups"]


def test_the_value_a_run_returns_is_its_optimized_metric():
    from robustnlu.rundir import optimized_value

    results = {"metrics": {"valid": {"combined": 0.5, "semer": 0.25, "group/3/combined": 0.1}, "test": {"combined": 0.4}}}
    assert optimized_value(results, "valid/combined") == 0.5
    assert optimized_value(results, "valid/semer") == 0.25
    assert optimized_value(results, "test/combined") == 0.4
    with pytest.raises(ConfigError, match=r"^optimized_metric=valid/f1: the run has no valid metric 'f1' \(combined, semer\)$"):
        optimized_value(results, "valid/f1")


def test_search_space_syntax_of_the_sweeper():
    """Hydra's sweep syntax as Optuna distributions (hydra_plugins/robustnlu_plugins):
    range's stop is excluded (1, 4, 7; 10, 7, 4), a plain override is fixed and fixes a searched
    key given before it (the command line after hydra.sweeper.params)."""
    space, fixed = search_space([
        "a=range(1,10,3)", "b=range(0.0,1.0,0.25)", "c=range(10,1,-3)", "d=choice(x,y)",
        "e=interval(0,1)", "f=int(interval(1,16))", "g=tag(log, interval(1e-5, 1e-4))",
        "optimizer.lr=tag(log, interval(1e-5, 1e-4))", "seed=3", "optimizer.lr=5e-3",
        "~callbacks.progress_bar", "+experiment=snips"])
    assert space == {"a": IntDistribution(1, 7, step=3), "b": FloatDistribution(0.0, 0.75, step=0.25),
                     "c": IntDistribution(4, 10, step=3), "d": CategoricalDistribution(("x", "y")),
                     "e": FloatDistribution(0.0, 1.0), "f": IntDistribution(1, 16),
                     "g": FloatDistribution(1e-5, 1e-4, log=True)}
    assert fixed == {"seed": "seed=3", "optimizer.lr": "optimizer.lr=5e-3",
                     "~callbacks.progress_bar": "~callbacks.progress_bar", "+experiment": "+experiment=snips"}
    for bad in ("g=glob(*)", "g=range(1,1)"):
        with pytest.raises(ConfigError, match=r"^g=(glob|range)"):
            search_space([bad])


@pytest.mark.parametrize("setting,line", [
    ("hydra.sweeper.direction=up", "hydra.sweeper.direction must be one of ('maximize', 'minimize'), got 'up'"),
    ("optimizer.lr=interval(1e-3,1e-5)",
     "optimizer.lr=interval(1e-3,1e-5): `low <= high` must hold, but got (low=0.001, high=1e-05)."),
    ("optimizer.lr=tag(log,interval(0,1e-3))",
     "optimizer.lr=tag(log,interval(0,1e-3)): `low > 0` must hold for `log=True`, but got (low=0.0, high=0.001)."),
    ("hydra.sweeper.sampler=cmaes",
     "hydra.sweeper.sampler must be an Optuna sampler (hydra/sweeper/sampler=tpe|random, "
     "or hydra.sweeper.sampler._target_=<its class>), got 'cmaes'"),
    ("hydra.sweeper.storage=notaurl",
     "hydra.sweeper.storage: cannot open 'notaurl': ArgumentError: "
     "Could not parse SQLAlchemy URL from given URL string"),
])
def test_a_bad_sweeper_setting_is_one_error_line(tmp_path, setting, line):
    """~5 s each: checked before the study is created or a trial runs: nothing is made, not even the
    storage's folder."""
    proc = run_cli(["-m", "hparams_search=optuna", "method=erm", setting,
                    f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: {line}"]
    assert not (tmp_path / "hpo").exists() and not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("top", ["0", "-1"])
def test_the_driver_refuses_a_top_of_less_than_one_setting(tmp_path, top):
    proc = run_cli(["--no-search", "--top", top, "method=topk", f"paths.hpo_dir={tmp_path}/hpo"], cwd=tmp_path,
                   module="robustnlu.hpo")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: python -m robustnlu.hpo: --top: the number of settings to retrain must be >= 1, got {top} "
        "(see python -m robustnlu.hpo --help)"]
    assert not (tmp_path / "hpo").exists()


def test_the_driver_reading_a_storage_it_cannot_open_is_one_error_line(tmp_path):
    proc = run_cli(["--no-search", "method=topk", "hydra.sweeper.storage=postgresql://u@localhost:1/db"], cwd=tmp_path,
                   module="robustnlu.hpo")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: hydra.sweeper.storage: cannot open 'postgresql://u@localhost:1/db': ImportError: Failed to import DB "
        "access module for the specified storage URL. Please install appropriate one."]


def test_a_search_with_nothing_left_to_search_is_one_error_line(tmp_path):
    """~5 s: ERM declares no search space; with λ and γ fixed on the command line the driver's
    search would run n_trials copies of one setting: refused before the study is created."""
    proc = run_cli(["method=erm", "optimizer.lr=5e-5", "model.intent_loss_scale=1", f"paths.hpo_dir={tmp_path}/hpo",
                    f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path, module="robustnlu.hpo")
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "error: hydra.sweeper.params: nothing to search: method declares no search space; "
        "the command line fixes optimizer.lr, model.intent_loss_scale"]
    assert not (tmp_path / "hpo").exists() and not (tmp_path / "sweep").exists()


def test_the_folder_of_a_sqlite_storage_is_made_and_no_other(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_sqlite_folder(f"sqlite:///{tmp_path}/a/b/optuna.db")  # absolute
    make_sqlite_folder("sqlite:///rel/hpo/optuna.db")  # relative to the current folder
    make_sqlite_folder("sqlite:///:memory:")
    make_sqlite_folder("postgresql://user@host/not_a_folder")
    make_sqlite_folder(None)  # Optuna's in-memory storage
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/b", "rel", "rel/hpo"]


def test_what_leaves_a_search_empty_is_named():
    params = {"optimizer.lr": "tag(log, interval(1e-5, 1e-4))", "method": {"k": "tag(log, int(interval(1, 16)))"}}
    assert nothing_to_search(params, search_space(["optimizer.lr=5e-5", "method.k=4"])[1]) == (
        "hydra.sweeper.params: nothing to search: the command line fixes optimizer.lr, method.k")
    assert nothing_to_search({}, {}) == "hydra.sweeper.params: nothing to search: no sweep given"


def test_a_method_whose_search_space_cannot_be_read_is_one_error_line(tmp_path):
    """~5 s: the search space is read from the method's class (``${declared_search_space:method}``)
    when the sweeper is built: a class that does not import ends there, as the schema says it."""
    proc = run_cli(["-m", "hparams_search=optuna", "method=topk", "method._target_=no.Such",
                    f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "error: method._target_: cannot be imported (No module named 'no') (got no.Such)"]
    assert not (tmp_path / "sweep").exists()


def test_driver_overrides():
    assert hpo.search_overrides(["+experiment=snips", "method=topk"]) == [
        "hparams_search=optuna", "+experiment=snips", "method=topk"]
    # a search config of the user's own (conf/hparams_search/ on their hydra.searchpath) is kept
    assert hpo.search_overrides(["hparams_search=mine", "method=topk"]) == ["hparams_search=mine", "method=topk"]
    with pytest.raises(ConfigError, match="exactly one method"):
        hpo.search_overrides(["+experiment=snips"])
    assert hpo.retrain_overrides(["method=topk", "hparams_search=optuna", "seed=3", "paths.hpo_dir=x",
                                  "hydra.sweeper.n_trials=3", "hydra.sweep.dir=d", "validation=ood"]) == [
        "method=topk", "validation=ood"]


def _trial(value, state=TrialState.COMPLETE, **params):
    dists = {"optimizer.lr": FloatDistribution(1e-5, 1e-4, log=True), "method.k": IntDistribution(1, 16, log=True)}
    params = {"optimizer.lr": 5e-5, "method.k": 4, **params}
    return create_trial(state=state, value=value if state == TrialState.COMPLETE else None,
                        params=params, distributions=dists)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_top2_takes_the_two_best_completed_distinct_settings(tmp_path, direction):
    study = optuna.create_study(study_name="s", direction=direction,
                                storage=f"sqlite:///{tmp_path}/optuna.db")
    best = 0.99 if direction == "maximize" else 0.01
    study.add_trial(_trial(0.5, **{"method.k": 1}))                           # 0
    study.add_trial(_trial(None, TrialState.FAIL, **{"method.k": 2}))         # 1: failed
    study.add_trial(_trial(None, TrialState.PRUNED, **{"method.k": 3}))       # 2: pruned
    study.add_trial(_trial(0.8, **{"method.k": 5}))                           # 3
    study.add_trial(_trial(0.8, **{"method.k": 5}))                           # 4: same point again
    study.add_trial(_trial(0.7, **{"method.k": 6}))                           # 5
    study.add_trial(_trial(best, **{"method.k": 7}))                          # 6
    loaded = hpo.load_study("s", f"sqlite:///{tmp_path}/optuna.db")
    top = hpo.top_settings(loaded, 2)
    if direction == "maximize":
        assert [t["trial"] for t in top] == [6, 3]  # 4 repeats 3's point: counted once
        assert top[1]["params"] == {"optimizer.lr": 5e-5, "method.k": 5} and top[1]["value"] == 0.8
    else:
        assert [t["trial"] for t in top] == [6, 0]
    assert hpo.load_study("other", f"sqlite:///{tmp_path}/optuna.db") is None


def test_top2_of_a_study_without_completed_trials_is_empty():
    study = optuna.create_study(direction="maximize")
    study.add_trial(_trial(None, TrialState.FAIL))
    assert hpo.top_settings(study) == []


@pytest.fixture(scope="module")
def continued_search(tmp_path_factory):
    """~25 s: a search of 3 one-epoch tiny-encoder trials in one Hydra multirun, copied as it is
    then (``first``: for the tests of one search), then the same command again with 1 trial into
    the same sweep dir (how a user continues a search, or one that was stopped)."""
    root = tmp_path_factory.mktemp("continued")
    data = write_snips_sample_jsonl(root / "data", n_train=48, n_eval=16)
    fast = [o for o in FAST if not o.startswith(("optimizer.lr", "trainer.max_epochs"))]  # lr is searched
    scenario = [*jsonl_overrides(data), *fast, "trainer.max_epochs=1"]
    sweep = root / "sweep"
    command = ["-m", "hparams_search=optuna", "method=topk", *scenario, f"paths.hpo_dir={root}/hpo",
               f"hydra.sweep.dir={sweep}"]
    first = tmp_path_factory.mktemp("first")
    for n_trials in (3, 1):
        proc = run_cli([*command, f"hydra.sweeper.n_trials={n_trials}"], cwd=root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        if n_trials == 3:  # the sweep dir and the study's storage (hpo/) as the first search left them
            for folder in ("sweep", "hpo"):
                shutil.copytree(root / folder, first / folder)
    study = optuna.load_study(study_name="jsonl-topk", storage=f"sqlite:///{root}/hpo/optuna.db")
    return {"root": root, "sweep": sweep, "study": study, "command": command, "scenario": scenario, "first": first}


def test_optuna_sweep_of_3_trials_runs_through_hydra_and_writes_the_best_parameters(continued_search, tmp_path):
    """3 one-epoch tiny-encoder trials in one Hydra multirun (the `continued_search` fixture's first, as it
    left its sweep dir and storage), then the driver reads the study back (no search, no
    retraining) and writes best_params.json."""
    first = continued_search["first"]
    sweep = first / "sweep"
    storage = f"sqlite:///{first}/hpo/optuna.db"
    study = optuna.load_study(study_name="jsonl-topk", storage=storage)
    assert len(study.trials) == 3
    assert all(t.state == TrialState.COMPLETE for t in study.trials)
    assert all(set(t.params) == {"optimizer.lr", "model.intent_loss_scale", "method.k"} for t in study.trials)
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    assert set(results.best_params) == {"optimizer.lr", "model.intent_loss_scale", "method.k"}
    assert results.best_value == pytest.approx(study.best_value) and results.optimized_metric == "valid/combined"
    for trial in study.trials:  # the value told is the run's optimized_metric (conf/config.yaml)
        run = json.loads((sweep / str(trial.number) / "results.json").read_text())
        assert run["metrics"]["valid"]["combined"] == pytest.approx(trial.value)

    out = tmp_path / "driver"  # in this process: what the driver writes, not how its command line ends
    assert hpo.main(["--no-search", "--no-retrain", "method=topk", *continued_search["scenario"],
                     f"paths.hpo_dir={first}/hpo", f"hydra.sweep.dir={out}"]) == 0
    report = json.loads((out / "best_params.json").read_text())
    assert report["best_params"] == study.best_params and report["n_complete"] == 3
    assert report["optimized_metric"] == "valid/combined"
    assert [c["trial"] for c in report["chosen"]] == [t["trial"] for t in hpo.top_settings(study)]
    assert report["retrain_seed"] == 1 and "method=topk" in report["overrides"]


def test_a_search_continued_into_its_sweep_dir_keeps_each_trials_run_in_the_trials_folder(continued_search):
    sweep, study = continued_search["sweep"], continued_search["study"]
    assert [t.number for t in study.trials] == [0, 1, 2, 3]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0", "1", "2", "3"]
    for trial in study.trials:  # each folder holds its own trial's run, none replaced by a later one
        run = json.loads((sweep / str(trial.number) / "results.json").read_text())
        assert run["config"]["method"]["k"] == trial.params["method.k"]
        assert run["config"]["optimizer"]["lr"] == pytest.approx(trial.params["optimizer.lr"])
        assert run["metrics"]["valid"]["combined"] == pytest.approx(trial.value)


@pytest.fixture(scope="module")
def protocol(continued_search, tmp_path_factory):
    """~5 s: the HPO protocol's sweep dir as `python -m robustnlu.hpo` leaves it, from the
    `continued_search` fixture's 4 trials: a copy of its sweep dir; in it the 2 best settings
    retrained with seed 1 (in this process, with the driver's overrides: the scenario, the method,
    seed=1 and the setting) under retrain/top<rank>_seed1; best_params.json written by the
    driver's writer, naming the copy's trial runs."""
    sweep = tmp_path_factory.mktemp("protocol") / "sweep"
    shutil.copytree(continued_search["sweep"], sweep)
    chosen = hpo.top_settings(continued_search["study"], 2)
    for rank, setting in enumerate(chosen, 1):
        assert Path(setting["run_dir"]) == continued_search["sweep"] / str(setting["trial"])  # as the sweeper recorded it
        setting["run_dir"] = str(sweep / str(setting["trial"]))
        setting["retrain_dir"] = str(sweep / "retrain" / f"top{rank}_seed1")
        run(compose_config([*hpo.retrain_overrides(["method=topk", *continued_search["scenario"]]), "seed=1",
                            *(f"{k}={v}" for k, v in setting["params"].items())], Path(setting["retrain_dir"])))
    write_best_params(sweep, {"study_name": "jsonl-topk", "retrain_seed": 1, "chosen": chosen})
    return sweep


def chosen_runs(sweep: Path) -> list[Path]:
    """The 4 run dirs best_params.json names: each chosen trial's run, then its retraining."""
    record = json.loads((sweep / BEST_PARAMS).read_text())
    return [sweep / s[key] for s in record["chosen"] for key in ("run_dir", "retrain_dir")]


def test_best_params_names_the_chosen_runs_relative_to_the_sweep_dir(protocol):
    record = json.loads((protocol / BEST_PARAMS).read_text())
    assert [s["retrain_dir"] for s in record["chosen"]] == ["retrain/top1_seed1", "retrain/top2_seed1"]
    assert [s["run_dir"] for s in record["chosen"]] == [str(s["trial"]) for s in record["chosen"]]


def test_the_report_of_an_hpo_search_pools_its_2_chosen_settings_times_2_seeds(protocol, tmp_path, capsys):
    """Core paper section 5: the models are the 2 best settings × 2 seeds, which differ in the
    searched keys; the other 2 trials of the search are left out, and report.md and the console
    summary say so."""
    study = st.build_study([protocol], rounds=10)
    (stats,) = study.stats
    models = chosen_runs(protocol)
    assert stats.method == "topk" and stats.n == 4 and sorted(r.path for r in stats.runs) == sorted(models)
    assert sorted(r.seed for r in stats.runs) == [0, 0, 1, 1] and study.incomplete == []
    results = [json.loads((m / "results.json").read_text()) for m in models]
    lrs = {r["config"]["optimizer"]["lr"] for r in results}
    assert len(lrs) == 2  # two settings, each trained twice
    combined = [100 * r["metrics"]["test"]["combined"] for r in results]
    assert stats.stats["combined"][0] == pytest.approx(sum(combined) / 4)
    assert report_main([str(protocol), "--out", str(tmp_path), "--rounds", "10"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "1 HPO search(es): pooled only the runs each one's best_params.json chose; 2 other runs below them "
        "(trials not chosen) left out")
    rows = list(csv.DictReader((tmp_path / "table10_metrics.csv").open()))
    assert [(row["method"], row["n_models"]) for row in rows] == [("topk", "4")]
    assert float(rows[0]["combined_mean"]) == pytest.approx(sum(combined) / 4, abs=1e-3)
    trials = json.loads((protocol / BEST_PARAMS).read_text())["chosen"]
    line = (f"- `{protocol}` (study `jsonl-topk`): chose trial {trials[0]['trial']}, trial {trials[1]['trial']} "
            "(each also retrained); 2 other runs below it (trials not chosen) left out")
    assert line in (tmp_path / "report.md").read_text().splitlines()


def test_a_chosen_run_of_an_hpo_search_with_another_unsearched_setting_is_one_error_line(protocol, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    shutil.copytree(protocol, sweep)  # best_params.json names its runs relative to it: the copy's
    first, _, _, retrained = chosen_runs(sweep)
    results = json.loads((retrained / "results.json").read_text())
    results["config"]["trainer"]["max_epochs"] = 2
    (retrained / "results.json").write_text(json.dumps(results))
    assert report_main([str(sweep), "--out", str(tmp_path / "out"), "--rounds", "10"]) == 2
    assert capsys.readouterr().err == (
        f"error: {retrained}: topk in scenario {Scenario.of_results(results).name} trained with other settings than {first} "
        "(trainer.max_epochs: 1 vs 2); report them separately\n")
    assert not (tmp_path / "out").exists()


def test_a_report_of_an_optuna_searchs_trials_without_best_params_says_how_to_choose_them(continued_search, tmp_path,
                                                                                         capsys):
    """A search run alone (``python -m robustnlu -m hparams_search=optuna``), or one whose driver
    stopped before it wrote best_params.json: its trials differ in the searched keys, so no mean
    pools them; the one error line says how to choose and retrain its 2 best settings."""
    sweep = tmp_path / "sweep"
    shutil.copytree(continued_search["sweep"], sweep)
    assert not (sweep / BEST_PARAMS).exists()
    assert report_main([str(sweep), "--out", str(tmp_path / "out"), "--rounds", "10"]) == 2
    err = capsys.readouterr().err
    scenario = Scenario.of_results(json.loads((sweep / "0" / "results.json").read_text())).name
    assert err.startswith(f"error: {sweep / '1'}: topk in scenario {scenario} trained with other settings than "
                          f"{sweep / '0'} (") and err.count("\n") == 1
    assert err.endswith(f"): trials of the Optuna search {sweep}, which has no {BEST_PARAMS}: choose and retrain its 2 "
                        "best settings with python -m robustnlu.hpo --no-search <the search's overrides> "
                        f"hydra.sweep.dir={sweep}, then report {sweep}\n")
    assert not (tmp_path / "out").exists()


def test_a_chosen_run_that_is_missing_is_listed_as_incomplete(protocol, tmp_path):
    """The search's retraining not done (or still running): its chosen settings' trials are the
    models, and the missing retraining is listed, not passed over."""
    sweep = tmp_path / "sweep"
    shutil.copytree(protocol, sweep)
    *_, retrained = chosen_runs(sweep)
    shutil.rmtree(retrained)
    study = st.build_study([sweep], rounds=10)
    assert [s.n for s in study.stats] == [3]
    trial = json.loads((sweep / BEST_PARAMS).read_text())["chosen"][1]["trial"]
    assert study.incomplete == [Incomplete(retrained, "missing", f"trial {trial} retrained chosen by "
                                           f"{sweep / BEST_PARAMS}: no such folder", folder=False)]


def test_a_report_of_part_of_an_hpo_search_or_of_it_and_another_run_is_one_error_line(protocol, tmp_path):
    """Its retrain folder alone would be half of its models; a trial not chosen beside it no model."""
    for part in (protocol / "retrain", protocol / "retrain" / "top1_seed1"):
        with pytest.raises(StudyError, match=f"^{part}: inside HPO search {protocol} .* give the report {protocol}$"):
            st.build_study([part], rounds=10)
    chosen = chosen_runs(protocol)
    other = next(p for p in sorted(protocol.iterdir()) if p.name.isdigit() and p not in chosen)
    shutil.copytree(other, tmp_path / "other" / "plain")
    with pytest.raises(StudyError, match=f"^{tmp_path / 'other' / 'plain'}: topk in scenario .*: chosen by no HPO "
                                         f"search, {min(chosen)} chosen by HPO search {protocol}; report them separately$"):
        st.build_study([protocol, tmp_path / "other"], rounds=10)


def killed_while_training(command: list[str], sweep_dir, trial: int) -> str:
    """Run the search ``command`` into ``sweep_dir`` and SIGKILL it once trial ``trial``'s job
    trains; what the search printed on stderr."""
    status = sweep_dir / str(trial) / "status.json"
    with open(sweep_dir.parent / f"{sweep_dir.name}.stderr", "w+") as stderr:
        search = subprocess.Popen([sys.executable, "-m", "robustnlu", *command, f"hydra.sweep.dir={sweep_dir}"],
                                  cwd=sweep_dir.parent, env=cli_env(), stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.time() + 300
        while search.poll() is None and time.time() < deadline:
            if status.is_file() and json.loads(status.read_text() or "{}").get("state") == "running":
                search.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        assert search.wait(timeout=60) == -signal.SIGKILL
        stderr.seek(0)
        return stderr.read()


def test_a_killed_searchs_trial_is_settled_by_the_next_search_unless_a_live_process_holds_its_run(tmp_path):
    """~60 s: a search SIGKILLed while its trial 0 trains leaves the trial RUNNING (nothing told it).
    The next search on the study leaves it so while a live process holds the trial's run directory
    (its run.lock: here this test's process). Once the lock is the killed job's again (its process
    gone) and the run is finished (resumed, as a Slurm job that outlived its search finishes), the
    next search tells the trial the run's value; that search, killed in turn while its trial 2
    trains, leaves an unfinished run, which the next search marks FAIL. Each says so on stderr."""
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=16)
    fast = [o for o in FAST if not o.startswith(("optimizer.lr", "trainer.max_epochs"))]
    command = ["-m", "hparams_search=optuna", "method=erm", *jsonl_overrides(data), *fast, "trainer.max_epochs=3",
               f"paths.hpo_dir={tmp_path}/hpo"]
    killed = tmp_path / "killed"
    killed_while_training([*command, "hydra.sweeper.n_trials=2"], killed, 0)

    def study():
        return optuna.load_study(study_name="jsonl-erm", storage=f"sqlite:///{tmp_path}/hpo/optuna.db")

    assert [t.state for t in study().trials] == [TrialState.RUNNING]
    lock = killed / "0" / LOCK_NAME
    left = lock.read_text()  # the killed job's
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    proc = run_cli([*command, "hydra.sweeper.n_trials=1", f"hydra.sweep.dir={tmp_path / 'held'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [t.state for t in study().trials] == [TrialState.RUNNING, TrialState.COMPLETE]
    assert "left RUNNING" not in proc.stderr
    lock.write_text(left)
    job = RunDir(killed / "0")
    run(compose_config([*job.overrides(), "resume=true"], job.path))  # in this process: only that it finishes counts
    assert job.finished()

    printed = killed_while_training([*command, "hydra.sweeper.n_trials=1"], tmp_path / "killed_too", 2)
    trials = study().trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.RUNNING]
    assert trials[0].value == job.results()["metrics"]["valid"]["combined"]  # optimized_metric: valid/combined
    assert [line for line in printed.splitlines() if "left RUNNING" in line] == [
        f"note: study 'jsonl-erm': trial(s) 0 left RUNNING by a search that is gone, their runs finished: told "
        f"their values ({killed / '0'})"]
    proc = run_cli([*command, "hydra.sweeper.n_trials=1", f"hydra.sweep.dir={tmp_path / 'next'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [t.state for t in study().trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL,
                                                 TrialState.COMPLETE]
    assert [line for line in proc.stderr.splitlines() if "left RUNNING" in line] == [
        f"note: study 'jsonl-erm': trial(s) 2 left RUNNING by a search that is gone, their runs held by no live "
        f"process and unfinished: marked FAIL ({tmp_path / 'killed_too' / '2'})"]


def test_a_batch_whose_trial_numbers_another_search_interrupted_is_launched_in_runs_of_its_own_numbers():
    """A batch's jobs take their trials' numbers (their folders); a trial that another search asked
    of the study in between (here: asked between ours) splits the batch where its number is."""
    study = optuna.create_study()
    ours = [study.ask(), study.ask()]
    study.ask()  # the other search's, number 2
    ours += [study.ask(), study.ask()]
    assert [[t.number for t in run] for run in numbered_runs(ours)] == [[0, 1], [3, 4]]
    assert [[t.number for t in run] for run in numbered_runs(ours[:2])] == [[0, 1]]


def test_a_continued_search_proposes_new_points_not_those_of_its_earlier_trials(continued_search):
    study = continued_search["study"]  # both launches with the config's sampler seed (42)
    *earlier, continued = (t.params for t in study.trials)
    assert len(earlier) == 3 and continued not in earlier


def test_a_search_that_searches_a_key_of_its_study_otherwise_is_one_error_line(continued_search):
    """The study searched method.k on a log scale (the space TopK declares); Optuna takes no other
    scale, kind or choices for it in that study: refused before a trial is asked."""
    root, study = continued_search["root"], continued_search["study"]
    proc = run_cli([*continued_search["command"], "method.k=int(interval(1,16))"], cwd=root)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: method.k: study 'jsonl-topk' searched it as IntDistribution(high=16, log=True, low=1, step=1), "
        "this search as IntDistribution(high=16, log=False, low=1, step=1) (Cannot set different log configuration "
        "to the same parameter name.): search it as before, or name another study (hydra.sweeper.study_name=...)")
    assert "Traceback" not in proc.stderr
    after = optuna.load_study(study_name="jsonl-topk", storage=f"sqlite:///{root}/hpo/optuna.db")
    assert len(after.trials) == len(study.trials)  # no trial asked


@pytest.mark.parametrize("other,line", [
    (["trainer.max_epochs=2", "logger=wandb"],  # logger: how it logs, which changes no value
     "study 'jsonl-topk' holds trials of other settings (trainer.max_epochs=1 there, trainer.max_epochs=2 here):"),
    (["optimized_metric=valid/intent_acc"], "study 'jsonl-topk' holds trials of other settings "
     "(optimized_metric=valid/combined there, optimized_metric=valid/intent_acc here):"),
    (["optimized_metric=valid/semer", "hydra.sweeper.direction=minimize"],
     "hydra.sweeper.direction: study 'jsonl-topk' is to maximize, not minimize;"),
])
def test_a_search_with_other_settings_than_its_studys_trials_is_one_error_line(continued_search, other, line):
    """Trials of other budgets, data or metrics in one study would be ranked together, and the
    driver would retrain the best of them: refused before a trial is asked."""
    root, study = continued_search["root"], continued_search["study"]
    proc = run_cli([*continued_search["command"], *other], cwd=root)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {line} run it with the same settings, or name another study (hydra.sweeper.study_name=...)")
    after = optuna.load_study(study_name="jsonl-topk", storage=f"sqlite:///{root}/hpo/optuna.db")
    assert len(after.trials) == len(study.trials)  # no trial asked


@pytest.mark.slow
def test_driver_runs_the_whole_protocol(tmp_path):
    """~85 s: search (3 trials), best_params.json, the 2 best settings retrained with seed 1."""
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=40)
    fast = [o for o in FAST if not o.startswith(("optimizer.lr", "trainer.max_epochs"))]
    out = tmp_path / "hpo_run"
    proc = run_cli(["method=topk", *jsonl_overrides(data), *fast, "trainer.max_epochs=1",
                    "hydra.sweeper.n_trials=3", f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={out}"],
                   cwd=tmp_path, module="robustnlu.hpo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "best_params.json").read_text())
    assert report["n_trials"] == 3 and len(report["chosen"]) == 2
    for rank, setting in enumerate(report["chosen"], 1):
        results = json.loads((out / "retrain" / f"top{rank}_seed1" / "results.json").read_text())
        assert results["seed"] == 1
        assert results["config"]["method"]["k"] == setting["params"]["method.k"]
        assert results["config"]["optimizer"]["lr"] == pytest.approx(setting["params"]["optimizer.lr"])


@pytest.mark.slow
def test_n_jobs_trials_run_as_one_batch_of_the_submitit_launcher(tmp_path):
    """~60 s: n_jobs=2 with hydra/launcher=local: the 2 trials are asked together and run as 2
    submitit processes of one batch (their logs under .submitit/), both told back COMPLETE."""
    data = write_snips_sample_jsonl(tmp_path / "data", n_train=48, n_eval=16)
    fast = [o for o in FAST if not o.startswith(("optimizer.lr", "trainer.max_epochs"))]
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", "hparams_search=optuna", "method=erm", *jsonl_overrides(data), *fast, "trainer.max_epochs=1",
                    "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", "hydra/launcher=local",
                    f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="jsonl-erm", storage=f"sqlite:///{tmp_path}/hpo/optuna.db")
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    for trial in study.trials:
        results = json.loads((sweep / str(trial.number) / "results.json").read_text())
        assert results["metrics"]["valid"]["combined"] == pytest.approx(trial.value)
    assert len(list((sweep / ".submitit").glob("*/*_log.out"))) == 2  # two submitit jobs
