"""`bench.profile_step`'s attribution: which profiler events are a step, and which steps of each
loop it counts (none that runs a batch shape for the first time in its loop)."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from bench import profile_step
from bench.profile_step import PREFIX, profile_loops, step_breakdown


def _event(name: str, start: float, end: float, device_type: DeviceType = DeviceType.CPU) -> FunctionEvent:
    return FunctionEvent(id=0, name=PREFIX + name, thread=0, start_us=start, end_us=end, use_device="cuda",
                         device_type=device_type, is_user_annotation=device_type != DeviceType.CPU)


def test_a_step_is_its_cpu_region_not_its_device_annotation():
    """As a CUDA profile lists a labelled region: the CPU range with its parts as children and the
    kernels they launched, and the same name again as a device-side user annotation spanning the
    kernels. Three steps of 50 µs, each with a forward part of 20 µs whose kernel ran 7 µs; the
    first is the warm-up."""
    events = []
    for i in range(3):
        t = 1000.0 * i
        step, forward = _event("step", t, t + 50), _event("forward", t + 10, t + 30)
        forward.append_kernel("gemm", 0, 7.0)
        step.append_cpu_child(forward)
        forward.set_cpu_parent(step)
        events += [step, forward, _event("step", t + 15, t + 400, DeviceType.CUDA),
                   _event("forward", t + 15, t + 22, DeviceType.CUDA)]
    r = step_breakdown(events, 1, 2)
    assert r["steps"] == 2
    assert r["step_cpu_ms"] == pytest.approx(0.050)
    assert r["step_device_ms"] == pytest.approx(0.007)
    assert r["parts"]["forward"] == pytest.approx({"cpu_ms": 0.020, "device_ms": 0.007, "calls": 1})
    assert r["other_cpu_ms"] == pytest.approx(0.030)
    with pytest.raises(RuntimeError, match="holds 2 steps after the warm-up, not 3"):
        step_breakdown(events, 1, 3)


def test_each_loop_has_run_every_counted_shape_before_its_counted_steps(tmp_path, monkeypatch):
    """Both loops run in one process on the same batches: the first would meet each shape first,
    in its counted steps here (the tiny workload's 4 batches are 4 lengths). Each profiled run
    must have stepped on the shape of each counted batch before its warm-up ends."""
    from bench.workload import compose_config, load_workload

    workload = load_workload(compose_config(tmp_path, ["encoder=tiny"]), 4)
    batches = workload.batches(None)
    runs = []

    def recorded(run, batch_arg, warmup_arg):
        def call(*args, **kwargs):
            runs.append((run.__name__, args[batch_arg], args[warmup_arg]))
            return run(*args, **kwargs)
        return call

    monkeypatch.setattr(profile_step, "run_lightning", recorded(profile_step.run_lightning, 2, 3))
    monkeypatch.setattr(profile_step, "run_plain", recorded(profile_step.run_plain, 1, 2))
    results = profile_loops(workload.cfg, workload, batches, torch.device("cpu"), "32-true", 1)

    def shape(batch):
        return tuple((key, tuple(t.shape)) for key, t in batch.items())

    # the profiled runs, then the host synchronisations' passes
    assert [name for name, _, _ in runs] == ["run_lightning", "run_plain"] * 2
    for name, run_batches, warmup in runs[:2]:
        assert [shape(b) for b in run_batches[warmup:]] == [shape(b) for b in batches[1:]], name
        first_seen = {shape(b) for b in run_batches[:warmup]}
        assert all(shape(b) in first_seen for b in run_batches[warmup:]), name
    for loop in ("lightning", "plain"):
        assert results[loop]["steps"] == len(batches) - 1 == results["batches"] - results["warmup"]
