"""Empirical risk minimisation: the batch mean of the per-example losses (core paper 4.2)."""

from __future__ import annotations

from torch import Tensor

from robustnlu.model.jointbert import TaskLosses
from robustnlu.robust.base import RobustObjective


class ERM(RobustObjective):
    def reduce(self, losses: Tensor, task: str, batch: TaskLosses) -> Tensor:
        return losses.mean()
