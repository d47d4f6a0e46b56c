"""``optimizer=adamw`` (conf/optimizer/adamw.yaml): JointBERT's AdamW, weight decay on the
weights only (`weight_decay_groups`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robustnlu.optim import weight_decay_groups


def adamw(model: nn.Module, lr: float, weight_decay: float, betas: Sequence[float], eps: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(weight_decay_groups(model, weight_decay), lr=lr, betas=tuple(betas), eps=eps)
