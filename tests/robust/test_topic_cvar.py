"""Topic-CVaR: the CVaR topic weights against a linear program, the per-topic exponential
averages against a hand-computed trajectory, loss and gradient against NumPy, state round trip."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from robustnlu.errors import ConfigError
from robustnlu.groups.base import GroupSource
from robustnlu.robust.topic_cvar import TopicCVaR, cvar_weights
from tests.robust.helpers import task_losses


class FixedGroups(GroupSource):
    def __init__(self, membership):
        self.membership = torch.as_tensor(membership, dtype=torch.float32)

    def memberships(self, datamodule):
        return self.membership


def make_objective(membership, **kwargs) -> TopicCVaR:
    objective = TopicCVaR(groups=FixedGroups(membership), name="topic_cvar", **kwargs)
    objective.setup(datamodule=None, model=None)
    return objective


def hard(topics, n_topics):
    return np.eye(n_topics)[topics]


def cvar_by_linear_program(scores, prior, alpha):
    """max_q Σ q_z s_z  s.t.  0 ≤ q_z ≤ p_z/α, Σ q_z = 1."""
    result = linprog(-np.asarray(scores), A_eq=np.ones((1, len(scores))), b_eq=[1.0],
                     bounds=[(0, p / alpha) for p in prior], method="highs")
    assert result.success
    return result.x


def cvar_greedy(scores, prior, alpha):
    q, left = np.zeros(len(scores)), 1.0
    for z in np.argsort(-np.asarray(scores), kind="stable"):
        q[z] = min(prior[z] / alpha, left)
        left -= q[z]
    return q


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.7])
def test_cvar_weights_solve_the_linear_program(seed, alpha):
    rng = np.random.default_rng(seed)
    scores, prior = rng.uniform(0, 5, 7), rng.dirichlet(np.ones(7))
    q = cvar_weights(torch.tensor(scores), torch.tensor(prior), alpha).numpy()
    np.testing.assert_allclose(q, cvar_by_linear_program(scores, prior, alpha), atol=1e-9)
    assert q.sum() == pytest.approx(1.0)


def test_cvar_weights_limits():
    scores, prior = torch.tensor([1.0, 4.0, 2.0, 3.0]), torch.tensor([0.1, 0.2, 0.3, 0.4])
    assert cvar_weights(scores, prior, 1.0).tolist() == pytest.approx(prior.tolist())
    assert cvar_weights(scores, prior, 0.01).tolist() == [0.0, 1.0, 0.0, 0.0]
    # α = 0.5: topic 1 takes 0.2/0.5 = 0.4, topic 3 the remaining 0.6 (< its cap 0.8)
    assert cvar_weights(scores, prior, 0.5).tolist() == pytest.approx([0.0, 0.4, 0.0, 0.6])


def test_exponential_averages_follow_the_hand_computed_trajectory():
    objective = make_objective(hard([0, 0, 1, 1, 2, 2], 3), ema_step=0.5, alpha=1.0)
    # batch 1: slot L = (2, 5, absent), intent L = (1, 0, absent): first sight → the batch values
    objective(task_losses([1, 3, 5], [2, 0, 0], index=[0, 1, 2]))
    assert objective.topic_loss_ema.tolist() == [[2, 5, 0], [1, 0, 0]]
    assert objective.topic_seen.tolist() == [[True, True, False]] * 2
    # batch 2: slot L = (4, 1, 6) → (2+.5·2, 5−.5·4, 6 first) ; intent L = (2, 4, 8)
    objective(task_losses([4, 1, 6], [2, 4, 8], index=[1, 3, 4]))
    assert objective.topic_loss_ema.tolist() == [[3, 3, 6], [1.5, 2, 8]]
    # batch 3: only topic 2: slot L2 = 3, intent L2 = 2; topics 0 and 1 keep their averages
    objective(task_losses([2, 4], [1, 3], index=[4, 5]))
    assert objective.topic_loss_ema.tolist() == [[3, 3, 4.5], [1.5, 2, 5]]
    assert objective.topic_seen.all()


def numpy_topic_cvar(membership, slot, intent, ema, alpha, step, gamma):
    """Loss and d loss / d (slot, intent) of one batch after the averages ``ema`` [2, G] (all
    topics seen and present in the batch)."""
    prior = membership.sum(0) / len(membership)
    loss, grads = 0.0, []
    for t, losses in enumerate((slot, intent)):
        m = membership[: len(losses)]
        topic_losses = losses @ m / m.sum(0)
        q = cvar_greedy((1 - step) * ema[t] + step * topic_losses, prior, alpha)
        scale = 1.0 if t == 0 else gamma
        loss += scale * q @ topic_losses
        grads.append(scale * m @ (q / m.sum(0)))
    return loss, grads


def test_loss_and_gradient_match_numpy_with_soft_topics():
    rng = np.random.default_rng(0)
    membership = rng.dirichlet(np.full(4, 0.5), size=10)
    objective = make_objective(membership, alpha=0.3, ema_step=0.2, intent_loss_scale=0.7)
    first = task_losses(rng.uniform(0, 3, 10), rng.uniform(0, 3, 10))
    objective(first)
    ema = objective.topic_loss_ema.double().numpy().copy()
    slot, intent = rng.uniform(0, 3, 6), rng.uniform(0, 3, 6)
    step = task_losses(slot, intent)
    loss = objective(step)
    loss.backward()
    m = membership.astype(np.float32).astype(np.float64)  # the group source's float32 memberships
    expected, (d_slot, d_intent) = numpy_topic_cvar(m, slot, intent, ema, 0.3, 0.2, 0.7)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(step.slot.grad.numpy(), d_slot, rtol=1e-6)
    np.testing.assert_allclose(step.intent.grad.numpy(), d_intent, rtol=1e-6)


def test_selection_uses_the_averages_not_the_batch():
    objective = make_objective(hard([0, 1, 0, 1], 2), alpha=0.5, ema_step=0.1)
    objective(task_losses([9.0, 1.0], [0.0, 0.0], index=[0, 1]))  # topic 0 averages 9, topic 1 averages 1
    step = task_losses([1.0, 3.0], [0.0, 0.0], index=[2, 3])  # this batch topic 1 is worse
    loss = objective(step)
    loss.backward()
    # averages (8.2, 1.2): all mass (prior 0.5 / α 0.5 = 1) on topic 0, whose batch loss is 1
    assert loss.item() == pytest.approx(1.0)
    assert step.slot.grad.tolist() == [1.0, 0.0]


def test_averages_include_the_current_batch_before_selecting():
    objective = make_objective(hard([0, 1, 0, 1], 2), alpha=0.5, ema_step=0.5)
    objective(task_losses([3.0, 2.0], [0.0, 0.0], index=[0, 1]))  # averages (3, 2)
    # updated averages (2, 5.5) select topic 1 (the stale ones (3, 2) would select topic 0)
    assert objective(task_losses([1.0, 9.0], [0.0, 0.0], index=[2, 3])).item() == pytest.approx(9.0)


@pytest.mark.parametrize("renormalize, expected", [(False, 0.5 * 4.0), (True, 4.0)])
def test_absent_topics_contribute_nothing_or_are_renormalised_away(renormalize, expected):
    objective = make_objective(hard([0, 1, 2, 2], 3), alpha=0.5, ema_step=1.0, renormalize=renormalize)
    objective(task_losses([4.0, 2.0, 1.0], [0.0] * 3, index=[0, 1, 2]))  # averages (4, 2, 1)
    # prior (.25, .25, .5), α = .5: topic 0 takes .25/.5 = .5, topic 1 the remaining .5, topic 2 none
    assert objective(task_losses([4.0], [0.0], index=[0])).item() == pytest.approx(expected)  # topic 1 absent
    assert objective(task_losses([1.0], [0.0], index=[2])).item() == 0.0  # only the unselected topic 2


def test_state_round_trip_continues_identically():
    rng = np.random.default_rng(1)
    membership = rng.dirichlet(np.full(5, 0.3), size=20)
    batches = [task_losses(rng.uniform(0, 3, 8), rng.uniform(0, 3, 8), index=rng.choice(20, 8, replace=False))
               for _ in range(5)]
    original = make_objective(membership, alpha=0.25, ema_step=0.3)
    for batch in batches[:3]:
        original(batch)
    buffer = io.BytesIO()
    torch.save({"state": original.state_dict(), "optimizers": original.optimizer_states()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    restored = make_objective(membership, alpha=0.25, ema_step=0.3)
    restored.load_state_dict(saved["state"])
    restored.load_optimizer_states(saved["optimizers"])
    for batch in batches[3:]:
        assert restored(batch).item() == original(batch).item()
        assert torch.equal(restored.topic_loss_ema, original.topic_loss_ema)
        assert torch.equal(restored.topic_seen, original.topic_seen)


def test_state_loads_without_the_data():
    original = make_objective(hard([0, 1, 2], 3))
    original(task_losses([1.0, 2.0], [3.0, 4.0], index=[0, 2]))
    fresh = TopicCVaR(groups=FixedGroups(hard([0], 1)))  # not set up: no groups known
    fresh.load_state_dict(original.state_dict())
    assert torch.equal(fresh.topic_loss_ema, original.topic_loss_ema)
    assert fresh.topic_seen.tolist() == [[True, False, True]] * 2


@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"alpha": 1.5}, {"ema_step": 0.0}])
def test_rejects_invalid_hyper_parameters(kwargs):
    ((key, value),) = kwargs.items()
    with pytest.raises(ConfigError, match=rf"^{key}: must be in \(0, 1\] \(got {value}\)$"):
        TopicCVaR(groups=FixedGroups(hard([0], 1)), **kwargs)


def test_config_gives_lda_topics_seeded_with_the_run_seed(tmp_path):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from integration_helpers import compose_config
    from robustnlu.groups.lda_topics import LDATopics

    cfg = compose_config(["method=topic_cvar", "seed=3", "method.groups.assignment=soft"], tmp_path)
    objective = instantiate(OmegaConf.to_container(cfg.method, resolve=True), intent_loss_scale=2.0)
    assert isinstance(objective, TopicCVaR) and isinstance(objective.group_source, LDATopics)
    assert objective.group_source.lda.random_state == 3 and objective.group_source.assignment == "soft"
    assert (objective.name, objective.alpha, objective.ema_step, objective.intent_loss_scale) == ("topic_cvar", 0.2, 0.1, 2.0)
