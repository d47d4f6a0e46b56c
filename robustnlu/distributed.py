"""Multi-device training (``trainer=ddp``, Lightning DDP) with single-device semantics.

With N processes, ``data.batch_size`` is per device and a step trains on one *global* batch of
N × batch_size utterances, cut into N contiguous parts (`SLUDataModule` shards the batches).
Before the objective, `gather_task_losses` concatenates every process's per-example losses,
encodings and batch tensors (in rank order: the global batch as one device would have
collated it), so every robust objective sees the whole global batch: top-k, CVaR and
group losses are over the global batch, not per device, and every process updates the
objective's running state (Group-DRO weights, averages, windows) identically. The gather is
differentiable: each process back-propagates the global loss into its own part and DDP's
gradient averaging then yields exactly the single-device gradient of that global batch.
Validation and test run on every process over the whole split (no distributed sampler), so
the metrics are the single-device ones without any gathering.

Before a run writes anything, `check_launch` refuses what this machine cannot start: an
accelerator it does not have (``trainer.accelerator=gpu`` without CUDA), GPU devices on the CPU
(``trainer.devices=-1``), and several devices
per run under ``-m``: Lightning starts the extra processes of a plain ``python -m robustnlu`` by
re-executing its command line, so each would run the whole sweep (and Optuna would sample other
trials), unless the launcher is Slurm with one task per device (then Slurm starts the
processes). It runs in the job, on the machine that trains, not in the config schema, which a
driver also checks on the machine that submits the jobs (a login node without GPUs).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
from pytorch_lightning.accelerators import CUDAAccelerator, MPSAccelerator, XLAAccelerator
from torch import Tensor

from robustnlu.errors import ConfigError
from robustnlu.hardware import processes_per_node
from robustnlu.model.jointbert import TaskLosses


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class GatherParts(torch.autograd.Function):
    """All-gather with a backward pass: ``[world, *shape]``; each process receives the
    gradient of its own part summed over the processes."""

    @staticmethod
    def forward(ctx, part: Tensor) -> Tensor:
        parts = [torch.empty_like(part) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, part.contiguous())
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad[dist.get_rank()]


def gather_padded(tensors: list[Tensor], pad_values: list[float]) -> list[Tensor]:
    """Each tensor concatenated over processes along dim 0 in rank order; the other dims padded
    to their largest size over processes with its pad value. Differentiable in float tensors
    that require grad (each process receives the gradient of its own part summed over
    processes)."""
    world = dist.get_world_size()
    ndim = max(t.dim() for t in tensors)
    shapes = torch.tensor([list(t.shape) + [0] * (ndim - t.dim()) for t in tensors], dtype=torch.long,
                          device=tensors[0].device)
    all_shapes = [torch.empty_like(shapes) for _ in range(world)]
    dist.all_gather(all_shapes, shapes)  # one collective for the shapes of every tensor
    all_shapes = torch.stack(all_shapes).tolist()  # one device-to-host copy
    gathered = []
    for i, (t, pad) in enumerate(zip(tensors, pad_values, strict=True)):
        sizes = [s[i][: t.dim()] for s in all_shapes]
        target = [max(dim) for dim in zip(*sizes)]
        buffer = t.new_full(target, pad, dtype=torch.uint8 if t.dtype == torch.bool else t.dtype)
        buffer[tuple(slice(0, n) for n in t.shape)] = t  # copy_ keeps the autograd graph
        if t.requires_grad:
            parts = list(GatherParts.apply(buffer))
        else:
            parts = [torch.empty_like(buffer) for _ in range(world)]
            dist.all_gather(parts, buffer)
        joined = torch.cat([p[: sizes[r][0]] for r, p in enumerate(parts)])
        gathered.append(joined.bool() if t.dtype == torch.bool else joined)
    return gathered


def gather_task_losses(losses: TaskLosses, pad_values: Mapping[str, float] | None) -> TaskLosses:
    """The global batch's `TaskLosses` from every process's part (identity on one process);
    ``pad_values``: the collator's padding value of each batch tensor (default 0), needed with
    several processes."""
    if world_size() == 1:
        return losses
    if pad_values is None:
        raise RuntimeError("gathering the batch over processes needs the collator's pad values: train with a data module")
    keys = [k for k, v in losses.inputs.items() if isinstance(v, Tensor)]
    tensors = [losses.slot, losses.intent, losses.x_enc, *(losses.inputs[k] for k in keys)]
    gathered = gather_padded(tensors, [0.0, 0.0, 0.0, *(pad_values.get(k, 0) for k in keys)])
    inputs = {**losses.inputs, **dict(zip(keys, gathered[3:], strict=True))}
    return replace(losses, slot=gathered[0], intent=gathered[1], x_enc=gathered[2], inputs=inputs)


#: ``trainer.accelerator`` -> what it needs (the devices Lightning takes it to mean: ``gpu`` is
#: CUDA or Apple's MPS) and the Lightning accelerators of which one must be available
DEVICE_ACCELERATORS = {"gpu": ("a CUDA or MPS device", (CUDAAccelerator, MPSAccelerator)),
                       "cuda": ("a CUDA device", (CUDAAccelerator,)),
                       "mps": ("an MPS device", (MPSAccelerator,)),
                       "tpu": ("a TPU (torch_xla)", (XLAAccelerator,))}


def check_accelerator(accelerator: str) -> None:
    """Refuse an accelerator this machine does not have (``auto`` and ``cpu`` always run)."""
    if accelerator not in DEVICE_ACCELERATORS:
        return
    needs, choices = DEVICE_ACCELERATORS[accelerator]
    if not any(choice.is_available() for choice in choices):
        raise ConfigError(f"trainer.accelerator: needs {needs}, and this machine ({platform.node()}) has none: "
                          f"use trainer.accelerator=cpu, or auto (got {accelerator})")


def on_cpu(accelerator: str) -> bool:
    """Whether ``trainer.accelerator`` trains on the CPU here (``auto`` without CUDA or MPS)."""
    return accelerator == "cpu" or (accelerator == "auto" and not (CUDAAccelerator.is_available()
                                                                   or MPSAccelerator.is_available()))


def check_cpu_devices(accelerator: str, devices: Any) -> None:
    """On the CPU, ``trainer.devices`` counts processes: a number > 0 or ``auto`` (one); ``-1``
    (every GPU) and lists of device ids name devices the CPU does not have."""
    count = devices if isinstance(devices, int) else int(devices) if str(devices).isdigit() else None
    if on_cpu(accelerator) and devices != "auto" and not (count is not None and count > 0):
        raise ConfigError(f"trainer.devices: on the CPU (trainer.accelerator={accelerator}) it is a number of processes "
                          f"> 0 or auto; -1 and lists of ids name GPUs (got {devices!r})")


def check_launch(trainer_cfg: Mapping[str, Any], multirun: bool, launcher: Mapping[str, Any] | None) -> None:
    """Refuse an accelerator this machine does not have (`check_accelerator`), GPU devices on the
    CPU (`check_cpu_devices`), and several devices per run under ``-m`` unless Slurm starts one
    task per device."""
    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    check_accelerator(accelerator)
    check_cpu_devices(accelerator, trainer_cfg.get("devices", 1))
    devices = processes_per_node(trainer_cfg.get("devices", 1))
    if not multirun or devices == 1:
        return
    target = str((launcher or {}).get("_target_", ""))
    if not target.endswith("SlurmLauncher"):
        raise ConfigError(
            f"trainer.devices={trainer_cfg.get('devices')} ({devices} processes per run) cannot run under -m "
            f"with {target.rsplit('.', 1)[-1] or 'this launcher'}: Lightning starts the extra processes by "
            "re-executing the command line, so each would run the whole sweep. Use hydra/launcher=slurm with "
            f"hydra.launcher.tasks_per_node={devices}, or run the settings one by one without -m"
        )
    tasks = (launcher or {}).get("tasks_per_node")
    if tasks != devices:
        raise ConfigError(
            f"trainer.devices={devices} but hydra.launcher.tasks_per_node={tasks}: with Slurm each device "
            f"needs its own task; set hydra.launcher.tasks_per_node={devices}"
        )

