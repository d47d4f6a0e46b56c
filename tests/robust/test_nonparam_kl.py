"""NonParam KL-DRO (thesis 5.4.4): τ* against scipy's root of KL(softmax(l/τ)‖uniform) = κ,
clipping at the interval's ends, uniform weights for equal losses, loss and gradients (detached
and not) against NumPy, validation log-weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import brentq
from scipy.special import logsumexp

from robustnlu.errors import ConfigError
from robustnlu.robust.nonparam_kl import NonParamKL, optimal_temperature
from tests.robust.helpers import task_losses

GAMMA = 0.5


def np_weights(losses, tau):
    z = np.asarray(losses, dtype=np.float64) / tau
    return np.exp(z - logsumexp(z))


def np_kl(losses, tau):
    w = np_weights(losses, tau)
    return float(np.sum(w * np.log(np.maximum(len(w) * w, 1e-300))))


def np_tau(losses, kappa):
    """The root in log10 τ by Brent's method (the bracket holds it in these tests)."""
    return 10.0 ** brentq(lambda t: np_kl(losses, 10.0**t) - kappa, -10, 10, xtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kappa", [0.01, 0.1, 1.0, 3.0])
def test_temperature_solves_the_kl_constraint(seed, kappa):
    losses = np.random.default_rng(seed).gamma(2.0, 1.0, size=32)  # KL ≤ log 32 ≈ 3.47
    tau = optimal_temperature(torch.tensor(losses, dtype=torch.float32), kappa).item()
    assert abs(np_kl(losses, tau) - kappa) < 1e-3 * kappa
    assert tau == pytest.approx(np_tau(losses, kappa), rel=1e-4)  # within 1e-5 decades


def test_unreachable_radius_clips_to_the_lower_end():
    losses = torch.tensor([0.5, 2.0, 1.0, 0.1])
    tau = optimal_temperature(losses, kappa=10.0).item()  # KL ≤ log 4 < 10 for every τ
    assert tau == pytest.approx(1e-10, rel=1e-4)
    objective = NonParamKL(kappa=10.0, intent_loss_scale=0.0)
    assert objective(task_losses(losses, [0.0] * 4)).item() == pytest.approx(2.0)  # all weight on the max


def test_root_above_the_interval_clips_to_the_upper_end():
    losses = torch.tensor([0.0, 1e12], dtype=torch.float64)  # at τ = 1e10: weights ∝ (1, e^100)
    assert np_kl(losses.numpy(), 1e10) > 0.5
    assert optimal_temperature(losses, kappa=0.01).item() == pytest.approx(1e10, rel=1e-4)


def test_equal_losses_give_uniform_weights():
    objective = NonParamKL(kappa=1.0, intent_loss_scale=GAMMA)
    step = task_losses([0.7] * 5, [0.2] * 5)
    loss = objective(step)
    loss.backward()
    assert loss.item() == pytest.approx(0.7 + GAMMA * 0.2)
    assert step.slot.grad.tolist() == pytest.approx([0.2] * 5)


@pytest.mark.parametrize("detach", [True, False])
def test_loss_and_gradient_match_numpy(detach):
    rng = np.random.default_rng(7)
    slot, intent = rng.gamma(2.0, 1.0, size=16), rng.gamma(1.0, 1.0, size=16)
    combined = slot + GAMMA * intent  # one weight per utterance from the combined loss
    tau = np_tau(combined, 0.5)
    w = np_weights(combined, tau)
    loss_ref = float(w @ combined)
    # d/dl_j Σ_i w_i l_i: w_j with the weights held fixed (Danskin), plus, through the softmax
    # at fixed τ, w_j (l_j - Σ_i w_i l_i)/τ
    grad_ref = w if detach else w + w * (combined - loss_ref) / tau

    step = task_losses(slot, intent)
    loss = NonParamKL(kappa=0.5, detach_weights=detach, intent_loss_scale=GAMMA)(step)
    loss.backward()
    assert loss.item() == pytest.approx(loss_ref, rel=1e-4)
    assert step.slot.grad.numpy() == pytest.approx(grad_ref, rel=1e-3)
    assert step.intent.grad.numpy() == pytest.approx(GAMMA * grad_ref, rel=1e-3)


def test_validation_log_weights_are_the_batch_likelihood_ratios():
    slot, intent = [0.1, 2.0, 0.5, 1.2], [0.3, 0.0, 1.0, 0.2]
    combined = np.add(slot, GAMMA * np.asarray(intent))
    log_w = NonParamKL(kappa=0.2, intent_loss_scale=GAMMA).validation_log_weights(task_losses(slot, intent))
    expected = np.log(4 * np_weights(combined, np_tau(combined, 0.2)))
    assert log_w.numpy() == pytest.approx(expected, abs=1e-4)


def test_no_state_to_checkpoint():
    assert NonParamKL().state_dict() == {}


def test_invalid_radius_is_rejected():
    with pytest.raises(ConfigError, match=r"^kappa: must be > 0 \(got 0.0\)$"):
        NonParamKL(kappa=0.0)
