"""TopK-AE (core paper App. B, Algorithm 1): the autoencoder's losses (eqs. 2-3) and the
TopK-AE-Prob/-Bin batch losses and gradients against independent NumPy, the update order of
Algorithm 1, cluster recovery on planted clusters and the checkpoint round trip."""

from __future__ import annotations

import functools
import io

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from sklearn.metrics import normalized_mutual_info_score

from integration_helpers import compose_config
from robustnlu.errors import ConfigError
from robustnlu.groups.autoencoder import OnlineAutoencoder
from robustnlu.model.spec import ModelSpec
from robustnlu.robust.topk_ae import TopKAE
from tests.robust.helpers import task_losses


def spec(d: int) -> ModelSpec:
    return ModelSpec(hidden_size=d, n_intents=3, n_tags=5, vocab_size=50, encoder_config={})


def topk_ae(d, c, assignment="prob", k=2, ae_lr=1e-3, dropout=0.0, beta=0.3, beta_weights="diversity", gamma=1.0):
    factory = functools.partial(OnlineAutoencoder, latent_groups=c, dropout=dropout, beta=beta,
                                beta_weights=beta_weights)
    return TopKAE(factory, k=k, assignment=assignment, ae_lr=ae_lr, intent_loss_scale=gamma, spec=spec(d))


# --- NumPy references, written from the paper's equations ---------------------------------
def np_softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def np_ae_losses(x, a_enc, a_dec):
    """(L_Recon, L_Divers) of App. B eqs. 1-3, loops over the batch."""
    h = np_softmax(x @ a_enc)
    r = h @ a_dec
    b = len(x)
    recon = 0.0
    for i in range(b):  # R_i against every input X_j
        scores = np.array([x[j] @ r[i] for j in range(b)])
        recon -= scores[i] - np.log(np.exp(scores).sum())
    divers = sum(np.sum(h[i] * np.log(h[i] / h[j])) for i in range(b) for j in range(b) if i != j)
    return recon / b, divers / (b * (b - 1))


def numeric_gradient(f, param, eps=1e-6):
    """Central differences of the scalar f at ``param``."""
    grad = np.zeros_like(param)
    for idx in np.ndindex(param.shape):
        shift = np.zeros_like(param)
        shift[idx] = eps
        grad[idx] = (f(param + shift) - f(param - shift)) / (2 * eps)
    return grad


def np_group_loss(losses, membership, k):
    """max over groups present of the mean of the k largest H_ig·l_i (divisor min(k, members)),
    and its gradient w.r.t. l."""
    best, grad = -np.inf, None
    for g in range(membership.shape[1]):
        members = np.flatnonzero(membership[:, g] > 0)
        if len(members) == 0:
            continue
        weighted = membership[:, g] * losses
        top = np.argsort(-weighted)[: min(k, len(members))]
        value = weighted[top].sum() / len(top)
        if value > best:
            best, grad = value, np.zeros_like(losses)
            grad[top] = membership[top, g] / len(top)
    return best, grad


# --- the autoencoder's losses ------------------------------------------------------------------
X3 = np.array([[1.0, -0.5, 0.3, 2.0], [0.2, 1.5, -1.0, 0.0], [-0.7, 0.4, 0.9, -1.2]])
A_ENC = np.array([[0.5, -0.3], [0.1, 0.8], [-0.6, 0.2], [0.4, 0.05]])
A_DEC = np.array([[0.3, -0.2, 0.7, 0.1], [-0.5, 0.6, 0.2, -0.4]])


def autoencoder_3x4(beta_weights="diversity", beta=0.4) -> OnlineAutoencoder:
    ae = OnlineAutoencoder(4, latent_groups=2, dropout=0.0, beta=beta, beta_weights=beta_weights).double()
    with torch.no_grad():
        ae.encoder.copy_(torch.tensor(A_ENC))
        ae.decoder.copy_(torch.tensor(A_DEC))
    return ae


def test_reconstruction_and_diversity_losses_follow_equations_2_and_3():
    ae = autoencoder_3x4()
    x = torch.tensor(X3)
    log_h = ae.log_codes(x)
    recon = ae.reconstruction_loss(x, log_h.exp() @ ae.decoder)
    divers = ae.diversity_loss(log_h)
    ref_recon, ref_divers = np_ae_losses(X3, A_ENC, A_DEC)
    assert recon.item() == pytest.approx(ref_recon, rel=1e-12)
    assert divers.item() == pytest.approx(ref_divers, rel=1e-12)
    assert ref_divers > 0.01  # the example has distinct codes


@pytest.mark.parametrize("beta_weights", ["diversity", "reconstruction"])
def test_autoencoder_loss_and_gradient(beta_weights):
    beta = 0.4

    def ref_loss(a_enc, a_dec):
        recon, divers = np_ae_losses(X3, a_enc, a_dec)
        # the diversity loss is maximised; β weights the loss beta_weights names
        return recon - beta * divers if beta_weights == "diversity" else beta * recon - divers

    ae = autoencoder_3x4(beta_weights, beta)
    loss = ae.loss(torch.tensor(X3))
    assert loss.item() == pytest.approx(ref_loss(A_ENC, A_DEC), rel=1e-12)
    loss.backward()
    np.testing.assert_allclose(ae.encoder.grad.numpy(), numeric_gradient(lambda a: ref_loss(a, A_DEC), A_ENC),
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ae.decoder.grad.numpy(), numeric_gradient(lambda a: ref_loss(A_ENC, a), A_DEC),
                               rtol=1e-6, atol=1e-9)


def test_dropout_on_the_reconstruction_only_in_training():
    ae = autoencoder_3x4()
    ae.dropout = 0.5
    x = torch.tensor(X3)
    ref = ae.eval().loss(x).item()
    assert ref == pytest.approx(autoencoder_3x4().loss(x).item())
    torch.manual_seed(0)
    assert ae.train().loss(x).item() != pytest.approx(ref)


# --- TopK-AE-Prob / -Bin ----------------------------------------------------------------------
#: five items of d=4 whose hand-set codes put items 0-2 in group 0, 3 in group 1 and 4 in group 2
X5 = np.array([[2.0, 0.1, 0.0, 0.3], [1.5, 0.0, 0.2, -0.1], [1.8, 0.3, 0.1, 0.0], [0.1, 2.0, 0.0, 0.2],
               [0.0, 0.2, 1.9, 0.1]])
SLOT = [0.9, 2.0, 1.2, 0.4, 1.5]
INTENT = [0.3, 0.8, 2.5, 1.1, 0.2]


@pytest.mark.parametrize("assignment", ["prob", "bin"])
def test_batch_loss_and_gradient_match_numpy(assignment):
    gamma, k = 0.5, 2
    objective = topk_ae(4, 3, assignment, k=k, ae_lr=1e-3, gamma=gamma)
    with torch.no_grad():
        objective.autoencoder.encoder.copy_(torch.tensor([[2.0, 0, 0], [0, 2.0, 0], [0, 0, 2.0], [0, 0, 0]]))
    step = task_losses(SLOT, INTENT, x_enc=X5)
    loss = objective(step)
    loss.backward()

    h = np_softmax(X5 @ objective.autoencoder.encoder.detach().double().numpy())  # the updated weights
    assert h.argmax(1).tolist() == [0, 0, 0, 1, 2]  # group 0 has more than k members
    membership = h if assignment == "prob" else np.eye(3)[h.argmax(1)]
    slot, slot_grad = np_group_loss(np.array(SLOT), membership, k)
    intent, intent_grad = np_group_loss(np.array(INTENT), membership, k)
    assert loss.item() == pytest.approx(slot + gamma * intent, rel=1e-6)
    np.testing.assert_allclose(step.slot.grad.numpy(), slot_grad, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(step.intent.grad.numpy(), gamma * intent_grad, rtol=1e-6, atol=1e-12)


def test_autoencoder_is_updated_once_before_the_assignment_and_slu_loss_does_not_reach_it():
    torch.manual_seed(0)
    objective = topk_ae(4, 3, "prob", ae_lr=0.05)
    reference = topk_ae(4, 3, "prob")
    reference.load_state_dict(objective.state_dict())
    old_encoder = objective.autoencoder.encoder.detach().clone()
    x = torch.tensor(X5, requires_grad=True)
    step = task_losses(SLOT, INTENT, x_enc=x)  # x: the "encoder output", with its graph
    loss = objective(step)

    # the autoencoder took exactly one AdamW step on l_AE of the batch
    manual = torch.optim.AdamW(reference.autoencoder.parameters(), lr=0.05, weight_decay=0.01)
    reference.autoencoder.loss(x).backward()
    manual.step()
    torch.testing.assert_close(objective.autoencoder.encoder, reference.autoencoder.encoder, rtol=0, atol=0)
    assert objective.optimizer_states()["autoencoder"]["state"][0]["step"].item() == 1

    # the loss uses H of the updated weights, not of the old ones
    def np_loss(encoder):
        h = np_softmax(X5 @ encoder.double().numpy())
        return np_group_loss(np.array(SLOT), h, 2)[0] + np_group_loss(np.array(INTENT), h, 2)[0]

    assert loss.item() == pytest.approx(np_loss(objective.autoencoder.encoder.detach()), rel=1e-6)
    assert abs(np_loss(old_encoder) - loss.item()) > 1e-3

    # the SLU loss reaches neither the autoencoder nor (through H) the encoder output
    ae_grads = [p.grad.clone() for p in objective.autoencoder.parameters()]
    loss.backward()
    for p, g in zip(objective.autoencoder.parameters(), ae_grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=0, atol=0)
    assert x.grad is None


@pytest.fixture
def one_thread():
    """400 tiny steps: intra-op threads only add synchronisation (30x slower on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_planted_clusters_are_recovered_online(one_thread):
    """Four Gaussian clusters sharing a large common offset (as mean-pooled BERT outputs do):
    the untrained autoencoder lumps them, the one trained online as in Algorithm 1 separates them."""
    gen = torch.Generator().manual_seed(0)
    d, n = 16, 512
    centers = 3.0 * torch.randn(4, d, generator=gen) + 10.0 * torch.randn(d, generator=gen)
    labels = torch.arange(n) % 4
    x = centers[labels] + torch.randn(n, d, generator=gen)
    torch.manual_seed(0)
    objective = topk_ae(d, 8, "bin", ae_lr=1e-3, dropout=0.1)

    def nmi():
        return normalized_mutual_info_score(labels.numpy(), objective.memberships(x).argmax(1).numpy())

    assert nmi() < 0.5
    for _ in range(400):
        idx = torch.randint(0, n, (32,), generator=gen)
        objective(task_losses(torch.rand(32, generator=gen), torch.rand(32, generator=gen), x_enc=x[idx]))
    assert nmi() >= 0.9


def test_state_round_trip_continues_identically():
    gen = torch.Generator().manual_seed(1)
    batches = [task_losses(torch.rand(8, generator=gen), torch.rand(8, generator=gen),
                           x_enc=torch.randn(8, 6, generator=gen)) for _ in range(6)]
    torch.manual_seed(0)
    objective = topk_ae(6, 5, "bin", dropout=0.1)
    for i, batch in enumerate(batches[:5]):
        torch.manual_seed(100 + i)
        objective(batch)
    buffer = io.BytesIO()
    torch.save({"state": objective.state_dict(), "optimizers": objective.optimizer_states()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    torch.manual_seed(1)
    restored = topk_ae(6, 5, "bin", dropout=0.1)
    restored.load_state_dict(saved["state"])
    restored.load_optimizer_states(saved["optimizers"])

    losses = []
    for obj in (objective, restored):
        torch.manual_seed(7)
        losses.append(obj(batches[5]).item())
    assert losses[0] == losses[1]
    for a, b in zip(objective.parameters(), restored.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_k_below_one_is_rejected():
    with pytest.raises(ConfigError, match=r"^k: must be >= 1 \(got 0\)$"):
        topk_ae(4, 2, k=0)


@pytest.mark.parametrize(("overrides", "name"), [
    (["method=topk_ae_prob"], "topk_ae_prob"),
    (["method=topk_ae_bin"], "topk_ae_bin"),
    (["method=topk_ae"], "topk_ae_bin"),  # the default variant: Bin (conf/method/topk_ae.yaml)
    (["method=topk_ae", "method.assignment=prob"], "topk_ae_prob"),
])
def test_configs_build_the_objective(overrides, name, tmp_path):
    cfg = compose_config([*overrides, "method.groups.latent_groups=128"], tmp_path)
    objective = instantiate(cfg.method, intent_loss_scale=2.0, spec=spec(24))
    assert isinstance(objective, TopKAE) and objective.name == name and objective.assignment == name.rsplit("_", 1)[1]
    assert objective.autoencoder.encoder.shape == (24, 128) and objective.intent_loss_scale == 2.0
