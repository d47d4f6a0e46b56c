"""Co-natural gradient (thesis ch. 7): empirical Fisher, rolling Fisher, CoNaturalSGD."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from robustnlu.optim.conatural import CoNaturalSGD, RollingFisher, empirical_fisher


def _softmax_regression(seed: int = 0, n: int = 6, d: int = 3, k: int = 4):
    gen = torch.Generator().manual_seed(seed)
    lin = nn.Linear(d, k).double()
    with torch.no_grad():
        lin.weight.copy_(torch.randn(k, d, generator=gen, dtype=torch.float64))
        lin.bias.copy_(torch.randn(k, generator=gen, dtype=torch.float64))
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    y = torch.randint(0, k, (n,), generator=gen)
    return lin, x, y


def _example_losses(lin, x, y):
    return (lambda i=i: F.cross_entropy(lin(x[i : i + 1]), y[i : i + 1]) for i in range(len(x)))


def _closed_form_fisher(lin, x, y):
    """Per-example gradient of −log softmax(Wx+b)_y: (p − e_y) xᵀ for W, p − e_y for b."""
    with torch.no_grad():
        p = torch.softmax(x @ lin.weight.T + lin.bias, dim=-1)
        r = p - F.one_hot(y, p.shape[-1]).to(p.dtype)  # [n, k]
        grad_w = r[:, :, None] * x[:, None, :]  # [n, k, d]
        return [grad_w.square().mean(0), r.square().mean(0)], [grad_w.mean(0), r.mean(0)]


def _normalised(tensors):
    total = sum(t.sum() for t in tensors)
    n = sum(t.numel() for t in tensors)
    return [t * n / total for t in tensors]


# --- empirical Fisher ------------------------------------------------------------------------


def test_empirical_fisher_matches_softmax_regression_closed_form():
    lin, x, y = _softmax_regression()
    params = [lin.weight, lin.bias]
    expected, _ = _closed_form_fisher(lin, x, y)

    raw = empirical_fisher(params, _example_losses(lin, x, y), normalise=False)
    torch.testing.assert_close(raw, expected)

    fisher = empirical_fisher(params, _example_losses(lin, x, y))
    torch.testing.assert_close(fisher, _normalised(expected))
    total = sum(f.sum() for f in fisher)
    torch.testing.assert_close(total, torch.tensor(16.0, dtype=torch.float64))  # 4·3 + 4 entries
    assert all(g is None for g in (lin.weight.grad, lin.bias.grad))  # .grad untouched


def test_empirical_fisher_is_not_the_square_of_the_mean_gradient():
    lin, x, y = _softmax_regression(seed=1)
    _, mean_grad = _closed_form_fisher(lin, x, y)
    fisher = empirical_fisher([lin.weight, lin.bias], _example_losses(lin, x, y))
    squared_mean = _normalised([g.square() for g in mean_grad])
    assert not torch.allclose(fisher[0], squared_mean[0], rtol=1e-2, atol=1e-2)


def test_empirical_fisher_errors():
    lin, x, y = _softmax_regression()
    params = [lin.weight, lin.bias]
    with pytest.raises(ValueError, match="zero everywhere"):
        empirical_fisher(params, [lambda: (lin.weight * 0).sum()])
    with pytest.raises(ValueError, match="scalar loss of ONE example"):
        empirical_fisher(params, [lambda: F.cross_entropy(lin(x), y, reduction="none")])
    with pytest.raises(ValueError, match="no examples"):
        empirical_fisher(params, [])
    with torch.inference_mode(), pytest.raises(RuntimeError, match="inference_mode"):
        empirical_fisher(params, _example_losses(lin, x, y))


def test_empirical_fisher_on_tiny_bert_runs_per_example():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=3)
    model = BertForSequenceClassification(config).eval()
    gen = torch.Generator().manual_seed(0)
    examples = [(torch.randint(0, 50, (1, n), generator=gen), torch.tensor([n % 3])) for n in (3, 4, 5, 6, 7)]
    params = [p for p in model.parameters() if p.requires_grad]

    fisher = empirical_fisher(params, (lambda e=e: model(input_ids=e[0], labels=e[1]).loss for e in examples))

    assert [f.shape for f in fisher] == [p.shape for p in params]
    assert all(bool(torch.isfinite(f).all()) and bool((f >= 0).all()) for f in fisher)
    n_params = sum(p.numel() for p in params)
    assert sum(float(f.sum()) for f in fisher) == pytest.approx(n_params, rel=1e-5)

    # One co-natural step: encoder preconditioned, classifier head plain SGD.
    head = list(model.classifier.parameters())
    encoder = [p for p in params if all(p is not h for h in head)]
    enc_fisher = [f for p, f in zip(params, fisher, strict=True) if any(p is e for e in encoder)]
    opt = CoNaturalSGD([{"params": encoder}, {"params": head, "precondition": False}], lr=0.1,
                       fisher=enc_fisher, damping=1.0)
    before = [p.detach().clone() for p in params]
    model(input_ids=examples[0][0], labels=examples[0][1]).loss.backward()
    opt.step()
    assert any(not torch.equal(b, p) for b, p in zip(before, params, strict=True))


# --- CoNaturalSGD ----------------------------------------------------------------------------


def _params_and_grads(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    params = [nn.Parameter(torch.randn(5, generator=gen)), nn.Parameter(torch.randn(2, 3, generator=gen))]
    grads = [torch.randn(p.shape, generator=gen) for p in params]
    return params, grads


def _step(opt, params, grads):
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    opt.step()
    return [p.detach().clone() for p in params]


def _clone(params):
    return [nn.Parameter(p.detach().clone()) for p in params]


def _random_fisher(params, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return _normalised([torch.rand(p.shape, generator=gen) * 10 for p in params])


def test_no_fisher_and_zero_fisher_with_unit_damping_equal_sgd_exactly():
    params, grads = _params_and_grads()
    sgd_params = _clone(params)
    expected = _step(torch.optim.SGD(sgd_params, lr=0.3, weight_decay=0.01), sgd_params, grads)

    plain = _clone(params)
    assert all(torch.equal(a, b) for a, b in zip(
        _step(CoNaturalSGD(plain, lr=0.3, weight_decay=0.01), plain, grads), expected, strict=True))

    zero_f = _clone(params)
    opt = CoNaturalSGD(zero_f, lr=0.3, fisher=[torch.zeros_like(p) for p in params], damping=1.0, weight_decay=0.01)
    torch.testing.assert_close(_step(opt, zero_f, grads), expected, rtol=0, atol=0)


def test_huge_damping_gives_the_sgd_step():
    params, grads = _params_and_grads()
    sgd_params = _clone(params)
    expected = _step(torch.optim.SGD(sgd_params, lr=0.5), sgd_params, grads)
    cn = _clone(params)
    opt = CoNaturalSGD(cn, lr=0.5, fisher=_random_fisher(params), damping=1e12)
    torch.testing.assert_close(_step(opt, cn, grads), expected)


def test_step_is_preconditioned_and_rescaled_to_the_gradient_norm():
    params, grads = _params_and_grads()
    fisher = _random_fisher(params)
    damping, lr = 0.1, 0.5
    cn = _clone(params)
    after = _step(CoNaturalSGD(cn, lr=lr, fisher=fisher, damping=damping), cn, grads)
    delta = torch.cat([((b - a) / lr).flatten() for a, b in zip(after, params, strict=True)])
    g = torch.cat([x.flatten() for x in grads])
    direction = torch.cat([(x / (f + damping)).flatten() for x, f in zip(grads, fisher, strict=True)])
    torch.testing.assert_close(delta.norm(), g.norm())  # global rescaling ‖δ‖ = ‖g‖
    torch.testing.assert_close(delta, direction * g.norm() / direction.norm())
    assert not torch.allclose(delta, g, rtol=1e-2, atol=1e-2)  # a non-trivial preconditioning


def test_parameter_with_large_fisher_moves_less_than_with_sgd():
    p0 = torch.zeros(4)
    grad = torch.ones(4)
    fisher = [torch.tensor([100.0, 1.0, 1.0, 1.0])]
    cn = [nn.Parameter(p0.clone())]
    move = -_step(CoNaturalSGD(cn, lr=0.1, fisher=fisher, damping=0.1), cn, [grad])[0]
    sgd = [nn.Parameter(p0.clone())]
    sgd_move = -_step(torch.optim.SGD(sgd, lr=0.1), sgd, [grad])[0]
    assert (move > 0).all()
    assert float(move[0] / move[1]) == pytest.approx((1.0 + 0.1) / (100.0 + 0.1), rel=1e-5)  # (F_j + α)^-1 ratio
    assert float(sgd_move[0] / sgd_move[1]) == 1.0
    assert move[1] > sgd_move[1]  # the others move more: the total step keeps the norm of g


def test_non_preconditioned_group_takes_the_exact_sgd_step():
    params, grads = _params_and_grads()
    head, head_grad = nn.Parameter(torch.randn(3, 2)), torch.randn(3, 2)
    fisher = _random_fisher(params)

    enc, h = _clone(params), nn.Parameter(head.detach().clone())
    opt = CoNaturalSGD([{"params": enc}, {"params": [h], "precondition": False, "lr": 0.2}], lr=0.5,
                       fisher=fisher, damping=0.1)
    assert opt.preconditioned_params() == enc
    after = _step(opt, enc + [h], grads + [head_grad])
    assert torch.equal(after[-1], head.detach() - 0.2 * head_grad)

    enc_only = _clone(params)
    expected = _step(CoNaturalSGD(enc_only, lr=0.5, fisher=fisher, damping=0.1), enc_only, grads)
    torch.testing.assert_close(after[:-1], expected, rtol=0, atol=0)  # the head is not in the rescaling


def test_state_dict_round_trip_reproduces_the_next_step(tmp_path):
    params, grads = _params_and_grads()
    _, grads2 = _params_and_grads(seed=2)
    fisher = _random_fisher(params)
    a = _clone(params)
    opt_a = CoNaturalSGD(a, lr=0.5, fisher=fisher, damping=0.1)
    _step(opt_a, a, grads)
    path = tmp_path / "opt.pt"
    torch.save(opt_a.state_dict(), path)

    b = _clone(a)
    opt_b = CoNaturalSGD(b, lr=0.5, damping=0.1)
    opt_b.load_state_dict(torch.load(path, weights_only=True))
    assert all(torch.equal(opt_b.state[p]["fisher"], f) for p, f in zip(b, fisher, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(_step(opt_a, a, grads2), _step(opt_b, b, grads2), strict=True))


def test_set_fisher_validates_and_can_remove():
    params, _ = _params_and_grads()
    opt = CoNaturalSGD(params, lr=0.1)
    with pytest.raises(ValueError, match="2 preconditioned"):
        opt.set_fisher([torch.ones(5)])
    with pytest.raises(ValueError, match="shape"):
        opt.set_fisher([torch.ones(5), torch.ones(3, 2)])
    with pytest.raises(ValueError, match="negative"):
        opt.set_fisher([-torch.ones(5), torch.ones(2, 3)])
    opt.set_fisher([torch.ones(5), torch.ones(2, 3)])
    opt.set_fisher(None)
    assert all("fisher" not in opt.state[p] for p in params)


# --- RollingFisher ---------------------------------------------------------------------------


def test_rolling_fisher_matches_hand_computed_values_and_round_trips():
    rolling = RollingFisher([(2,)], damping=0.5, gamma=0.9, dtype=torch.float64)
    torch.testing.assert_close(rolling.fisher[0], torch.full((2,), 0.5 / 0.9, dtype=torch.float64))
    rolling.update([torch.tensor([1.0, 3.0])])
    # 0.9·[1, 3] + 0.1·0.5/0.9
    torch.testing.assert_close(rolling.fisher[0], torch.tensor([0.9555555556, 2.7555555556], dtype=torch.float64))
    rolling.update([torch.tensor([0.0, 1.0])])
    # 0.9·[0, 1] + 0.1·[0.95556, 2.75556]
    torch.testing.assert_close(rolling.fisher[0], torch.tensor([0.0955555556, 1.1755555556], dtype=torch.float64))

    buffer = io.BytesIO()
    torch.save(rolling.state_dict(), buffer)
    buffer.seek(0)
    restored = RollingFisher([torch.zeros(2, dtype=torch.float64)], damping=7.0)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(restored.fisher[0], rolling.fisher[0])
    assert (restored.gamma, restored.damping, restored.num_updates) == (0.9, 0.5, 2)
    with pytest.raises(ValueError, match="shape"):
        restored.update([torch.zeros(3)])
