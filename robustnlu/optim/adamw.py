"""``optimizer=adamw`` (conf/optimizer/adamw.yaml): JointBERT's AdamW, weight decay on the
weights only (`weight_decay_groups`).

``fused`` picks PyTorch's implementation of the same update: ``auto`` (the default) takes the fused
kernel (one vectorised pass over every parameter) where PyTorch has one for the parameters'
device (CPU and CUDA), else the per-parameter loop; ``true`` / ``false`` force either. On this
project's 2-core CPU the fused step over MiniLM's 22.6M parameters is about 5x faster than the
loop PyTorch uses by default on CPU, and it agrees with it to ~1e-8 per step (float rounding order)
— `make bench` (v) measures both side by side, and tests/optim/test_adamw.py compares their updates.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robustnlu.optim import weight_decay_groups

#: devices with a fused AdamW kernel in the pinned PyTorch (torch.optim.AdamW's ``fused=True``)
FUSED_DEVICES = ("cpu", "cuda")


def use_fused(model: nn.Module, fused: bool | str) -> bool:
    """Whether ``fused`` (``auto`` | true | false) means the fused kernel for ``model``'s parameters."""
    if fused != "auto":
        return bool(fused)
    devices = {p.device.type for p in model.parameters()}
    return bool(devices) and devices <= set(FUSED_DEVICES)


def adamw(model: nn.Module, lr: float, weight_decay: float, betas: Sequence[float], eps: float,
          fused: bool | str = "auto") -> torch.optim.AdamW:
    return torch.optim.AdamW(weight_decay_groups(model, weight_decay), lr=lr, betas=tuple(betas), eps=eps,
                             fused=use_fused(model, fused))
