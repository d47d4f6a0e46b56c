"""TopK: the mean of the k largest per-example losses of the batch (core paper section 4.2;
Levy et al. 2020, Kawaguchi & Lu 2020), applied to the slot and the intent loss separately
(Algorithm 1: L = TopK(l_slot) + γ·TopK(l_intent))."""

from __future__ import annotations

from torch import Tensor

from robustnlu.config_spec import AT_LEAST_1, integer
from robustnlu.hparams import HParam, log_int
from robustnlu.model.jointbert import TaskLosses
from robustnlu.robust.base import RobustObjective


def topk_mean(losses: Tensor, k: int) -> Tensor:
    """Mean of the ``k`` largest entries of ``losses`` ``[b]``; k is clipped to b."""
    return losses.topk(min(k, losses.numel())).values.mean()


class TopK(RobustObjective):
    HPARAMS = {
        # default 4: tuned k "typically ended up in the lower regions of the range, i.e. between 2-8" (App. C);
        # search: Table 9 TOPK "topk k", logint 1 - 16 (batch size 32)
        "k": HParam(integer(AT_LEAST_1), 4, "how many of the batch's largest per-example losses are averaged "
                    "(< the batch: with k >= the batch TopK is ERM)", search=log_int(1, 16)),
    }

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.k = self.hparams["k"]

    def reduce(self, losses: Tensor, task: str, step: TaskLosses) -> Tensor:
        return topk_mean(losses, self.k)
