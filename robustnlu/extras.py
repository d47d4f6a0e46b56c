"""The optional parts of robustnlu and the pip extra that installs each (pyproject.toml
``[project.optional-dependencies]``): the Optuna search (``hpo``), the submitit launchers
(``slurm``), the WordNet / inflection noise (``noise``) and Weights & Biases (``wandb``).
Using one without it installed is a user error of one line that names the extra, e.g.
``error: the Optuna search (hydra/sweeper=optuna) needs the hpo extra: No module named 'optuna'
(pip install 'robustnlu[hpo]')``."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from robustnlu.errors import RobustNLUError, exit_with_error


class MissingExtra(RobustNLUError):
    """A module of an extra that is not installed; ``str(err)`` names the extra."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """``module`` imported, or `MissingExtra`: ``feature`` (what the user asked for, as they
    wrote it) needs the pip extra ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtra(f"{feature} needs the {extra} extra: {err} (pip install 'robustnlu[{extra}]')") from err


def raise_missing_extra(err: BaseException) -> None:
    """Re-raise the `MissingExtra` behind ``err`` (e.g. Hydra's ``InstantiationException`` of a
    class whose module could not import its extra), if there is one."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, MissingExtra):
            raise cause
        cause = cause.__cause__


#: the Hydra plugins that come from an extra: the start of their ``_target_`` -> (what they are,
#: the config group that selects them, the module that must import, the extra)
PLUGINS = {
    "hydra_plugins.robustnlu_plugins.optuna_sweeper.": ("the Optuna search", "hydra/sweeper", "optuna", "hpo"),
    "hydra_plugins.hydra_submitit_launcher.": ("the submitit launcher", "hydra/launcher",
                                               "hydra_plugins.hydra_submitit_launcher", "slurm"),
}


class RequireExtras(Callback):
    """Hydra callback (conf/hydra/default.yaml): before a multirun builds its sweeper and launcher,
    check that the extras they come from are installed; otherwise one error line, exit status 2."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        for node in ("sweeper", "launcher"):
            target = OmegaConf.select(config, f"hydra.{node}._target_", default="") or ""
            for prefix, (what, group, module, extra) in PLUGINS.items():
                if target.startswith(prefix):
                    choice = OmegaConf.select(config, f"hydra.runtime.choices.{group}", default=None)
                    try:
                        require(module, extra, f"{what} ({group}={choice})")
                    except MissingExtra as err:
                        exit_with_error(err)
