"""The model's optimiser (``optimizer=``, conf/optimizer/): each option names a factory with
``_target_`` (``_partial_: true``) that `build_optimizer` calls with the SLU model, plus the
learning-rate schedule every option shares (linear warm-up, then linear decay to 0 or constant).

Options: AdamW (`robustnlu.optim.adamw`, JointBERT's), the co-natural SGD
(`robustnlu.optim.conatural`, Michel's thesis ch. 7; its Fisher comes from the efficiency
protocol, `robustnlu.efficiency.adapt`). A new optimiser is one function + one YAML.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from hydra.utils import instantiate
from torch import nn

#: parameters without weight decay (JointBERT / BERT fine-tuning convention)
NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias")

#: keys of an ``optimizer=`` node that are not its factory's arguments: the option's name (run
#: records, the efficiency driver), the schedule (`build_optimizer`) and the co-natural Fisher's
#: sample count and rolling weight (read by `robustnlu.efficiency.adapt` from the same node)
NOT_FACTORY_ARGUMENTS = ("name", "warmup_steps", "linear_decay", "fisher_samples", "gamma")


def weight_decay_groups(module: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Optimiser parameter groups: ``weight_decay`` on the weights, none on biases and LayerNorm."""
    named = list(module.named_parameters())
    return [
        {"params": [p for n, p in named if not any(k in n for k in NO_DECAY)], "weight_decay": float(weight_decay)},
        {"params": [p for n, p in named if any(k in n for k in NO_DECAY)], "weight_decay": 0.0},
    ]


def build_optimizer(config: Mapping[str, Any], model: nn.Module, total_steps: Callable[[], int]) -> dict[str, Any]:
    """Lightning's ``configure_optimizers`` answer for the ``optimizer=`` node ``config``: its
    factory called with ``model``, then ``warmup_steps`` of linear warm-up and, with
    ``linear_decay`` (default true), linear decay to 0 over ``total_steps()`` (only called then;
    0 steps: constant), else a constant rate."""
    # transformers here, not above: the config check imports this package to check ``_target_``
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    factory = instantiate({k: v for k, v in config.items() if k not in NOT_FACTORY_ARGUMENTS})
    optimizer: torch.optim.Optimizer = factory(model)
    total = total_steps() if config.get("linear_decay", True) else None
    scheduler = (get_linear_schedule_with_warmup(optimizer, config["warmup_steps"], total) if total
                 else get_constant_schedule_with_warmup(optimizer, config["warmup_steps"]))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


__all__ = ["NO_DECAY", "build_optimizer", "weight_decay_groups"]
