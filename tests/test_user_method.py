"""A method, a group source and a dataset of the user's own, added the way docs/architecture.md's
recipes say, outside robustnlu: the classes in a package of the user's (a folder on PYTHONPATH),
their YAML files in the user's config folder (``hydra.searchpath``); nothing under robustnlu/ or
conf/ changes. The method trains in a sweep, resumes after a kill and shows up under its own
name in results.json, W&B and the study report; its declared hyper-parameter is checked with the
schema's one line and searched by ``python -m robustnlu.hpo`` from the declaration alone (the user
writes no search config); the group source groups one of robustnlu's group methods."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from hydra_plugins.robustnlu_plugins.optuna_sweeper import sweep_overrides

from integration_helpers import CONF, FAST, REPO, cli_env, enter_cli, file_bytes, run_cli, write_snips_sample_jsonl
from robustnlu import hpo, report
from robustnlu.cli import compose_run_config
from robustnlu.errors import ConfigError
from test_cli import read_wandb_records

#: the user's package: a CVaR over the batch (the mean of the ⌈α·b⌉ largest losses of each task,
#: Rockafellar & Uryasev's CVaR_α of the batch's empirical loss distribution) and one group per intent
METHOD = '''
    import math

    from robustnlu.config_spec import number
    from robustnlu.hparams import HParam, uniform
    from robustnlu.robust.base import RobustObjective


    class BatchCVaR(RobustObjective):
        """CVaR_α of each task's batch losses: the mean of the ⌈α·b⌉ largest."""

        HPARAMS = {"alpha": HParam(number("(0, 1]"), 0.5, "the share of the batch's largest losses averaged",
                                   search=uniform(0.1, 1.0))}

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.alpha = self.hparams["alpha"]

        def reduce(self, losses, task, step):
            return losses.topk(max(1, math.ceil(self.alpha * losses.numel()))).values.mean()
'''
GROUPS = '''
    import torch

    from robustnlu.config_spec import number
    from robustnlu.groups.base import GroupSource
    from robustnlu.hparams import HParam


    class IntentGroups(GroupSource):
        """One group per training intent; ``smoothing`` spreads that share of a row over all groups."""

        HPARAMS = {"smoothing": HParam(number("[0, 1)"), 0.0, "the share of a membership spread over all groups")}

        def memberships(self, datamodule):
            ids = torch.tensor([e.intent_id for e in datamodule.datasets["train"].encoded])
            n, smoothing = int(ids.max()) + 1, self.hparams["smoothing"]
            return (1 - smoothing) * torch.nn.functional.one_hot(ids, n).float() + smoothing / n
'''
#: the YAML files, as the recipes write them (the dataset: conf/dataset/atis.yaml's layout)
CONFIGS = {
    "method/batch_cvar.yaml": """
        # CVaR over the batch (the user's own method)
        _target_: mymethods.BatchCVaR
        name: batch_cvar
        alpha: 0.5   # half the batch
    """,
    "groups/intents.yaml": """
        _target_: mygroups.IntentGroups
        smoothing: 0.0
    """,
    "dataset/mysnips.yaml": """
        name: mysnips
        format: bio_lines
        path: data/mysnips   # from the folder the command runs in
        folders:
          train: train
          valid: dev
          test: test
    """,
}
TINY = [*FAST, "trainer.max_epochs=1", "dataset=mysnips"]


@dataclass
class User:
    folder: Path  # where the user's commands run: their package, their config folder, their data

    @property
    def searchpath(self) -> str:
        return f"hydra.searchpath=[file://{self.folder / 'myconf'}]"

    @property
    def pythonpath(self) -> str:
        """The PYTHONPATH of the user's commands: their package, then `cli_env`'s."""
        return os.pathsep.join([str(self.folder / "mypkg"), cli_env()["PYTHONPATH"]])

    def run(self, *args: str, module: str = "robustnlu"):
        """``python -m <module> <args>`` in the user's folder, their package on PYTHONPATH."""
        return run_cli(list(args), cwd=self.folder, env={"PYTHONPATH": self.pythonpath}, module=module)

    def train(self, *args: str):
        """``python -m robustnlu`` with the user's config folder."""
        return self.run(*args, self.searchpath)

    def enter(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """This process as `run` starts a command, for an entry point called here (and the
        commands it starts): in the user's folder, their package importable."""
        enter_cli(monkeypatch, self.folder, PYTHONPATH=self.pythonpath)
        monkeypatch.syspath_prepend(str(self.folder / "mypkg"))


@pytest.fixture(scope="module")
def user(tmp_path_factory) -> User:
    folder = tmp_path_factory.mktemp("user")
    assert REPO not in folder.parents
    (folder / "mypkg").mkdir()
    (folder / "mypkg" / "mymethods.py").write_text(textwrap.dedent(METHOD))
    (folder / "mypkg" / "mygroups.py").write_text(textwrap.dedent(GROUPS))
    for name, text in CONFIGS.items():
        (folder / "myconf" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "myconf" / name).write_text(textwrap.dedent(text).lstrip())
    sample = write_snips_sample_jsonl(folder / "jsonl", n_train=64, n_eval=32)
    for split, folder_name in (("train", "train"), ("valid", "dev"), ("test", "test")):
        rows = [json.loads(line) for line in sample[split].read_text().splitlines()]
        out = folder / "data" / "mysnips" / folder_name
        out.mkdir(parents=True)
        for file, field in (("seq.in", "tokens"), ("seq.out", "tags")):
            (out / file).write_text("".join(" ".join(r[field]) + "\n" for r in rows))
        (out / "label").write_text("".join(r["intent"] + "\n" for r in rows))
    return User(folder)


@pytest.fixture(scope="module")
def user_sweep(user, tmp_path_factory) -> Path:
    """~15 s: erm and the user's method in one sweep, logged to W&B: its sweep dir."""
    sweep = tmp_path_factory.mktemp("user_sweep") / "sweep"
    proc = user.train("-m", *TINY, "method=erm,batch_cvar", "logger=wandb", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep


def test_a_users_method_trains_in_a_sweep_under_its_own_name(user, user_sweep, tmp_path, monkeypatch):
    """The `user_sweep` (erm and the user's method, logged to W&B), then the study report (the method beside ERM)."""
    sweep = user_sweep
    results = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/results.json"))]
    assert sorted(r["method"] for r in results) == ["batch_cvar", "erm"]
    ours = next(r for r in results if r["method"] == "batch_cvar")
    assert ours["config"]["method"] == {"_target_": "mymethods.BatchCVaR", "name": "batch_cvar", "alpha": 0.5}
    assert ours["config"]["dataset"]["name"] == "mysnips" and ours["sizes"]["train"] == 64
    assert sorted(p.name.split("-seed")[0] for p in sweep.glob("*-seed*")) == ["mysnips-batch_cvar", "mysnips-erm"]

    runs = [next(r["run"] for r in read_wandb_records(f) if "run" in r) for f in sweep.glob("wandb/offline-run-*/*.wandb")]
    assert sorted((r["job_type"], r["display_name"].rsplit("-", 1)[0]) for r in runs) == [
        ("batch_cvar", "mysnips-batch_cvar-seed0"), ("erm", "mysnips-erm-seed0")]
    assert {r["display_name"] for r in runs} == {p.name for p in sweep.glob("*-seed*")}  # named as their folders
    assert "method=batch_cvar" in next(r["tags"] for r in runs if r["job_type"] == "batch_cvar")

    user.enter(monkeypatch)  # the report in this process
    assert report.main([str(sweep), "--out", str(tmp_path / "report"), "--rounds", "50"]) == 0
    rows = (tmp_path / "report" / "table10_metrics.md").read_text().splitlines()  # one per scenario and method
    assert sorted(row.split(" | ")[4] for row in rows if row.startswith("| mysnips ")) == ["batch_cvar", "erm"]


def test_a_users_method_resumes_after_a_kill(user, tmp_path):
    """~15 s: killed after 2 steps (its last checkpoint at step 2), resumed to the end."""
    run_dir = tmp_path / "run"
    common = [*TINY, "method=batch_cvar", "trainer.max_epochs=2", "callbacks.last_checkpoint.every_minutes=null",
              "callbacks.last_checkpoint.every_n_train_steps=2", f"hydra.run.dir={run_dir}"]
    killed = user.train(*common, "+callbacks.kill._target_=integration_helpers.KillAtStep", "+callbacks.kill.step=3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not (run_dir / "results.json").exists() and (run_dir / "checkpoints" / "last.ckpt").is_file()
    resumed = user.train(*common, "resume=true", "+resume_override=[callbacks.kill]")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["method"] == "batch_cvar" and results["epochs_trained"] == 2


@pytest.mark.parametrize("override, line", [
    ("method.alpha=0", "error: method.alpha: must be in (0, 1] (got 0)"),
    ("+method.beta=1", "error: method.beta: unknown key (method has _target_, alpha, name) (got 1)"),
])
def test_a_bad_value_for_a_users_method_is_one_error_line(user, tmp_path, override, line):
    """~5 s: the schema checks the user's node against the class's declaration; nothing is written."""
    before = file_bytes(user.folder)
    proc = user.train(*TINY, "method=batch_cvar", override, f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 2
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [line]
    assert not (tmp_path / "run").exists() and file_bytes(user.folder) == before


def test_a_users_config_folder_that_is_missing_or_renames_a_shipped_file_is_one_error_line(user, tmp_path):
    """~20 s: robustnlu's configs come first on Hydra's search path, so the user's method/topk.yaml
    (k = 2) would be passed over for the shipped one (k = 4): refused, as is a folder that is not
    there (Hydra would only warn); a copy of a shipped file, the same bytes, is no error."""
    (tmp_path / "mine" / "method").mkdir(parents=True)
    (tmp_path / "mine" / "method" / "topk.yaml").write_text((CONF / "method" / "topk.yaml").read_text())
    (tmp_path / "mine" / "method" / "erm.yaml").write_text("_target_: robustnlu.robust.topk.TopK\nname: erm\nk: 2\n")
    for method, line in [("erm", f"error: hydra.searchpath: {tmp_path}/mine/method/erm.yaml is not read: robustnlu's "
                                 "own method/erm.yaml has its name and is read instead; give yours a name of its own"),
                         ("batch_cvar", f"error: hydra.searchpath: no such folder: {tmp_path}/nowhere "
                                        f"(got file://{tmp_path}/nowhere)")]:
        searchpath = f"hydra.searchpath=[file://{tmp_path / 'mine'},{user.folder / 'myconf'},file://{tmp_path / 'nowhere'}]"
        proc = user.run(*TINY, f"method={method}", searchpath, f"hydra.run.dir={tmp_path}/run")
        assert (proc.returncode, [ln for ln in proc.stderr.splitlines() if ln.strip()]) == (2, [line])
        assert not (tmp_path / "run").exists()
    proc = user.run(*TINY, "method=topk", f"hydra.searchpath=[file://{tmp_path / 'mine'},{user.folder / 'myconf'}]",
                    f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["config"]["method"]["k"] == 4
    # the primary config too: a copy of conf/config.yaml with the user's defaults would be passed over
    (tmp_path / "defaults").mkdir()
    (tmp_path / "defaults" / "config.yaml").write_text((CONF / "config.yaml").read_text().replace("seed: 0", "seed: 1"))
    with pytest.raises(ConfigError, match=r"^hydra\.searchpath: .*/defaults/config\.yaml is not read: robustnlu's own "
                                          r"config\.yaml has its name"):
        compose_run_config([f"hydra.searchpath=[file://{tmp_path / 'defaults'}]"])


def test_a_checkpoint_of_a_users_method_predicts_without_its_package(user, user_sweep, tmp_path):
    """~10 s: predict reads the model alone, not the objective that trained it (the `user_sweep`'s
    run of the user's method), so it answers the same with the user's package on the path and
    without it."""
    (ckpt,) = user_sweep.glob("mysnips-batch_cvar-*/checkpoints/best-*.ckpt")
    proc = user.run("--ckpt", str(ckpt), "play adele", module="robustnlu.predict")
    assert proc.returncode == 0, proc.stderr[-3000:]
    elsewhere = run_cli(["--ckpt", str(ckpt), "play adele"], cwd=tmp_path, module="robustnlu.predict")
    assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
    assert elsewhere.stdout == proc.stdout and proc.stdout.startswith("intent: ")


#: a method with a rule across its values that no single spec says: its constructor checks it
RANGE_METHOD = '''
    from robustnlu.config_spec import number
    from robustnlu.errors import ConfigError
    from robustnlu.hparams import HParam
    from robustnlu.robust.base import RobustObjective


    class QuantileBand(RobustObjective):
        """The mean of the losses between the lo and hi quantiles of the batch."""

        HPARAMS = {"lo": HParam(number("[0, 1]"), 0.5, "lower quantile"), "hi": HParam(number("[0, 1]"), 1.0, "upper")}

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            if self.hparams["lo"] >= self.hparams["hi"]:
                raise ConfigError(f"method.hi: must be > method.lo ({self.hparams['lo']}) (got {self.hparams['hi']})")

        def reduce(self, losses, task, step):
            lo, hi = losses.quantile(self.hparams["lo"]), losses.quantile(self.hparams["hi"])
            return losses[(losses >= lo) & (losses <= hi)].mean()
'''


def test_a_users_method_that_refuses_its_values_in_its_constructor_is_one_error_line(user, tmp_path):
    """~10 s: the method's own check (a ConfigError its constructor raises, which Hydra wraps in
    an InstantiationException) ends the run as the schema's would: its line, exit 2, no run
    directory; in a sweep it fails its own job, recorded in the job's status.json."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "band.py").write_text(textwrap.dedent(RANGE_METHOD))
    (tmp_path / "conf" / "method").mkdir(parents=True)
    (tmp_path / "conf" / "method" / "band.yaml").write_text("_target_: band.QuantileBand\nname: band\nlo: 0.9\nhi: 0.5\n")
    common = [*TINY, "method=band", f"hydra.searchpath=[file://{tmp_path / 'conf'},file://{user.folder / 'myconf'}]"]
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), cli_env()["PYTHONPATH"]])}
    proc = run_cli([*common, f"hydra.run.dir={tmp_path}/run"], cwd=user.folder, env=env)
    line = "error: method.hi: must be > method.lo (0.9) (got 0.5)"
    assert (proc.returncode, [ln for ln in proc.stderr.splitlines() if ln.startswith(("error", "Error"))]) == (2, [line])
    assert not (tmp_path / "run").exists()
    sweep = run_cli(["-m", *common, f"hydra.sweep.dir={tmp_path}/sweep", "hydra.sweep.subdir=job"], cwd=user.folder, env=env)
    assert sweep.returncode == 1 and "Traceback" not in sweep.stderr
    assert json.loads((tmp_path / "sweep" / "job" / "status.json").read_text())["error"] == line.removeprefix("error: ")


def test_a_users_group_source_groups_a_robustnlu_method(user, tmp_path):
    """~15 s: TopK-Group over the user's intent groups, with a value of the source's own; a bad one refused."""
    run_dir = tmp_path / "run"
    proc = user.train(*TINY, "method=topk_group", "groups@method.groups=intents", "method.groups.smoothing=0.1",
                    f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    method = json.loads((run_dir / "results.json").read_text())["config"]["method"]
    assert method["groups"] == {"_target_": "mygroups.IntentGroups", "smoothing": 0.1}
    refused = user.train(*TINY, "method=topk_group", "groups@method.groups=intents", "method.groups.smoothing=1",
                       f"hydra.run.dir={tmp_path}/refused")
    assert refused.returncode == 2 and refused.stderr.strip() == "error: method.groups.smoothing: must be in [0, 1) (got 1)"


def test_the_hpo_search_of_a_users_method_is_what_it_declares(user, monkeypatch):
    """``hparams_search=optuna method=<name>``: Table 9's λ and γ, and the method's own space."""
    monkeypatch.syspath_prepend(str(user.folder / "mypkg"))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=[user.searchpath, "hparams_search=optuna", "method=batch_cvar", "dataset=mysnips"])
    assert sweep_overrides(cfg.hydra.sweeper.params) == [
        "optimizer.lr=tag(log, interval(1e-5, 1e-4))", "model.intent_loss_scale=tag(log, interval(1e-2, 10.0))",
        "method.alpha=interval(0.1, 1.0)"]
    assert cfg.hydra.sweeper.study_name == "mysnips-batch_cvar"
    objective = instantiate(cfg.method, intent_loss_scale=1.0)
    assert type(objective).__module__ == "mymethods" and objective.alpha == 0.5


def test_the_hpo_protocol_runs_a_users_method_from_its_declaration(user, tmp_path, monkeypatch):
    """~25 s: ``python -m robustnlu.hpo method=batch_cvar`` with no search config of the user's: a
    2-trial Optuna study over λ, γ and the declared α, best_params.json, the best setting retrained
    with seed 1. The driver runs in this process (its search and retraining are its commands)."""
    assert not list(user.folder.rglob("hparams_search"))
    fast = [o for o in TINY if not o.startswith("optimizer.lr")]  # λ is searched
    out, storage = tmp_path / "hpo_run", f"sqlite:///{tmp_path}/hpo/optuna.db"
    user.enter(monkeypatch)
    assert hpo.main(["--top", "1", "method=batch_cvar", user.searchpath, *fast, "hydra.sweeper.n_trials=2",
                     f"paths.hpo_dir={tmp_path}/hpo", f"hydra.sweep.dir={out}"]) == 0
    study = optuna.load_study(study_name="mysnips-batch_cvar", storage=storage)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE] * 2
    for trial in study.trials:
        assert set(trial.params) == {"optimizer.lr", "model.intent_loss_scale", "method.alpha"}
        assert 0.1 <= trial.params["method.alpha"] <= 1.0  # the declared uniform(0.1, 1.0)
    (best,) = json.loads((out / "best_params.json").read_text())["chosen"]
    assert best["value"] == max(t.value for t in study.trials)
    results = json.loads((out / "retrain" / "top1_seed1" / "results.json").read_text())
    assert results["method"] == "batch_cvar" and results["seed"] == 1
    assert results["config"]["method"]["alpha"] == pytest.approx(best["params"]["method.alpha"])
