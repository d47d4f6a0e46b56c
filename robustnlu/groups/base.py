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

from robustnlu.hparams import HParam, hparam_values


class GroupSource:
    #: the source's hyper-parameters, one line each (`robustnlu.hparams`): the config schema of
    #: ``method.groups`` and the constructor's checks read them; a subclass declares its own
    HPARAMS: dict[str, HParam] = {}

    def __init__(self, **hparams):
        """``hparams``: values of the declared hyper-parameters, checked and completed with the
        declared defaults into ``self.hparams``."""
        self.hparams = hparam_values(type(self), hparams)

    def memberships(self, datamodule) -> Tensor:
        """``[n_train, G]`` float membership matrix, rows summing to 1."""
        raise NotImplementedError


def one_hot_memberships(group_ids: Tensor, n_groups: int) -> Tensor:
    return torch.nn.functional.one_hot(group_ids, n_groups).float()
