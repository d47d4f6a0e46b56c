"""`group_topk_losses` against hand-computed values; group memberships and group-balanced
sample weights from a real data module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustnlu.groups.seqdrift_clusters import SeqDriftClusters
from robustnlu.errors import ConfigError
from robustnlu.robust.grouped import group_topk_losses
from tests.robust.helpers import synthetic_datamodule


def test_hard_groups_average_their_own_top_k_members():
    losses = torch.tensor([4.0, 1.0, 3.0, 2.0, 5.0])
    groups = torch.tensor([0, 0, 0, 1, 2])  # group 3 absent from the batch
    membership = torch.nn.functional.one_hot(groups, 4).float()
    out = group_topk_losses(losses, membership, k=2)
    # group 0: top-2 of {4,1,3} = (4+3)/2; group 1: its only member 2; group 2: 5
    assert out.tolist() == [3.5, 2.0, 5.0]


def test_soft_memberships_follow_app_b_literally():
    losses = torch.tensor([1.0, 2.0, 3.0])
    h = torch.tensor([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]])
    out = group_topk_losses(losses, h, k=2)
    col0 = sorted([0.5 * 1, 0.9 * 2, 0.2 * 3], reverse=True)[:2]
    col1 = sorted([0.5 * 1, 0.1 * 2, 0.8 * 3], reverse=True)[:2]
    assert out.tolist() == pytest.approx([sum(col0) / 2, sum(col1) / 2])


def test_gradient_flows_only_to_the_selected_entries():
    losses = torch.tensor([4.0, 1.0, 3.0, 2.0], requires_grad=True)
    membership = torch.nn.functional.one_hot(torch.tensor([0, 0, 0, 1]), 2).float()
    group_topk_losses(losses, membership, k=2).max().backward()
    assert losses.grad.tolist() == [0.5, 0.0, 0.5, 0.0]


def test_seqdrift_clusters_give_isolated_utterances_their_own_group(tokenizer):
    dm = synthetic_datamodule(tokenizer, [0, 2, -1, 2, 0, 0])
    m = SeqDriftClusters().memberships(dm)
    assert m.shape == (6, 4)  # clusters 0..2 and one group for the isolated utterance
    assert m.argmax(1).tolist() == [0, 2, 3, 2, 0, 0] and torch.all(m.sum(1) == 1)


def test_seqdrift_clusters_need_a_drift_split(tokenizer):
    with pytest.raises(ConfigError, match="needs a SeqDrift split"):
        SeqDriftClusters().memberships(synthetic_datamodule(tokenizer, [-1, -1]))


def test_group_balanced_sampling_draws_every_group_equally_often(tokenizer):
    from robustnlu.data.datamodule import ShuffledBatchSampler
    from robustnlu.robust.grouped import GroupedObjective

    groups = [0] * 90 + [1] * 10
    objective = GroupedObjective(groups=SeqDriftClusters(), sampling="group_balanced")
    objective.setup(synthetic_datamodule(tokenizer, groups), model=None)
    weights = objective.sample_weights()
    assert weights[0].item() == pytest.approx(1 / 90) and weights[-1].item() == pytest.approx(1 / 10)
    sampler = ShuffledBatchSampler([5] * 100, batch_size=10, seed=0, weights=weights.tolist())
    drawn = np.array([i for _ in range(50) for batch in sampler for i in batch])
    share_minority = np.mean(drawn >= 90)
    assert abs(share_minority - 0.5) < 0.03  # 5,000 draws: 3 standard deviations ≈ 0.021
