"""The two training loops compared, with one clock shared by both.

`run_plain`: the minimal plain-PyTorch loop. `run_lightning`: the real `SLUModule` under a
``pl.Trainer`` instantiated from ``conf/trainer`` with logging, checkpointing, validation and
the progress bar off. Both train a module with the optimizer and schedule of
``SLUModule.configure_optimizers`` on a given list of pre-collated batches, and time the steps
``warmup .. len(batches) - 2`` with a `SteadyClock` read at the start of a step.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from bench.contention import system_busy_seconds
from robustnlu.module import SLUModule
from robustnlu.precision import BF16, FP32, fp32, resolve_precision
from robustnlu.train import lightning_arguments

Batch = dict[str, torch.Tensor]

# Lightning's start-up notes ("GPU available: ...") and its advice for a real run (more
# dataloader workers, a validation_step without val loader) are noise here.
for _name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch"):
    logging.getLogger(_name).setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=r".*(does not have many workers|val_dataloader|LeafSpec).*")


class SteadyClock:
    """Wall time between the start of step ``first`` and the start of step ``last``: the
    ``last - first`` steps in between, each complete with its per-step overhead. Also reads
    this process's CPU time and the whole machine's, to tell whether others competed."""

    def __init__(self, first: int, last: int, device: torch.device):
        if not 0 <= first < last:
            raise ValueError(f"need 0 <= first < last, got {first}, {last}")
        self.first, self.last, self.device = first, last, device
        #: step -> (wall clock, this process's CPU time, the machine's busy CPU time or None)
        self.times: dict[int, tuple[float, float, float | None]] = {}

    def at_step_start(self, step: int) -> None:
        if step in (self.first, self.last):
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.times[step] = (time.perf_counter(), time.process_time(), system_busy_seconds())

    def _elapsed(self, which: int) -> float:
        if len(self.times) != 2:
            raise RuntimeError(f"the clock saw steps {sorted(self.times)}, not {self.first} and {self.last}")
        return self.times[self.last][which] - self.times[self.first][which]

    @property
    def seconds(self) -> float:
        return self._elapsed(0)

    @property
    def cpu_busy(self) -> float:
        """CPUs this process kept busy on average while timed."""
        return self._elapsed(1) / self._elapsed(0)

    @property
    def others_busy(self) -> float | None:
        """CPUs that other processes (or the hypervisor) kept busy on average while timed:
        about 0 on an idle machine; the timings of the run are unreliable when it is not."""
        if self.times[self.first][2] is None or self.times[self.last][2] is None:
            return None
        return max(0.0, (self._elapsed(2) - self._elapsed(1)) / self._elapsed(0))


@dataclass
class RunTiming:
    loop: str  # "plain" | "lightning" | "recipe" (`run_plain`'s JointBERT recipe)
    padding: str  # "dynamic" | "fixed"
    timed_steps: int
    timed_examples: int
    seconds: float
    cpu_busy: float  # CPUs this process kept busy while timed
    others_busy: float | None  # CPUs other processes kept busy meanwhile (contention; None: unknown)
    final_loss: float  # loss of the last step: a sanity check that the run trained
    setup: dict[str, Any]  # optimizer groups, schedule length, clipping: must match across loops
    precision: str = "32-true"  # Lightning's precision of the run (the plain loop: float32)

    @property
    def examples_per_s(self) -> float:
        return self.timed_examples / self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "examples_per_s": self.examples_per_s}


def _clock_for(batches: Sequence[Batch], warmup: int, device: torch.device) -> tuple[SteadyClock, int]:
    last = len(batches) - 1
    examples = sum(int(b["input_ids"].size(0)) for b in batches[warmup:last])
    return SteadyClock(warmup, last, device), examples


def _optimizer_setup(optimizer: torch.optim.Optimizer, total_steps: int, clip: float | None) -> dict[str, Any]:
    return {
        "param_groups": [
            {"n_params": len(g["params"]), "weight_decay": g["weight_decay"], "lr": g.get("initial_lr", g["lr"])}
            for g in optimizer.param_groups
        ],
        "schedule_steps": int(total_steps),
        "gradient_clip_val": clip,
    }


def configured_optimizer(module: SLUModule, total_steps: int):
    """The optimizer and per-step scheduler that ``module.configure_optimizers`` builds for a
    run of ``total_steps`` optimizer steps, without a Trainer (the method only reads
    ``trainer.estimated_stepping_batches``)."""
    module.trainer = SimpleNamespace(estimated_stepping_batches=total_steps)
    try:
        conf = module.configure_optimizers()
    finally:
        module.trainer = None
    if conf["lr_scheduler"].get("interval") != "step":
        raise RuntimeError("the bench's plain loop steps the scheduler every step; configure_optimizers changed")
    return conf["optimizer"], conf["lr_scheduler"]["scheduler"]


def _to(batch: Mapping[str, torch.Tensor], device: torch.device) -> Batch:
    return {k: v.to(device) for k, v in batch.items()}


def no_region(name: str) -> contextlib.AbstractContextManager:
    """`plain_step`'s default ``region``: none (`bench.profile_step` names the parts instead)."""
    return contextlib.nullcontext()


def plain_step(module: SLUModule, optimizer, scheduler, params, batch: Batch, clip: float, bf16: bool = False,
               region=no_region) -> torch.Tensor:
    """One training step of the plain loop; returns the loss. ``bf16``: the forward pass and the
    losses under bf16 autocast, as Lightning's ``bf16-mixed`` runs ``SLUModule.training_step``, and
    the objective in float32 as there. ``region(part)``: a context around each part of the step."""
    device = batch["input_ids"].device
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        with region("forward"):
            output = module.model(batch)
        with region("losses"):
            losses = module.model.task_losses(output, batch)
        with region("objective"), fp32(device):
            loss = module.objective(losses)
    with region("backward"):
        loss.backward()
    with region("clip"):
        torch.nn.utils.clip_grad_norm_(params, clip)
    with region("optimizer"):
        optimizer.step()
        scheduler.step()
    with region("zero_grad"):
        optimizer.zero_grad()
    return loss


def run_plain(
    module: SLUModule, batches: Sequence[Batch], warmup: int, clip: float, device: torch.device, padding: str,
    precision: str = FP32, recipe: bool = False, region=no_region,
) -> RunTiming:
    """forward → loss → backward → clip → optimizer step → scheduler step → zero_grad, once per batch,
    in ``precision`` (``32-true`` or ``bf16-mixed``, as Lightning's).

    ``recipe``: the training loop of JointBERT's code (Chen et al. 2019) on our model: its AdamW a
    Python loop over the parameters (transformers' AdamW then; PyTorch's single-tensor AdamW here,
    not the fused or multi-tensor kernels) and the loss read on the host every step (``.item()``, its
    running loss). The caller gives it float32 and batches padded to its 50 tokens."""
    if precision not in (FP32, BF16):
        raise ValueError(f"the plain loop runs in {FP32} or {BF16}, not {precision}")
    module.to(device).train()
    if recipe:
        module.hparams.optimizer = {**module.hparams.optimizer, "fused": False}
    optimizer, scheduler = configured_optimizer(module, len(batches))
    if recipe:
        for group in optimizer.param_groups:
            group.update(fused=False, foreach=False)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    clock, examples = _clock_for(batches, warmup, device)
    loss, running_loss = torch.zeros(()), 0.0
    for step, batch in enumerate(batches):
        clock.at_step_start(step)
        with region("step"):
            loss = plain_step(module, optimizer, scheduler, params, _to(batch, device), clip, precision == BF16, region)
        if recipe:
            running_loss += loss.item()
    return RunTiming("recipe" if recipe else "plain", padding, clock.last - clock.first, examples, clock.seconds,
                     clock.cpu_busy, clock.others_busy, float(loss.detach()),
                     _optimizer_setup(optimizer, len(batches), clip), precision)


class _LightningProbe(pl.Callback):
    """Reads the shared clock at every step start; records the run's optimizer set-up and last loss."""

    def __init__(self, clock: SteadyClock):
        self.clock = clock
        self.setup: dict[str, Any] = {}
        self.final_loss: torch.Tensor | None = None  # read after the run: no host sync inside it

    def on_train_start(self, trainer, pl_module) -> None:
        self.setup = _optimizer_setup(trainer.optimizers[0], trainer.estimated_stepping_batches,
                                      trainer.gradient_clip_val)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.clock.at_step_start(batch_idx)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == self.clock.last:
            self.final_loss = outputs["loss"].detach()


def build_bench_trainer(cfg: DictConfig, callbacks: list[pl.Callback], device: torch.device, root: str,
                        precision: str | None = None) -> pl.Trainer:
    """A Trainer from ``conf/trainer`` (as `robustnlu.train.build_trainer` makes it) for one
    epoch of pure training: no progress bar, logger, checkpointing or validation; ``precision``:
    instead of ``trainer.precision`` (``auto`` resolved as in a run)."""
    return instantiate(
        lightning_arguments(cfg.trainer),
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        max_epochs=1,
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision=resolve_precision(precision or cfg.trainer.precision, device.type),
        default_root_dir=root,
    )


def run_lightning(
    cfg: DictConfig, module: SLUModule, batches: Sequence[Batch], warmup: int, device: torch.device, padding: str,
    precision: str | None = None, callbacks: Sequence[pl.Callback] = (),
) -> RunTiming:
    """One epoch of ``trainer.fit`` over ``DataLoader(batches, batch_size=None)``, in ``precision``
    (default: ``trainer.precision``), with ``callbacks`` besides the clock's."""
    clock, examples = _clock_for(batches, warmup, device)
    probe = _LightningProbe(clock)
    with tempfile.TemporaryDirectory(prefix="robustnlu-bench-pl-") as root:
        trainer = build_bench_trainer(cfg, [probe, *callbacks], device, root, precision)
        trainer.fit(module, train_dataloaders=DataLoader(list(batches), batch_size=None, shuffle=False))
    if trainer.global_step != len(batches):
        raise RuntimeError(f"Lightning took {trainer.global_step} optimizer steps for {len(batches)} batches")
    return RunTiming("lightning", padding, clock.last - clock.first, examples, clock.seconds, clock.cpu_busy,
                     clock.others_busy, float("nan") if probe.final_loss is None else float(probe.final_loss),
                     probe.setup, trainer.precision)
