"""Group-DRO (Sagawa et al. 2020, "Distributionally Robust Neural Networks for Group Shifts",
Algorithm 1 and their minibatch code ``loss.py``; core paper section 4.2 and App. C).

Exponentiated-gradient weights q over the G groups, uniform at the start. Every training step:

1. per-group mean losses of the groups present in the batch, L_g = Σ_i M_ig l_i / Σ_i M_ig
   (M = the batch's memberships; one-hot for hard groups, Sagawa's ``compute_group_avg``);
2. q update from the detached L_g, in log space: log q_g ← ρ·log q_g + η·L_g for every group g,
   then log q ← log_softmax(log q). An absent group has L_g = 0, as in Sagawa's code (their
   Algorithm 1 step q_g ← q_g·exp(η·L_g) with exp(η·0) = 1): with ρ = 1 it keeps its unnormalised
   weight; with ρ < 1 its log-weight decays like every other group's, so that appearing in a
   batch gains a group nothing unless its loss is positive;
3. loss = Σ_{g present} q_g L_g with the updated q (Sagawa's ``group_loss @ adv_probs``).

η = ``step_size``. ρ = ``decay`` is our reading of the "geometric decay of the exponential average"
the core paper added as an option (App. C, Table 9 "geometric decay: True, False"; no formula is
given): log q_t = η Σ_{s≤t} ρ^(t−s) L_s + const (L_s = 0 for a group absent at step s; the uniform
start is a constant and drops out), i.e. old group losses are forgotten geometrically; ρ = 1 is
Sagawa's update (their sum of all past losses).

Two tasks: Algorithm 1 of the core paper reduces the slot and the intent loss separately, so by
default each task has its own q, updated from its own group losses (``shared_weights=False``).
``shared_weights=True`` keeps one q updated from the group losses of l_slot + γ·l_intent, the
single-loss setting of Sagawa et al.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from robustnlu.config_spec import POSITIVE, flag, number
from robustnlu.groups.base import GroupSource
from robustnlu.hparams import HParam, grid, log_uniform
from robustnlu.model.jointbert import TaskLosses
from robustnlu.robust.base import entropy
from robustnlu.robust.grouped import GroupedObjective, group_mean_losses

#: the loss the single q of ``shared_weights=True`` follows
COMBINED = "combined"


class GroupDRO(GroupedObjective):
    HPARAMS = {
        # default 0.1: Michel's thesis (grid {1, 0.1, 0.01}); search: Table 9 "step size", loguniform 1e-4 - 1
        "step_size": HParam(number(POSITIVE), 0.1, "η of log q_g ← ρ·log q_g + η·L_g",
                            search=log_uniform(1e-4, 1.0)),
        # Table 9 "geometric decay: True, False" (App. C: added against overfitting) gives no rate and no formula:
        # this form is our reading; the search's True is ρ = 0.99 (ours: a memory of ~100 steps, a quarter of a
        # SNIPS epoch), False is ρ = 1
        "decay": HParam(number("(0, 1]"), 1.0, "ρ, geometric decay of the accumulated group losses in log q "
                        "(1 = off = Sagawa et al.)", search=grid(1.0, 0.99)),
        # Algorithm 1 of the core paper reduces the two task losses separately: one q per task by default
        "shared_weights": HParam(flag(), False, "one q from the group losses of l_slot + γ·l_intent (Sagawa's "
                                 "single-loss setting) instead of one q per task"),
        # Sagawa et al., and core paper 4.2: "upsamples groups reciprocally to their frequency"
        "sampling": replace(GroupedObjective.HPARAMS["sampling"], default="group_balanced"),
    }

    def __init__(self, groups: GroupSource, **kwargs):
        super().__init__(groups, **kwargs)
        self.step_size = self.hparams["step_size"]
        self.decay = self.hparams["decay"]
        self.weight_sets = (COMBINED,) if self.hparams["shared_weights"] else self.TASKS
        for name in self.weight_sets:  # sized in on_groups; a checkpoint's size replaces it
            self.register_buffer(self._buffer(name), torch.zeros(0))

    @staticmethod
    def _buffer(name: str) -> str:
        return f"log_q_{name}"

    def log_group_weights(self, name: str) -> Tensor:
        """log q ``[G]`` of weight set ``name`` ("slot", "intent" or "combined")."""
        return getattr(self, self._buffer(name))

    def on_groups(self, n_groups: int) -> None:
        for name in self.weight_sets:
            device = self.log_group_weights(name).device
            setattr(self, self._buffer(name), torch.full((n_groups,), -math.log(n_groups), device=device))

    def forward(self, step: TaskLosses) -> Tensor:
        if self.weight_sets == (COMBINED,):
            return self.robust_loss(self.combined_losses(step), COMBINED, step)
        return super().forward(step)

    def reduce(self, losses: Tensor, task: str, step: TaskLosses) -> Tensor:
        return self.robust_loss(losses, task, step)

    def robust_loss(self, losses: Tensor, name: str, step: TaskLosses) -> Tensor:
        """Update q of weight set ``name`` from the batch's group losses; return Σ_g q_g L_g."""
        group_losses, _ = group_mean_losses(losses, self.batch_membership(step))  # 0 for absent groups
        log_q = self.log_group_weights(name)
        with torch.no_grad():
            step_losses = group_losses.detach().to(log_q.dtype)
            log_q.copy_(torch.log_softmax(self.decay * log_q + self.step_size * step_losses, dim=0))
        return group_losses @ log_q.exp().to(losses.dtype)

    def logged_state(self) -> dict[str, float]:
        """Per weight set: the entropy of q (nats; log G while uniform) and its largest weight."""
        state = {}
        for name in self.weight_sets:
            q = self.log_group_weights(name).exp()
            if q.numel():
                state |= {f"q_{name}/entropy": entropy(q).item(), f"q_{name}/max": q.max().item()}
        return state
