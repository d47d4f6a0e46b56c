"""What a run trained on, as its records say it: the CPU's model name (`cpu_model`) and the
training device (`device_record`: results.json's ``device``; the reproduction report's hardware
table reads it, so that a run trained on a GPU is not listed under the CPU of its node). torch is
imported by `device_record` alone: the study runner's command line reads `cpu_model` without it."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def cpu_model() -> str:
    """The CPU's model name as the kernel lists it (else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_record(device: torch.device, processes: int) -> dict[str, Any]:
    """``{"accelerator": "cpu" | "cuda" | ..., "name": model name, "processes": n}`` of a run that
    trained on ``device`` (one of its ``processes``, under DDP each on a device like it)."""
    import torch  # loaded already: ``device`` is a torch device

    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    elif device.type == "cpu":
        name = cpu_model()
    else:  # mps, xla, ...: the kind is what there is to say
        name = device.type
    return {"accelerator": device.type, "name": name, "processes": processes}
