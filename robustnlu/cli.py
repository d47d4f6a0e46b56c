"""What every Hydra entry point shares: where its configs are (`robustnlu.paths.CONF_DIR`: a
checkout's conf/ or the installed package's copy), and how a user error ends a
run (one line on stderr, exit code 2, no traceback, no half-written run directory, and never a
file the invocation did not make removed: `robustnlu.rundir_claim`; a run stopped in
mid-training by a non-finite loss keeps its resumable run directory, `NonFiniteLoss`).

In a multirun (``-m``: the basic sweeper, the Optuna sweeper ``hparams_search=<method>``, the
submitit launchers) a user error fails that job only: the job prints the same line and removes
what it made of its run dir, then raises `JobFailed` (an ordinary exception) instead of exiting, so Hydra records
a failed job and the sweep goes on. The basic sweeper runs the batch's other jobs, then prints
``Error executing job with overrides: [...]`` and the line once more, and exits with status 1;
the Optuna sweeper records the trial as FAIL (``max_failure_rate``) and goes on with the study.

Every entry point reports a user error the same way (`robustnlu.errors.report`): the Hydra
apps (training, seqdrift, noise, evaluate) through `hydra_app` and `run_or_exit`, which also
turn Hydra's own errors (an unknown key, a group option that does not exist, an override that
does not parse) into that one line; the argparse ones (predict, report, compare, hpo,
efficiency and the analysis tools) through `robustnlu.errors.entry_point`."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from robustnlu.config_schema import check_config
from robustnlu.errors import ConfigError, RobustNLUError, report
from robustnlu.paths import CONF_DIR
from robustnlu.rundir_claim import claim, undo, unclaim

T = TypeVar("T")


class JobFailed(RobustNLUError, CompactHydraException):
    """A job of a multirun stopped on a user error. A `CompactHydraException`: when the sweep
    re-raises it at the end, Hydra prints its one-line message rather than a traceback.
    ``str(err)`` is ``"error: <message>"``; the original error is its ``__cause__`` (in-process)."""


def run_or_exit(task: Callable[[DictConfig], T], cfg: DictConfig) -> T:
    """Check ``cfg`` against its app's schema (`robustnlu.config_schema`), then run ``task(cfg)``;
    a `RobustNLUError` prints ``error: <message>`` and exits with 2, or in a multirun raises
    `JobFailed` so that only this job fails (a `SystemExit` would end the sweep). Either way only
    what this invocation made in the run directory is removed (`robustnlu.rundir_claim.undo`); a
    sweep's job claims its folder here (a single run's is claimed before Hydra creates it)."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        if hydra_cfg.mode == RunMode.MULTIRUN:  # a single run's folder is claimed before Hydra makes it
            claim(run_dir, bool(OmegaConf.select(hydra_cfg, "callbacks.run_dir.exclusive", default=False)),
                  before_creation=False)
        check_config(cfg, hydra_cfg.job.config_name)
        result = task(cfg)
    except RobustNLUError as err:
        undo(run_dir, keep=err.keeps_run_dir)
        status = report(err)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            raise JobFailed(f"error: {err}") from err
        sys.exit(status)
    if hydra_cfg.mode == RunMode.MULTIRUN:
        unclaim(run_dir)
    return result


#: where a method's groups and adversary are chosen since they moved into the method's node
#: (conf/method/*.yaml's defaults): added to Hydra's message for ``groups=`` / ``adversary=``
METHOD_NODE_GROUPS = ("a method's group source is chosen with groups@method.groups=<name> (conf/groups/: "
                      "seqdrift_clusters, lda_topics, autoencoder), its learned adversary with "
                      "adversary@method.adversary=<name> (conf/adversary/: ratio_net, generative_lm)")


def hydra_message(err: CompactHydraException) -> str:
    """Hydra's message for a config it cannot compose, on one line (its OmegaConf cause
    included; the config search path and OmegaConf's key details left out); an override of
    ``groups=`` or ``adversary=`` gets `METHOD_NODE_GROUPS`."""
    text = str(err).split("Config search path:")[0]
    if err.__cause__ is not None and str(err.__cause__) not in text:
        text += "\n" + str(err.__cause__)
    parts: list[str] = []
    for line in text.splitlines():
        if not line.strip() or re.match(r"\s*(full_key|object_type|reference_type|See https)\b", line):
            continue
        if line[0].isspace() and parts:  # an indented list (the options of a config group)
            parts[-1] += (" " if parts[-1].endswith(":") else ", ") + line.strip()
        else:
            parts.append(line.strip().rstrip("."))
    if re.search(r"Could not override '(groups|adversary)'", text):
        parts.append(METHOD_NODE_GROUPS)
    return "; ".join(parts)


def hydra_app(config_name: str) -> Callable[[Callable[[DictConfig], Any]], Callable[[], None]]:
    """``@hydra.main`` over ``conf/<config_name>.yaml`` (`CONF_DIR`), except that a config Hydra cannot
    compose ends like every user error: one line, exit 2 (Hydra prints several lines and exits
    with 1). ``HYDRA_FULL_ERROR=1`` is Hydra's switch to raise its errors instead of printing
    them; unexpected errors then show their whole traceback. A multirun whose jobs failed
    (`JobFailed`) still ends with Hydra's summary line and exit status 1."""

    def decorate(task: Callable[[DictConfig], Any]) -> Callable[[], None]:
        app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(task)

        @functools.wraps(task)
        def main() -> None:
            os.environ["HYDRA_FULL_ERROR"] = "1"
            try:
                app()
            except JobFailed as err:
                print(err, file=sys.stderr, flush=True)
                sys.exit(1)
            except CompactHydraException as err:
                sys.exit(report(ConfigError(hydra_message(err))))

        return main

    return decorate


def compose_run_config(overrides: list[str]) -> DictConfig:
    """The training config ``python -m robustnlu <overrides>`` would run, with its ``hydra``
    node (sweep dir, sweeper settings), checked against the schema: for drivers that launch
    multiruns (robustnlu.hpo, robustnlu.efficiency) and must know where they will write."""
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    except CompactHydraException as err:
        raise ConfigError(hydra_message(err)) from err
    with open_dict(cfg):  # what the multirun's jobs will see as ${hydra:runtime.output_dir}
        cfg.hydra.runtime.output_dir = cfg.hydra.sweep.dir
    hydra_config = HydraConfig.instance()
    previous, hydra_config.cfg = hydra_config.cfg, None
    try:
        hydra_config.set_config(cfg)  # resolves ${hydra:...} as in a job
        check_config(cfg, "config")
    finally:
        hydra_config.cfg = previous
    return cfg


def run_multirun(args: list[str]) -> None:
    """``python -m robustnlu -m <args>`` in a subprocess (printed first); a failure exits with its status."""
    cmd = [sys.executable, "-m", "robustnlu", "-m", *args]
    print("+ " + " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, env=os.environ.copy()).returncode
    if rc != 0:
        raise SystemExit(rc)


__all__ = ["JobFailed", "compose_run_config", "hydra_app", "hydra_message", "run_multirun", "run_or_exit"]
