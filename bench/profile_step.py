"""Where a training step's time goes: torch.profiler over a few steps of the Lightning loop and of the
plain loop (`bench.loops`), each part of the step in a labelled region (``record_function``).

Parts (`PARTS`): the encoder and heads' forward pass, the per-example losses, the objective,
``self.log`` (logging), metric updates (none in training: `SLUMetrics` runs in evaluation), backward,
gradient clipping, the optimizer (its update and scheduler; in Lightning also the closure that runs
the training step inside ``optimizer.step``), zero_grad; in Lightning also ``training_step``'s own
work (the non-finite check and the epoch's loss sums). Each part's time is exclusive: its region's
time less that of the labelled regions inside it; ``other`` is the rest of the step (Lightning's
loop and hooks, from one batch's start to the next's; in the plain loop the batch's move to the
device). Per step: CPU milliseconds and, on a GPU, the device milliseconds of the kernels the
part launched. A step is a CPU-side ``step`` region: with CUDA the profiler lists each labelled
region a second time, as a device-side user annotation of the same name without CPU time, which
is no step. On CUDA the backward pass's kernels are launched from autograd's device thread,
outside the regions: backward's device time and the step's leave them out, and backward's CPU
time is the main thread's wait for that thread.

Both loops run in one process on the same batches (each on fresh weights), so the first would
meet each batch shape first, and its counted steps would carry the first uses (a shape's kernels
and the library's choice of them, the allocator's blocks) that the second finds done: each loop
first steps once on every distinct shape of its counted steps (`bench.workload.shape_warmup`, as
the throughput stage does). Without that, at MiniLM's dimensions (batch 32, bf16-mixed, CPU) the
first loop's counted steps ran 181 operation signatures (operation, shapes, dtypes) of the forward
pass and 105 of the backward pass for the first time in the process, the second loop's none.
Otherwise the loops' forward and backward passes are the same host work, measured there with a
`TorchDispatchMode` and ``sys.setprofile``: per step 653 aten operations in the forward pass and
920 in the backward pass (Lightning: 921, the backward of its closure's division by
``accumulate_grad_batches``, ``pytorch_lightning/loops/optimization/automatic.py``), the same
Python calls but for ``LightningModule.backward``, no module hooks; unprofiled, Lightning's steps
took 0.99 of the plain loop's.

Host synchronisations (`HostSyncs`, a separate pass of each loop, since the counting is slow): the
operations that make the host wait for the device on a GPU, each by the source line that called it:
a tensor's value read on the host (``.item()``, ``bool(tensor)``, ``if tensor.any()``), a copy from
the device to the host (``.cpu()``, ``.tolist()``) and operations whose output size depends on the
data (``nonzero``, boolean masks). Counted on the CPU too (where they cost little), so the CPU run
shows what a GPU run would wait for. The profile also counts the synchronising CUDA runtime calls.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import re
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

from bench.loops import run_lightning, run_plain
from bench.workload import shape_warmup

PREFIX = "dc:"
PARTS = ("training_step", "forward", "losses", "objective", "logging", "metrics", "backward", "clip", "optimizer",
         "zero_grad")
SYNC_RUNTIME = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
_TORCH_FRAME = re.compile(r"[/\\]torch[/\\]")


def region(part: str):
    return record_function(PREFIX + part)


class _StepRegion(pl.Callback):
    """Each Lightning step as the region ``step``, from one batch's start to the next's: with all
    that Lightning does between them (its logger connector's per-step work, fetching the next
    batch and moving it to the device), as the plain loop's ``step`` includes the batch's move."""

    def __init__(self):
        self.open: record_function | None = None

    def _close(self) -> None:
        if self.open is not None:
            self.open.__exit__(None, None, None)
            self.open = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._close()
        self.open = region("step")
        self.open.__enter__()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._close()


@contextlib.contextmanager
def labelled(module) -> Iterator[None]:
    """The `SLUModule`'s parts under regions while inside: each method is shadowed by an instance
    attribute that calls it in its region (removed on the way out)."""
    targets = [(module.model, "forward", "forward"), (module.model, "task_losses", "losses"),
               (module.objective, "forward", "objective"), (module, "training_step", "training_step"),
               (module, "log", "logging"), (module, "log_dict", "logging"), (module.metrics, "update", "metrics"),
               (module, "backward", "backward"), (module, "configure_gradient_clipping", "clip"),
               (module, "optimizer_step", "optimizer"), (module, "optimizer_zero_grad", "zero_grad")]

    def wrap(method, part):
        @functools.wraps(method)
        def call(*args, **kwargs):
            with region(part):
                return method(*args, **kwargs)
        return call

    for obj, attr, part in targets:
        object.__setattr__(obj, attr, wrap(getattr(obj, attr), part))
    try:
        yield
    finally:
        for obj, attr, _ in targets:
            object.__delattr__(obj, attr)


def _nearest_labelled(event: FunctionEvent) -> list[FunctionEvent]:
    found = []
    for child in event.cpu_children:
        found.extend([child] if child.name.startswith(PREFIX) else _nearest_labelled(child))
    return found


def _walk(event: FunctionEvent) -> Iterator[FunctionEvent]:
    yield event
    for child in event.cpu_children:
        yield from _walk(child)


def _device_us(event: FunctionEvent) -> float:
    return float(getattr(event, "device_time_total", 0.0) or 0.0)


def step_breakdown(events: Sequence[FunctionEvent], skip: int, n_steps: int) -> dict[str, Any]:
    """Per-step means over the CPU-side ``step`` regions of ``events`` after the first ``skip``
    (warm-up), of which there must be ``n_steps``."""
    steps = sorted((e for e in events if e.name == PREFIX + "step" and e.device_type == DeviceType.CPU),
                   key=lambda e: e.time_range.start)[skip:]
    if len(steps) != n_steps:
        raise RuntimeError(f"the profile holds {len(steps)} steps after the warm-up, not {n_steps}")
    parts = {p: {"cpu_ms": 0.0, "device_ms": 0.0, "calls": 0} for p in PARTS}
    syncs: collections.Counter[str] = collections.Counter()
    step_cpu = step_device = inside = 0.0
    for step in steps:
        step_cpu += step.cpu_time_total
        step_device += _device_us(step)
        for event in _walk(step):
            if event is not step and event.name.startswith(PREFIX):
                nested = _nearest_labelled(event)
                part = parts[event.name[len(PREFIX):]]
                cpu = event.cpu_time_total - sum(e.cpu_time_total for e in nested)
                part["cpu_ms"] += cpu / 1e3
                part["device_ms"] += (_device_us(event) - sum(_device_us(e) for e in nested)) / 1e3
                part["calls"] += 1
                if event in _nearest_labelled(step):
                    inside += event.cpu_time_total
            elif event.name in SYNC_RUNTIME:
                syncs[event.name] += 1
    n = len(steps)
    per_step = {p: {k: v / n for k, v in values.items()} for p, values in parts.items()}
    return {
        "steps": n,
        "step_cpu_ms": step_cpu / n / 1e3,
        "step_device_ms": step_device / n / 1e3,
        "parts": per_step,
        "other_cpu_ms": (step_cpu - inside) / n / 1e3,
        "cuda_runtime_syncs_per_step": {k: v / n for k, v in syncs.most_common()},
    }


def profile_loops(cfg, workload, batches, device: torch.device, precision: str, warmup: int) -> dict[str, Any]:
    """Both loops on ``batches`` (the first ``warmup`` steps not counted; the clock's last batch is
    the last step), each under the profiler after a step on each distinct shape of the counted
    batches (module docstring); then each loop's host synchronisations on ``batches`` as given."""
    clip = float(cfg.trainer.gradient_clip_val)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    profiled, skip = shape_warmup(batches, warmup)
    results: dict[str, Any] = {"precision": precision, "batches": len(profiled), "warmup": skip}
    for loop in ("lightning", "plain"):
        pl.seed_everything(cfg.seed, verbose=False)
        module = workload.fresh_module()
        with profile(activities=activities, with_stack=False) as prof:
            if loop == "lightning":
                with labelled(module):
                    run_lightning(cfg, module, profiled, skip, device, "dynamic", precision, [_StepRegion()])
            else:
                run_plain(module, profiled, skip, clip, device, "dynamic", precision, region=region)
        results[loop] = step_breakdown(prof.events(), skip, len(profiled) - skip)
        del module
    for loop in ("lightning", "plain"):
        results[loop]["host_syncs"] = host_syncs(cfg, workload, batches, device, precision, warmup, loop)
    return results


def _short(path: str) -> str:
    return re.sub(r"^.*?((robustnlu|bench|pytorch_lightning|lightning_fabric|transformers|torch)[/\\])", r"\1", path)


class StepWindow(pl.Callback):
    """Whether a step past the warm-up is running: fed by the Lightning loop's hooks (from a batch's
    start to the next's), or by `region` as the plain loop's ``region`` (inside its ``step`` regions)."""

    def __init__(self, warmup: int):
        self.warmup, self.steps, self.on = warmup, 0, False

    def _start(self) -> None:
        self.on = self.steps >= self.warmup
        self.steps += 1

    @contextlib.contextmanager
    def _step(self) -> Iterator[None]:
        self._start()
        try:
            yield
        finally:
            self.on = False

    def region(self, part: str) -> contextlib.AbstractContextManager:
        return self._step() if part == "step" else contextlib.nullcontext()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.on = False


class HostSyncs(TorchDispatchMode):
    """Counts, while ``window.on``, the operations that synchronise the host with a GPU (module
    docstring) by the innermost source line outside torch that called them."""

    SHAPE_DEPENDENT = ("nonzero", "masked_select", "unique", "_unique2", "repeat_interleave")

    def __init__(self, window: StepWindow):
        super().__init__()
        self.window = window
        self.found: collections.Counter[str] = collections.Counter()

    @staticmethod
    def _kind(func, args, kwargs) -> str | None:
        name = func.__name__.split(".")[0]
        if name == "_local_scalar_dense":
            return "value read on the host"
        if name in HostSyncs.SHAPE_DEPENDENT:
            return f"data-dependent shape ({name})"
        if name == "_to_copy" and args and torch.device(kwargs.get("device") or args[0].device).type == "cpu":
            return "device-to-host copy" if args[0].device.type != "cpu" else None
        if name == "copy_" and len(args) > 1 and args[0].device.type == "cpu" and args[1].device.type != "cpu":
            return "device-to-host copy"
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.window.on:
            kind = self._kind(func, args, kwargs)
            if kind is not None:
                frame = next((f for f in reversed(traceback.extract_stack()) if not _TORCH_FRAME.search(f.filename)
                              and "profile_step.py" not in f.filename), None)
                where = f"{_short(frame.filename)}:{frame.lineno} ({frame.name})" if frame else "?"
                self.found[f"{kind} at {where}"] += 1
        return func(*args, **kwargs)


def host_syncs(cfg, workload, batches, device, precision: str, warmup: int, loop: str) -> dict[str, Any]:
    """`HostSyncs` over the steps after ``warmup`` of one run of ``loop`` (lightning | plain)."""
    pl.seed_everything(cfg.seed, verbose=False)
    module = workload.fresh_module()
    window = StepWindow(warmup)
    counter = HostSyncs(window)
    with counter:
        if loop == "lightning":
            run_lightning(cfg, module, batches, warmup, device, "dynamic", precision, [window])
        else:
            run_plain(module, batches, warmup, float(cfg.trainer.gradient_clip_val), device, "dynamic", precision,
                      region=window.region)
    steps = len(batches) - warmup
    return {"per_step": sum(counter.found.values()) / steps,
            "sources": {k: v / steps for k, v in counter.found.most_common()}}
