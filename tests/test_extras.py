"""The pip extras (pyproject.toml, robustnlu/extras.py): the core install trains and evaluates
without any of them, and a feature whose extra is missing ends with one line naming the extra.

"Not installed" is simulated: the subprocess sets ``sys.modules[name] = None`` for each module of
the extra before anything imports it, so every ``import name`` raises ImportError exactly as for a
module that is absent (the test venv has every extra installed, as `make install` does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from integration_helpers import FAST, jsonl_overrides, write_snips_sample_jsonl
from robustnlu.extras import MissingExtra, raise_missing_extra, require

#: the top-level modules each extra installs (pyproject.toml [project.optional-dependencies])
EXTRA_MODULES = {
    "hpo": ["optuna", "sqlalchemy", "alembic"],
    "slurm": ["submitit", "hydra_plugins.hydra_submitit_launcher"],
    "noise": ["nltk", "lemminflect"],
    "wandb": ["wandb"],
}


def run_without(modules: list[str], module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` with ``modules`` simulated as not installed (module docstring)."""
    code = ("import runpy, sys\n"
            f"for name in {modules!r}:\n"
            "    sys.modules[name] = None  # simulates: not installed\n"
            f"sys.argv = [{module!r}, *{args!r}]\n"
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=600)


def error_line(extra: str, feature: str, module: str) -> str:
    return (f"error: {feature} needs the {extra} extra: import of {module} halted; None in sys.modules "
            f"(pip install 'robustnlu[{extra}]')")


@pytest.fixture
def data(tmp_path):
    return jsonl_overrides(write_snips_sample_jsonl(tmp_path / "data", n_train=48, n_eval=16))


def test_require_imports_or_names_the_extra(monkeypatch):
    assert require("json", "hpo", "x") is sys.modules["json"]
    monkeypatch.setitem(sys.modules, "lemminflect", None)  # simulates: not installed
    with pytest.raises(MissingExtra) as err:
        require("lemminflect", "noise", "noise=synonym")
    assert str(err.value) == error_line("noise", "noise=synonym", "lemminflect")[len("error: "):]
    # found behind the exceptions that wrap it (Hydra's instantiate: InstantiationException <- ImportError)
    try:
        try:
            raise ImportError("Error loading") from err.value
        except ImportError as wrapped:
            raise RuntimeError("Error locating target") from wrapped
    except RuntimeError as outer:
        with pytest.raises(MissingExtra) as again:
            raise_missing_extra(outer)
        assert again.value is err.value
        raise_missing_extra(RuntimeError("no extra behind it"))  # nothing to re-raise: returns


def test_training_and_evaluation_need_no_extra(data, tmp_path):
    """~15 s: a whole run (train, valid and test metrics, results.json) without any extra."""
    out = tmp_path / "run"
    absent = [m for modules in EXTRA_MODULES.values() for m in modules]
    proc = run_without(absent, "robustnlu", [*FAST, "trainer.max_epochs=1", *data, f"hydra.run.dir={out}"],
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "results.json").is_file()


@pytest.mark.parametrize("case", ["hpo-sweep", "hpo-driver", "slurm", "local", "noise", "wandb-logger",
                                  "wandb-report"])
def test_a_missing_extra_is_one_error_line(case, data, tmp_path):
    """~5-10 s each: the feature's command with its extra simulated as not installed."""
    run = [*FAST, "trainer.max_epochs=1", *data]
    cases = {  # case: (extra, module made absent, python -m ..., args, the feature as the line names it)
        "hpo-sweep": ("hpo", "optuna", "robustnlu", ["-m", "hparams_search=optuna", *run, f"paths.hpo_dir={tmp_path}/hpo"],
                      "the Optuna search (hydra/sweeper=optuna)"),
        "hpo-driver": ("hpo", "optuna", "robustnlu.hpo", ["method=erm", *run], "python -m robustnlu.hpo"),
        "slurm": ("slurm", "hydra_plugins.hydra_submitit_launcher", "robustnlu", ["-m", "hydra/launcher=slurm", *run],
                  "the submitit launcher (hydra/launcher=slurm)"),
        "local": ("slurm", "hydra_plugins.hydra_submitit_launcher", "robustnlu", ["-m", "hydra/launcher=local", *run],
                  "the submitit launcher (hydra/launcher=local)"),
        "noise": ("noise", "lemminflect", "robustnlu", ["augment=morphology", *run],
                  "noise=synonym / noise=morphology"),
        "wandb-logger": ("wandb", "wandb", "robustnlu", ["logger=wandb", *run], "logger=wandb"),
        "wandb-report": ("wandb", "wandb", "robustnlu.report", [str(tmp_path), "--out", str(tmp_path / "report"),
                                                                "--wandb"], "--wandb"),
    }
    extra, module, entry, args, feature = cases[case]
    sweep = tmp_path / "sweep"
    proc = run_without([module], entry, [*args, f"hydra.sweep.dir={sweep}", f"hydra.run.dir={tmp_path / 'run'}"]
                       if entry != "robustnlu.report" else args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == error_line(extra, feature, module)
    assert "Traceback" not in proc.stderr
    # nothing written: no run or sweep dir, no study, no report
    assert not any(p.exists() for p in (sweep, tmp_path / "run", tmp_path / "hpo" / "optuna.db", tmp_path / "report"))
