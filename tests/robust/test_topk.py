"""TopK (core paper 4.2) and TopK-Group (4.3): losses and gradients against NumPy, per task."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustnlu.errors import ConfigError
from robustnlu.groups.base import GroupSource
from robustnlu.robust.erm import ERM
from robustnlu.robust.topk import TopK
from robustnlu.robust.topk_group import TopKGroup
from tests.robust.helpers import task_losses

GAMMA = 0.5


class FixedGroups(GroupSource):
    """A group source with a given membership matrix (no data module needed)."""

    def __init__(self, membership):
        self.membership = torch.as_tensor(membership, dtype=torch.float32)

    def memberships(self, datamodule):
        return self.membership


def np_topk_mean(losses, k):
    return np.sort(np.asarray(losses))[::-1][:k].mean()


@pytest.mark.parametrize("k", [1, 2, 3, 5, 16])
def test_topk_is_the_mean_of_the_k_largest_losses_per_task(k):
    slot, intent = [0.3, 2.0, 1.1, 0.7, 1.9], [1.5, 0.1, 0.2, 3.0, 0.4]
    loss = TopK(k=k, intent_loss_scale=GAMMA)(task_losses(slot, intent))
    kk = min(k, 5)  # k clipped to the batch size
    assert loss.item() == pytest.approx(np_topk_mean(slot, kk) + GAMMA * np_topk_mean(intent, kk))


def test_topk_gradient_is_one_over_k_on_the_selected_examples_of_each_task():
    step = task_losses([0.3, 2.0, 1.1, 0.7], [1.5, 0.1, 0.2, 3.0])
    TopK(k=2, intent_loss_scale=GAMMA)(step).backward()
    assert step.slot.grad.tolist() == [0.0, 0.5, 0.5, 0.0]  # slot top-2: 2.0, 1.1
    assert step.intent.grad.tolist() == [GAMMA / 2, 0.0, 0.0, GAMMA / 2]  # intent top-2: 3.0, 1.5


def test_k_below_one_is_rejected():
    with pytest.raises(ConfigError, match=r"^k: must be >= 1 \(got 0\)$"):
        TopK(k=0)
    with pytest.raises(ConfigError, match=r"^k: must be >= 1 \(got 0\)$"):
        TopKGroup(groups=FixedGroups([[1.0]]), k=0)


def test_topk_over_the_whole_batch_is_erm_and_one_less_is_not():
    """Why the config check wants k < the batch size b (robustnlu/config_schema/method.py top_k_rule):
    k = b (or more) averages every loss, ERM's mean; k = b - 1 already leaves the smallest out."""
    slot, intent = [1.0, 2.0, 3.0, 6.0], [0.5, 0.0, 1.5, 2.0]
    step = task_losses(slot, intent)
    erm = ERM(intent_loss_scale=GAMMA)(step).item()
    assert erm == pytest.approx(3.0 + GAMMA * 1.0)
    for k in (4, 5, 100_000):
        assert TopK(k=k, intent_loss_scale=GAMMA)(step).item() == pytest.approx(erm)
    assert TopK(k=3, intent_loss_scale=GAMMA)(step).item() == pytest.approx(11 / 3 + GAMMA * 4 / 3)


def np_topk_group(losses, groups, k):
    """max over the groups present of the mean of each group's (up to) k largest losses."""
    losses, groups = np.asarray(losses), np.asarray(groups)
    return max(np_topk_mean(losses[groups == g], min(k, int((groups == g).sum()))) for g in np.unique(groups))


def test_topk_group_is_the_largest_group_topk_loss_per_task():
    train_groups = np.array([0, 0, 1, 2, 1, 0, 2, 3])  # dataset rows' groups; group 3 never in the batch
    objective = TopKGroup(groups=FixedGroups(np.eye(4)[train_groups]), k=2, intent_loss_scale=GAMMA)
    objective.setup(datamodule=None, model=None)
    index = [5, 0, 1, 2, 4, 3, 6]  # a batch of dataset rows
    slot = [0.2, 3.0, 1.0, 0.5, 2.9, 0.1, 0.4]
    intent = [1.0, 0.2, 0.3, 4.0, 0.1, 2.0, 2.5]
    step = task_losses(slot, intent, index=index)
    loss = objective(step)
    groups = train_groups[index]
    # slot: group 0 {0.2, 3.0, 1.0} → (3.0+1.0)/2 = 2.0; group 1 {0.5, 2.9} → 1.7; group 2 {0.1, 0.4} → 0.25
    assert np_topk_group(slot, groups, 2) == pytest.approx(2.0)
    expected = np_topk_group(slot, groups, 2) + GAMMA * np_topk_group(intent, groups, 2)
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    # gradient: 1/k on the top-k members of the worst group, per task
    assert step.slot.grad.tolist() == [0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    # intent: group 0 {1.0, 0.2, 0.3} → 0.65; group 1 {4.0, 0.1} → 2.05; group 2 {2.0, 2.5} → 2.25
    assert step.intent.grad.tolist() == [0.0, 0.0, 0.0, 0.0, 0.0, GAMMA / 2, GAMMA / 2]


def test_topk_group_with_one_group_is_topk():
    objective = TopKGroup(groups=FixedGroups(np.ones((6, 1))), k=3, intent_loss_scale=GAMMA)
    objective.setup(datamodule=None, model=None)
    step = task_losses([0.1, 0.9, 0.5, 0.3, 2.0, 1.0], [1.0, 0.0, 0.2, 0.4, 0.3, 0.9])
    assert objective(step).item() == pytest.approx(TopK(k=3, intent_loss_scale=GAMMA)(step).item())


def test_stateless_methods_checkpoint_nothing():
    """TopK keeps no state; TopK-Group's memberships come from the data (re-derived by setup)."""
    objective = TopKGroup(groups=FixedGroups(np.eye(2)), k=2)
    objective.setup(datamodule=None, model=None)
    assert TopK(k=2).state_dict() == {} and objective.state_dict() == {}
