"""optimizer=adamw: the fused kernel and PyTorch's per-parameter loop apply the same AdamW update
(Loshchilov & Hutter's decoupled weight decay), checked against the update written out by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustnlu.optim.adamw import adamw, use_fused


class _Tiny(nn.Module):
    """Named like BERT's layers, so that `weight_decay_groups` exempts the LayerNorm and biases."""

    def __init__(self):
        super().__init__()
        self.dense, self.LayerNorm, self.out = nn.Linear(5, 4), nn.LayerNorm(4), nn.Linear(4, 3)


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = _Tiny()
    with torch.no_grad():  # LayerNorm starts at 1 / 0: make its decay (none) visible
        model.LayerNorm.weight.normal_()
        model.LayerNorm.bias.normal_()
    return model


#: the devices with a fused kernel; CUDA's runs with `make test-gpu`
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _steps(fused, grads_seed: int = 1, steps: int = 3, device: str = "cpu"):
    model = _model().to(device)
    optimizer = adamw(model, lr=0.1, weight_decay=0.02, betas=(0.9, 0.999), eps=1e-8, fused=fused)
    gen = torch.Generator().manual_seed(grads_seed)
    grads = [[torch.randn(p.shape, generator=gen) for p in model.parameters()] for _ in range(steps)]
    for step in grads:
        for p, g in zip(model.parameters(), step):
            p.grad = g.to(device, copy=True)
        optimizer.step()
    return model, optimizer, grads


def _by_hand(grads, lr=0.1, weight_decay=0.02, b1=0.9, b2=0.999, eps=1e-8):
    """AdamW written out (float64): decay the weights (not biases / LayerNorm), then the bias-corrected
    Adam step."""
    model = _model()
    names = [n for n, _ in model.named_parameters()]
    params = [p.detach().double().clone() for p in model.parameters()]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    decays = [0.0 if (n.startswith("LayerNorm.") or n.endswith(".bias")) else weight_decay for n in names]
    for t, step in enumerate(grads, start=1):
        for i, g in enumerate(step):
            g = g.double()
            params[i] = params[i] * (1 - lr * decays[i])
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat, v_hat = m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t)
            params[i] = params[i] - lr * m_hat / (v_hat.sqrt() + eps)
    return params


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [True, False])
def test_adamw_applies_the_update_written_out_by_hand(fused, device):
    model, optimizer, grads = _steps(fused, device=device)
    assert all(g.get("fused") is fused for g in optimizer.param_groups)
    for got, want in zip(model.parameters(), _by_hand(grads)):
        torch.testing.assert_close(got.detach().cpu().double(), want, rtol=0, atol=1e-6)


def test_fused_and_loop_agree_to_float_rounding():
    fused, _, _ = _steps(True)
    loop, _, _ = _steps(False)
    for a, b in zip(fused.parameters(), loop.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES)
def test_auto_takes_the_fused_kernel_on_cpu_and_cuda_and_the_flag_forces_either(device):
    model = _model().to(device)
    assert use_fused(model, "auto") is True  # every parameter on one device with a fused kernel
    assert use_fused(model, False) is False and use_fused(model, True) is True
    assert use_fused(nn.Module(), "auto") is False  # no parameters: nothing to fuse


def test_a_fused_optimizer_resumed_from_a_loop_checkpoint_keeps_the_loop():
    """What results.json's ``optimizer_fused`` relies on: the optimiser state of a checkpoint written
    with the per-parameter loop carries the implementation, and loading it takes the loop back."""
    _, loop, _ = _steps(False)
    resumed = adamw(_model(), lr=0.1, weight_decay=0.02, betas=(0.9, 0.999), eps=1e-8, fused="auto")
    assert all(g["fused"] is True for g in resumed.param_groups)
    resumed.load_state_dict(loop.state_dict())
    assert not any(g["fused"] for g in resumed.param_groups)
