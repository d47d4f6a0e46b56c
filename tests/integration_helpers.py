"""Helpers for tests that compose the real Hydra configs and run training end to end."""

from __future__ import annotations

import json
import lzma
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytorch_lightning as pl

from hydra import compose, initialize_config_dir
from omegaconf import open_dict

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
METHODS = sorted(p.stem for p in (CONF / "method").glob("*.yaml"))
#: ``method.name`` (run directories, results.json, study names) where it is not the config's file
#: name: topk_ae names its variant, Bin by default (conf/method/topk_ae.yaml)
METHOD_NAMES = {"topk_ae": "topk_ae_bin"}

#: overrides that make a run small and quiet: tiny encoder, no progress bar
FAST = [
    "encoder=tiny",
    "~callbacks.progress_bar",
    "trainer.enable_progress_bar=false",
    "trainer.max_epochs=6",
    "optimizer.lr=5e-3",
    "data.batch_size=16",
    "trainer.precision=32-true",  # the same numbers on every machine (auto: bf16 where supported; tests/test_precision.py)
    "trainer.accelerator=cpu",  # likewise (auto: a GPU where there is one); the CUDA tests are marked gpu
]


#: per method, overrides that shrink what it trains besides the model, for tests whose property
#: does not depend on that part's size: P-DRO's LSTM adversary at width 64, not 256 (its embedding
#: is tied over the tokenizer's 30k sub-words: at 256 a step costs several of the tiny encoder's).
#: Not narrower: at 16 or 32 the resumed losses of tests/robust/test_resume.py stayed the same
#: when the resume lost the adversary's running normaliser (eq. 5.9); at 64, as at 256, they did not
SMALL_ADVERSARY = {"pdro": ["method.adversary.hidden_size=64"]}


def method_overrides(method: str) -> list[str]:
    """``method=<method>`` and its `SMALL_ADVERSARY` overrides."""
    return [f"method={method}", *SMALL_ADVERSARY.get(method, [])]


#: a SeqDrift slot-context split that clusters `write_snips_sample_jsonl(n_train=600)` in ~1 s
#: (the paper's frequency thresholds scaled down to a 720-utterance corpus)
SMALL_DRIFT = [
    "drift=slot_context",
    "drift.n_clusters=10",
    "drift.min_intent_freq=20",
    "drift.min_slot_freq=5",
    "drift.min_projected_size=2",
]


def compose_config(overrides: list[str], output_dir: Path):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
    return cfg


def shipped_lines(name: str) -> list[str]:
    """The lines of the shipped data file ``data/<name>``, which ships as ``data/<name>.xz``:
    decompressed with the standard library, not with robustnlu's readers."""
    return lzma.decompress((REPO / "data" / f"{name}.xz").read_bytes()).decode("utf-8").splitlines()


def write_snips_sample_jsonl(folder: Path, n_train: int = 240, n_eval: int = 60) -> dict[str, Path]:
    """A small jsonl dataset cut from the shipped SNIPS files (read directly, not via our reader)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, src, n in (("train", "train", n_train), ("valid", "dev", n_eval), ("test", "test", n_eval)):
        words, tags, intents = (shipped_lines(f"snips/{src}/{file}") for file in ("seq.in", "seq.out", "label"))
        step = max(1, len(words) // n)  # every step-th row: all intents represented
        rows = [
            {"tokens": w.split(), "tags": t.split(), "intent": i, "uid": f"s-{split}-{k}"}
            for k, (w, t, i) in enumerate(zip(words, tags, intents))
        ][::step][:n]
        paths[split] = folder / f"{split}.jsonl"
        paths[split].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


#: the TOPv2 domains of `write_topv2_cut`: the efficiency protocol's target (weather) and two sources
TOPV2_CUT_DOMAINS = ("weather", "alarm", "timer")


def write_topv2_cut(folder: Path) -> Path:
    """The first rows (train 160, eval 40, test 60; header kept) of the shipped files of each of
    `TOPV2_CUT_DOMAINS`, in TOPv2's own format, in ``folder`` (``dataset.path=<folder>``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for domain in TOPV2_CUT_DOMAINS:
        for split, n in (("train", 160), ("eval", 40), ("test", 60)):
            lines = shipped_lines(f"topv2/{domain}_{split}.tsv")
            (folder / f"{domain}_{split}.tsv").write_text("\n".join(lines[: n + 1]) + "\n")
    return folder


def jsonl_overrides(paths: dict[str, Path]) -> list[str]:
    return ["dataset=jsonl", *(f"dataset.{k}={v}" for k, v in paths.items())]


def file_bytes(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (relative path → its bytes): compared before and after a command
    to show that it left its inputs untouched and wrote nothing there."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def another_hydra_apps_output(run_dir: Path, multirun: bool = False) -> Path:
    """``run_dir`` as a Hydra app that is not robustnlu's leaves it after a run that wrote nothing
    of its own (``+lr=0.1``): Hydra's ``.hydra/`` record and its log; ``multirun``: after a sweep
    (``-m +lr=0.1,0.2``) into ``run_dir``: Hydra's ``multirun.yaml`` and its jobs' folders ``0/``
    and ``1/``. A real Hydra app, run in a subprocess from ``run_dir``'s parent (~1 s)."""
    app = run_dir.parent / "other_app.py"
    app.parent.mkdir(parents=True, exist_ok=True)
    app.write_text("import hydra\n\n\n@hydra.main(version_base=None)\ndef main(cfg):\n    pass\n\n\nmain()\n")
    args = ["-m", f"hydra.sweep.dir={run_dir}", "+lr=0.1,0.2"] if multirun else [f"hydra.run.dir={run_dir}", "+lr=0.1"]
    subprocess.run([sys.executable, str(app), *args], cwd=app.parent, check=True, capture_output=True)
    return run_dir


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess: offline, and importing this checkout's robustnlu (the
    repository root first on PYTHONPATH, ahead of whatever copy is installed) and the test helpers
    (tests/, for ``+callbacks.x._target_=integration_helpers.X``); the caller's PYTHONPATH follows."""
    paths = [str(REPO), str(REPO / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(paths), **extra}


def enter_cli(monkeypatch, cwd: Path, **extra: str) -> None:
    """This process as `run_cli` starts a command in ``cwd`` (environment: `cli_env` plus
    ``extra``), for an entry point called here whose own commands inherit it: its working folder and
    the variables `cli_env` sets, undone with ``monkeypatch``."""
    env = cli_env(**extra)
    monkeypatch.chdir(cwd)
    for key in ("PYTHONPATH", "HF_HUB_OFFLINE", *extra):
        monkeypatch.setenv(key, env[key])


def run_cli(args: list[str], cwd: Path, env: dict[str, str] | None = None, module: str = "robustnlu"):
    """``python -m <module> <args>`` in ``cwd`` (environment: `cli_env` plus ``env``)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=cli_env(**(env or {})),
                          capture_output=True, text=True, timeout=600)


class KillAtStep(pl.Callback):
    """A hard kill for resume tests: SIGKILL to the own process once ``step`` optimiser steps
    are done (no Python clean-up runs, as with the OOM killer or ``scancel --signal=KILL``).
    Used from the CLI: ``+callbacks.kill._target_=integration_helpers.KillAtStep +callbacks.kill.step=N``."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class KillInValidation(pl.Callback):
    """`KillAtStep` during validation: SIGKILL once validation batch ``batch`` of epoch ``epoch``
    is done (the sanity check excluded). Used from the CLI like `KillAtStep`."""

    def __init__(self, epoch: int, batch: int):
        self.epoch = epoch
        self.batch = batch

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking and trainer.current_epoch == self.epoch and batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)


class FillDiskAtStep(pl.Callback):
    """A full disk from ``step`` optimiser steps on: writes ``path`` until the file system it is on
    refuses (ENOSPC), so that the next checkpoint cannot be saved. For a run directory on a small
    tmpfs; used from the CLI: ``+callbacks.fill._target_=integration_helpers.FillDiskAtStep
    +callbacks.fill.step=N +callbacks.fill.path=<file>``."""

    def __init__(self, step: int, path: str):
        self.step = step
        self.path = Path(path)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != self.step:
            return
        chunk = b"\0" * (1 << 16)
        try:
            with self.path.open("ab") as file:
                while True:
                    file.write(chunk)
                    file.flush()
        except OSError:
            pass


class SignalAtStep(pl.Callback):
    """What Slurm does at a job's time limit or on preemption, for requeue tests: ``signame``
    (default SIGUSR2, the one submitit's handler answers) to the own process once ``step``
    optimiser steps are done, in the job's first start only (``SLURM_RESTART_COUNT`` unset or 0),
    so that the requeued job runs to the end. ``step=None``: never. Used from the CLI:
    ``+callbacks.signal._target_=integration_helpers.SignalAtStep +callbacks.signal.step=N``."""

    def __init__(self, step: int | None, signame: str = "SIGUSR2"):
        self.step = step
        self.signum = getattr(signal, signame)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        first_start = int(os.environ.get("SLURM_RESTART_COUNT") or 0) == 0
        if self.step is not None and trainer.global_step == self.step and first_start:
            if self.signum == signal.SIGINT:  # Ctrl-C in a terminal reaches a process that handles it, but
                # one started in the background of a non-interactive shell (a test run under nohup ... &)
                # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt for it
                signal.signal(signal.SIGINT, signal.default_int_handler)
            # the Python handler (submitit's) runs as soon as os.kill returns, before training goes on
            os.kill(os.getpid(), self.signum)


class HoldUntilFile(pl.Callback):
    """A run kept in training for as long as a test needs it: once ``step`` optimiser steps are
    done it waits until the file ``path`` exists (at most ``timeout_s``, then it fails), so that the
    test can look at a run that is certainly still training and then let it finish at once. Used
    from the CLI: ``+callbacks.hold._target_=integration_helpers.HoldUntilFile
    +callbacks.hold.path=<file>``."""

    def __init__(self, path: str, step: int = 1, timeout_s: float = 300.0):
        self.path = Path(path)
        self.step = step
        self.timeout_s = timeout_s

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != self.step:
            return
        deadline = time.monotonic() + self.timeout_s
        while not self.path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"HoldUntilFile: {self.path} did not appear in {self.timeout_s} s")
            time.sleep(0.1)


class RecordProcess(pl.Callback):
    """What a run's process was given, for the launcher tests (a CPU machine: the GPU a job was
    given is its ``CUDA_VISIBLE_DEVICES``, not a device it trained on): ``path`` (JSON) holds that
    variable, ``OMP_NUM_THREADS``, torch's thread count and the wall-clock times training started
    and (once it did) ended. Used from the CLI: ``+callbacks.record._target_=integration_helpers.RecordProcess
    +callbacks.record.path=<file>``."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.record: dict = {}

    def on_fit_start(self, trainer, pl_module):
        import torch

        self.record = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                       "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads(),
                       "start": time.time()}
        self.write(self.record)

    def on_fit_end(self, trainer, pl_module):
        self.write({**self.record, "end": time.time()})

    def write(self, record: dict) -> None:
        """Whole or not at all (a test reads it while the run goes on)."""
        part = self.path.with_name(self.path.name + ".part")
        part.write_text(json.dumps(record))
        part.replace(self.path)


class NonFiniteLossAtStep(pl.Callback):
    """A non-finite per-example loss, produced by the model itself: in the training batch after
    ``step`` optimiser steps (once), a forward hook on the intent head sets the first
    utterance's gold-intent logit to −inf (``value="inf"``: its intent loss is +inf) or all its
    logits to NaN (``value="nan"``). Used from the CLI: ``+callbacks.nonfinite._target_=
    integration_helpers.NonFiniteLossAtStep +callbacks.nonfinite.step=N``."""

    def __init__(self, step: int, value: str = "inf"):
        self.step = step
        self.value = value
        self.hook = None
        self.fired = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step != self.step or self.fired:
            return
        self.fired = True
        gold = int(batch["intent_labels"][0])

        def poison(module, args, logits):
            logits = logits.clone()
            if str(self.value) == "nan":  # from the CLI, Hydra reads nan as a float
                logits[0] = float("nan")
            else:
                logits[0, gold] = -float("inf")
            return logits

        self.hook = pl_module.model.intent_classifier.register_forward_hook(poison)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.hook is not None:
            self.hook.remove()
            self.hook = None
