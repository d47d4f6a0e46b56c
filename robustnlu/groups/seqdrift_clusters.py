"""The SeqDrift clusters of the drift split as groups (``groups@method.groups=seqdrift_clusters``,
the default of the group methods; core paper 4.2)."""

from __future__ import annotations

import torch
from torch import Tensor

from robustnlu.errors import ConfigError
from robustnlu.groups.base import GroupSource, one_hot_memberships


class SeqDriftClusters(GroupSource):
    """The SeqDrift clusters of the drift split (an oracle: the clusters that define the test
    drift, core paper 4.2). Utterances the clustering left isolated (cluster -1) form one extra
    group of their own, so every training example belongs to exactly one group."""

    def memberships(self, datamodule) -> Tensor:
        ids = torch.tensor([e.group for e in datamodule.datasets["train"].encoded], dtype=torch.long)
        if ids.numel() == 0 or bool((ids < 0).all()):
            raise ConfigError(
                "groups=seqdrift_clusters needs a SeqDrift split (drift=slot_value or drift=slot_context): "
                "without one no training utterance has a cluster; or pick another group source "
                "(groups@method.groups=lda_topics)"
            )
        n_clusters = int(ids.max()) + 1
        ids = torch.where(ids < 0, torch.full_like(ids, n_clusters), ids)
        return one_hot_memberships(ids, n_clusters + 1)
