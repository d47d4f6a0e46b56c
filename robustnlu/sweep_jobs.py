"""A sweep's jobs: what identifies one, and the job list of a sweep directory.

A job of a multirun is what its task overrides (``hydra.overrides.task``) make of the config. Its
identity (`job_identity`) is those overrides normalized — parsed, each value written in one
canonical form (``optimizer.lr=1e-3`` as written on the command line and ``0.001`` as Hydra's
basic sweeper passes it from ``optimizer.lr=1e-3,1e-4`` are the same value), ``+key`` / ``++key``
read as ``key``, sorted — less the settings that do not change what a run computes
(`NEUTRAL_SETTINGS`: where it writes, how it logs, ``resume``). The same job has the same identity
whatever the order of the overrides, whatever else the sweep holds and wherever it stands in it.

A job's folder is named by it (conf/hydra/default.yaml: ``hydra.sweep.subdir``): a readable part,
``<scenario>-<method>-seed<seed>``, and `job_hash`, 8 hex digits of the identity, through the
``${job_hash:${hydra.overrides.task}}`` resolver; the efficiency protocol's sweeps
(``<mode>-<percent>pct-seed<seed>-<hash>``, robustnlu/efficiency/__main__.py) and SeqDrift's
(``<scenario>-<hash>``, conf/seqdrift.yaml) likewise. A sweep launched again into its folder with
more values (``seed=0,1`` then ``seed=0,1,2``, with ``resume=true``) finds its finished jobs where
they are. Hydra's ``hydra.job.override_dirname`` is not used: it keeps the text as typed (``1e-3`` and
``0.001`` differ), excludes keys only by their exact name (not ``paths.*``) and grows with every
override.

The job list (`Sweep.jobs`): Hydra writes ``<sweep dir>/multirun.yaml`` when a multirun starts; its
``hydra.sweeper.params`` and task overrides are expanded here into one override list per job,
as Hydra's basic sweeper expands them (`BasicSweeper.split_arguments`), so that a job that never
started is known too. Other sweepers (the Optuna search) decide their jobs as they go: no list.

A sweep directory's jobs are every job asked for in it (`job_list`): a sweep launched into a folder
that holds another's ``multirun.yaml`` replaces that file, so the product sweeper first keeps the
earlier record as ``.multirun/<n>.yaml`` where the new sweep does not hold each of its jobs
(`keep_replaced`: ``seed=0,1`` then ``method=topk seed=2``, not ``seed=0,1`` then ``seed=0,1,2``).
Two sweeps' jobs never share a folder (a job's folder is named by its identity), so the jobs of
both are the directory's: the latest sweep's list, then the jobs of the earlier ones it does not
hold, each with the record that asked for it (its settings are those its relaunch runs with).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from robustnlu.errors import DataError, yaml_problem
from robustnlu.io import atomic_create
from robustnlu.paths import upgrade_run_config

#: settings that do not change what a run computes: where it writes and caches, how it logs and
#: shows progress, how often it saves last.ckpt, which metric ``python -m robustnlu`` returns,
#: whether it resumes: left out of a job's identity, and of the settings two run configs are compared
#: in (`changed_settings`: what a resumed run may differ in, `robustnlu.rundir_check.check_settings`, and
#: the runs one mean of a study report pools, `robustnlu.analysis.runs.check_one_setting`)
NEUTRAL_SETTINGS = ("resume", "resume_override", "keep_last_checkpoint", "optimized_metric", "paths", "logger",
                    "callbacks.progress_bar", "callbacks.last_checkpoint", "callbacks.lr_monitor",
                    "trainer.enable_progress_bar", "trainer.log_every_n_steps")
#: a setting absent from one of the two configs
ABSENT = "<absent>"
#: the checkpoint callback a run config names, as its current equal: Lightning's `ModelCheckpoint`,
#: which runs before `RelocatableModelCheckpoint` named, saves the same checkpoints and state
SAME_CHECKPOINTING = {f"{package}.callbacks.ModelCheckpoint": "robustnlu.resume.RelocatableModelCheckpoint"
                      for package in ("pytorch_lightning", "lightning.pytorch")}
#: the file Hydra writes into a sweep directory when the multirun starts
MULTIRUN_FILE = "multirun.yaml"
#: the folder of a sweep directory that keeps the ``multirun.yaml`` of earlier sweeps into it, each
#: as ``<n>.yaml`` numbered in launch order (`keep_replaced`)
EARLIER_DIR = ".multirun"
#: the ``_target_``s of the sweepers whose job list is the product of the sweep's values: Hydra's basic
#: sweeper and robustnlu's (``hydra/sweeper=product``, the default)
PRODUCT_SWEEPERS = ("hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                    "hydra_plugins.robustnlu_plugins.product_sweeper.ProductSweeper")
#: the ``_target_`` of robustnlu's Optuna sweeper (``hparams_search=optuna``, conf/hydra/sweeper/optuna.yaml)
OPTUNA_SWEEPER = "hydra_plugins.robustnlu_plugins.optuna_sweeper.OptunaSweeper"
#: the sweepers whose jobs ``python -m robustnlu.sweep relaunch`` runs again: the product sweepers
#: and its own job list sweeper (``hydra/sweeper=joblist``)
RELAUNCHABLE_SWEEPERS = (*PRODUCT_SWEEPERS, "hydra_plugins.robustnlu_plugins.job_list_sweeper.JobListSweeper")
#: hex digits of `job_hash`
HASH_DIGITS = 8


def under(key: str, nodes: Sequence[str]) -> bool:
    """Whether ``key`` is one of ``nodes`` or inside one of them."""
    return any(key == n or key.startswith(n + ".") for n in nodes)


def override_key(override: Any) -> str:
    """The key an override sets, without ``+`` / ``++`` / ``~`` (a group's package kept:
    ``groups@method.groups``)."""
    return override.key_or_group + (f"@{override.package}" if override.package is not None else "")


def parse_overrides(overrides: Iterable[str], config_loader: Any = None) -> list[Any]:
    """Hydra's parse of ``overrides``; `DataError`-free: a line Hydra cannot parse raises
    ``ValueError`` naming it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create(config_loader=config_loader)
    lines = [str(o) for o in overrides]
    try:
        return parser.parse_overrides(lines)
    except HydraException as err:
        raise ValueError(f"cannot parse the overrides {lines}: {err}") from None


def varying(jobs: Iterable[Sequence[str]]) -> set[str]:
    """The keys (`override_key`) whose overrides are not the same in every one of ``jobs``, each
    a job's task overrides (set in some, not in others; set to other values): what tells the jobs
    apart."""
    lines = [{override_key(o): o.input_line for o in parse_overrides(overrides)} for overrides in jobs]
    return {key for key in set().union(*lines) if len({job.get(key) for job in lines}) > 1}


def shown_overrides(overrides: Sequence[str], keys: set[str]) -> str:
    """Those of ``overrides`` that set one of ``keys`` (all of them if ``keys`` is empty), as typed."""
    return " ".join(o.input_line for o in parse_overrides(overrides) if not keys or override_key(o) in keys)


def job_identity(overrides: Iterable[str]) -> list[str]:
    """The normalized overrides that identify a job (see the module docstring): ``key=<value as
    JSON>`` (``~key`` for a deletion), sorted, `NEUTRAL_SETTINGS` left out; of two overrides of
    one key the later counts, as when Hydra applies them."""
    entries: dict[str, str] = {}
    for override in parse_overrides(overrides):
        key = override_key(override)
        if under(override.key_or_group, NEUTRAL_SETTINGS) or under(override.key_or_group, ("hydra",)):
            continue
        if override.is_sweep_override():  # not a job's override: kept as typed
            entries[key] = f"{key}={override.get_value_element_as_str()}"
            continue
        value = override.value()
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
        if override.is_delete():
            entries[key] = f"~{key}" if value is None else f"~{key}={text}"
        else:
            entries[key] = f"{key}={text}"
    return sorted(entries.values())


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A config's leaves by dotted key (lists and empty nodes are leaves)."""
    if isinstance(node, dict) and node:
        return {k: v for key, value in node.items() for k, v in flatten(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): node}


def changed_settings(stored: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The settings (dotted keys) that differ between two resolved run configs, as (stored,
    current), leaving out `NEUTRAL_SETTINGS`; paths inside each run's own directory are compared
    relative to it (a moved run directory is the same run), and so are the dataset paths inside
    each one's ``paths.data_dir`` (the same datasets from another installation: the same run; a
    config from before that setting: `upgrade_run_config`), and a checkpoint callback's class as
    its current equal (`SAME_CHECKPOINTING`)."""
    def leaves(config: dict[str, Any]) -> dict[str, Any]:
        config = upgrade_run_config(config)
        paths = config.get("paths") or {}
        own, data = str(paths.get("output_dir") or "\0"), str(paths.get("data_dir") or "\0")
        return {k: SAME_CHECKPOINTING.get(v, v) if k.endswith("._target_")
                else v.replace(own, "<run dir>").replace(data, "<data dir>") if isinstance(v, str) else v
                for k, v in flatten(config).items() if not under(k, NEUTRAL_SETTINGS)}

    a, b = leaves(stored), leaves(current)
    return {k: (a.get(k, ABSENT), b.get(k, ABSENT)) for k in sorted(a.keys() | b.keys())
            if a.get(k, ABSENT) != b.get(k, ABSENT)}


def shown_setting(value: Any) -> str:
    """A value of `changed_settings` as a message shows it: ``<absent>`` (`ABSENT`) bare, others as repr."""
    return ABSENT if value is ABSENT else repr(value)


def job_hash(overrides: Iterable[str]) -> str:
    """`HASH_DIGITS` hex digits of the job's identity (`job_identity`): the last part of its folder name."""
    text = "\n".join(job_identity(overrides))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_DIGITS]


def job_hash_resolver(overrides: Any) -> str:
    """``${job_hash:${hydra.overrides.task}}``: `job_hash` of a job's task overrides."""
    if isinstance(overrides, (ListConfig, DictConfig)):
        overrides = OmegaConf.to_container(overrides, resolve=True)
    if isinstance(overrides, str):
        overrides = [overrides] if overrides else []
    return job_hash(overrides or [])


def register_resolver() -> None:
    """``${job_hash:<overrides>}`` (idempotent)."""
    if not OmegaConf.has_resolver("job_hash"):
        OmegaConf.register_new_resolver("job_hash", job_hash_resolver)


@dataclass(frozen=True)
class Sweep:
    """A sweep directory and a record of a sweep into it (its ``multirun.yaml``, or an earlier
    sweep's kept in `EARLIER_DIR`), as written (unresolved)."""

    path: Path
    config: dict[str, Any]
    #: the file it was read from
    record: Path

    def get(self, key: str, default: Any = None) -> Any:
        """The value at dotted ``key`` as written in multirun.yaml (interpolations unresolved)."""
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return default if node is None else node

    @property
    def earlier(self) -> bool:
        """Whether it is the record of an earlier sweep into its directory (kept in `EARLIER_DIR`)."""
        return self.record.parent == self.path / EARLIER_DIR

    @property
    def task_overrides(self) -> list[str]:
        """The multirun's task overrides as typed (sweeps included)."""
        return [str(o) for o in self.get("hydra.overrides.task", [])]

    @property
    def hydra_overrides(self) -> list[str]:
        """The multirun's ``hydra.*`` overrides (launcher, sweep dir, ...)."""
        return [str(o) for o in self.get("hydra.overrides.hydra", [])]

    @property
    def sweeper(self) -> str:
        return str(self.get("hydra.sweeper._target_", ""))

    @property
    def product(self) -> bool:
        """Whether a product sweeper ran it (a job list that is the product of its values)."""
        return self.sweeper in PRODUCT_SWEEPERS

    @property
    def subdir(self) -> str:
        """``hydra.sweep.subdir`` as configured (unresolved)."""
        return str(self.get("hydra.sweep.subdir", ""))

    @property
    def cwd(self) -> Path | None:
        """The folder the multirun was started in (relative paths in its overrides are from there)."""
        cwd = self.get("hydra.runtime.cwd")
        return Path(cwd) if cwd else None

    @property
    def config_name(self) -> str:
        return str(self.get("hydra.job.config_name", ""))

    def jobs(self) -> list[list[str]] | None:
        """Each job's task overrides, in launch order, as Hydra's basic sweeper makes them
        (``hydra.sweeper.params`` first, then the command line's overrides); None for another
        sweeper. `DataError` for overrides that cannot be expanded."""
        if not self.product:
            return None
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.types import ValueType

        params = self.get("hydra.sweeper.params", {})
        lines = [f"{k}={v}" for k, v in params.items()] + self.task_overrides
        try:
            overrides = parse_overrides(lines)
            if any(o.value_type == ValueType.GLOB_CHOICE_SWEEP for o in overrides):  # needs the config groups
                overrides = parse_overrides(lines, config_loader())
            (jobs,) = BasicSweeper.split_arguments(overrides, None)
        except Exception as err:  # Hydra's parse and expansion errors (a link to its grammar on a line of its own)
            message = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
            raise DataError(self.record, None, f"cannot expand the sweep's overrides: {message}") from None
        return jobs


def config_loader() -> Any:
    """Hydra's config loader over the repository's conf/ (for ``glob(...)`` sweeps of config groups)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path

    from robustnlu.paths import CONF_DIR

    return ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))


def read_record(path: Path, record: Path) -> Sweep:
    """The sweep into ``path`` that ``record`` holds; `DataError` for a file that is not a multirun's record."""
    try:
        config = OmegaConf.to_container(OmegaConf.load(record), resolve=False)
    except Exception as err:  # YAML errors: their line and problem (the message spans several lines)
        _, line, problem = yaml_problem(err)
        raise DataError(record, line, f"unreadable ({type(err).__name__}: {problem})") from None
    sweep = Sweep(path, config if isinstance(config, dict) else {}, record)
    if not isinstance(sweep.get("hydra.overrides"), dict):
        raise DataError(record, None, "not a Hydra multirun record (no hydra.overrides)")
    return sweep


def read_sweep(path: str | Path) -> Sweep | None:
    """The sweep in ``path`` (its ``multirun.yaml``: the latest launched into it); None where there
    is none. `DataError` for a file that is not a multirun's record."""
    path = Path(path)
    record = path / MULTIRUN_FILE
    return read_record(path, record) if record.is_file() else None


def earlier_records(path: Path) -> list[Path]:
    """The records of earlier sweeps that ``path`` keeps (`EARLIER_DIR`), the latest first."""
    folder = Path(path) / EARLIER_DIR
    kept = [p for p in folder.glob("*.yaml") if p.stem.isdigit()] if folder.is_dir() else []
    return sorted(kept, key=lambda p: int(p.stem), reverse=True)


def read_sweeps(path: str | Path) -> list[Sweep]:
    """Every sweep into ``path`` whose record is there: its ``multirun.yaml`` (`read_sweep`), then the
    earlier ones (`earlier_records`), the latest first. `DataError` for a record that is not a multirun's."""
    latest = read_sweep(path)
    return ([latest] if latest is not None else []) + [read_record(Path(path), r) for r in earlier_records(path)]


def job_list(sweeps: Sequence[Sweep]) -> list[tuple[Sweep, list[str]]]:
    """Every job ``sweeps`` (`read_sweeps`, the latest first) asked for, each with the sweep that
    lists it: the first sweep's job list (`Sweep.jobs`), then each later one's jobs that no sweep
    before it lists. `DataError` for overrides that cannot be expanded."""
    listed: list[tuple[Sweep, list[str]]] = []
    seen: set[str] = set()
    for sweep in sweeps:
        jobs = sweep.jobs() or []
        keys = [job_hash(overrides) for overrides in jobs]
        listed += [(sweep, overrides) for overrides, key in zip(jobs, keys) if key not in seen]
        seen.update(keys)
    return listed


def keep_replaced(path: Path, jobs: Iterable[Sequence[str]]) -> Path | None:
    """Before a sweep of ``jobs`` writes its ``multirun.yaml`` into ``path``: the one there kept as
    ``<path>/.multirun/<n>.yaml`` (`EARLIER_DIR`, ``n`` one more than the last kept, or the next free
    one where another sweep took it meanwhile: `robustnlu.io.atomic_create`), unless the new
    sweep holds each of its jobs (its record then lists them all) or it has no job list; a record
    that cannot be read is kept too. The file it is kept as, or None."""
    record = Path(path) / MULTIRUN_FILE
    if not record.is_file():
        return None
    try:
        earlier = read_record(Path(path), record).jobs()
    except DataError:
        earlier = None
    else:
        new = {job_hash(overrides) for overrides in jobs}
        if earlier is None or all(job_hash(overrides) in new for overrides in earlier):
            return None
    kept = earlier_records(path)
    first = int(kept[0].stem) + 1 if kept else 1
    # a new file each: of two sweeps that start at once, the second to claim n takes n + 1
    names = (Path(path) / EARLIER_DIR / f"{number}.yaml" for number in itertools.count(first))
    return atomic_create(names, record.read_bytes())


def job_positions(path: str | Path) -> dict[str, int]:
    """`job_hash` -> position in the job list of ``path`` (`job_list`); {} where there is no list."""
    try:
        listed = job_list(read_sweeps(path))
    except DataError:
        return {}
    positions: dict[str, int] = {}
    for position, (_, overrides) in enumerate(listed):
        positions.setdefault(job_hash(overrides), position)
    return positions
