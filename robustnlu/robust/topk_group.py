"""TopK-Group (core paper section 4.3): the TopK loss of every group present in the batch
(`group_topk_losses`), and the batch loss is the largest of them ("only the largest TopK group
loss is picked"), for the slot and the intent loss separately (Algorithm 1). The default groups
are the SeqDrift clusters, an oracle (section 4.3)."""

from __future__ import annotations

from torch import Tensor

from robustnlu.config_spec import AT_LEAST_1, integer
from robustnlu.groups.base import GroupSource
from robustnlu.hparams import HParam, log_int
from robustnlu.model.jointbert import TaskLosses
from robustnlu.robust.grouped import GroupedObjective, group_topk_losses


class TopKGroup(GroupedObjective):
    HPARAMS = {
        # default 4, in the 2-8 region where tuned k ended up (App. C); search: Table 9 TOPK-GROUP "topk k",
        # logint 2 - 16
        "k": HParam(integer(AT_LEAST_1), 4, "how many of a group's largest losses its group loss averages (a group "
                    "with fewer members in the batch averages those it has; < the batch)", search=log_int(2, 16)),
    }

    def __init__(self, groups: GroupSource, **kwargs):
        super().__init__(groups, **kwargs)
        self.k = self.hparams["k"]

    def reduce(self, losses: Tensor, task: str, step: TaskLosses) -> Tensor:
        return group_topk_losses(losses, self.batch_membership(step), self.k).max()
