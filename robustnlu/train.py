"""`run(cfg)`: compose the pieces of one training run and write its record. Wiring only: every
computation lives in the data, model, objective, metrics and module code.

The run directory (Hydra's runtime output dir) holds:
- ``results.json``: valid and test metrics of the best checkpoint (with per-cluster and
  worst-cluster metrics under a SeqDrift split), the robustness measures (``measures``:
  ``drop/<m>``, ``<split>/worst_group_min10/<m>``, `robustnlu.metrics.registry.run_measures`),
  the drift split's key and statistics, the
  resolved config, seed, package versions, wall time, split sizes, the number of training
  batches dropped for a non-finite loss (``nonfinite_skips``, ``trainer.on_nonfinite=skip``),
  the precision and ``torch.compile`` settings it trained with (``precision``, ``compile``);
- ``predictions/{valid,test}.jsonl``: uid, tokens, gold and predicted intent and tags;
- with ``suite=[...]``: ``robustness.json`` / ``robustness.md``, the best checkpoint scored on
  noisy control / treatment pairs (`robustnlu.evaluate`), also under ``robustness`` in results.json;
- ``status.json``: running / finished / failed (`write_status`);
- ``config.yaml`` (resolved) and Hydra's ``.hydra/``; ``checkpoints/``: the best (weights only),
  and while the run is unfinished the last for ``resume=true`` (`robustnlu.resume`; a finished run
  keeps it with ``keep_last_checkpoint=true``);
  ``csv/metrics.csv`` and ``csv/hparams.yaml`` (the flat config of `robustnlu.dashboard`); with
  ``logger=wandb``: ``wandb.json`` (the W&B run's id, name and folder) and ``wandb/`` (a sweep's
  jobs share ``<sweep dir>/wandb/`` instead: `wandb_save_dir`; a resumed run writes where it
  first did: `robustnlu.rundir.RunDir.wandb_save_dir`), what `robustnlu.dashboard` logs.
"""

from __future__ import annotations

import errno
import json
import platform
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, NamedTuple

import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning_fabric.utilities.rank_zero import rank_zero_only
from pytorch_lightning.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from robustnlu.checkpoint_io import AtomicCheckpointIO
from robustnlu.config_schema import check_loaded_encoder
from robustnlu.dashboard import log_results, run_config
from robustnlu.data.datamodule import SLUDataModule
from robustnlu.data.utterance import Corpus
from robustnlu.data.readers import load_corpus
from robustnlu.distributed import check_launch
from robustnlu.errors import ConfigError, RobustNLUError, RunWriteError, first_line
from robustnlu.evaluate import evaluate_suites, write_robustness
from robustnlu.extras import require
from robustnlu.hardware import device_record
from robustnlu.io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from robustnlu.metrics.registry import RUN_SUMMARY, drop, run_measures
from robustnlu.model.encoders import build_encoder, load_tokenizer
from robustnlu.module import SLUModule
from robustnlu.noise.augment import augment_corpus
from robustnlu.paths import data_dir
from robustnlu.precision import resolve_precision
from robustnlu.predictor import Predictor
from robustnlu.rundir import RunDir, status_record
from robustnlu.rundir_claim import unclaim
from robustnlu.scenario import Scenario
from robustnlu.sweep_jobs import RELAUNCHABLE_SWEEPERS
from robustnlu.resume import ResumableCSVLogger, ResumePoint, discard_last_checkpoint, record_wandb_run, resume_point
from robustnlu.rundir_check import check_run_dir
from robustnlu.seqdrift.pipeline import make_drift_split
from robustnlu.seqdrift.shipped import SHIPPED_DIR
from robustnlu.seqdrift.split import DriftSplit

PACKAGES = ("robustnlu", "torch", "transformers", "pytorch-lightning", "torchmetrics", "hydra-core")
#: the errors of a write that the user can mend (room, quota, permissions): one line, not a traceback
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS})
#: ``trainer.*`` keys that are robustnlu's, not `pl.Trainer` arguments (read by `SLUModule.from_config`)
OWN_TRAINER_KEYS = ("on_nonfinite", "compile")


def lightning_arguments(trainer_cfg: DictConfig) -> dict[str, Any]:
    """``cfg.trainer`` without our own keys (`OWN_TRAINER_KEYS`): what `pytorch_lightning.Trainer` takes."""
    return {k: v for k, v in trainer_cfg.items() if k not in OWN_TRAINER_KEYS}
SUMMARY_METRICS = RUN_SUMMARY


def versions() -> dict[str, str]:
    return {"python": platform.python_version(), **{p: package_version(p) for p in PACKAGES}}


def package_version(package: str) -> str:
    """The installed distribution's version; robustnlu's own from the package where it is run from a
    checkout without being installed (``python -m robustnlu`` in the repository, as on a GPU machine
    that the checkout is copied to: bench/DEVICE.md)."""
    try:
        return version(package)
    except PackageNotFoundError:
        if package != "robustnlu":
            raise
        import robustnlu

        return robustnlu.__version__


def sweep_job_folder(out_dir: Path) -> Path | None:
    """A sweep job's folder below its sweep directory: the last parts of its run directory
    ``out_dir``, as many as ``hydra.sweep.subdir`` has (by default one,
    ``<scenario>-<method>-seed<seed>-<job hash>``; a study's job: its name). None for a single
    run or a run without Hydra."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    return Path(*out_dir.parts[-len(Path(HydraConfig.get().sweep.subdir).parts):])


def wandb_save_dir(out_dir: Path) -> Path:
    """Where W&B writes (into ``<dir>/wandb/``): a sweep's job into the sweep directory (its run
    directory ``out_dir`` less `sweep_job_folder`), so that one folder holds every run of the
    sweep (``wandb leet <sweep dir>/wandb`` lists them side by side, one ``wandb sync`` uploads
    them); a single run, or a run without Hydra, into ``out_dir``."""
    job = sweep_job_folder(out_dir)
    return out_dir if job is None else out_dir.parents[len(job.parts) - 1]


def logger_options(logger_cfg: DictConfig, out_dir: Path, resume: ResumePoint) -> dict[str, Any]:
    """A logger's arguments that the run decides. W&B: its folder (``save_dir: null``:
    `wandb_save_dir`; a resumed run: where its first launch wrote, `RunDir.wandb_save_dir`); a
    sweep's job is named by its folder (`sweep_job_folder`: the job hash in it tells apart jobs
    that differ in any setting, where ``logger.wandb.name`` names scenario, method and seed
    only); a resumed run continues the W&B run recorded in ``wandb.json``, its id and name. The CSV log: the step a resumed run
    continues from (`ResumableCSVLogger` keeps the rows before it)."""
    if "Wandb" in logger_cfg._target_:
        run = RunDir(out_dir)
        record = run.wandb_record() if resume.checkpoint else None
        options = {}
        if not logger_cfg.get("save_dir"):
            options["save_dir"] = str(run.wandb_save_dir() if record else wandb_save_dir(out_dir))
        job = sweep_job_folder(out_dir)
        if job is not None:
            options["name"] = str(job)
        return {**options, **({"id": record["id"], "name": record["name"], "resume": "allow"} if record else {})}
    if logger_cfg._target_ == f"{ResumableCSVLogger.__module__}.{ResumableCSVLogger.__name__}":
        return {"resume_step": resume.global_step}
    return {}


def built(key: str, node: Any, **kwargs: Any) -> Any:
    """``instantiate(node, **kwargs)``, where a constructor that refuses its arguments is a
    `ConfigError` naming the config's ``key``: the schema passes Lightning's own Trainer
    arguments and a callback's or logger's unchecked (``+trainer.limit_train_batches=-1``)."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, RobustNLUError):  # the class's own check, said in its words
            raise
        raise ConfigError(f"{key}: {first_line(err.__cause__ or err)}") from err


def build_trainer(cfg: DictConfig, resume: ResumePoint = ResumePoint(),
                  extra_callbacks: list[pl.Callback] = ()) -> pl.Trainer:
    """The trainer with the configured callbacks (then ``extra_callbacks``) and loggers; a
    run that ``resume``s continues its W&B run and its CSV log."""
    callbacks = [built(f"callbacks.{name}", c) for name, c in (cfg.callbacks or {}).items() if c is not None]
    if any("Wandb" in c._target_ for c in (cfg.logger or {}).values() if c is not None):
        require("wandb", "wandb", "logger=wandb")
    out_dir = Path(cfg.paths.output_dir)
    loggers = [built(f"logger.{name}", c, **logger_options(c, out_dir, resume))
               for name, c in (cfg.logger or {}).items() if c is not None]
    return built("trainer", lightning_arguments(cfg.trainer), callbacks=callbacks + list(extra_callbacks),
                 logger=loggers, precision=resolve_precision(cfg.trainer.precision, cfg.trainer.accelerator),
                 plugins=[AtomicCheckpointIO()])


def best_checkpoint_callback(trainer: pl.Trainer) -> ModelCheckpoint | None:
    """The callback that keeps the best checkpoint (``callbacks.model_checkpoint``)."""
    return next((c for c in trainer.callbacks if isinstance(c, ModelCheckpoint)), None)


def summary_table(metrics: dict[str, dict[str, float]]) -> str:
    """Valid and test metrics of the best checkpoint and the valid → test drop (in points; the
    robustness measure of the core paper, section 2.4 and Table 10)."""
    widths = [len(k) + 2 for k in SUMMARY_METRICS]
    rows = [f"{'':<6}" + "".join(f"{k:>{w}}" for k, w in zip(SUMMARY_METRICS, widths))]
    for split in ("valid", "test"):
        rows.append(f"{split:<6}" + "".join(f"{100 * metrics[split][k]:>{w}.2f}" for k, w in zip(SUMMARY_METRICS, widths)))
    drops = [100 * drop(metrics["valid"], metrics["test"], k) for k in SUMMARY_METRICS]
    rows.append(f"{'drop':<6}" + "".join(f"{d:>+{w}.2f}" for d, w in zip(drops, widths)))
    return "\n".join(rows)


class RunParts(NamedTuple):
    """The pieces of a run that `prepare` builds."""

    corpus: Corpus  # re-split by the drift split, not augmented
    drift_split: DriftSplit
    datamodule: SLUDataModule  # its training split augmented when augment=<noise type>
    module: SLUModule
    augmentation: dict[str, Any] | None  # what augment did (results.json), None without
    protocol: Any  # the ``efficiency=`` protocol object (its corpus, callbacks and record), None without
    callbacks: list[pl.Callback]  # the protocol's, trained with besides ``cfg.callbacks``


def prepare(cfg: DictConfig) -> RunParts:
    """The corpus (re-split by the drift split; ``drift=none``: as is), the drift split, the data
    module (training split augmented by ``cfg.augment``; groups = SeqDrift clusters) and a new
    module around the pre-trained encoder.

    An optional protocol (``efficiency=``: an object its config's ``_target_`` names, e.g.
    `robustnlu.efficiency.protocol.EfficiencyProtocol`) may replace the corpus and its label
    vocabulary (``corpus(cfg, root)``), prepare the module and add callbacks
    (``attach(module, tokenizer, cfg)``) and add to results.json (``record()``)."""
    protocol = instantiate(cfg.efficiency, _convert_="all") if cfg.get("efficiency") else None
    corpus, vocab = (protocol.corpus(cfg, Path()) if protocol  # relative paths: from the current folder
                     else (load_corpus(cfg.dataset), None))
    drift_split = make_drift_split(corpus, cfg.drift, cfg.validation, cfg.paths.cache_dir, data_dir(cfg) / SHIPPED_DIR)
    corpus = drift_split.apply(corpus)
    trained_on, groups, augmentation = augment_corpus(corpus, drift_split.groups(), cfg.augment, cfg.seed)
    vocab = vocab if vocab is not None else trained_on.vocab()
    tokenizer = load_tokenizer(cfg.encoder)
    encoder = build_encoder(cfg.encoder, vocab_size=len(tokenizer))
    check_loaded_encoder(cfg, encoder.config)
    datamodule = SLUDataModule(trained_on, tokenizer, vocab, seed=cfg.seed, groups=groups, **cfg.data)
    module = SLUModule.from_config(cfg, vocab, trained_on.intents(), encoder)
    callbacks = protocol.attach(module, tokenizer, cfg) if protocol else []
    return RunParts(corpus, drift_split, datamodule, module, augmentation, protocol, callbacks)


def end_wandb_run() -> None:
    """Finish this run's W&B run (with ``logger=wandb``): the jobs of a sweep run one after
    another in one process, and Lightning's logger would log the next job into a W&B run
    still open."""
    wandb = sys.modules.get("wandb")  # None also where the wandb extra is missing (sys.modules entry None)
    if wandb is not None and wandb.run is not None:
        wandb.finish()


def write_status(out_dir: Path, state: str, **extra: Any) -> None:
    """``status.json``: ``running`` once the input is valid, then ``finished``, ``failed`` (with
    the error) or ``interrupted`` (a signal ended it, e.g. a Slurm requeue: ``resume=true``
    continues it), so a report finds failed and unfinished runs (a hard-killed job stays
    ``running``) from the run directories alone. Written by the rank-0 process only; on a disk
    too full for the atomic write's new file, in place (the old file's blocks are reused)."""
    if rank_zero_only.rank != 0:
        return
    status = status_record(state, **extra)
    path = RunDir(out_dir).status_file
    try:
        atomic_write_json(path, status)
    except OSError:
        if not path.is_file():
            raise
        with path.open("r+", encoding="utf-8") as file:
            file.truncate(0)
            file.write(json.dumps(status))


def write_failure(err: OSError, out_dir: Path) -> RunWriteError:
    """A run that could not write a file: status.json says failed (as far as the disk allows) and
    the error to raise, one line; its run directory stays for ``resume=true``."""
    where = Path(err.filename).relative_to(out_dir) if err.filename and str(err.filename).startswith(str(out_dir)) \
        else err.filename
    line = f"{out_dir}: cannot write {where}: {err.strerror or err}; resume=true continues from the last complete checkpoint"
    try:
        write_status(out_dir, "failed", error=line)
    except OSError:
        pass  # the line below still says it
    return RunWriteError(line)


def what_ended(err: BaseException) -> BaseException:
    """The exception that ended a run: Lightning ends a Ctrl-C with ``exit(1)`` once it has shut
    down, a SystemExit whose context is the KeyboardInterrupt."""
    context = err.__context__
    return context if isinstance(err, SystemExit) and isinstance(context, KeyboardInterrupt) else err


def how_to_continue(out_dir: Path) -> str | None:
    """The command that continues the interrupted run in ``out_dir`` (`robustnlu.resume`): a single
    run's with ``resume=true``, a sweep's job's its sweep's relaunch; None for a search's trial (the
    search records it as failed and proposes the next points itself)."""
    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return f"python -m robustnlu <the same overrides> resume=true hydra.run.dir={out_dir}"
    hydra = HydraConfig.get()
    if hydra.sweeper.get("_target_") in RELAUNCHABLE_SWEEPERS:
        return f"python -m robustnlu.sweep relaunch {hydra.sweep.dir}"
    return None


def run(cfg: DictConfig) -> dict[str, Any]:
    started = time.time()
    out_dir = Path(cfg.paths.output_dir)
    if HydraConfig.initialized():  # from the command line (not when a test composes the config)
        hydra = HydraConfig.get()
        check_launch(cfg.trainer, hydra.mode == RunMode.MULTIRUN, hydra.launcher)
    overridden = check_run_dir(cfg)
    resume = resume_point(out_dir, cfg.get("resume", False))
    if resume.results is not None:
        unclaim(out_dir, restore=True)  # nothing in the finished run is rewritten
        print(f"resume=true: the run in {out_dir} has finished; its stored results.json is the result")
        return resume.results
    pl.seed_everything(cfg.seed, workers=True)
    parts = prepare(cfg)  # raises DataError / ConfigError before anything is written
    try:
        write_status(out_dir, "running", resumed_from=resume.record())
        results = train_and_record(cfg, parts, out_dir, started, resume, overridden)
    except BaseException as err:
        if isinstance(err, OSError) and err.errno in WRITE_ERRNOS:  # a full disk, a folder not writable
            raise write_failure(err, out_dir) from None
        # SystemExit / KeyboardInterrupt: a signal (a Slurm requeue, Ctrl-C)
        interrupted = isinstance(err, (SystemExit, KeyboardInterrupt))
        ended = first_line(what_ended(err))
        write_status(out_dir, "interrupted" if interrupted else "failed", error=ended)
        command = how_to_continue(out_dir) if interrupted else None
        if command is not None and rank_zero_only.rank == 0:
            print(f"{out_dir}: interrupted ({ended}); to continue it: {command}", file=sys.stderr, flush=True)
        raise
    finally:
        end_wandb_run()
    write_status(out_dir, "finished", wall_time_s=results["wall_time_s"], resumed_from=resume.record())
    if rank_zero_only.rank == 0 and not cfg.get("keep_last_checkpoint", False):
        discard_last_checkpoint(out_dir)
    return results


def train_and_record(cfg: DictConfig, parts: RunParts, out_dir: Path, started: float,
                     resume: ResumePoint = ResumePoint(), overridden: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit (from ``resume.checkpoint`` if there is one), validate and test the best
    checkpoint, score the suites, write the run record (``overridden``: the settings a resumed
    run changed, `robustnlu.rundir_check.check_settings`)."""
    corpus, drift_split, datamodule, module, augmentation, protocol, callbacks = parts
    config = OmegaConf.to_container(cfg, resolve=True)
    if rank_zero_only.rank == 0:
        atomic_write_text(RunDir(out_dir).config_file, OmegaConf.to_yaml(cfg, resolve=True))

    trainer = build_trainer(cfg, resume, callbacks)
    record_wandb_run(out_dir, trainer)
    for lg in trainer.loggers:
        lg.log_hyperparams(run_config(cfg, module, drift_split, trainer.precision))
    fit_started = time.time()
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume.checkpoint)
    fit_time = time.time() - fit_started
    best_callback = best_checkpoint_callback(trainer)
    best = best_callback.best_model_path if best_callback else ""
    ckpt = best or None  # without a checkpoint callback: evaluate the final weights
    trainer.validate(module, datamodule=datamodule, ckpt_path=ckpt, verbose=False)
    trainer.test(module, datamodule=datamodule, ckpt_path=ckpt, verbose=False)

    scenario = Scenario.of(corpus.name, cfg.drift.kind, cfg.drift.get("partial"), cfg.validation.kind)
    metrics = {split: module.evaluations[split]["metrics"] for split in ("valid", "test")}
    results = {
        "dataset": corpus.name,
        "method": cfg.method.get("name"),
        "seed": cfg.seed,
        "scenario": scenario.to_dict(),
        "drift": {"kind": cfg.drift.kind, "partial": cfg.drift.get("partial", False),
                  "validation": scenario.validation,  # "dataset" without a drift
                  "split_key": drift_split.key, "clustering": drift_split.info.get("clustering"),
                  "split_stats": drift_split.stats},
        "metrics": metrics,
        "measures": run_measures(metrics),
        "sizes": {split: len(datamodule.corpus.split(split)) for split in ("train", "valid", "test")},
        "augment": augmentation,
        "efficiency": protocol.record() if protocol else None,
        "best_checkpoint": str(Path(best).relative_to(out_dir)) if best else None,
        "epochs_trained": trainer.current_epoch,
        "nonfinite_skips": module.nonfinite_skips,  # training batches dropped (trainer.on_nonfinite=skip)
        "precision": trainer.precision,  # as trained: trainer.precision=auto resolved (robustnlu/precision.py)
        "compile": module.torch_compile,  # trainer.compile's mode and backend where enabled, else None
        # as trained: optimizer.fused=auto resolved (robustnlu/optim/adamw.py); a run resumed from a
        # checkpoint of the per-parameter loop keeps the loop (the optimiser state carries it)
        "optimizer_fused": any(bool(g.get("fused")) for g in trainer.optimizers[0].param_groups),
        "device": device_record(trainer.strategy.root_device, trainer.world_size),  # what it trained on
        "resumed_from": resume.record(),
        "resume_overrides": overridden or None,  # settings changed on resume (+resume_override), stored -> now
        "wall_time_s": round(time.time() - started, 1),  # of this session (the sessions before: resumed_from's fit_time_s)
        "fit_time_s": round(fit_time, 1),  # trainer.fit (training + per-epoch validation) of this session
        "versions": versions(),
        "config": config,
    }
    log_results(trainer, results, module.evaluations["test"]["predictions"], drift_split)
    suites = cfg.get("suite")
    if suites and trainer.is_global_zero:  # the module holds the best checkpoint's weights since trainer.test
        results["robustness"] = evaluate_suites(Predictor(module.model, module.vocab, datamodule.tokenizer), suites, cfg, corpus)
        tables = write_robustness(out_dir, results["robustness"], results["best_checkpoint"])
    if trainer.is_global_zero:
        run = RunDir(out_dir)
        for split in ("valid", "test"):
            atomic_write_jsonl(run.predictions_file(split), module.evaluations[split]["predictions"])
        atomic_write_json(run.results_file, results)
        print(f"\n{corpus.name} / {results['method']} / seed {cfg.seed}: best checkpoint "
              f"{results['best_checkpoint']} (metrics in %; drop = valid - test)\n{summary_table(results['metrics'])}\n"
              + (f"robustness (metrics in %):\n{tables}\n" if suites else "") + f"run directory: {out_dir}")
    return results
