"""TopK: the mean of the k largest per-example losses of the batch (core paper section 4.2;
Levy et al. 2020, Kawaguchi & Lu 2020), applied to the slot and the intent loss separately
(Algorithm 1: L = TopK(l_slot) + γ·TopK(l_intent))."""

from __future__ import annotations

from torch import Tensor

from robustnlu.model.jointbert import TaskLosses
from robustnlu.robust.base import RobustObjective


def topk_mean(losses: Tensor, k: int) -> Tensor:
    """Mean of the ``k`` largest entries of ``losses`` ``[b]``; k is clipped to b."""
    return losses.topk(min(k, losses.numel())).values.mean()


class TopK(RobustObjective):
    def __init__(self, k: int = 4, **kwargs):
        """``k``: how many of the largest per-example losses are averaged (k ≥ 1)."""
        super().__init__(**kwargs)
        if k < 1:
            raise ValueError(f"k={k}: expected k >= 1")
        self.k = int(k)

    def reduce(self, losses: Tensor, task: str, step: TaskLosses) -> Tensor:
        return topk_mean(losses, self.k)
