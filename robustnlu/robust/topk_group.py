"""TopK-Group (core paper section 4.3): the TopK loss of every group present in the batch
(`group_topk_losses`), and the batch loss is the largest of them ("only the largest TopK group
loss is picked"), for the slot and the intent loss separately (Algorithm 1). The default groups
are the SeqDrift clusters, an oracle (section 4.3)."""

from __future__ import annotations

from torch import Tensor

from robustnlu.groups.base import GroupSource
from robustnlu.model.jointbert import TaskLosses
from robustnlu.robust.grouped import GroupedObjective, group_topk_losses


class TopKGroup(GroupedObjective):
    def __init__(self, groups: GroupSource, k: int = 4, **kwargs):
        """``k``: how many of a group's largest losses its group loss averages (k ≥ 1)."""
        super().__init__(groups, **kwargs)
        if k < 1:
            raise ValueError(f"k={k}: expected k >= 1")
        self.k = int(k)

    def reduce(self, losses: Tensor, task: str, step: TaskLosses) -> Tensor:
        return group_topk_losses(losses, self.batch_membership(step), self.k).max()
