"""A run directory and what is in it: the one place that knows its layout, and how run
directories are found under a sweep. Every reader of run directories goes through `RunDir`
(the study, compare, robustness and efficiency reports, evaluate, resume, a study's runner and
its records); `robustnlu.train` writes them.

A training run's directory (Hydra's runtime output dir, `robustnlu.train`) holds:

- ``results.json``: the finished run's metrics and record; ``status.json``: running / finished /
  failed (with the error) / interrupted;
- Hydra's ``.hydra/`` (``overrides.yaml``: the task overrides it was started with; ``config.yaml``:
  the config as composed; ``hydra.yaml``: Hydra's settings, robustnlu's callbacks among them);
- a sweep's job that failed: ``status.json`` says failed with the error line and the job's
  overrides (a job refused for a bad value leaves this record and nothing else), and a failure
  that is not a user error keeps its traceback in ``traceback.txt`` (`robustnlu.cli.run_or_exit`);
- ``predictions/<split>.jsonl`` (a study's record keeps ``<split>.jsonl.xz``);
- ``config.yaml``, the resolved config;
- ``checkpoints/``: the best checkpoint (``results.json`` names it) and, while the run is
  unfinished, ``last.ckpt`` for ``resume=true``;
- ``csv/metrics.csv``, the per-epoch log (a study's record keeps it as ``metrics.csv``);
- with ``logger=wandb``, ``wandb.json``: the id, name and folder of the run's W&B run (its files
  in the run's ``wandb/``, or a sweep's ``<sweep dir>/wandb/``) and the run directory then;
- with noise suites, ``robustness.json`` and ``robustness.md`` (`robustnlu.evaluate`);
- a study's record's ``meta.json`` (command, hardware, wall time: `robustnlu.studies.runner`).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from robustnlu.errors import ConfigError, DataError, yaml_problem
from robustnlu.io import CORRUPT_STREAM, data_file, open_data
from robustnlu.sweep_jobs import job_hash, job_positions

RESULTS = "results.json"
STATUS = "status.json"
CONFIG = "config.yaml"
META = "meta.json"
ROBUSTNESS = "robustness.json"
TRACEBACK = "traceback.txt"
WANDB = "wandb.json"
#: Hydra's record of the task overrides a run or job was started with
HYDRA_OVERRIDES = Path(".hydra") / "overrides.yaml"
#: Hydra's record of the config as composed (interpolations unresolved), written as a job starts
HYDRA_CONFIG = Path(".hydra") / "config.yaml"
#: Hydra's record of its own settings for the run (the app's callbacks among them)
HYDRA_SETTINGS = Path(".hydra") / "hydra.yaml"
LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"
#: sub-directories of a run directory that never hold runs (not walked)
RUN_SUBDIRS = frozenset({"checkpoints", "predictions", "csv", "wandb", ".hydra"})
#: Keys every prediction row must have (`read_predictions`).
PREDICTION_KEYS = ("uid", "gold_intent", "pred_intent", "gold_tags", "pred_tags")


def status_record(state: str, **extra: Any) -> dict[str, Any]:
    """What ``status.json`` holds: the state, when, and which process on which host (and Slurm
    job) wrote it, with ``extra`` (the error, where a run resumed from, ...)."""
    return {"state": state, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
            "pid": os.getpid(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"), **extra}


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; `DataError` (file, line, problem) otherwise."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(path, err.lineno, f"invalid JSON: {err.msg}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(path, None, f"cannot read: {err}") from None
    if not isinstance(data, dict):
        raise DataError(path, None, "expected a JSON object")
    return data


def optimized_value(results: Mapping[str, Any], optimized_metric: str) -> float:
    """The value of ``optimized_metric`` (``<split>/<metric>``, conf/config.yaml) in the run's
    results: what an Optuna sweeper optimises (conf/hparams_search/): the value the
    training app returns, or that a finished run tells a study its search left unfinished."""
    split, metric = optimized_metric.split("/", 1)
    scores = results["metrics"][split]
    if metric not in scores:
        raise ConfigError(f"optimized_metric={optimized_metric}: the run has no {split} metric {metric!r} "
                          f"({', '.join(k for k in scores if not k.startswith('group/'))})")
    return scores[metric]


@dataclass(frozen=True)
class RunDir:
    """One run directory (or a study's record, which has the same files)."""

    path: Path

    @classmethod
    def of_checkpoint(cls, checkpoint: str | Path) -> RunDir:
        """The run directory of ``RUN/checkpoints/<file>.ckpt``."""
        return cls(Path(checkpoint).resolve().parent.parent)

    @property
    def results_file(self) -> Path:
        return self.path / RESULTS

    @property
    def status_file(self) -> Path:
        return self.path / STATUS

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG

    @property
    def meta_file(self) -> Path:
        """A study's record's ``meta.json`` (command, hardware, wall time)."""
        return self.path / META

    @property
    def robustness_file(self) -> Path:
        """``robustness.json``: the noise suites' scores (`robustnlu.evaluate`)."""
        return self.path / ROBUSTNESS

    @property
    def wandb_file(self) -> Path:
        """``wandb.json``: the W&B run the run logged into (`robustnlu.resume.record_wandb_run`)."""
        return self.path / WANDB

    @property
    def last_checkpoint(self) -> Path:
        return self.path / LAST_CHECKPOINT

    @property
    def traceback_file(self) -> Path:
        """``traceback.txt``: the traceback of a sweep job's failure that was not a user error."""
        return self.path / TRACEBACK

    def overrides(self) -> list[str] | None:
        """The task overrides the run was started with: Hydra's ``.hydra/overrides.yaml``, else
        the ``overrides`` of a failed job's ``status.json``; None if neither says."""
        try:
            found = yaml.safe_load((self.path / HYDRA_OVERRIDES).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            found = None
        if found is None and self.status_file.is_file():
            try:
                found = self.status().get("overrides")
            except DataError:
                found = None
        if isinstance(found, list) and all(isinstance(o, str) for o in found):
            return found
        return None

    def job_hash(self) -> str | None:
        """`robustnlu.sweep_jobs.job_hash` of `overrides` (which job of a sweep this is); None if
        the overrides are not recorded or do not parse."""
        overrides = self.overrides()
        try:
            return job_hash(overrides) if overrides is not None else None
        except ValueError:
            return None

    @property
    def metrics_csv(self) -> Path:
        """The per-epoch log: a record's ``metrics.csv``, else a run's ``csv/metrics.csv``."""
        record = self.path / "metrics.csv"
        return record if record.is_file() else self.path / "csv" / "metrics.csv"

    def finished(self) -> bool:
        """Whether it holds ``results.json``."""
        return self.results_file.is_file()

    def is_run(self) -> bool:
        """Whether it holds ``results.json`` or ``status.json`` (a run, finished or not)."""
        return self.finished() or self.status_file.is_file()

    def results(self) -> dict[str, Any]:
        return read_json_object(self.results_file)

    def config(self) -> DictConfig:
        """``config.yaml``, the run's resolved config; `DataError` naming it if it is missing,
        unreadable, not a YAML mapping or cut short (no line break at its end: `robustnlu.train`
        writes one)."""
        path = self.config_file
        if not path.is_file():
            raise DataError(path, None, "no such run config")
        try:
            text = path.read_text(encoding="utf-8")
            cfg = OmegaConf.create(text)
        except (OSError, UnicodeDecodeError) as err:
            raise DataError(path, None, f"cannot read: {err}") from None
        except yaml.YAMLError as err:
            _, line, problem = yaml_problem(err)
            raise DataError(path, line, f"invalid YAML: {problem}") from None
        if not text.endswith("\n"):
            raise DataError(path, text.count("\n") + 1, "no line break at the end of the last line: the file is cut short")
        if not isinstance(cfg, DictConfig):
            raise DataError(path, None, "not a run config: expected a YAML mapping")
        return cfg

    def started_config(self) -> DictConfig | None:
        """The config the run was started with: `config` (resolved), else Hydra's
        ``.hydra/config.yaml`` (as composed: interpolations unresolved), there from the moment a
        job starts, before the run writes anything; None where neither can be read."""
        try:
            return self.config()
        except DataError:
            pass
        try:
            cfg = OmegaConf.load(self.path / HYDRA_CONFIG)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return None
        return cfg if isinstance(cfg, DictConfig) else None

    def status(self) -> dict[str, Any] | None:
        """``status.json``, None if there is none."""
        return read_json_object(self.status_file) if self.status_file.is_file() else None

    def wandb_record(self) -> dict[str, Any] | None:
        """``wandb.json`` (``id``, ``name``, ``dir``: the W&B run's folder, ``run_dir``: the run
        directory when it was written), None if the run logged no W&B run."""
        return read_json_object(self.wandb_file) if self.wandb_file.is_file() else None

    def wandb_save_dir(self) -> Path | None:
        """Where the run's W&B files are (in ``<it>/wandb/``; None without ``wandb.json``): the save
        dir of the W&B run folder ``wandb.json`` names (``dir``: ``<save dir>/wandb/<run
        folder>``), where a resumed run goes on writing. A sweep's job resumed as a single run
        (``hydra.run.dir=<sweep dir>/<job>``) thus stays in ``<sweep dir>/wandb/``, and one ``wandb
        sync <sweep dir>/wandb`` still uploads the whole sweep.

        A save dir that was the run directory or one of its parents (``run_dir``: where the run
        directory was) is found at the same place relative to the run directory now: a run
        directory or sweep moved or copied since has its W&B files in its own ``wandb/``, not in
        the old place (gone, or the original's), as its checkpoints' paths are read in the new
        place (`robustnlu.resume.RelocatableModelCheckpoint`). Any other recorded folder (a
        ``logger.wandb.save_dir`` of the first launch), or one of a record without ``run_dir``, is
        taken as it is."""
        record = self.wandb_record()
        if record is None:
            return None
        save_dir = Path(record["dir"]).parents[1]
        then = Path(record["run_dir"]) if record.get("run_dir") else None
        if then is None or not (then == save_dir or save_dir in then.parents):
            return save_dir
        return Path(*self.path.parts[:len(self.path.parts) - len(then.relative_to(save_dir).parts)])

    def meta(self) -> dict[str, Any]:
        """A study's record's ``meta.json``, {} if there is none."""
        return read_json_object(self.meta_file) if self.meta_file.is_file() else {}

    def best_checkpoint(self) -> Path:
        """The best checkpoint that ``results.json`` names."""
        return self.path / self.results()["best_checkpoint"]

    def predictions_file(self, split: str = "test") -> Path:
        """``predictions/<split>.jsonl``, or a record's ``<split>.jsonl.xz`` when only that exists
        (`robustnlu.io.data_file`)."""
        return data_file(self.path / "predictions" / f"{split}.jsonl")

    def predictions(self, split: str = "test") -> list[dict[str, Any]]:
        """The rows of `predictions_file` (`read_predictions`); `DataError` if there is none."""
        path = self.predictions_file(split)
        if not path.is_file():
            raise DataError(path, None, f"no {split} predictions (is the run finished?)")
        return read_predictions(path)


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a text file (``.gz``, ``.xz``: decompressed, `robustnlu.io.open_data`),
    numbered from 1; `DataError` naming the file if it cannot be read to its end (a compressed
    stream cut short or corrupt, bytes that are not UTF-8), with the last line read."""
    lineno = 0
    try:
        with open_data(path, "rt", encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                yield lineno, line
    except (OSError, *CORRUPT_STREAM, UnicodeDecodeError) as err:
        raise DataError(path, None, f"cannot be read past line {lineno} (cut short or corrupt?): "
                                    f"{type(err).__name__}: {err}") from None


def read_predictions(path: Path) -> list[dict[str, Any]]:
    """The prediction rows of a ``.jsonl`` file (or ``.jsonl.xz``, ``.jsonl.gz``), one JSON object
    per line with at least the keys `PREDICTION_KEYS`; blank lines are skipped. Raises `DataError`
    naming the file and line of a malformed row (invalid JSON, missing key, wrong type, tag
    sequences of different lengths, duplicate uid; a compressed file cut short, `numbered_lines`)
    or naming the file if it does not exist."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "no such predictions file")
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for lineno, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(path, lineno, f"invalid JSON: {err.msg}") from None
        if not isinstance(row, dict):
            raise DataError(path, lineno, f"expected a JSON object, got {type(row).__name__}")
        missing = [key for key in PREDICTION_KEYS if key not in row]
        if missing:
            raise DataError(path, lineno, f"missing key(s) {', '.join(missing)}")
        if not isinstance(row["uid"], str):
            raise DataError(path, lineno, f"uid must be a string, got {row['uid']!r}")
        for key in ("gold_intent", "pred_intent"):
            if not isinstance(row[key], str):
                raise DataError(path, lineno, f"{key} must be a string, got {row[key]!r}")
        for key in ("gold_tags", "pred_tags"):
            if not (isinstance(row[key], list) and all(isinstance(t, str) for t in row[key])):
                raise DataError(path, lineno, f"{key} must be a list of strings")
        if len(row["gold_tags"]) != len(row["pred_tags"]):
            raise DataError(path, lineno, f"{len(row['pred_tags'])} predicted tags but "
                                          f"{len(row['gold_tags'])} gold tags")
        if row["uid"] in seen:
            raise DataError(path, lineno, f"uid {row['uid']!r} already on line {seen[row['uid']]}")
        seen[row["uid"]] = lineno
        rows.append(row)
    return rows


def walk(root: Path) -> Iterator[RunDir]:
    """The runs (`RunDir.is_run`) at and below ``root``, in sorted path order, not descending
    into a run directory nor into a run's own sub-folders (`RUN_SUBDIRS`)."""
    stack = [Path(root)]
    while stack:
        folder = stack.pop()
        run = RunDir(folder)
        if run.is_run():
            yield run
            continue
        stack.extend(sorted((p for p in folder.iterdir() if p.is_dir() and p.name not in RUN_SUBDIRS), reverse=True))


def job_order(path: Path) -> tuple[bool, int, str]:
    """Sort key of job directories named by number (``<job number>`` or ``<job number>-<name>``,
    an Optuna search's trials): numbered ones first, by number; then by name."""
    number = path.name.split("-", 1)[0]
    return (not number.isdigit(), int(number) if number.isdigit() else 0, path.name)


def sweep_runs(path: Path) -> list[RunDir]:
    """``path`` if it is a finished run, else its finished sub-directories (a Hydra multirun's
    jobs) in job order: the order of the sweep's job list (its ``multirun.yaml``,
    `robustnlu.sweep_jobs.job_positions`), then `job_order`; [] if neither."""
    if RunDir(path).finished():
        return [RunDir(path)]
    if not path.is_dir():
        return []
    runs = [RunDir(p) for p in path.iterdir() if RunDir(p).finished()]
    positions = job_positions(path) if runs else {}

    def order(run: RunDir) -> tuple[int, tuple[bool, int, str]]:
        position = positions.get(run.job_hash() or "", len(positions)) if positions else 0
        return position, job_order(run.path)

    return sorted(runs, key=order)


def finished_runs(dirs: Iterable[Path]) -> list[RunDir]:
    """The finished runs of `walk` under each of ``dirs``, each run once (by resolved path)."""
    seen: set[Path] = set()
    found = []
    for d in dirs:
        for run in walk(d):
            key = run.path.resolve()
            if run.finished() and key not in seen:
                seen.add(key)
                found.append(run)
    return found
