"""Where robustnlu finds its configs and its datasets, in a checkout and installed, and how the
paths in a config are read.

A checkout keeps them at the repository's top level, ``conf/`` and ``data/``. A wheel carries
the same two folders inside the package, as ``robustnlu/_shipped/conf`` and
``robustnlu/_shipped/data`` (copied there when the wheel is built: `robustnlu._build`).
`CONF_DIR` and `DATA_DIR` are whichever of the two this copy of robustnlu has.

Paths in a config are read as written: a relative one from the current folder (the folder the
command runs in; Hydra does not change it, ``hydra.job.chdir: false``). The shipped dataset and
suite configs name their files under ``${paths.data_dir}`` (conf/paths/default.yaml), which is
`DATA_DIR` unless set: ``paths.data_dir`` is the one setting that moves the datasets. A run's
config.yaml records the absolute paths it read; `relocate_data` reads them under another data
folder when the recorded one is gone (a run brought from another installation or machine)."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from robustnlu.errors import ConfigError

logger = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent
#: the folder inside an installed package that holds the checkout's conf/ and data/ (the name
#: `robustnlu._build` copies them to)
SHIPPED = "_shipped"
#: a checkout's root (installed: the site-packages folder, where nothing of robustnlu's is)
REPO_ROOT = PACKAGE_DIR.parent


def shipped(name: str) -> Path:
    """The shipped folder ``name`` (``conf`` or ``data``): the installed package's copy, or the
    checkout's."""
    installed = PACKAGE_DIR / SHIPPED / name
    return installed if installed.is_dir() else REPO_ROOT / name


CONF_DIR = shipped("conf")
DATA_DIR = shipped("data")
#: the folder that tools working on the repository (the reproduction's committed records, its
#: runs) start from: the checkout's root, or, installed, the current folder
PROJECT_DIR = REPO_ROOT if CONF_DIR == REPO_ROOT / "conf" else Path()


def register_resolver() -> None:
    """``${shipped_data_dir:}``, the default of ``paths.data_dir``, and
    ``${added_options:${hydra.searchpath},[<group>,...]}``, the apps' --help on the user's config
    folders (`added_options_help`) (idempotent)."""
    if not OmegaConf.has_resolver("shipped_data_dir"):
        OmegaConf.register_new_resolver("shipped_data_dir", lambda: str(DATA_DIR))
    if not OmegaConf.has_resolver("added_options"):
        OmegaConf.register_new_resolver("added_options", added_options_help)


def data_dir(cfg: Any) -> Path:
    """The datasets' folder of a composed config (``paths.data_dir``)."""
    return Path(cfg.paths.data_dir)


def shipped_config(group: str, name: str) -> dict[str, Any]:
    """``conf/<group>/<name>.yaml`` on its own, as plain containers, with ``${paths.data_dir}``
    read as the shipped datasets (`DATA_DIR`): a dataset or suite config outside a composed run
    (``load_corpus(shipped_config("dataset", "snips"))``). Mandatory values stay ``"???"``."""
    node = OmegaConf.load(CONF_DIR / group / f"{name}.yaml")
    merged = OmegaConf.create({"paths": {"data_dir": str(DATA_DIR)}, "node": node})
    return OmegaConf.to_container(merged, resolve=True)["node"]


def check_search_path(searchpath: list[str], config_name: str, choices: Mapping[str, Any]) -> None:
    """The user's config folders (``hydra.searchpath``, read after `CONF_DIR`): `ConfigError`
    for one that is not there, or that holds a config file this run read (the app's primary
    config ``<config_name>.yaml``, each option it chose) under a name robustnlu ships, with other
    contents. Hydra reads the first file of a name along the search path, so robustnlu's would
    be read and the user's silently ignored. ``choices`` is Hydra's ``runtime.choices``
    (``groups@method.groups: lda_topics``); other schemes than ``file://`` are left to Hydra."""
    names = [f"{config_name}.yaml", *(f"{key.split('@')[0]}/{option}.yaml" for key, chosen in choices.items()
                                      for option in ([chosen] if isinstance(chosen, str) else chosen or []))]
    for entry in searchpath:
        if "://" in entry and not entry.startswith("file://"):
            continue
        folder = Path(entry.removeprefix("file://"))
        if not folder.is_dir():
            raise ConfigError(f"hydra.searchpath: no such folder: {folder} (got {entry})")
        for name in names:
            ours, theirs = CONF_DIR / name, folder / name
            if theirs.is_file() and ours.is_file() and theirs.read_bytes() != ours.read_bytes():
                raise ConfigError(f"hydra.searchpath: {theirs} is not read: robustnlu's own {name} has its name "
                                  "and is read instead; give yours a name of its own")


def added_options(searchpath: Sequence[str], groups: Sequence[str]) -> dict[str, list[str]]:
    """The config options the user's config folders (``hydra.searchpath``, read as Hydra reads
    them: ``file://``, ``pkg://``) add to ``groups`` (an app's groups, ``method``,
    ``hydra/launcher``) and their sub-groups, by group, sorted: their option files but those with
    the name of one robustnlu ships (passed over, `check_search_path`). A folder that is not there
    adds none."""
    from hydra._internal.config_repository import ConfigRepository
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra.core.object_type import ObjectType
    from hydra.core.plugins import Plugins

    Plugins.instance()  # registers Hydra's config sources (file://, pkg://)
    search_path = ConfigSearchPathImpl()
    for entry in searchpath:
        search_path.append("hydra.searchpath", str(entry))
    repository = ConfigRepository(config_search_path=search_path)
    added: dict[str, list[str]] = {}
    found = list(repository.get_group_options("", ObjectType.GROUP))
    while found:
        group = found.pop()
        found += [f"{group}/{sub}" for sub in repository.get_group_options(group, ObjectType.GROUP)]
        options = [o for o in repository.get_group_options(group, ObjectType.CONFIG)
                   if not (CONF_DIR / group / f"{o}.yaml").is_file()]
        if options and any(group == g or group.startswith(f"{g}/") for g in groups):
            added[group] = sorted(options)
    return dict(sorted(added.items()))


def added_options_help(searchpath: Sequence[str], groups: Sequence[str]) -> str:
    """``${added_options:${hydra.searchpath},[<group>,...]}`` in an app's --help
    (conf/hydra/help/), ``groups`` those of its table of groups: the `added_options` to them as
    rows below that table, in its columns; "" where the user's folders add none. Hydra fills the
    help with string.Template afterwards: a dollar sign doubled."""
    rows = [textwrap.fill(", ".join(options), width=100, initial_indent=f"  {group:<28}", subsequent_indent=" " * 30)
            for group, options in added_options(list(searchpath or []), list(groups)).items()]
    if not rows:
        return ""
    return "\n\nAdded by your config folders (hydra.searchpath):\n" + "\n".join(rows).replace("$", "$$")


#: the keys of a dataset config that hold paths (jsonl: the split files; mit: ``corpora``)
DATASET_PATH_KEYS = ("path", "train", "valid", "test")


def _map_dataset_paths(config: dict[str, Any], change: Callable[[str], str]) -> dict[str, Any]:
    """``config`` with each path of its dataset config replaced by ``change(path)`` (a copy)."""
    if not isinstance(config.get("dataset"), dict):
        return config
    dataset = {k: change(v) if k in DATASET_PATH_KEYS and isinstance(v, str) else v
               for k, v in config["dataset"].items()}
    if isinstance(dataset.get("corpora"), dict):
        dataset["corpora"] = {k: change(v) if isinstance(v, str) else v for k, v in dataset["corpora"].items()}
    return {**config, "dataset": dataset}


def upgrade_run_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run config (plain containers) as the current code writes it: where one was written before
    a setting existed, that setting is given the value that does what the code of its time did, so
    that it compares with a current config (`robustnlu.sweep_jobs.changed_settings`: a resumed run,
    the runs one mean of a report pools) and runs as one. A current config is returned as it is.

    - ``paths.data_dir`` (`_upgrade_paths`): the datasets' folder, was ``paths.root``.
    - ``optimizer._target_``, ``_partial_`` and AdamW's ``fused`` (`_upgrade_optimizer`).
    - a top-level ``adversary`` (`_upgrade_adversary`): now ``method.groups`` / ``method.adversary``.
    - ``trainer.compile`` and ``data.pad_to_multiple_of`` (`_upgrade_compile`).
    """
    return _upgrade_compile(_upgrade_adversary(_upgrade_optimizer(_upgrade_paths(config))))


def _upgrade_paths(config: dict[str, Any]) -> dict[str, Any]:
    """A config written before ``paths.data_dir`` existed has ``paths.root`` instead, and its
    relative dataset paths (``data/snips``) were read from that root or, null, from the folder
    holding the shipped ``data/``: they are given here as those absolute paths,
    ``paths.data_dir`` as ``<root>/data``."""
    paths = config.get("paths")
    if not isinstance(paths, dict) or "data_dir" in paths or "root" not in paths:
        return config
    root = Path(paths["root"]) if paths["root"] else DATA_DIR.parent
    paths = {**{k: v for k, v in paths.items() if k != "root"}, "data_dir": str(root / "data")}
    return _map_dataset_paths({**config, "paths": paths},
                              lambda p: p if p == "???" or Path(p).is_absolute() else str(root / p))


#: what an AdamW config without ``fused`` ran: the per-parameter loop, PyTorch's default on the
#: CPU, before the option existed (``fused: auto`` takes the fused kernel: the same update to
#: float rounding, robustnlu/optim/adamw.py)
UNFUSED = False


def _upgrade_optimizer(config: dict[str, Any]) -> dict[str, Any]:
    """An ``optimizer=`` option written before the options named their factory (``_target_``,
    ``_partial_: true``) was called by its ``name``: given the factory the shipped option of that
    name names (conf/optimizer/<name>.yaml). An AdamW option without ``fused`` ran the loop
    (`UNFUSED`)."""
    optimizer = config.get("optimizer")
    if not isinstance(optimizer, dict) or not isinstance(name := optimizer.get("name"), str):
        return config
    shipped_option = CONF_DIR / "optimizer" / f"{name}.yaml"
    if "_target_" not in optimizer and shipped_option.is_file():
        factory = OmegaConf.load(shipped_option)
        optimizer = {"_target_": factory["_target_"], "_partial_": factory["_partial_"], **optimizer}
    if name == "adamw" and "fused" not in optimizer:
        optimizer = {**optimizer, "fused": UNFUSED}
    return {**config, "optimizer": optimizer}


def _upgrade_adversary(config: dict[str, Any]) -> dict[str, Any]:
    """A config written before each method chose its group source or adversary (``method.groups``,
    ``method.adversary``) has a top-level ``adversary`` node: empty (``adversary=none``, no group
    source) it is left out, as a current config has none; one naming a group source is kept (it
    compares as a setting the current code has not)."""
    if "adversary" in config and not config["adversary"]:
        return {k: v for k, v in config.items() if k != "adversary"}
    return config


def _upgrade_compile(config: dict[str, Any]) -> dict[str, Any]:
    """A config written before ``trainer.compile`` and ``data.pad_to_multiple_of`` existed ran eager
    (the shipped ``trainer.compile`` disabled) on batches without length buckets (null)."""
    trainer, data = config.get("trainer"), config.get("data")
    if isinstance(trainer, dict) and "compile" not in trainer:
        shipped_compile = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "trainer" / "default.yaml")["compile"])
        config = {**config, "trainer": {**trainer, "compile": {**shipped_compile, "enabled": False}}}
    if isinstance(data, dict) and "pad_to_multiple_of" not in data:
        config = {**config, "data": {**data, "pad_to_multiple_of": None}}
    return config


def relocate_data(config: dict[str, Any], data_dir_now: Path) -> dict[str, Any]:
    """A run config (plain containers, `upgrade_run_config`) whose dataset is read where the run
    read it, or, when its ``paths.data_dir`` no longer exists (the run came from another
    installation or machine), at the same place under ``data_dir_now``. Logs the move."""
    config = upgrade_run_config(config)
    before = str((config.get("paths") or {}).get("data_dir") or "").rstrip("/")
    if not before or Path(before).is_dir():
        return config
    now = str(data_dir_now)
    logger.warning("the run read its datasets under %s, which no longer exists; reading them under %s "
                   "(paths.data_dir)", before, now)
    return _map_dataset_paths({**config, "paths": {**config["paths"], "data_dir": now}},
                              lambda p: now + p[len(before):] if p == before or p.startswith(before + "/") else p)


__all__ = ["CONF_DIR", "DATA_DIR", "PACKAGE_DIR", "PROJECT_DIR", "REPO_ROOT", "SHIPPED", "added_options", "check_search_path", "data_dir",
           "register_resolver", "relocate_data", "shipped", "shipped_config", "upgrade_run_config"]
