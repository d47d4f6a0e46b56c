"""Group-DRO (Sagawa et al. 2020): the weight trajectory, losses and gradients against an
independent NumPy implementation of the update; stability; checkpoint round trip."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from robustnlu.errors import ConfigError
from robustnlu.groups.seqdrift_clusters import SeqDriftClusters
from robustnlu.robust.group_dro import GroupDRO
from tests.robust.helpers import synthetic_datamodule, task_losses
from tests.robust.test_topk import FixedGroups

GAMMA = 0.5
#: 6 training rows over 4 groups; row 5 is soft (split between groups 1 and 2); group 3 has
#: no example in any of the batches below
MEMBERSHIP = np.array([
    [1, 0, 0, 0],
    [1, 0, 0, 0],
    [0, 1, 0, 0],
    [0, 0, 1, 0],
    [0, 1, 0, 0],
    [0, 0.25, 0.75, 0],
], dtype=np.float64)
#: (dataset rows, slot losses, intent losses) of three steps; step 2 lacks groups 2 and 3
STEPS = [
    ([0, 2, 3, 5], [1.0, 2.0, 0.5, 3.0], [0.2, 0.1, 1.5, 0.4]),
    ([1, 4, 0], [0.7, 2.5, 1.2], [0.9, 0.3, 0.6]),
    ([5, 3, 2, 1], [0.1, 4.0, 0.6, 0.8], [2.0, 0.5, 0.3, 1.0]),
]


def np_group_dro(steps, membership, eta, rho, shared=False, gamma=GAMMA):
    """Reference: per weight set, L_g = Σ M l / Σ M over present groups (0 for absent ones),
    log q ← ρ log q + η L_g for every group, normalise; loss Σ q L. Returns per step
    (loss, {set: q}, {task: dloss/dl})."""
    n_groups = membership.shape[1]
    log_q = {name: np.full(n_groups, -np.log(n_groups)) for name in (["combined"] if shared else ["slot", "intent"])}
    out = []
    for index, slot, intent in steps:
        m = membership[index]
        counts = m.sum(0)
        present = counts > 0
        if shared:
            losses = {"combined": np.add(slot, gamma * np.asarray(intent))}
        else:
            losses = {"slot": np.array(slot), "intent": np.array(intent)}
        total, grads = 0.0, {}
        for name, l in losses.items():
            group_loss = np.zeros(n_groups)
            group_loss[present] = (m[:, present] * l[:, None]).sum(0) / counts[present]
            z = rho * log_q[name] + eta * group_loss
            log_q[name] = z - np.log(np.exp(z - z.max()).sum()) - z.max()
            q = np.exp(log_q[name])
            scale = gamma if name == "intent" else 1.0
            total += scale * (q * group_loss).sum()
            grad = scale * (m[:, present] * (q[present] / counts[present])).sum(1)
            if shared:
                grads = {"slot": grad, "intent": gamma * grad}
            else:
                grads[name] = grad
        out.append((total, {k: np.exp(v) for k, v in log_q.items()}, grads))
    return out


def make(**kwargs) -> GroupDRO:
    objective = GroupDRO(groups=FixedGroups(MEMBERSHIP), intent_loss_scale=GAMMA, **kwargs)
    objective.setup(datamodule=None, model=None)
    return objective


@pytest.mark.parametrize("decay", [1.0, 0.7])
@pytest.mark.parametrize("shared", [False, True])
def test_weights_losses_and_gradients_follow_the_update_rule(decay, shared):
    objective = make(step_size=0.5, decay=decay, shared_weights=shared)
    expected = np_group_dro(STEPS, MEMBERSHIP, eta=0.5, rho=decay, shared=shared)
    for (index, slot, intent), (loss_ref, q_ref, grad_ref) in zip(STEPS, expected, strict=True):
        step = task_losses(slot, intent, index=index)
        loss = objective(step)
        loss.backward()
        assert loss.item() == pytest.approx(loss_ref, rel=1e-6)
        for name, q in q_ref.items():
            assert objective.log_group_weights(name).exp().numpy() == pytest.approx(q, rel=1e-6)
        assert step.slot.grad.numpy() == pytest.approx(grad_ref["slot"], rel=1e-6)
        assert step.intent.grad.numpy() == pytest.approx(grad_ref["intent"], rel=1e-6)


def test_an_absent_group_keeps_its_unnormalised_weight():
    objective = GroupDRO(groups=FixedGroups(np.eye(2)), step_size=1.0)
    objective.setup(datamodule=None, model=None)
    loss = objective(task_losses([2.0], [0.0], index=[0]))  # only group 0, loss 2
    q0 = np.exp(2.0) / (np.exp(2.0) + 1.0)  # 0.5·e² against group 1's unchanged 0.5
    assert objective.log_group_weights("slot").exp().tolist() == pytest.approx([q0, 1 - q0])
    assert objective.log_group_weights("intent").exp().tolist() == pytest.approx([0.5, 0.5])  # intent loss 0
    assert loss.item() == pytest.approx(q0 * 2.0)  # Σ over present groups, q normalised over all


def closed_form_weights(group_losses: np.ndarray, eta: float, rho: float) -> np.ndarray:
    """q_T = softmax(η Σ_{s≤T} ρ^(T−s) L_s) for per-step group losses ``[T, G]`` (absent groups 0):
    the geometric average the decayed update computes, written out as a sum."""
    t = len(group_losses)
    z = eta * (rho ** np.arange(t - 1, -1, -1)[:, None] * group_losses).sum(0)
    return np.exp(z - z.max()) / np.exp(z - z.max()).sum()


@pytest.mark.parametrize("decay", [1.0, 0.8, 0.5])
def test_decayed_weights_equal_the_closed_form_with_absent_groups(decay):
    """Hard groups, most of them absent from most batches: q after every step equals the
    discounted sum of past group losses, where an absent group's loss is 0."""
    rng = np.random.default_rng(0)
    n_groups, steps = 5, 12
    objective = GroupDRO(groups=FixedGroups(np.eye(n_groups)), step_size=0.3, decay=decay)
    objective.setup(datamodule=None, model=None)
    history = []
    for _ in range(steps):
        index = rng.choice(n_groups, size=int(rng.integers(1, 3)), replace=False)  # 1-2 of 5 groups
        slot = rng.uniform(0, 3, size=len(index))
        objective(task_losses(slot, np.zeros(len(index)), index=index))
        row = np.zeros(n_groups)
        row[index] = slot  # one example per present group: its loss is the group's mean
        history.append(row)
        q = objective.log_group_weights("slot").exp().numpy()
        assert q == pytest.approx(closed_form_weights(np.array(history), eta=0.3, rho=decay), rel=1e-6)  # q is float32


def test_appearing_with_zero_loss_gains_a_group_no_weight():
    """With decay < 1, a group that appears in the batch with loss 0 leaves q uniform."""
    objective = GroupDRO(groups=FixedGroups(np.eye(2)), step_size=1.0, decay=0.5)
    objective.setup(datamodule=None, model=None)
    objective(task_losses([0.0], [0.0], index=[0]))  # only group 0, loss 0
    assert objective.log_group_weights("slot").exp().tolist() == pytest.approx([0.5, 0.5], rel=1e-6)

    rng = np.random.default_rng(1)
    objective = GroupDRO(groups=FixedGroups(np.eye(100)), step_size=0.1, decay=0.99)
    objective.setup(datamodule=None, model=None)
    for _ in range(300):
        index = rng.choice(100, size=32, replace=False)
        objective(task_losses(np.zeros(32), np.zeros(32), index=index))
    for name in ("slot", "intent"):
        q = objective.log_group_weights(name).exp()
        assert (q.max() / q.min()).item() == pytest.approx(1.0, rel=1e-6)


def test_large_losses_stay_finite():
    objective = make(step_size=1.0)
    for index, slot, intent in STEPS:
        loss = objective(task_losses(np.asarray(slot) * 1e4, np.asarray(intent) * 1e4, index=index))
        assert torch.isfinite(loss)
    q = objective.log_group_weights("slot").exp()
    assert torch.isfinite(q).all() and q.sum().item() == pytest.approx(1.0)
    # accumulated slot group losses ≈ (2.75, 5.2, 3.9, 0)·1e4: group 1 takes all the weight
    assert q[1].item() == pytest.approx(1.0)


def test_invalid_hyper_parameters_are_rejected():
    with pytest.raises(ConfigError, match=r"^step_size: must be > 0 \(got 0.0\)$"):
        GroupDRO(groups=FixedGroups(MEMBERSHIP), step_size=0.0)
    with pytest.raises(ConfigError, match=r"^decay: must be in \(0, 1\] \(got 1.5\)$"):
        GroupDRO(groups=FixedGroups(MEMBERSHIP), decay=1.5)


def test_state_round_trip_continues_identically():
    original = make(step_size=0.5, decay=0.9)
    for index, slot, intent in STEPS[:2]:
        original(task_losses(slot, intent, index=index))
    buffer = io.BytesIO()
    torch.save({"state": original.state_dict(), "optimizers": original.optimizer_states()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)

    restored = make(step_size=0.5, decay=0.9)  # set up (uniform q), then the checkpoint is restored
    restored.load_state_dict(saved["state"])
    restored.load_optimizer_states(saved["optimizers"])
    index, slot, intent = STEPS[2]
    continued = original(task_losses(slot, intent, index=index))
    assert restored(task_losses(slot, intent, index=index)).item() == continued.item()
    for name in ("slot", "intent"):
        assert torch.equal(restored.log_group_weights(name), original.log_group_weights(name))

    without_data = GroupDRO(groups=FixedGroups(MEMBERSHIP))  # e.g. predict: no setup, sizes from the checkpoint
    without_data.load_state_dict(saved["state"])
    assert without_data.log_group_weights("slot").shape == (4,)


def test_default_is_group_balanced_sampling_over_seqdrift_clusters(tokenizer):
    objective = GroupDRO(groups=SeqDriftClusters())
    objective.setup(synthetic_datamodule(tokenizer, [0, 0, 0, 1]), model=None)
    assert objective.sample_weights().tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0])
    # clusters 0 and 1, plus the (here empty) group of unclustered utterances
    assert objective.log_group_weights("slot").exp().tolist() == pytest.approx([1 / 3] * 3)
