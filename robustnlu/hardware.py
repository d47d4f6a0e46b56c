"""What a run trained on, as its records say it: the CPU's model name (`cpu_model`) and the
training device (`device_record`: results.json's ``device``; the reproduction report's hardware
table reads it, so that a run trained on a GPU is not listed under the CPU of its node). torch is
imported by the functions that need it alone: the study runner's command line reads `cpu_model`
without it. How many processes a run starts on a node (`processes_per_node`), which the config
schema reads too, before training imports Lightning."""

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


def processes_per_node(devices: Any) -> int:
    """How many processes ``trainer.devices`` starts on a node: an int (-1: every GPU), a list
    of device ids, or a string ("auto", "2", "0,1")."""
    if isinstance(devices, str):
        if devices.strip() in ("auto", "-1"):
            return _gpu_count() or 1
        return len([d for d in devices.split(",") if d.strip()]) if "," in devices else int(devices)
    if isinstance(devices, int):
        return (_gpu_count() or 1) if devices == -1 else devices
    return len(devices)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()
