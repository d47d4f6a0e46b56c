"""``hydra/sweeper=optuna`` (conf/hydra/sweeper/optuna.yaml): Hydra's `Sweeper` interface over
Optuna's ask-and-tell API, for Optuna >= 4 with SQLAlchemy 2. An adapter, not an optimiser: the
sampler proposes, Hydra's launcher (basic, or submitit: Slurm / local processes) runs each batch of
``n_jobs`` trials, the values the jobs return are told back. It replaces hydra-optuna-sweeper
1.3.0 (which requires optuna < 3) with the same configuration keys and search-space syntax:

- ``hydra.sweeper.params`` and sweep overrides on the command line are the search space (a
  nested mapping in ``params`` stands for its keys under its own: conf/hparams_search/optuna.yaml's
  ``method``, the space the method declares, gives ``method.k``, ``method.groups.beta``, ...):
  ``choice(a, b)`` = categorical; ``interval(lo, hi)`` = float uniform, ``int(interval(lo, hi))`` =
  int uniform, ``tag(log, ...)`` = log scale; ``range(start, stop, step)`` = stepped int / float
  (``stop`` excluded, as in Hydra); not ``glob``. Plain overrides are
  passed to every trial; a plain override of a searched key fixes it (it leaves the space). A
  space with no key left is a user error (`nothing_to_search`): n_trials runs of one setting.
- ``direction``, ``study_name``, ``storage`` (``load_if_exists``: a rerun adds trials, its sampler's
  ``seed`` shifted by the trials the study holds so that it proposes new points; a rerun whose
  fixed overrides, ``optimized_metric`` or direction differ from those the study's trials ran with
  is refused, so that one study never ranks trials of different settings, `settings_clash`; a SQLite
  file's folder is made once the settings are checked, `make_sqlite_folder`), ``n_trials``,
  ``n_jobs``, ``max_failure_rate`` (checked per batch: more failed trials of a batch than this
  share re-raises the first failure and ends the sweep), ``sampler`` (instantiated by Hydra).
- A trial whose job fails is told as FAIL (``Failed experiment: <error>`` is logged, with the
  traceback unless it is a user error's one line) and the study goes on; so are the trials of a
  batch the search was stopped in (Ctrl-C), rather than left RUNNING in the study for ever;
  ``<sweep dir>/optimization_results.yaml`` holds the best trial of the study at the end.
- A search killed outright (SIGKILL, the OOM killer, a lost node) tells nothing: its trials stay
  RUNNING. Each trial records its job's run directory and the search's process (`JOB_ATTR`), so
  the next search on the study settles, with a note on stderr, each RUNNING trial whose search is
  gone and whose run directory no live process holds (`abandoned`): a run that finished (a Slurm
  job that outlived its search) tells its value, any other is marked FAIL; a trial whose run is still
  locked by a live process (a Slurm job that outlived its search), or whose search may still run (a
  search on the study from another host), is left alone.

Single objective only: the value each job returns, the run's ``optimized_metric`` (conf/config.yaml;
logged and written with the best trial); no ``search_space`` (deprecated
in 1.3.0), ``custom_search_space`` or GridSampler. Optuna is imported when the sweeper runs, not
when Hydra scans its plugins, so a core install without the ``hpo`` extra still starts."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override, RangeSweep, Transformer, ValueType
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.errors import CompactHydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from robustnlu.errors import ConfigError, RobustNLUError, exit_with_error
from robustnlu.runlock import in_force, stale, this_process
from robustnlu.sweep_jobs import job_identity

log = logging.getLogger(__name__)

DIRECTIONS = ("maximize", "minimize")
#: the study's user attribute that records what its trials share (`study_settings`)
SETTINGS_ATTR = "robustnlu_settings"
#: a trial's user attribute that records its job, set before it is launched: ``run_dir``, the
#: folder the launcher gives it, and ``search``, the process of the search that launched it
#: (`robustnlu.runlock.this_process`)
JOB_ATTR = "robustnlu_job"


def distribution(override: Override) -> Any:
    """The Optuna distribution of a sweep override (see the module docstring)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        raise ConfigError(f"{override.input_line}: the Optuna sweeper takes choice, range or interval sweeps")
    value = override.value()
    if override.is_choice_sweep():
        return CategoricalDistribution(list(override.sweep_iterator(transformer=Transformer.encode)))
    if override.is_range_sweep():
        assert isinstance(value, RangeSweep)
        points = list(override.sweep_iterator())  # shuffle(range(...)) only reorders them
        if not points:
            raise ConfigError(f"{override.input_line}: the range is empty")
        if all(isinstance(v, int) for v in (value.start, value.stop, value.step)):
            return IntDistribution(min(points), max(points), step=abs(value.step))
        return FloatDistribution(min(points), max(points), step=abs(value.step) if len(points) > 1 else None)
    if override.is_interval_sweep():
        assert isinstance(value, IntervalSweep)
        log_scale = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return IntDistribution(value.start, value.end, log=log_scale)
        return FloatDistribution(value.start, value.end, log=log_scale)
    raise AssertionError(f"unknown sweep {override.input_line}")  # Hydra 1.3 has no other kind


def sweep_overrides(params: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``hydra.sweeper.params`` as ``key=sweep`` overrides, a nested mapping's keys under its own."""
    overrides = []
    for key, value in params.items():
        if isinstance(value, Mapping):
            overrides += sweep_overrides(value, f"{prefix}{key}.")
        else:
            overrides.append(f"{prefix}{key}={value}")
    return overrides


def search_space(overrides: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``overrides`` (``hydra.sweeper.params`` as ``key=value`` first, then the command line's) as
    (the searched keys and their distributions, the fixed overrides by key); a later override of a
    key replaces an earlier one, so a plain value on the command line fixes a searched key."""
    space: dict[str, Any] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.get_key_element()
        space.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            try:
                space[key] = distribution(override)
            except ValueError as err:  # Optuna's bounds checks: low > high, a log scale from 0
                raise ConfigError(f"{override.input_line}: {err}") from None
        else:
            fixed[key] = override.input_line
    return space, fixed


def nothing_to_search(params: Mapping[str, Any], fixed: Mapping[str, str]) -> str:
    """Why a search has an empty space: the mappings of ``params`` that are empty (a method whose
    class declares no search space) and the keys it searches that the command line ``fixed``."""
    empty = [f"{key} declares no search space" for key, value in params.items()
             if isinstance(value, Mapping) and not value]
    overridden = [key for key in search_space(sweep_overrides(params))[0] if key in fixed]
    reasons = [*empty, *([f"the command line fixes {', '.join(overridden)}"] if overridden else [])]
    return f"hydra.sweeper.params: nothing to search: {'; '.join(reasons) or 'no sweep given'}"


def space_clash(study: Any, space: Mapping[str, Any]) -> str | None:
    """Why ``space`` cannot extend ``study``: a key its trials searched with a distribution Optuna
    does not mix with the new one (another kind, scale or choices; other bounds it takes); None if
    it can."""
    from optuna.distributions import check_distribution_compatibility

    for trial in study.get_trials(deepcopy=False):
        for key, earlier in trial.distributions.items():
            if key not in space:
                continue
            try:
                check_distribution_compatibility(earlier, space[key])
            except ValueError as err:
                return (f"{key}: study {study.study_name!r} searched it as {earlier}, this search as {space[key]} "
                        f"({err}): search it as before, or name another study (hydra.sweeper.study_name=...)")
    return None


def study_settings(fixed: Sequence[str], metric: str | None) -> dict[str, str]:
    """What every trial of a study shares, by key: its fixed overrides normalized as a job's identity
    (`robustnlu.sweep_jobs.job_identity`: ``1e-3`` = ``0.001``, where it writes and how it logs left
    out) and the metric its values are."""
    settings = {entry.lstrip("~").split("=", 1)[0]: entry for entry in job_identity(fixed)}
    return {**settings, "optimized_metric": f"optimized_metric={metric}"}


def settings_clash(study: Any, settings: Mapping[str, str], direction: str) -> str | None:
    """Why a search of ``settings`` and ``direction`` cannot add trials to ``study``: its trials ran
    with other settings (`SETTINGS_ATTR`, recorded by the search that made it) or it goes the other
    way; None if they agree."""
    where = f"study {study.study_name!r}"
    fix = "run it with the same settings, or name another study (hydra.sweeper.study_name=...)"
    if study.direction.name.lower() != direction:
        return f"hydra.sweeper.direction: {where} is to {study.direction.name.lower()}, not {direction}; {fix}"
    earlier = study.user_attrs.get(SETTINGS_ATTR)
    if earlier is None:
        return None
    differ = [f"{earlier.get(key, f'no {key}')} there, {settings.get(key, f'no {key}')} here"
              for key in sorted(set(earlier) | set(settings)) if earlier.get(key) != settings.get(key)]
    if not differ:
        return None
    return f"{where} holds trials of other settings ({'; '.join(differ)}): {fix}"


def numbered_runs(trials: Sequence[Any]) -> list[list[Any]]:
    """``trials`` (asked in a row) in runs of consecutive trial numbers, each launched as one batch
    whose jobs take their trials' numbers: one run, unless another search asked trials of the study
    in between (their numbers' folders are that search's)."""
    runs: list[list[Any]] = []
    for trial in trials:
        if runs and trial.number == runs[-1][-1].number + 1:
            runs[-1].append(trial)
        else:
            runs.append([trial])
    return runs


def make_sqlite_folder(storage: str | None) -> None:
    """The folder of a SQLite ``storage``'s file (``sqlite:///outputs/hpo/optuna.db``: outputs/hpo),
    which SQLite does not make. Made when the study is first opened, after the settings are
    checked, so that a refused command leaves no folder behind."""
    from sqlalchemy.engine import make_url

    url = make_url(storage) if storage else None
    if url is not None and url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)


def abandoned(trial: Any) -> bool:
    """Whether a RUNNING ``trial`` will never be told: the search that launched it is gone (a
    process of this host that no longer runs, or an earlier instance of this Slurm job:
    `robustnlu.runlock.stale`) and no live process holds its run directory (its ``run.lock`` not
    in force, `robustnlu.runlock.in_force`). A trial without its job's record (`JOB_ATTR`) is not
    known to be."""
    record = trial.user_attrs.get(JOB_ATTR)
    if not isinstance(record, dict) or not isinstance(record.get("search"), dict) or not record.get("run_dir"):
        return False
    return stale(record["search"], 0.0) and in_force(Path(record["run_dir"])) is None


def settle_abandoned(study: Any, optimized_metric: str | None) -> None:
    """Tell the study what became of its `abandoned` trials, with one line on stderr for each
    outcome: a trial whose run finished (a Slurm job that outlived its search) its value
    (`robustnlu.rundir.optimized_value` of its ``results.json``), any other FAIL."""
    from optuna.trial import TrialState

    from robustnlu.rundir import RunDir, optimized_value

    told: dict[str, list[Any]] = {"finished": [], "failed": []}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not abandoned(trial):
            continue
        run = RunDir(Path(trial.user_attrs[JOB_ATTR]["run_dir"]))
        try:
            value = optimized_value(run.results(), optimized_metric) if run.finished() and optimized_metric else None
        except (RobustNLUError, KeyError, TypeError):  # unreadable, or not the record of a run
            value = None
        if value is None:
            study.tell(trial.number, state=TrialState.FAIL)
        else:
            study.tell(trial.number, value)
        told["failed" if value is None else "finished"].append(trial)
    for outcome, what in (("finished", "their runs finished: told their values"),
                          ("failed", "their runs held by no live process and unfinished: marked FAIL")):
        if told[outcome]:
            trials = told[outcome]
            print(f"note: study {study.study_name!r}: trial(s) {', '.join(str(t.number) for t in trials)} left RUNNING "
                  f"by a search that is gone, {what} ({', '.join(t.user_attrs[JOB_ATTR]['run_dir'] for t in trials)})",
                  file=sys.stderr, flush=True)


class OptunaSweeper(Sweeper):
    """See the module docstring; the arguments are conf/hydra/sweeper/optuna.yaml's keys."""

    def __init__(self, sampler: Any, direction: str, study_name: str | None, storage: str | None,
                 n_trials: int, n_jobs: int, max_failure_rate: float, params: DictConfig | None) -> None:
        self.sampler = sampler
        self.direction = direction
        self.study_name = study_name
        self.storage = storage
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.max_failure_rate = max_failure_rate
        self.params = params or {}

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def _check(self) -> None:
        from optuna.samplers import BaseSampler

        if self.sampler is not None and not isinstance(self.sampler, BaseSampler):
            raise ConfigError(f"hydra.sweeper.sampler must be an Optuna sampler (hydra/sweeper/sampler=tpe|random, or "
                              f"hydra.sweeper.sampler._target_=<its class>), got {self.sampler!r}")
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"hydra.sweeper.direction must be one of {DIRECTIONS}, got {self.direction!r}")
        for key in ("n_trials", "n_jobs"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"hydra.sweeper.{key} must be an integer >= 1, got {value!r}")
        rate = self.max_failure_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
            raise ConfigError(f"hydra.sweeper.max_failure_rate must be in [0, 1], got {self.max_failure_rate!r}")

    def sweep(self, arguments: list[str]) -> None:
        import optuna
        from optuna.trial import TrialState

        try:
            self._check()
            space, fixed = search_space([*sweep_overrides(self.params), *arguments])
            if not space:
                raise ConfigError(nothing_to_search(self.params, fixed))
        except ConfigError as err:
            exit_with_error(err)
        from sqlalchemy.exc import SQLAlchemyError

        try:
            make_sqlite_folder(self.storage)
            study = optuna.create_study(study_name=self.study_name, storage=self.storage, sampler=self.sampler,
                                        direction=self.direction, load_if_exists=True)
        except (ImportError, OSError, SQLAlchemyError) as err:
            from robustnlu.hpo import unopenable_storage  # here: plugin discovery imports this module in every app

            exit_with_error(unopenable_storage(self.storage, err))
        settings = study_settings(list(fixed.values()), self.config.get("optimized_metric"))
        clash = settings_clash(study, settings, self.direction) or space_clash(study, space)
        if clash is not None:
            exit_with_error(ConfigError(clash))
        settle_abandoned(study, self.config.get("optimized_metric"))
        if SETTINGS_ATTR not in study.user_attrs:
            study.set_user_attr(SETTINGS_ATTR, settings)
        seed = OmegaConf.select(self.config, "hydra.sweeper.sampler.seed", default=None)
        if study.trials and seed is not None:
            # a continued study: the same seed would propose the earlier searches' points again
            study.sampler = instantiate(self.config.hydra.sweeper.sampler, seed=int(seed) + len(study.trials))
        log.info(f"Study name: {study.study_name}")
        log.info(f"Storage: {self.storage}")
        log.info(f"Sampler: {type(self.sampler).__name__}")
        log.info(f"Direction: {self.direction}")
        log.info(f"Optimized metric: {self.config.get('optimized_metric')}")

        left = self.n_trials
        while left > 0:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, left))]
            # a job's number is its trial's, so that a search continued into its sweep dir
            # (hydra.sweep.subdir: ${hydra.job.num}) writes new folders, not its earlier trials'
            returns: list[JobReturn] = []
            try:
                for run in numbered_runs(trials):
                    batch = [(*(f"{k}={v}" for k, v in trial.params.items()), *fixed.values()) for trial in run]
                    for trial, overrides in zip(run, batch):
                        trial.set_user_attr(JOB_ATTR, {"run_dir": str(self._job_dir(overrides, trial.number)),
                                                       "search": this_process()})
                    returns += self.launcher.launch(batch, initial_job_idx=run[0].number)
            except BaseException:  # the search is stopped (Ctrl-C): its trials run no more, as Optuna's optimize
                for trial in trials[len(returns):]:
                    study.tell(trial, state=TrialState.FAIL)
                for trial, ret in zip(trials, returns):
                    self._tell(study, trial, ret)
                raise
            told = [self._tell(study, trial, ret) for trial, ret in zip(trials, returns, strict=True)]
            failed = [err for err in told if err is not None]
            if len(failed) / len(returns) > self.max_failure_rate:
                log.error(f"{len(failed)} of {len(returns)} trials failed (max_failure_rate={self.max_failure_rate})")
                raise failed[0]  # the first failed job's error, as Hydra's basic sweeper ends
            left -= len(trials)

        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not complete:
            raise CompactHydraException(f"study {study.study_name!r} has no completed trial")
        best = study.best_trial
        log.info(f"Best parameters: {best.params}")
        log.info(f"Best value: {best.value}")
        results = {"name": "optuna", "optimized_metric": self.config.get("optimized_metric"),
                   "best_params": best.params, "best_value": best.value}
        OmegaConf.save(OmegaConf.create(results), f"{self.config.hydra.sweep.dir}/optimization_results.yaml")

    def _job_dir(self, overrides: Sequence[str], number: int) -> Path:
        """The run directory the launcher gives job ``number`` of ``overrides``: its config's
        ``hydra.sweep.dir`` / ``hydra.sweep.subdir``, resolved as Hydra's `run_job` resolves them
        (the job's number and id: ``number``, as Hydra's basic launcher sets them)."""
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id = number
            cfg.hydra.job.num = number
        hydra_config = HydraConfig.instance()
        previous = hydra_config.cfg
        try:
            hydra_config.set_config(cfg)  # resolves ${hydra:...} as in the job
            return Path(os.path.abspath(Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)))
        finally:
            hydra_config.cfg = previous

    @staticmethod
    def _tell(study: Any, trial: Any, ret: JobReturn) -> Exception | None:
        """Tell ``study`` the job's value (COMPLETE) or FAIL; the job's error when it failed."""
        from optuna.trial import TrialState

        try:
            value = float(ret.return_value)  # raises the job's own error when the job failed
        except Exception as err:  # noqa: BLE001  (any job error fails its trial only)
            study.tell(trial, state=TrialState.FAIL)
            # a user error is its one line (robustnlu.cli.JobFailed); a crash comes with its traceback
            log.warning(f"Failed experiment: {err}", exc_info=None if isinstance(err, RobustNLUError) else err)
            return err
        if study.tell(trial, value).state != TrialState.COMPLETE:  # a NaN value is told as FAIL by Optuna
            return ValueError(f"trial {trial.number} returned {value}")
        return None
