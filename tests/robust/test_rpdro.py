"""R-PDRO (thesis ch. 6): the gold-label score f, the two players' losses of eq. 6.6 and their
gradients against NumPy, the optimum of the adversary's objective, the training step (weights of
ψ_t for the model, one adversary step, nothing else updated) and the state round trip."""

from __future__ import annotations

import io
import types

import numpy as np
import pytest
import torch
from transformers import AutoModel, BertConfig

from robustnlu.adversary.ratio import RatioAdversary, gold_logit_score
from robustnlu.model.jointbert import JointBERT
from robustnlu.model.spec import ModelSpec
from robustnlu.robust.rpdro import RPDRO, rpdro_losses
from tests.robust.helpers import task_losses

CONFIG = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)
SPEC = ModelSpec(hidden_size=16, n_intents=3, n_tags=4, vocab_size=50, encoder_config=CONFIG.to_dict())


def np_softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def make_objective(tau=0.1, gamma=1.0, lr=1e-2, seed=0):
    torch.manual_seed(seed)
    return RPDRO(adversary=lambda spec: RatioAdversary(spec, n_layers=2), tau=tau, lr=lr, weight_decay=0.01,
                 max_grad_norm=1.0, name="rpdro", intent_loss_scale=gamma, spec=SPEC)


def random_batch(seed, b=6, seq=7, words=4):
    g = torch.Generator().manual_seed(seed)
    slot_labels = torch.randint(0, 4, (b, words), generator=g)
    slot_labels[0, 2:] = -100
    slot_labels[1, 1] = -100
    intent_labels = torch.randint(0, 3, (b,), generator=g)
    inputs = {"input_ids": torch.randint(1, 50, (b, seq), generator=g),
              "attention_mask": torch.ones(b, seq, dtype=torch.long),
              "word_index": torch.arange(1, words + 1).repeat(b, 1),
              "slot_labels": slot_labels, "intent_labels": intent_labels}
    slot = torch.rand(b, generator=g, dtype=torch.float64) * 3
    intent = torch.rand(b, generator=g, dtype=torch.float64) * 2
    return task_losses(slot.tolist(), intent.tolist(), **inputs)


# --- pure functions -------------------------------------------------------------------------
def test_gold_logit_score_adds_the_gold_intent_logit_and_the_mean_gold_tag_logit():
    rng = np.random.default_rng(0)
    intent_logits, slot_logits = rng.normal(size=(3, 4)), rng.normal(size=(3, 2, 5))
    intent_labels = np.array([2, -100, 0])
    slot_labels = np.array([[1, 4], [3, -100], [-100, -100]])
    f = gold_logit_score(*(torch.tensor(a) for a in (intent_logits, slot_logits, intent_labels, slot_labels)))
    expected = [intent_logits[0, 2] + (slot_logits[0, 0, 1] + slot_logits[0, 1, 4]) / 2,
                slot_logits[1, 0, 3],  # unknown intent: no intent term; one labelled word
                intent_logits[2, 0]]  # no labelled word: no slot term
    np.testing.assert_allclose(f.numpy(), expected, rtol=1e-12)


def test_losses_and_gradients_match_numpy():
    f_np, l_np, tau = np.array([0.3, -1.2, 2.0, 0.5]), np.array([1.5, 0.2, 0.7, 3.0]), 0.25
    f = torch.tensor(f_np, requires_grad=True)
    losses = torch.tensor(l_np, requires_grad=True)
    model_loss, adversary_loss = rpdro_losses(f, losses, tau)
    r = np_softmax(f_np)
    gain = r @ l_np - tau * (r * np.log(r)).sum()
    assert model_loss.item() == pytest.approx(r @ l_np, rel=1e-12)
    assert adversary_loss.item() == pytest.approx(-gain, rel=1e-12)
    # dJ/df_k = r_k (l_k − Σ r l) − τ r_k (log r_k − Σ r log r) for J = Σ r l − τ Σ r log r
    grad_gain = r * (l_np - r @ l_np) - tau * r * (np.log(r) - r @ np.log(r))
    adversary_loss.backward()
    np.testing.assert_allclose(f.grad.numpy(), -grad_gain, rtol=1e-10)
    assert losses.grad is None  # the adversary sees the losses as constants
    f.grad = None
    model_loss.backward()
    np.testing.assert_allclose(losses.grad.numpy(), r, rtol=1e-12)  # dL_model/dl = r̃
    assert f.grad is None  # and the model the weights as constants


def batch_weights(f: torch.Tensor) -> np.ndarray:
    """The weights r̃ the model loss puts on each example: its value for a one-hot loss vector."""
    f = f.detach()
    return np.array([rpdro_losses(f, torch.eye(len(f), dtype=f.dtype)[j], 1.0)[0].item() for j in range(len(f))])


def test_batch_weights_sum_to_one_and_a_batch_of_one_weighs_one():
    f = torch.tensor([0.1, 5.0, -3.0], dtype=torch.float64)
    np.testing.assert_allclose(batch_weights(f), np_softmax(f.numpy()), rtol=1e-12)  # eq. 6.5
    assert batch_weights(f).sum() == pytest.approx(1.0)
    model_loss, _ = rpdro_losses(torch.tensor([7.3]), torch.tensor([2.5]), 0.1)
    assert batch_weights(torch.tensor([7.3])).item() == 1.0 and model_loss.item() == 2.5


@pytest.mark.parametrize("tau", [0.5, 1e4])
def test_adversary_optimum_is_the_tilted_distribution_and_uniform_as_tau_grows(tau):
    # the maximiser of Σ r l − τ Σ r log r over the simplex is r ∝ exp(l/τ) (uniform: ERM, as τ→∞)
    l_np = np.array([0.2, 1.0, 2.5, 0.7])
    f = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([f], lr=2.0 / tau)
    for _ in range(3000):
        opt.zero_grad()
        rpdro_losses(f, torch.tensor(l_np), tau)[1].backward()
        opt.step()
    expected = np_softmax(l_np / tau)
    np.testing.assert_allclose(batch_weights(f), expected, atol=1e-6)
    if tau > 1e3:
        np.testing.assert_allclose(expected, 0.25, atol=1e-3)


# --- the objective ----------------------------------------------------------------------------
def test_training_step_weights_with_psi_t_then_updates_only_the_adversary():
    gamma = 0.5
    objective = make_objective(gamma=gamma)
    step = random_batch(0)
    for _ in range(2):  # the heads start at zero (uniform weights): move them first
        objective(random_batch(1))
    f_before = objective.validation_log_weights(step).double().numpy()
    params_before = {n: p.detach().clone() for n, p in objective.named_parameters()}
    loss = objective(step)
    combined = step.slot.detach().numpy() + gamma * step.intent.detach().numpy()
    r = np_softmax(f_before)
    assert loss.item() == pytest.approx(r @ combined, rel=1e-6)
    changed = [n for n, p in objective.named_parameters() if not torch.equal(p, params_before[n])]
    assert any("encoder" in n for n in changed) and any("intent_classifier" in n for n in changed)
    assert not np.allclose(objective.validation_log_weights(step).double().numpy(), f_before)
    grads = {n: p.grad.clone() for n, p in objective.named_parameters() if p.grad is not None}
    loss.backward()  # the model's loss reaches the task losses, not the adversary
    np.testing.assert_allclose(step.slot.grad.numpy(), r, rtol=1e-6)
    np.testing.assert_allclose(step.intent.grad.numpy(), gamma * r, rtol=1e-6)
    assert all(torch.equal(p.grad, grads[n]) for n, p in objective.named_parameters() if p.grad is not None)


def test_first_step_is_erm_and_the_adversary_has_no_dropout():
    objective = make_objective()
    objective.train()
    assert not any(m.training for m in objective.adversary.modules())
    step = random_batch(2)
    loss = objective(step)
    assert loss.item() == pytest.approx((step.slot + step.intent).mean().item(), rel=1e-12)


def test_setup_copies_the_slu_encoder_and_warns_on_small_batches():
    torch.manual_seed(1)
    model = JointBERT(AutoModel.from_config(CONFIG), n_intents=3, n_tags=4)
    objective = make_objective()
    with pytest.warns(UserWarning, match="batch size 8"):
        objective.setup(types.SimpleNamespace(batch_size=8), model)
    source, copied = model.encoder.state_dict(), objective.adversary.classifier.encoder.state_dict()
    assert set(copied) < set(source) and all(torch.equal(copied[k], source[k]) for k in copied)
    assert "encoder.layer.1.output.dense.weight" in copied and "encoder.layer.2.output.dense.weight" not in copied


def test_state_round_trip_continues_identically():
    original = make_objective(seed=0)
    for seed in range(3):
        original(random_batch(seed))
    buffer = io.BytesIO()
    torch.save({"state": original.state_dict(), "optimizers": original.optimizer_states()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    restored = make_objective(seed=1)  # other initial weights: all must come from the checkpoint
    restored.load_state_dict(saved["state"])
    restored.load_optimizer_states(saved["optimizers"])
    step_a, step_b = random_batch(10), random_batch(10)
    assert original(step_a).item() == restored(step_b).item()
    for (n, p), q in zip(original.named_parameters(), restored.parameters(), strict=True):
        assert torch.equal(p, q), n
    assert original(random_batch(11)).item() == restored(random_batch(11)).item()
