"""The runs a report reads (`discover`, via `robustnlu.rundir`), their scenario and their metrics.

Scenario (robustnlu/scenario.py) = (dataset, drift kind, partial, validation): per dataset {slot value, slot context}
drift × {full, partial} × {i.i.d., o.o.d.} validation = 8 scenarios (core paper section 5). A
*model* is one finished run (a directory holding ``results.json``); the paper averages four
models per method and scenario (two hyperparameter settings × two seeds). Runs that did not
finish (``status.json`` says failed, interrupted or running, or there is no ``results.json``)
are listed as `Incomplete`, and so are a sweep's jobs that left no ``status.json`` (`jobs_without_status`).
A mean pools the models of one method and scenario only where they trained with one setting but
the seed (`check_one_setting`), or, where an HPO search's ``best_params.json`` is read, where they
are exactly the runs it chose (``Run.search``; `robustnlu.analysis.searches`): its best settings
× 2 seeds, which may differ in the keys it searched too (`other_settings`).

The worst-cluster figures count only test clusters of at least ``min_cluster_size`` utterances
(default `MIN_CLUSTER_SIZE` = 10, `robustnlu.metrics.registry`), so that clusters of 1-2 test
utterances do not decide them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from robustnlu.errors import DataError, RobustNLUError
from robustnlu.metrics.registry import MIN_CLUSTER_SIZE, TESTED, drop, worst_cluster, worst_cluster_key
from robustnlu.rundir import HYDRA_SETTINGS, RunDir, walk
from robustnlu.scenario import Scenario
from robustnlu.sweep_jobs import (OPTUNA_SWEEPER, changed_settings, job_hash, read_record, read_sweep, shown_overrides,
                                  shown_setting, under, varying)
from robustnlu.sweep_state import TRAINING_CONFIG, sweep_status, sweeps_in

if TYPE_CHECKING:
    from robustnlu.analysis.searches import Search

BASELINE = "erm"


class StudyError(RobustNLUError):
    """Input a report cannot be built from (names the directory)."""


@dataclass(frozen=True)
class Run:
    path: Path
    results: dict[str, Any]
    #: the HPO search whose best_params.json chose it as a model (`robustnlu.analysis.searches`)
    search: Search | None = None

    @property
    def method(self) -> str:
        return str(self.results["method"])

    @property
    def seed(self) -> int:
        return int(self.results["seed"])

    @property
    def scenario(self) -> Scenario:
        return Scenario.of_results(self.results)

    @property
    def dir(self) -> RunDir:
        return RunDir(self.path)

    def value(self, key: str, min_cluster_size: int = MIN_CLUSTER_SIZE) -> float | None:
        """A test metric (``drop/<m>``: `drop`; ``worst_group_min<n>/<m>``: over the clusters of
        at least ``min_cluster_size`` test utterances, `worst_cluster`), None if the run lacks it.
        Computed from the stored valid and test metrics, so runs recorded before results.json
        held them (``measures``) read the same."""
        metrics = self.results["metrics"]
        family, _, name = key.partition("/")
        if family == "drop":
            return drop(metrics["valid"], metrics["test"], name)
        if key == worst_cluster_key(name):  # the registry's key, at this report's floor
            return worst_cluster(metrics["test"], name, min_cluster_size)[0]
        value = metrics["test"].get(key)
        return None if value is None else float(value)


@dataclass(frozen=True)
class Incomplete:
    """A run without ``results.json``: state ``failed``, ``running`` (unfinished or killed) or what
    ``status.json`` says, ``error`` as the run recorded it; or a job of a training sweep that holds
    no run (`jobs_without_status`), in its state and with why (``folder`` False: a job that made no
    folder, ``path`` its sweep's)."""

    path: Path
    state: str
    error: str | None
    folder: bool = True

    @property
    def dir(self) -> RunDir | None:
        return RunDir(self.path) if self.folder else None


def jobs_without_status(path: Path) -> list[Incomplete]:
    """The jobs of the training sweeps at and below ``path`` (`robustnlu.sweep_state.sweeps_in`: a
    folder holding ``multirun.yaml``) that hold no run (no ``results.json`` nor ``status.json``), in
    their order and state as ``python -m robustnlu.sweep status`` reads them (`sweep_status`): a job
    with a folder but no status.json died before it wrote one (or is starting), a job without a
    folder never started (its overrides that tell it from the sweep's others shown)."""
    found: list[Incomplete] = []
    for folder in sweeps_in(path):
        sweep = read_sweep(folder)
        if sweep is None or sweep.config_name != TRAINING_CONFIG or RunDir(folder).is_run():
            continue
        _, jobs = sweep_status(folder)
        keys = varying([job.overrides for job in jobs if job.listed])
        seen: set[Path | str] = set()
        for job in jobs:
            key = job.folder if job.folder is not None else job_hash(job.overrides)
            if key in seen or (job.folder is not None and RunDir(job.folder).is_run()):
                continue
            seen.add(key)
            if job.folder is None:
                why = "; ".join(filter(None, [f"no job folder: never started ({shown_overrides(job.overrides, keys)})",
                                              job.note]))
                found.append(Incomplete(folder, job.state, why, folder=False))
            else:
                found.append(Incomplete(job.folder, job.state, job.error or job.note or "no status.json yet"))
    return found


def discover(paths: Sequence[Path]) -> tuple[list[Run], list[Incomplete]]:
    """Finished runs (``results.json``) and incomplete ones (``status.json`` only, and the jobs of the
    sweeps below that hold no run: `jobs_without_status`) found recursively under ``paths``
    (`robustnlu.rundir.walk`), each once, sorted by path. Raises `StudyError` naming the first path
    that does not exist or holds neither; `DataError` for an unreadable JSON file or sweep record."""
    seen: set[Path] = set()
    seen_jobs: set[tuple[Path, str | None]] = set()
    runs: list[Run] = []
    incomplete: list[Incomplete] = []
    for path in paths:
        path = Path(path)
        if not path.is_dir():
            raise StudyError(f"{path}: not a directory")
        found = 0
        for run_dir in walk(path):
            found += 1
            key = run_dir.path.resolve()
            if key in seen:
                continue
            seen.add(key)
            if run_dir.finished():
                runs.append(Run(run_dir.path, run_dir.results()))
            else:
                info = run_dir.status()
                state = str(info.get("state", "unknown"))
                if state == "finished":
                    state = "finished without results.json"
                incomplete.append(Incomplete(run_dir.path, state, info.get("error")))
        for job in jobs_without_status(path):
            found += 1
            if (key := (job.path.resolve(), job.error)) not in seen_jobs:  # a sweep given twice: its jobs once
                seen_jobs.add(key)
                incomplete.append(job)
        if not found:
            raise StudyError(f"{path}: no runs found (no results.json or status.json below it)")
    if not runs:
        raise StudyError(f"{', '.join(map(str, paths))}: no finished runs (no results.json), "
                         f"only {len(incomplete)} failed or unfinished")
    runs.sort(key=lambda r: str(r.path))
    incomplete.sort(key=lambda r: str(r.path))
    return runs, incomplete


def check_distinct(runs: Sequence[Run]) -> None:
    """`StudyError` naming the first of ``runs`` (in their order) that is the same run as an earlier
    one: the same method and seed trained in the same folder (``paths.output_dir`` of its config),
    e.g. a copied sweep beside its original. Counted twice, it would be two models of a method."""
    first: dict[tuple[Any, ...], Run] = {}
    for run in runs:
        paths = (run.results.get("config") or {}).get("paths") or {}
        trained = paths.get("output_dir") if isinstance(paths, dict) else None
        if trained is None:
            continue
        key = (str(trained), run.method, run.seed)
        if key in first:
            raise StudyError(f"{run.path}: the same run as {first[key].path} (both record training in "
                             f"{trained}: a copy?); give the report one of them")
        first[key] = run


def _utterances(run: Run) -> tuple[frozenset[tuple[str, Any]], ...]:
    """The (uid, cluster) of each of the run's valid and test predictions."""
    return tuple(frozenset((row["uid"], row.get("group")) for row in run.dir.predictions(split))
                 for split in ("valid", "test"))


def check_one_split(runs: Sequence[Run]) -> None:
    """`StudyError` naming the first of ``runs`` (in their order) trained on another split of its
    scenario than an earlier run of that scenario: another ``drift.split_key`` and other valid or
    test utterances or clusters (other drift settings or data under one scenario name, whose test
    sets and worst clusters a mean must not mix). The key alone does not tell: it also names where
    the clustering came from."""
    first: dict[Scenario, Run] = {}
    for run in runs:
        key = run.results["drift"].get("split_key")
        if key is None:
            continue
        other = first.setdefault(run.scenario, run)
        other_key = other.results["drift"]["split_key"]
        if key != other_key and _utterances(run) != _utterances(other):
            raise StudyError(f"{run.path}: another split of scenario {run.scenario.name} than {other.path} "
                             f"(split key {key[:12]} vs {other_key[:12]}, other valid or test utterances or "
                             "clusters: other drift or data settings); report them separately")


#: the config keys in which the models of one method and scenario may differ: the seed (one model
#: per seed), the scenario's name (the scenario itself is read from results.json; its name's
#: spelling changed: ``snips-slot_context-False-iid``, now ``...-full-iid``) and AdamW's kernel
#: (``optimizer.fused``: the same update to float rounding, robustnlu/optim/adamw.py, as a GPU's
#: non-deterministic kernels are; the committed ERM records of docs/studies.md's recipe were
#: trained with either), ``torch.compile`` (``trainer.compile``: the same step to float rounding)
#: and length buckets (``data.pad_to_multiple_of``: masked padding, the same losses); the models an
#: HPO search chose also in the keys it searched (`other_settings`' ``searched``)
POOLED_OVER = ("seed", "scenario", "optimizer.fused", "trainer.compile", "data.pad_to_multiple_of")


def trained_config(run: Run) -> dict[str, Any] | None:
    """The resolved config ``run`` trained with: its results.json's ``config``, else its
    ``config.yaml`` (`DataError` if that cannot be read whole); None where it records neither."""
    config = run.results.get("config")
    if isinstance(config, dict):
        return config
    if run.dir.config_file.is_file():
        return OmegaConf.to_container(run.dir.config(), resolve=False)
    return None


def other_settings(config: dict[str, Any], other: dict[str, Any],
                   searched: Iterable[str] = ()) -> dict[str, tuple[Any, Any]]:
    """The settings in which two runs' configs (`trained_config`) differ, as (other's, config's): their
    `changed_settings` (where a run writes and how it logs left out, as in a job's identity; paths
    inside each run's own folder and data folder read relative to it; a config written before a
    setting existed given the value that does what its code did, `upgrade_run_config`), but
    `POOLED_OVER` and the keys ``searched`` (those an HPO search varied, for two runs it chose: core
    paper section 5, 2 settings × 2 seeds). A key one config has and the other lacks (``+key=value``
    on one run's command line) is a setting they differ in, its missing value `ABSENT`."""
    pooled = (*POOLED_OVER, *searched)
    return {k: v for k, v in changed_settings(other, config).items() if not under(k, pooled)}


def _origin(run: Run) -> str:
    return f"chosen by HPO search {run.search.path}" if run.search else "chosen by no HPO search"


def unchosen_trial(run: Run) -> str | None:
    """Where ``run`` is a trial of an Optuna search that no ``best_params.json`` chose from (the
    search run alone, or `robustnlu.hpo` stopped before it wrote one; its ``.hydra/hydra.yaml``
    names `OPTUNA_SWEEPER`), what to run to choose the search's models (core paper section 5: its
    2 best settings × 2 seeds); None otherwise."""
    path = Path(run.path)
    if run.search is not None or not (path / HYDRA_SETTINGS).is_file():
        return None
    try:
        sweep = read_record(path.parent, path / HYDRA_SETTINGS)  # a job's record of its sweep's settings
    except DataError:
        return None
    if sweep.sweeper != OPTUNA_SWEEPER:
        return None
    return (f"trials of the Optuna search {sweep.path}, which has no best_params.json: choose and retrain its 2 best "
            f"settings with python -m robustnlu.hpo --no-search <the search's overrides> hydra.sweep.dir={sweep.path}, "
            f"then report {sweep.path}")


def check_one_setting(runs: Sequence[Run]) -> list[Run]:
    """`StudyError` naming the first of ``runs`` (in their order) trained with other settings than an
    earlier run of its method and scenario (`other_settings`: e.g. 1 and 4 epochs, another learning
    rate; runs an HPO search chose may differ in the keys it searched), or chosen by another HPO
    search or by none (``Run.search``: the models of a search's method and scenario are exactly
    the runs it chose): a mean over them is no mean of one method's models. Returns the runs whose settings
    cannot be compared (no `trained_config`: a results.json written by hand) in a method and
    scenario of more than one run: they are pooled and the report names them, a report with the
    doubt stated being of more use than none."""
    first: dict[tuple[Scenario, str], tuple[Run, dict[str, Any]]] = {}
    origin: dict[tuple[Scenario, str], Run] = {}  # the first run of each cell: which search chose it
    size: dict[tuple[Scenario, str], int] = defaultdict(int)
    uncompared: list[tuple[tuple[Scenario, str], Run]] = []
    for run in runs:
        cell = (run.scenario, run.method)
        size[cell] += 1
        if (other := origin.setdefault(cell, run)).search != run.search:
            raise StudyError(f"{run.path}: {run.method} in scenario {run.scenario.name}: {_origin(run)}, {other.path} "
                             f"{_origin(other)}; report them separately")
        config = trained_config(run)
        if config is None:
            uncompared.append((cell, run))
            continue
        other, other_config = first.setdefault(cell, (run, config))
        if differ := other_settings(config, other_config, run.search.searched if run.search else ()):
            shown = "; ".join(f"{k}: {shown_setting(a)} vs {shown_setting(b)}" for k, (a, b) in differ.items())
            trials = unchosen_trial(run)
            raise StudyError(f"{run.path}: {run.method} in scenario {run.scenario.name} trained with other settings than "
                             f"{other.path} ({shown})" + (f": {trials}" if trials else "; report them separately"))
    return [run for cell, run in uncompared if size[cell] > 1]


#: what every report reads from a results.json: (dotted key, type), in the order they are checked
RESULTS_KEYS: tuple[tuple[str, type], ...] = (
    ("dataset", str), ("method", str), ("seed", int), ("drift", dict), ("drift.kind", str), ("metrics", dict),
    ("metrics.valid", dict), ("metrics.test", dict),
    *((f"metrics.{split}.{key}", float) for split in ("valid", "test") for key in TESTED),
)
TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "an object"}


def results_problem(results: dict[str, Any], keys: Sequence[tuple[str, type]] = RESULTS_KEYS) -> str | None:
    """What makes ``results`` (a results.json) unreadable for a report: the first of ``keys`` (each
    object listed before the keys inside it) missing or of another type, or a ``scenario`` /
    ``drift`` that names no scenario; None if nothing does."""
    for dotted, kind in keys:
        *parents, last = dotted.split(".")
        node: Any = results
        for key in parents:
            node = node[key]  # an object: checked before
        if last not in node:
            return f"missing key {dotted!r}"
        value = node[last]
        numbers = (int, float) if kind is float else kind
        if not isinstance(value, numbers) or isinstance(value, bool):
            return f"{dotted} must be {TYPE_NAMES[kind]}, got {value!r}"
    try:
        Scenario.of_results(results)
    except (KeyError, TypeError, AttributeError) as err:
        return f"no scenario in its scenario / drift keys ({type(err).__name__}: {err})"
    return None


def check_results(runs: Iterable[Run], keys: Sequence[tuple[str, type]] = RESULTS_KEYS) -> None:
    """`DataError` naming the first ``results.json`` that a report cannot read (`results_problem`)."""
    for run in runs:
        if problem := results_problem(run.results, keys):
            raise DataError(run.dir.results_file, None, problem)


def run_dirs_under(paths: Iterable[Path]) -> list[Path]:
    """The run directories (finished or not) at and below each of ``paths`` that is a directory
    (`robustnlu.rundir.walk`): the folders a report's output must stay out of."""
    return [run.path for path in map(Path, paths) if path.is_dir() for run in walk(path)]


def group_runs(runs: Iterable[Run]) -> dict[Scenario, dict[str, list[Run]]]:
    """Scenario → method → its runs (sorted by seed, then path); scenarios sorted, ERM first."""
    grouped: dict[Scenario, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        grouped[run.scenario][run.method].append(run)
    out = {}
    for scenario in sorted(grouped):
        methods = grouped[scenario]
        out[scenario] = {m: sorted(methods[m], key=lambda r: (r.seed, str(r.path)))
                         for m in sorted(methods, key=method_order)}
    return out


def method_order(method: str) -> tuple[bool, str]:
    """Sort key of methods: ERM (the baseline) first, then by name."""
    return method != BASELINE, method
