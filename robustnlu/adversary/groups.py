"""Group sources: which group(s) each training utterance belongs to, for the group-based
objectives (TopK-Group, Group-DRO, Topic-CVaR; core paper section 4.2-4.3).

A group source turns the training split into a membership matrix M ∈ [0, 1]^{n×G} whose rows
sum to 1: one-hot for hard groups (SeqDrift clusters, argmax LDA topics), a distribution for
soft ones (LDA topic proportions). Row i belongs to ``datamodule.datasets["train"]`` item i,
the position a batch carries in ``inputs["index"]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from robustnlu.errors import ConfigError


class GroupSource:
    def memberships(self, datamodule) -> Tensor:
        """``[n_train, G]`` float membership matrix, rows summing to 1."""
        raise NotImplementedError


def one_hot_memberships(group_ids: Tensor, n_groups: int) -> Tensor:
    return torch.nn.functional.one_hot(group_ids, n_groups).float()


class SeqDriftClusters(GroupSource):
    """The SeqDrift clusters of the drift split (an oracle: the clusters that define the test
    drift, core paper 4.2). Utterances the clustering left isolated (cluster -1) form one extra
    group of their own, so every training example belongs to exactly one group."""

    def memberships(self, datamodule) -> Tensor:
        ids = torch.tensor([e.group for e in datamodule.datasets["train"].encoded], dtype=torch.long)
        if ids.numel() == 0 or bool((ids < 0).all()):
            raise ConfigError(
                "adversary=seqdrift_clusters needs a SeqDrift split (drift=slot_value or drift=slot_context): "
                "without one no training utterance has a cluster; or pick another group source (adversary=lda_topics)"
            )
        n_clusters = int(ids.max()) + 1
        ids = torch.where(ids < 0, torch.full_like(ids, n_clusters), ids)
        return one_hot_memberships(ids, n_clusters + 1)
