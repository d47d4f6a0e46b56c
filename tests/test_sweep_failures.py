"""A user error (bad input) in one job of a multirun fails that job only: the job prints its
one-line error and leaves nothing of its run but a record (its folder's status.json: failed, the
error line, the job's overrides), the sweep's other jobs run and write their results
(`robustnlu.cli.run_or_exit`, `JobFailed`). The basic sweeper ends with Hydra's one-line
summary of the failed job and exit status 1; the Optuna sweeper records the trial as FAIL and
finishes the study."""

from __future__ import annotations

import json

import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState

from integration_helpers import FAST, run_cli, write_snips_sample_jsonl


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A good jsonl sample and ``bad.jsonl``: its train split with a malformed line 5 (read only:
    one for the module)."""
    folder = tmp_path_factory.mktemp("data")
    paths = write_snips_sample_jsonl(folder, n_train=48, n_eval=16)
    lines = paths["train"].read_text().splitlines()
    lines.insert(4, '{"tokens": ["play"')  # line 5: not JSON
    paths["bad"] = folder / "bad.jsonl"
    paths["bad"].write_text("\n".join(lines) + "\n")
    return paths


def _common(data):
    return [*FAST, "trainer.max_epochs=1", "dataset=jsonl", f"dataset.valid={data['valid']}",
            f"dataset.test={data['test']}"]


@pytest.mark.parametrize("batch", [[], ["hydra.sweeper.max_batch_size=1"]], ids=["one_batch", "a_batch_per_job"])
def test_a_user_error_fails_its_job_only_and_the_sweep_exits_non_zero(data, tmp_path, batch):
    """~15 s: 2 jobs, the first with a malformed train file; in one batch, or a batch each (the
    failed job's batch does not stop the next: `hydra_plugins.robustnlu_plugins.batches`)."""
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", *_common(data), f"dataset.train={data['bad']},{data['train']}", *batch,
                    f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=job${hydra.job.num}"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert (sweep / "job1" / "results.json").is_file()  # the job after the failed one ran
    sweeper = OmegaConf.load(sweep / "multirun.yaml").hydra.sweeper
    assert sweeper._target_ == "hydra_plugins.robustnlu_plugins.product_sweeper.ProductSweeper"
    assert sorted(p.name for p in sweep.iterdir()) == ["job0", "job1", "multirun.yaml"]
    assert [p.name for p in (sweep / "job0").iterdir()] == ["status.json"]  # job0: its record, nothing else
    record = json.loads((sweep / "job0" / "status.json").read_text())
    assert record["state"] == "failed" and record["error"].startswith(f"{data['bad']}:5: invalid JSON")
    assert f"dataset.train={data['bad']}" in record["overrides"]
    error = f"error: {data['bad']}:5: invalid JSON"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert sum(ln.startswith(error) for ln in lines) == 2  # when job 0 failed, and in the summary
    # Hydra's summary at the end: the failed job's overrides, then its one-line error; no traceback
    summary = lines.index(next(ln for ln in lines if ln.startswith("Error executing job with overrides:")))
    assert f"dataset.train={data['bad']}" in lines[summary] and lines[summary + 1].startswith(error)
    assert "Traceback" not in proc.stderr


def test_an_optuna_trial_with_a_user_error_is_failed_and_the_study_goes_on(data, tmp_path):
    """~15 s: 3 ERM trials of hparams_search=optuna that also search the train file (good or bad)."""
    sweep = tmp_path / "sweep"
    fast = [o for o in _common(data) if not o.startswith("optimizer.lr")]  # lr is searched
    proc = run_cli(["-m", "hparams_search=optuna", "method=erm", *fast,
                    f"dataset.train=choice({data['bad']},{data['train']})", "hydra.sweeper.n_trials=3", f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={sweep}"],
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="jsonl-erm", storage=f"sqlite:///{tmp_path}/hpo/optuna.db")
    assert len(study.trials) == 3
    bad = {t.number for t in study.trials if t.params["dataset.train"] == str(data["bad"])}
    assert bad and len(bad) < 3  # the sampler's seed (42) proposes both files
    for trial in study.trials:
        failed = trial.number in bad
        assert trial.state == (TrialState.FAIL if failed else TrialState.COMPLETE)
        assert (sweep / str(trial.number) / "results.json").is_file() != failed
        if failed:  # the failed trial left its record and nothing else
            assert [p.name for p in (sweep / str(trial.number)).iterdir()] == ["status.json"]
            assert json.loads((sweep / str(trial.number) / "status.json").read_text())["state"] == "failed"
    assert f"Failed experiment: error: {data['bad']}:5: invalid JSON" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_optuna_trial_that_crashes_is_failed_with_its_traceback_and_the_study_goes_on(data, tmp_path):
    """~15 s: 3 ERM trials of hparams_search=optuna that also search trainer.val_check_interval over
    1.0 and 1000; Lightning's fit refuses 1000 validation steps apart in an epoch of fewer batches
    (ValueError: a crash, not a user error of ours — our config schema leaves Lightning's own arguments
    outside conf/trainer/ unchecked, and the Trainer accepts the value when it is made)."""
    sweep = tmp_path / "sweep"
    fast = [o for o in _common(data) if not o.startswith("optimizer.lr")]
    proc = run_cli(["-m", "hparams_search=optuna", "method=erm", *fast, f"dataset.train={data['train']}",
                    "++trainer.val_check_interval=choice(1.0,1000)",
                    "hydra.sweeper.n_trials=3",
                    f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="jsonl-erm", storage=f"sqlite:///{tmp_path}/hpo/optuna.db")
    assert len(study.trials) == 3
    crashed = {t.number for t in study.trials if t.params["++trainer.val_check_interval"] == 1000}
    assert crashed and len(crashed) < 3  # the sampler's seed (42) proposes both
    for trial in study.trials:
        assert trial.state == (TrialState.FAIL if trial.number in crashed else TrialState.COMPLETE)
        assert (sweep / str(trial.number) / "results.json").is_file() != (trial.number in crashed)
    log = proc.stdout + proc.stderr
    assert "Failed experiment:  `val_check_interval` (1000) must be less than or equal to the number" in log
    assert "Traceback" in log and "ValueError" in log  # a crash is logged with its traceback
    assert OmegaConf.load(sweep / "optimization_results.yaml").best_value == pytest.approx(study.best_value)


def test_a_batch_with_more_failures_than_max_failure_rate_ends_the_sweep(data, tmp_path):
    """~10 s: n_jobs=2 trials per batch, every trial reads the malformed file; 2 of 2 failed >
    0.4, so the sweep ends after the first batch with the job's error line and exit status 1."""
    fast = [o for o in _common(data) if not o.startswith("optimizer.lr")]
    proc = run_cli(["-m", "hparams_search=optuna", "method=erm", *fast, f"dataset.train={data['bad']}",
                    "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2", "hydra.sweeper.max_failure_rate=0.4",
                    f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()  # the sweep ends on the job's one error line (cli.hydra_app)
    assert lines[-1].startswith(f"error: {data['bad']}:5: invalid JSON") and "HYDRA_FULL_ERROR" not in proc.stderr
    assert "Traceback" not in proc.stderr
    study = optuna.load_study(study_name="jsonl-erm", storage=f"sqlite:///{tmp_path}/hpo/optuna.db")
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.FAIL]  # batch 2 never started


def test_an_optuna_search_stopped_by_ctrl_c_records_its_running_trial_as_failed(data, tmp_path):
    """~10 s: SIGINT (Ctrl-C) reaches the search's process in trial 0's training (the basic launcher
    runs it there); the trial is not left RUNNING in the study, and no later trial starts."""
    fast = [o for o in _common(data) if not o.startswith("optimizer.lr")]
    proc = run_cli(["-m", "hparams_search=optuna", "method=erm", *fast, f"dataset.train={data['train']}",
                    "hydra.sweeper.n_trials=2", "+callbacks.signal._target_=integration_helpers.SignalAtStep",
                    "+callbacks.signal.step=1", "+callbacks.signal.signame=SIGINT",
                    f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={tmp_path}/sweep"], cwd=tmp_path)
    assert proc.returncode != 0
    study = optuna.load_study(study_name="jsonl-erm", storage=f"sqlite:///{tmp_path}/hpo/optuna.db")
    assert [t.state for t in study.trials] == [TrialState.FAIL]
    assert "to continue it" not in proc.stderr  # the search proposes its points itself: nothing to relaunch


def test_a_sweep_stopped_by_ctrl_c_names_its_relaunch(data, tmp_path):
    """~10 s: SIGINT (Ctrl-C) in the first job's training ends the sweep (the basic launcher runs its
    jobs in its own process); the job says it was interrupted and that relaunch continues the sweep."""
    sweep = tmp_path / "sweep"
    proc = run_cli(["-m", *_common(data), f"dataset.train={data['train']}", "seed=0,1",
                    "+callbacks.signal._target_=integration_helpers.SignalAtStep", "+callbacks.signal.step=1",
                    "+callbacks.signal.signame=SIGINT", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert proc.returncode == 1
    (job,) = [p for p in sweep.iterdir() if p.is_dir()]
    assert json.loads((job / "status.json").read_text())["error"] == "KeyboardInterrupt"
    assert (f"{job}: interrupted (KeyboardInterrupt); to continue it: python -m robustnlu.sweep relaunch {sweep}"
            in proc.stderr.splitlines())


#: an earlier robustnlu sweep's record, as far as the folder's owner reads it (``rundir_claim.robustnlus_settings``)
EARLIER_SWEEPS_RECORD = ("# the record of an earlier sweep\n"
                         "hydra: {callbacks: {run_dir: {_target_: robustnlu.rundir_claim.RunDirOwnership}}}\n")


def test_a_sweep_one_of_whose_jobs_does_not_compose_is_refused_before_it_writes_anything(data, tmp_path):
    """~5 s: a job per batch, the second job's method a config that does not exist. Hydra composes a
    batch's configs just before launching it, after multirun.yaml is written: the first job would
    train and a new sweep directory would be left with a multirun.yaml, an existing one with its
    record replaced. Every job's config is composed before anything is written (`launch_batches`)."""
    args = [*_common(data), f"dataset.train={data['train']}", "method=erm,no_such_method",
            "hydra.sweeper.max_batch_size=1"]
    error = ("error: In 'config': Could not find 'method/no_such_method'; Available options in 'method': erm, "
             "group_dro, nonparam_kl, pdro, rpdro, topic_cvar, topk, topk_ae, topk_ae_bin, topk_ae_prob, topk_group")
    new = tmp_path / "new" / "sweep"
    proc = run_cli(["-m", *args, f"hydra.sweep.dir={new}"], cwd=tmp_path)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [error])
    assert not (tmp_path / "new").exists()
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    record = EARLIER_SWEEPS_RECORD
    (earlier / "multirun.yaml").write_text(record)
    proc = run_cli(["-m", *args, f"hydra.sweep.dir={earlier}"], cwd=tmp_path)
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [error])
    assert [p.name for p in earlier.iterdir()] == ["multirun.yaml"]
    assert (earlier / "multirun.yaml").read_text() == record
