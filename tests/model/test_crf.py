"""Tests of the linear-chain CRF against independent brute-force computations."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.func import functional_call

from robustnlu.model.crf import LinearChainCRF

T = 3  # number of tags in the brute-force tests


# --------------------------------------------------------------------- reference


def _params(crf: LinearChainCRF) -> tuple[list[float], list[float], list[list[float]]]:
    return (
        crf.start_transitions.detach().double().tolist(),
        crf.end_transitions.detach().double().tolist(),
        crf.transitions.detach().double().tolist(),
    )


def _path_score(em: list[list[float]], path, start, end, trans) -> float:
    """Score of one tag path, written out term by term from the CRF definition."""
    s = start[path[0]] + end[path[-1]]
    for t, y in enumerate(path):
        s += em[t][y]
    for prev, cur in zip(path[:-1], path[1:]):
        s += trans[prev][cur]
    return s


def _all_path_scores(em, n, start, end, trans) -> dict[tuple[int, ...], float]:
    return {
        path: _path_score(em, path, start, end, trans)
        for path in itertools.product(range(len(start)), repeat=n)
    }


def _logsumexp(xs) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


def _brute_nll(crf, emissions, tags, lengths) -> list[float]:
    start, end, trans = _params(crf)
    out = []
    for b, n in enumerate(lengths):
        if n == 0:
            out.append(0.0)
            continue
        em = emissions[b, :n].double().tolist()
        scores = _all_path_scores(em, n, start, end, trans)
        gold = tuple(tags[b, :n].tolist())
        out.append(_logsumexp(list(scores.values())) - scores[gold])
    return out


def _brute_decode(crf, emissions, lengths) -> list[list[int]]:
    start, end, trans = _params(crf)
    out = []
    for b, n in enumerate(lengths):
        if n == 0:
            out.append([])
            continue
        scores = _all_path_scores(emissions[b, :n].double().tolist(), n, start, end, trans)
        out.append(list(max(scores, key=scores.get)))
    return out


def _random_case(seed: int, lengths, num_tags=T, dtype=torch.float64, scale=2.0):
    """A CRF with non-trivial random parameters and a padded batch for ``lengths``."""
    g = torch.Generator().manual_seed(seed)
    crf = LinearChainCRF(num_tags).to(dtype)
    with torch.no_grad():
        crf.start_transitions.copy_(scale * torch.randn(num_tags, generator=g, dtype=dtype))
        crf.end_transitions.copy_(scale * torch.randn(num_tags, generator=g, dtype=dtype))
        crf.transitions.copy_(scale * torch.randn(num_tags, num_tags, generator=g, dtype=dtype))
    batch, max_len = len(lengths), max(max(lengths), 1)
    emissions = scale * torch.randn(batch, max_len, num_tags, generator=g, dtype=dtype)
    tags = torch.randint(0, num_tags, (batch, max_len), generator=g)
    mask = torch.arange(max_len).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    tags = tags.masked_fill(~mask, -100)  # padding label, as the data pipeline emits
    return crf, emissions, tags, mask


# ------------------------------------------------------------------- exactness


@pytest.mark.parametrize("seed", range(5))
def test_nll_matches_brute_force(seed):
    lengths = [4, 3, 1, 2, 0, 4]
    crf, emissions, tags, mask = _random_case(seed, lengths)
    nll = crf.neg_log_likelihood(emissions, tags, mask)
    assert nll.shape == (len(lengths),)
    assert nll.dtype == torch.float64
    expected = torch.tensor(_brute_nll(crf, emissions, tags, lengths), dtype=torch.float64)
    torch.testing.assert_close(nll.detach(), expected, rtol=1e-9, atol=1e-9)


def test_nll_not_reduced_and_batch_independent():
    """Each row's loss is the loss of that sequence alone (padding does not leak)."""
    lengths = [4, 2, 3]
    crf, emissions, tags, mask = _random_case(11, lengths)
    batched = crf.neg_log_likelihood(emissions, tags, mask)
    for b, n in enumerate(lengths):
        alone = crf.neg_log_likelihood(emissions[b : b + 1, :n], tags[b : b + 1, :n])
        torch.testing.assert_close(batched[b : b + 1], alone, rtol=1e-12, atol=1e-12)


def test_decode_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    for seed in range(60):
        lengths = torch.randint(0, 5, (5,), generator=g).tolist()
        lengths[0] = 4  # keep the padded width at 4
        crf, emissions, _, mask = _random_case(100 + seed, lengths)
        decoded = crf.decode(emissions, mask)
        assert decoded == _brute_decode(crf, emissions, lengths), f"seed {seed}"
        assert [len(p) for p in decoded] == lengths
        assert all(isinstance(y, int) for p in decoded for y in p)


def test_decode_float32_agrees_with_float64():
    lengths = [4, 1, 3]
    crf, emissions, _, mask = _random_case(3, lengths)
    expected = crf.decode(emissions, mask)
    assert crf.float().decode(emissions.float(), mask) == expected


def test_probabilities_normalise_and_nll_nonnegative():
    """exp(-NLL) over every tag path of a sequence sums to 1, and every NLL is >= 0."""
    n = 4
    crf, emissions, _, _ = _random_case(7, [n])
    paths = torch.tensor(list(itertools.product(range(T), repeat=n)))  # [T^n, n]
    em = emissions[:, :n].expand(len(paths), n, T)
    nll = crf.neg_log_likelihood(em, paths, torch.ones_like(paths, dtype=torch.bool))
    assert (nll >= 0).all()
    torch.testing.assert_close(torch.exp(-nll).sum(), torch.tensor(1.0, dtype=torch.float64),
                               rtol=0, atol=1e-12)


def test_float32_close_to_float64():
    lengths = [4, 3, 0, 1]
    crf, emissions, tags, mask = _random_case(5, lengths)
    nll64 = crf.neg_log_likelihood(emissions, tags, mask)
    crf32 = crf.float()
    nll32 = crf32.neg_log_likelihood(emissions.float(), tags, mask)
    assert nll32.dtype == torch.float32
    torch.testing.assert_close(nll32.double(), nll64.detach(), rtol=1e-5, atol=1e-5)


def test_numerically_stable_with_huge_scores():
    """Large emissions overflow a naive exp(); the log-space recursion stays finite."""
    lengths = [4, 2]
    crf, emissions, tags, mask = _random_case(9, lengths, dtype=torch.float32)
    emissions = (emissions * 1e4).requires_grad_()
    nll = crf.neg_log_likelihood(emissions, tags, mask)
    assert torch.isfinite(nll).all()
    assert (nll >= -1e-2).all()
    nll.sum().backward()
    assert torch.isfinite(emissions.grad).all()
    # The gold path is (near) certain when it is the Viterbi path: NLL ~ 0.
    best = crf.decode(emissions.detach(), mask)
    best_tags = torch.tensor([p + [0] * (4 - len(p)) for p in best])
    assert crf.neg_log_likelihood(emissions.detach(), best_tags, mask).abs().max() < 1e-2


# -------------------------------------------------------------------- gradients


def test_gradcheck_emissions_and_transitions():
    lengths = [3, 1, 2, 0]
    crf, emissions, tags, mask = _random_case(21, lengths, scale=1.0)
    params = {name: p.detach().clone().requires_grad_() for name, p in crf.named_parameters()}
    emissions = emissions.clone().requires_grad_()

    def f(em, trans, start, end):
        p = {"transitions": trans, "start_transitions": start, "end_transitions": end}
        return functional_call(crf, p, (em, tags, mask))

    inputs = (emissions, params["transitions"], params["start_transitions"],
              params["end_transitions"])
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7)


def test_emission_gradient_is_marginals_minus_gold():
    """d NLL / d E[t, y] = p(y_t = y) - [gold_t = y], with marginals by brute force."""
    n = 3
    crf, emissions, tags, _ = _random_case(4, [n])
    emissions.requires_grad_()
    crf.neg_log_likelihood(emissions, tags).sum().backward()
    start, end, trans = _params(crf)
    scores = _all_path_scores(emissions[0].detach().tolist(), n, start, end, trans)
    log_z = _logsumexp(list(scores.values()))
    expected = torch.zeros(n, T, dtype=torch.float64)
    for path, s in scores.items():
        for t, y in enumerate(path):
            expected[t, y] += math.exp(s - log_z)
    expected[torch.arange(n), tags[0]] -= 1.0
    torch.testing.assert_close(emissions.grad[0], expected, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------ masking rules


def test_tags_beyond_length_are_ignored():
    lengths = [2, 4, 1]
    crf, emissions, tags, mask = _random_case(13, lengths)
    reference = crf.neg_log_likelihood(emissions, tags, mask)
    for fill in (0, 1, 2, -100, 999, -7):
        other = tags.masked_fill(~mask, fill)
        assert torch.equal(crf.neg_log_likelihood(emissions, other, mask), reference), fill
    rand = torch.randint(0, T, tags.shape, generator=torch.Generator().manual_seed(1))
    other = torch.where(mask, tags, rand)
    assert torch.equal(crf.neg_log_likelihood(emissions, other, mask), reference)


def test_emissions_beyond_length_are_ignored_even_if_not_finite():
    lengths = [2, 4, 1]
    crf, emissions, tags, mask = _random_case(14, lengths)
    reference = crf.neg_log_likelihood(emissions, tags, mask)
    garbage = emissions.clone()
    garbage[~mask] = float("nan")
    garbage[0, 3, 1] = float("inf")
    garbage.requires_grad_()
    nll = crf.neg_log_likelihood(garbage, tags, mask)
    assert torch.equal(nll, reference)
    nll.sum().backward()
    assert torch.isfinite(garbage.grad).all()
    assert (garbage.grad[~mask] == 0).all()
    assert crf.decode(garbage.detach(), mask) == crf.decode(emissions, mask)


def test_length_zero_sequence_has_zero_loss_and_finite_gradient():
    lengths = [0, 3, 0]
    crf, emissions, tags, mask = _random_case(15, lengths)
    emissions.requires_grad_()
    nll = crf.neg_log_likelihood(emissions, tags, mask)
    assert nll[0].item() == 0.0 and nll[2].item() == 0.0
    assert nll[1].item() > 0.0
    nll.sum().backward()
    assert torch.isfinite(emissions.grad).all()
    assert (emissions.grad[0] == 0).all() and (emissions.grad[2] == 0).all()
    for p in crf.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()
    assert crf.decode(emissions.detach(), mask) == [[], _brute_decode(crf, emissions, lengths)[1], []]


def test_all_empty_batch_and_zero_width():
    crf = LinearChainCRF(T)
    # every row empty
    emissions = torch.randn(2, 3, T, requires_grad=True)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    tags = torch.full((2, 3), -100)
    nll = crf.neg_log_likelihood(emissions, tags, mask)
    assert torch.equal(nll, torch.zeros(2))
    nll.sum().backward()
    assert torch.equal(emissions.grad, torch.zeros_like(emissions))
    assert crf.decode(emissions.detach(), mask) == [[], []]
    # zero padded width
    emissions = torch.randn(2, 0, T, requires_grad=True)
    empty = torch.zeros(2, 0, dtype=torch.bool)
    nll = crf.neg_log_likelihood(emissions, torch.zeros(2, 0, dtype=torch.long), empty)
    assert torch.equal(nll.detach(), torch.zeros(2))
    nll.sum().backward()  # attached to the graph, zero gradient
    assert crf.decode(emissions.detach(), empty) == [[], []]


def test_ignore_index_inside_mask_raises():
    crf, emissions, tags, mask = _random_case(16, [3, 2])
    tags[0, 1] = -100
    with pytest.raises(ValueError, match="-100"):
        crf.neg_log_likelihood(emissions, tags, mask)
    tags[0, 1] = T  # out of range, not the ignore index
    with pytest.raises(ValueError, match="out of range"):
        crf.neg_log_likelihood(emissions, tags, mask)


def test_mask_with_holes_raises():
    crf, emissions, tags, _ = _random_case(17, [3, 3])
    mask = torch.tensor([[True, False, True], [True, True, True]])
    with pytest.raises(ValueError, match="left-aligned"):
        crf.neg_log_likelihood(emissions, tags, mask)
    with pytest.raises(ValueError, match="left-aligned"):
        crf.decode(emissions, mask)


def test_shape_errors():
    crf = LinearChainCRF(T)
    with pytest.raises(ValueError, match="emissions"):
        crf.neg_log_likelihood(torch.randn(2, 3, T + 1), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="tags"):
        crf.neg_log_likelihood(torch.randn(2, 3, T), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="mask"):
        crf.decode(torch.randn(2, 3, T), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError):
        LinearChainCRF(0)


def test_initialisation_range():
    torch.manual_seed(0)
    crf = LinearChainCRF(20)
    assert crf.transitions.shape == (20, 20)
    assert crf.start_transitions.shape == crf.end_transitions.shape == (20,)
    for p in crf.parameters():
        assert p.abs().max() <= 0.1 and p.std() > 0.01


# -------------------------------------------------------------------- training


def test_adam_steps_drive_the_nll_down():
    """Transitions-only learning: tags follow the cycle 0->1->2->0 under noise emissions,
    so only the transition parameters can explain them."""
    torch.manual_seed(0)
    batch, length = 16, 6
    emissions = torch.randn(batch, length, T)
    first = torch.randint(0, T, (batch, 1))
    tags = (first + torch.arange(length)) % T
    lengths = torch.randint(2, length + 1, (batch,))
    mask = torch.arange(length) < lengths.unsqueeze(1)
    crf = LinearChainCRF(T)
    opt = torch.optim.Adam(crf.parameters(), lr=0.1)
    initial = crf.neg_log_likelihood(emissions, tags, mask).mean().item()
    for _ in range(40):
        opt.zero_grad()
        loss = crf.neg_log_likelihood(emissions, tags, mask).mean()
        loss.backward()
        opt.step()
    final = crf.neg_log_likelihood(emissions, tags, mask).mean().item()
    assert final < 0.5 * initial, (initial, final)
    # the learnt transitions make Viterbi follow the cycle (whatever tag it starts in)
    for path in crf.decode(emissions, mask):
        assert all(cur == (prev + 1) % T for prev, cur in zip(path[:-1], path[1:])), path


@pytest.mark.gpu
def test_cuda_matches_cpu():
    """Run on a GPU machine with `make test-gpu` (deselected by default: CI has no GPU)."""
    lengths = [4, 3, 0, 1]
    crf, emissions, tags, mask = _random_case(30, lengths)
    cpu_nll = crf.neg_log_likelihood(emissions, tags, mask)
    cpu_path = crf.decode(emissions, mask)
    crf = crf.cuda()
    em = emissions.cuda().requires_grad_()
    nll = crf.neg_log_likelihood(em, tags.cuda(), mask.cuda())
    torch.testing.assert_close(nll.cpu(), cpu_nll, rtol=1e-9, atol=1e-9)
    nll.sum().backward()
    assert torch.isfinite(em.grad).all()
    assert crf.decode(em.detach(), mask.cuda()) == cpu_path
