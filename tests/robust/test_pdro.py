"""P-DRO (thesis ch. 5) against independent NumPy references: the LSTM adversary's log q(x, y)
token by token, the model loss, the running normaliser and the adversary's SGD steps on a
hand-made batch; ψ0 pre-training, the first step = ERM, validation log-weights and a state
round trip through torch.save / weights_only loading."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from robustnlu.adversary.generative_lm import GenerativeLM
from robustnlu.model.spec import ModelSpec
from robustnlu.robust.erm import ERM
from robustnlu.robust.pdro import PDRO
from tests.robust.helpers import synthetic_datamodule, task_losses

SPEC = ModelSpec(hidden_size=4, n_intents=3, n_tags=2, vocab_size=12, encoder_config={})
TEXTS = ["play song one", "play the song two", "add a song to my list", "play song one now",
         "book a table for two", "book a table", "play song", "add this to the list"]


# --- the language model ---------------------------------------------------------------------
def numpy_log_q(lm: GenerativeLM, rows: list[list[int]], intents: list[int], classes: list[int], oov: int) -> list[float]:
    """log q(x, y) by running an LSTM cell by hand one token at a time: inputs [CLS] ⟨y⟩ x…,
    targets ⟨y⟩ x… [SEP], softmax over the embedding rows ``classes`` (tied weights)."""
    emb = lm.embedding.weight.detach().double().numpy()
    w_ih, w_hh = lm.lstm.weight_ih_l0.detach().double().numpy(), lm.lstm.weight_hh_l0.detach().double().numpy()
    bias = (lm.lstm.bias_ih_l0 + lm.lstm.bias_hh_l0).detach().double().numpy()
    sigmoid = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    out = []
    for row, y in zip(rows, intents, strict=True):
        row = [t if t in classes else oov for t in row]
        sequence = [row[0], SPEC.vocab_size + y, *row[1:]]
        h, c, total = np.zeros(w_hh.shape[1]), np.zeros(w_hh.shape[1]), 0.0
        for prev, target in zip(sequence[:-1], sequence[1:], strict=True):
            i, f, g, o = np.split(w_ih @ emb[prev] + w_hh @ h + bias, 4)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            logits = emb[classes] @ h
            total += logits[classes.index(target)] - np.log(np.exp(logits).sum())
        out.append(total)
    return out


def lm_batch():
    # two rows, [CLS]=1 ... [SEP]=2, the second padded with 0
    input_ids = torch.tensor([[1, 5, 7, 8, 2], [1, 9, 2, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    return input_ids, attention_mask, torch.tensor([2, 0])


@pytest.mark.parametrize("output_vocab", ["full", "train"])
def test_log_q_is_the_sum_of_token_log_probabilities(output_vocab):
    torch.manual_seed(0)
    lm = GenerativeLM(SPEC, hidden_size=6, dropout=0.2, output_vocab=output_vocab).eval()
    lm.fit_output_vocabulary(torch.tensor([1, 2, 5, 7, 8]))  # 9 is unseen: OOV when restricted
    input_ids, mask, intents = lm_batch()
    rows = [[1, 5, 7, 8, 2], [1, 9, 2]]
    oov = SPEC.vocab_size + SPEC.n_intents
    classes = list(range(oov + 1)) if output_vocab == "full" else [1, 2, 5, 7, 8, 12, 13, 14, 15]
    expected = numpy_log_q(lm, rows, intents.tolist(), classes, oov)
    assert lm.log_prob(input_ids, mask, intents).tolist() == pytest.approx(expected, abs=1e-5)


def test_padding_does_not_change_log_q():
    torch.manual_seed(0)
    lm = GenerativeLM(SPEC, hidden_size=6).eval()
    input_ids, mask, intents = lm_batch()
    alone = lm.log_prob(input_ids[1:, :3], mask[1:, :3], intents[1:])
    garbage_padding = input_ids[1:].clone()
    garbage_padding[0, 3:] = 7
    assert lm.log_prob(garbage_padding, mask[1:], intents[1:]).item() == pytest.approx(alone.item(), abs=1e-6)


# --- the objective on a fake adversary: log q_i = a·f_i + b ---------------------------------
class LinearLogQ(nn.Module):
    """A fake adversary with log q(x_i, y_i) = a·f_i + b, f_i = input_ids[i, 1]."""

    def __init__(self, spec):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(0.3))
        self.b = nn.Parameter(torch.tensor(-1.0))

    def log_prob(self, input_ids, attention_mask, intents):
        return self.a * input_ids[:, 1].float() + self.b


def fake_objective(log_q0, **kwargs) -> PDRO:
    objective = PDRO(adversary=LinearLogQ, spec=SPEC, **kwargs)
    objective.pretrained.fill_(True)
    objective.train_log_q0 = torch.tensor(log_q0)
    return objective


def test_normaliser_window_is_a_fifo_of_the_last_k_minibatches():
    objective = fake_objective([0.0], window=2, temperature=1.0)
    # e^{l} per batch: {2} | {1, 3} | {6} | {1, 1, 4}; Z̃ = Σ e^{l} / Σ |B| over the last 2 batches
    batches = [[2.0], [1.0, 3.0], [6.0], [1.0, 1.0, 4.0]]
    expected = [2 / 1, (2 + 4) / (1 + 2), (4 + 6) / (2 + 1), (6 + 6) / (1 + 3)]
    got = [objective.push_normaliser(torch.tensor(b, dtype=torch.float64).log()).exp().item() for b in batches]
    assert got == pytest.approx(expected, rel=1e-12)
    assert objective.window_pushes.item() == 4


def test_model_loss_and_adversary_steps_match_numpy():
    gamma, tau, lr, k, clip = 0.7, 0.5, 0.1, 2, 2.0
    log_q0 = [-1.2, 0.4, -0.3, 0.9, -2.0, 0.1]
    objective = fake_objective(log_q0, intent_loss_scale=gamma, temperature=tau, window=k, adversary_lr=lr,
                               max_grad_norm=clip)
    batches = [  # (dataset rows, feature f_i, slot losses, intent losses): batch sizes 3, 2, 4, 1
        ([0, 2, 4], [1, 2, 3], [0.5, 1.5, 0.2], [0.1, 0.9, 1.3]),
        ([1, 5], [2, 1], [0.8, 0.3], [0.4, 2.0]),
        ([3, 0, 5, 2], [3, 1, 1, 2], [0.2, 0.7, 1.1, 0.4], [0.6, 0.2, 0.5, 1.7]),
        ([4], [2], [1.4], [0.3]),
    ]
    a, b, window = 0.3, -1.0, []
    for step, (index, f, slot, intent) in enumerate(batches):
        f, slot, intent = np.array(f, float), np.array(slot), np.array(intent)
        w = np.ones(len(f)) if step == 0 else np.exp(a * f + b - np.array(log_q0)[index])
        expected_loss = np.mean(w * slot) + gamma * np.mean(w * intent)
        e = np.exp((slot + gamma * intent) / tau)
        window = [*window, (e.sum(), len(e))][-k:]
        v = e / (sum(s for s, _ in window) / sum(n for _, n in window))
        grad = np.array([-(v * f).sum(), -v.sum()])  # ∂/∂(a, b) of −Σ v_i (a f_i + b)
        grad *= min(1.0, clip / (np.linalg.norm(grad) + 1e-6))
        a, b = a - lr * grad[0], b - lr * grad[1]

        losses = task_losses(slot, intent, index=index, input_ids=[[1, int(x)] for x in f],
                             attention_mask=[[1, 1]] * len(f), intent_labels=[0] * len(f))
        loss = objective(losses)
        loss.backward()
        assert loss.item() == pytest.approx(expected_loss, rel=1e-6)
        # weights are constants for θ: ∂L/∂l_slot,i = w_i / |B|, ∂L/∂l_intent,i = γ w_i / |B|
        assert losses.slot.grad.numpy() == pytest.approx(w / len(f), rel=1e-6)
        assert losses.intent.grad.numpy() == pytest.approx(gamma * w / len(f), rel=1e-6)
        assert [objective.adversary.a.item(), objective.adversary.b.item()] == pytest.approx([a, b], rel=1e-6)
    assert objective.adversary_steps.item() == 4


# --- the real adversary on a data module -----------------------------------------------------
def tiny_pdro(tokenizer, dm, **kwargs) -> PDRO:
    spec = ModelSpec(hidden_size=4, n_intents=len(dm.vocab.intents), n_tags=len(dm.vocab.tags),
                     vocab_size=len(tokenizer), encoder_config={})
    options = {"pretrain_epochs": 1, "pretrain_lr": 1e-2, "pretrain_batch_size": 4, "adversary_lr": 1e-2, **kwargs}
    objective = PDRO(adversary=lambda s: GenerativeLM(s, hidden_size=16), spec=spec, **options)
    objective.setup(dm, model=None)
    return objective


@pytest.fixture(scope="module")
def dm(tokenizer):
    return synthetic_datamodule(tokenizer, [0] * len(TEXTS), TEXTS)


def batch_losses(dm, index, slot=None, intent=None, split="train"):
    batch = dm.collate([dm.datasets[split][i] for i in index])
    n = len(index)
    slot = np.linspace(0.2, 1.5, n) if slot is None else slot
    intent = np.linspace(1.0, 0.1, n) if intent is None else intent
    return task_losses(slot, intent, index=index, input_ids=batch["input_ids"],
                       attention_mask=batch["attention_mask"], intent_labels=batch["intent_labels"])


def test_pretraining_lowers_the_training_nll_and_is_deterministic(tokenizer, dm):
    caches = {}
    for epochs in (0, 2):
        torch.manual_seed(0)  # the same initial ψ for both
        objective = tiny_pdro(tokenizer, dm, pretrain_epochs=epochs)
        objective.prepare()
        caches[epochs] = objective.train_log_q0
        with torch.no_grad():
            assert torch.equal(caches[epochs], objective.split_log_q(objective.adversary, "train"))  # ψ = ψ0
    assert -caches[2].mean().item() < -caches[0].mean().item() - 1.0
    torch.manual_seed(0)
    again = tiny_pdro(tokenizer, dm, pretrain_epochs=2)
    torch.rand(5)  # other RNG draws before pre-training: same ψ0 all the same
    state = torch.get_rng_state()
    again.prepare()
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left alone
    assert torch.equal(again.train_log_q0, caches[2])


def test_first_step_equals_erm_and_the_cache_matches_psi0(tokenizer, dm):
    objective = tiny_pdro(tokenizer, dm, intent_loss_scale=0.5)
    index = [5, 2, 7]
    pdro_losses, erm_losses = batch_losses(dm, index), batch_losses(dm, index)
    pdro_loss = objective(pdro_losses)
    erm_loss = ERM(intent_loss_scale=0.5)(erm_losses)
    assert pdro_loss.item() == erm_loss.item()
    pdro_loss.backward()
    erm_loss.backward()
    assert torch.equal(pdro_losses.slot.grad, erm_losses.slot.grad)
    assert torch.equal(pdro_losses.intent.grad, erm_losses.intent.grad)
    # the cached log q_ψ0 of rows 5, 2, 7 is ψ0's live log q of this batch, up to float rounding
    batch = pdro_losses.inputs
    live = objective.reference.log_prob(batch["input_ids"], batch["attention_mask"], batch["intent_labels"])
    assert objective.train_log_q0[index].tolist() == pytest.approx(live.tolist(), abs=1e-4)
    assert not torch.equal(objective.adversary.embedding.weight, objective.reference.embedding.weight)  # ψ moved


def test_validation_log_weights_are_the_log_ratio(tokenizer, dm):
    objective = tiny_pdro(tokenizer, dm)
    valid = batch_losses(dm, [1, 0], split="valid")
    assert objective.validation_log_weights(valid).tolist() == [0.0, 0.0]  # ψ = ψ0
    for index in ([0, 1, 2, 3], [4, 5, 6, 7]):
        objective(batch_losses(dm, index))
    batch = valid.inputs
    expected = (objective.adversary.log_prob(batch["input_ids"], batch["attention_mask"], batch["intent_labels"])
                - objective.reference.log_prob(batch["input_ids"], batch["attention_mask"], batch["intent_labels"]))
    assert objective.validation_log_weights(valid).tolist() == pytest.approx(expected.tolist(), abs=1e-4)
    assert expected.abs().max() > 1e-3
    batch["intent_labels"][0] = -100  # an intent unseen in training: no opinion
    assert objective.validation_log_weights(valid)[0].item() == 0.0


def test_adversary_stays_in_eval_mode_during_training(tokenizer, dm):
    objective = tiny_pdro(tokenizer, dm).train()
    assert objective.training and not objective.adversary.training and not objective.reference.training


def test_state_round_trip_gives_the_identical_next_step(tokenizer, dm, tmp_path):
    torch.manual_seed(0)
    original = tiny_pdro(tokenizer, dm, window=2)
    steps = [[0, 1, 2], [3, 4, 5, 6], [7, 0], [1, 3, 5]]
    for index in steps[:3]:
        original(batch_losses(dm, index))
    torch.save({"state": original.state_dict(), "optimizers": original.optimizer_states()}, tmp_path / "ckpt.pt")

    torch.manual_seed(1)
    restored = tiny_pdro(tokenizer, dm, window=2, adversary_lr=0.5)  # another ψ and λ before loading
    restored.pretrain = lambda: pytest.fail("a restored ψ0 must not be pre-trained again")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    restored.load_state_dict(saved["state"])
    restored.load_optimizer_states(saved["optimizers"])

    for name, value in original.state_dict().items():
        assert torch.equal(restored.state_dict()[name], value), name
    expected, got = original(batch_losses(dm, steps[3])), restored(batch_losses(dm, steps[3]))
    assert got.item() == expected.item()
    assert torch.equal(restored.train_log_q0, original.train_log_q0)  # recomputed from the restored ψ0
    for name, value in original.state_dict().items():  # the same SGD step (λ restored) and window
        assert torch.equal(restored.state_dict()[name], value), name
