"""What every Hydra entry point shares: where its configs are (`robustnlu.paths.CONF_DIR`: a
checkout's conf/ or the installed package's copy), and how a user error ends a
run (one line on stderr, exit code 2, no traceback, no half-written run directory, and never a
file the invocation did not make removed: `robustnlu.rundir_claim`; a run stopped in
mid-training by a non-finite loss keeps its resumable run directory, `NonFiniteLoss`).

In a multirun (``-m``: the basic sweeper, the Optuna sweeper ``hparams_search=optuna``, the
submitit launchers) a user error fails that job only: the job prints the same line and removes
what it made of its run dir, then raises `JobFailed` (an ordinary exception) instead of exiting, so Hydra records
a failed job and the sweep goes on. The basic sweeper runs the batch's other jobs, then prints
``Error executing job with overrides: [...]`` and the line once more, and exits with status 1;
the Optuna sweeper records the trial as FAIL (``max_failure_rate``) and goes on with the study.
The failed job leaves a record in its folder (`record_failed_job`): ``status.json`` says failed,
with the error line and the job's overrides, so that ``python -m robustnlu.sweep status`` shows it
and never a job that silently went missing; a job that stopped on anything else also keeps its
traceback there (``traceback.txt``). A single run's user error still leaves nothing.

Every entry point reports a user error the same way (`robustnlu.errors.report`): the Hydra
apps (training, seqdrift, noise, evaluate) through `hydra_app` and `run_or_exit`, which also
turn Hydra's own errors (an unknown key, a group option that does not exist, an override that
does not parse) into that one line; the argparse ones (predict, report, compare, hpo,
efficiency and the analysis tools) through `robustnlu.errors.entry_point`, and argparse's own
usage errors (an unknown option, a missing argument) through `robustnlu.errors.CommandLineParser`."""

from __future__ import annotations

import argparse
import functools
import os
import platform
import re
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException, ConfigCompositionException, HydraException, InstantiationException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import InterpolationResolutionError

from robustnlu.config_schema import check_config
from robustnlu.errors import CommandLineParser, ConfigError, RobustNLUError, exit_with_error, first_line, report, yaml_problem
from robustnlu.io import atomic_write_json, atomic_write_text
from robustnlu.paths import CONF_DIR, check_search_path
from robustnlu.rundir import RunDir, status_record
from robustnlu.rundir_claim import claim, secondary_process, undo, unclaim
from robustnlu.sweep_jobs import parse_overrides

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
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if multirun:  # a single run's folder is claimed before Hydra makes it
        try:
            settings = OmegaConf.select(hydra_cfg, "callbacks.run_dir", default=None) or {}
            claim(run_dir, bool(settings.get("exclusive", False)), before_creation=False,
                  outputs=settings.get("outputs"))
        except RobustNLUError as err:  # the folder is not this job's (another process holds it): left as it is
            report(err)
            raise JobFailed(f"error: {err}") from err
    try:
        check_search_path(list(hydra_cfg.searchpath), hydra_cfg.job.config_name, hydra_cfg.runtime.choices)
        check_config(cfg, hydra_cfg.job.config_name)
        result = unwrapped(task, cfg)
    except RobustNLUError as err:
        undo(run_dir, keep=err.keeps_run_dir)
        status = report(err)
        if multirun:
            if not err.keeps_run_dir:  # those keep a run's folder as the run left it (its status.json says why)
                record_failed_job(run_dir, str(err), list(hydra_cfg.overrides.task))
            raise JobFailed(f"error: {err}") from err
        sys.exit(status)
    except Exception as err:
        if multirun:  # the folder stays as the job left it (a resumable last.ckpt among it)
            record_failed_job(run_dir, first_line(err), list(hydra_cfg.overrides.task), err)
            unclaim(run_dir)
        raise
    if multirun:
        unclaim(run_dir)
    return result


def unwrapped(task: Callable[[DictConfig], T], cfg: DictConfig) -> T:
    """``task(cfg)``; a user error raised by a constructor Hydra calls (a method's own check of
    its values), which Hydra wraps in an InstantiationException, raised as itself."""
    try:
        return task(cfg)
    except InstantiationException as err:
        if isinstance(err.__cause__, RobustNLUError):
            raise err.__cause__ from None
        raise


def record_failed_job(run_dir: Path, error: str, overrides: list[str], crash: BaseException | None = None) -> None:
    """What a sweep's failed job leaves in its folder: ``status.json`` with state ``failed``, the
    error's line and the job's task overrides; for a ``crash`` (not a user error) also its
    traceback in ``traceback.txt``, which ``status.json`` names. Where the run itself recorded its
    failure (`robustnlu.train.run` writes status.json as it fails) that record stays, naming the
    traceback; a folder that holds a finished run keeps its status. The first process of a
    multi-process job writes it. A disk that refuses the record does not hide the job's own error."""
    if secondary_process():
        return
    run = RunDir(run_dir)
    try:
        status = run.status() or {}
    except RobustNLUError:  # unreadable: replaced by the record
        status = {}
    by_this_run = status.get("pid") == os.getpid() and status.get("host") == platform.node()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if crash is not None:
            atomic_write_text(run.traceback_file, "".join(traceback.format_exception(crash)))
        if crash is not None and by_this_run and status.get("state") == "failed":
            atomic_write_json(run.status_file, {**status, "traceback": run.traceback_file.name})
            return
        if run.finished():
            return
        record = status_record("failed", error=(error.splitlines() or [""])[0], overrides=overrides)
        if crash is not None:
            record["traceback"] = run.traceback_file.name
        atomic_write_json(run.status_file, record)
    except OSError as err:
        print(f"note: {run_dir}: could not record the failure ({err})", file=sys.stderr, flush=True)


#: where a method's groups and adversary are chosen since they moved into the method's node
#: (conf/method/*.yaml's defaults): added to Hydra's message for ``groups=`` / ``adversary=``
METHOD_NODE_GROUPS = ("a method's group source is chosen with groups@method.groups=<name> (conf/groups/: "
                      "seqdrift_clusters, lda_topics, autoencoder), its learned adversary with "
                      "adversary@method.adversary=<name> (conf/adversary/: ratio_net, generative_lm)")


#: Hydra's warning for a ``hydra.searchpath`` folder that is not there, left out: the run stops
#: on it with one line (`robustnlu.paths.check_search_path`)
SEARCH_PATH_WARNING = r"provider=hydra\.searchpath in .* is not available"

#: what composing a config raises for the user's mistakes: Hydra's own errors, and a YAML file
#: that does not parse or is not UTF-8 (Hydra lets PyYAML's and Python's errors through, a
#: traceback otherwise)
COMPOSE_ERRORS = (CompactHydraException, yaml.YAMLError, UnicodeDecodeError)


def hydra_message(err: CompactHydraException | yaml.YAMLError | UnicodeDecodeError) -> str:
    """Hydra's message for a config it cannot compose, on one line (its OmegaConf cause
    included; the config search path and OmegaConf's key details left out); an override of
    ``groups=`` or ``adversary=`` gets `METHOD_NODE_GROUPS`. A YAML file that does not parse:
    ``<file>:<line>: not valid YAML: <PyYAML's problem>``; one that is not UTF-8: ``<file>: not
    valid UTF-8 ...`` (the file: the one Hydra's config loader had open, ``full_path``)."""
    if isinstance(err, yaml.YAMLError):
        file, line, problem = yaml_problem(err)
        return f"{file}:{line}: not valid YAML: {problem}" if file else f"not valid YAML: {problem}"
    if isinstance(err, UnicodeDecodeError):
        files = [frame.f_locals["full_path"] for frame, _ in traceback.walk_tb(err.__traceback__)
                 if "full_path" in frame.f_locals]
        return f"{files[-1] if files else 'a config file'}: not valid UTF-8: {err.reason} at byte {err.start}"
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


def group_value_problem(err: ValueError, overrides: list[str], config_name: str) -> str | None:
    """Hydra's ValueError for a config group given a value that is not an option's name
    (``method=null``, ``method=1``: raised as Hydra builds the defaults list, a traceback
    otherwise), on one line naming the override; None for any other ValueError. The override is
    found from what Hydra makes public: the command line (``overrides``, a sweep's choices and
    ranges as its jobs' overrides) read by Hydra's parser, a value Hydra refuses for a group (not a
    name, list or dict; to delete: not a name), of a group on the config search path (the app's
    configs and ``hydra.searchpath``, as Hydra's config loader lists them)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    refused = []
    for override in parser.parse_overrides(overrides):
        jobs = ([parser.parse_override(f"{override.get_key_element()}={value}")
                 for value in override.sweep_string_iterator()]
                if override.is_choice_sweep() or override.is_range_sweep() else [override])
        for job in jobs:
            if job.is_sweep_override() or job.is_force_add():  # an Optuna interval, a glob: values no job has yet
                continue
            value = job.value()
            if not (isinstance(value, str) or (value is None if job.is_delete() else isinstance(value, (list, dict)))):
                refused.append(job)
    if not refused:
        return None
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        for job in refused:
            parent, _, name = job.key_or_group.rpartition("/")
            if name in loader.get_group_options(parent, ObjectType.GROUP, config_name, overrides):
                return f"{job.input_line}: {err}; a config group takes the name of one of its options"
    return None


def program() -> str:
    """How the user called this command: ``python -m <module>``, or the console script's name."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return f"python -m {spec.name.removesuffix('.__main__')}" if spec is not None else Path(sys.argv[0]).name


def check_hydra_flags(prog: str) -> argparse.Namespace:
    """Hydra's own flags (``--cfg``, ``--info``, ``-m``, ...) read as Hydra's parser reads them,
    its usage errors as one line (`CommandLineParser`), before Hydra does: argparse would print
    its usage first, and two modes at once (``-m --cfg job``) would end in a ValueError's traceback.
    Returns the command line as Hydra's parser reads it (``overrides``, the flags)."""
    from hydra._internal.utils import get_args_parser

    args = CommandLineParser(prog=prog, add_help=False, parents=[get_args_parser()]).parse_args()
    modes = [flag for flag, given in (("--run", args.run), ("--multirun", args.multirun), ("--cfg", args.cfg),
                                      ("--info", args.info is not None), ("--shell-completion", args.shell_completion))
             if given]
    if len(modes) > 1:
        exit_with_error(f"{prog}: only one of --run, --multirun, --cfg, --info and --shell-completion can be given "
                        f"(got {' '.join(modes)}; see {prog} --help)")
    return args


def unknown_key(err: BaseException, overrides: list[str], config_name: str) -> ConfigError | None:
    """Hydra's "Could not override 'K'" (``K=value`` for a key the config does not have: Hydra
    suggests ``+K=value``) read by the schema: the config composed with ``+K=value`` in its place
    (a sweep: its first job, the one Hydra composed first) is checked (`compose_run_config`), and
    the schema's line returned, ``method.kk: unknown key (method has _target_, k, name; the closest:
    k) (got 3)``. None where the schema allows K (Hydra's hint is right then: an optional key, a
    Trainer argument) or the config does not compose so."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    hint = re.search(r"^To append to your config use \+(.+)$", str(err), re.MULTILINE)
    if not isinstance(err, ConfigCompositionException) or hint is None:
        return None
    try:
        (added,) = parse_overrides([hint.group(1)])
        job = BasicSweeper.split_arguments(parse_overrides(overrides), None)[0][0]
    except (ValueError, HydraException):  # a sweep the basic sweeper cannot expand (an Optuna interval)
        return None
    job = [o for o in job if parse_overrides([o])[0].key_or_group != added.key_or_group]
    try:
        compose_run_config([*job, f"+{added.input_line}"], config_name)
    except ConfigError as found:
        return None if isinstance(found.__cause__, COMPOSE_ERRORS) else found
    return None


def hydra_app(config_name: str) -> Callable[[Callable[[DictConfig], Any]], Callable[[], None]]:
    """``@hydra.main`` over ``conf/<config_name>.yaml`` (`CONF_DIR`), except that a config Hydra cannot
    compose ends like every user error: one line, exit 2 (Hydra prints several lines and exits
    with 1), and so does a user error a resolver raises. ``HYDRA_FULL_ERROR=1`` is Hydra's switch
    to raise its errors instead of printing them; unexpected errors then show their whole
    traceback. A multirun whose jobs failed (`JobFailed`) still ends with Hydra's summary line and
    exit status 1."""

    def decorate(task: Callable[[DictConfig], Any]) -> Callable[[], None]:
        app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(task)

        @functools.wraps(task)
        def main() -> None:
            args = check_hydra_flags(program())
            os.environ["HYDRA_FULL_ERROR"] = "1"
            warnings.filterwarnings("ignore", SEARCH_PATH_WARNING)
            try:
                app()
            except JobFailed as err:
                print(err, file=sys.stderr, flush=True)
                sys.exit(1)
            except COMPOSE_ERRORS as err:
                sys.exit(report(unknown_key(err, args.overrides, args.config_name or config_name)
                                or ConfigError(hydra_message(err))))
            except InterpolationResolutionError as err:  # a resolver's user error (the search space a method declares)
                cause = err.__context__
                while cause is not None and not isinstance(cause, RobustNLUError):
                    cause = cause.__context__
                if cause is None:
                    raise
                sys.exit(report(cause))
            except ValueError as err:  # after InterpolationResolutionError, a ValueError too
                problem = group_value_problem(err, args.overrides, args.config_name or config_name)
                if problem is None:
                    raise
                sys.exit(report(ConfigError(problem)))

        return main

    return decorate


def compose_run_config(overrides: list[str], config_name: str = "config") -> DictConfig:
    """The training config ``python -m robustnlu <overrides>`` would run (another app's:
    ``config_name``), with its ``hydra`` node (sweep dir, sweeper settings), checked against the
    schema: for drivers that launch multiruns (robustnlu.hpo, robustnlu.efficiency) and must know
    where they will write. A key without its + that the schema does not know either is named as
    the schema names it (`unknown_key`)."""
    from hydra import compose, initialize_config_dir

    warnings.filterwarnings("ignore", SEARCH_PATH_WARNING)
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    except COMPOSE_ERRORS as err:
        found = unknown_key(err, overrides, config_name)
        if found is not None:
            raise found from None
        raise ConfigError(hydra_message(err)) from err
    except ValueError as err:  # a config group given no option's name (``method=null``)
        problem = group_value_problem(err, overrides, config_name)
        if problem is None:
            raise
        raise ConfigError(problem) from None
    with open_dict(cfg):  # what the multirun's jobs will see as ${hydra:runtime.output_dir}
        cfg.hydra.runtime.output_dir = cfg.hydra.sweep.dir
    hydra_config = HydraConfig.instance()
    previous, hydra_config.cfg = hydra_config.cfg, None
    try:
        hydra_config.set_config(cfg)  # resolves ${hydra:...} as in a job
        check_search_path(list(cfg.hydra.searchpath), config_name, cfg.hydra.runtime.choices)
        check_config(cfg, config_name)
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
