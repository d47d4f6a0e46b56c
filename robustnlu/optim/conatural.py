"""Co-natural gradient (Michel's thesis, chapter 7): adapt a source model to a new domain while
slowing its drift away from the source task's predictive distribution.

The update preconditions the target-task gradient with the diagonal empirical Fisher of the
*source* task (Eq. 7.7)::

    δ* = −λ [F^S + α I]^{-1} ∇L_T          (λ = learning rate, α = damping)

Practical details of the thesis (section 7.3), all implemented here:

- F is **diagonal** and computed **once**, at the source model θ_S, as the **empirical** Fisher
  F_jj = (1/N) Σ_i (∂_j log p_θ(y_i|x_i))² over N (default 1000) source examples: the mean of
  *per-example* squared gradients, not the square of a batch gradient (`empirical_fisher`);
- F is **normalised** so that Σ F = number of parameter entries (less model-size dependent
  hyper-parameters);
- a tiny damping **1e-12** is always added, and δ is **rescaled to the norm of the gradient**
  ‖g‖ (with low damping, parameters that do not affect the KL would otherwise get huge steps);
- the update is **plain SGD** θ ← θ − lr·δ (`CoNaturalSGD`);
- over several tasks (Eq. 7.8–7.9) a **rolling Fisher** F̃_n = γ F_{T_n} + (1 − γ) F̃_{n−1},
  γ = 0.9, F̃_0 = (α/γ)·1 (after online EWC, Schwarz et al. 2018) (`RollingFisher`);
- task-specific heads are **not** preconditioned (the thesis applies the co-natural gradient to
  the shared feature extractor only): put them in a parameter group with ``precondition=False``.

``optimizer=conatural`` (conf/optimizer/conatural.yaml) builds it with `conatural_sgd`: the
encoder preconditioned, the heads plain SGD; the efficiency protocol (``efficiency.mode=adapt``,
`robustnlu.efficiency.adapt`) computes the source Fisher and hands it over (`set_encoder_fisher`).

Per-example gradients are taken with a loop over examples (a batch of one each, so no padding
and no attention mask are needed): ``torch.func.vmap(grad(...))`` over a Hugging Face BERT fails
when an attention mask is passed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from robustnlu.optim import weight_decay_groups

__all__ = ["CoNaturalSGD", "RollingFisher", "conatural_sgd", "empirical_fisher", "set_encoder_fisher"]

TINY_DAMPING = 1e-12


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def empirical_fisher(
    params: Sequence[Tensor],
    example_losses: Iterable[Callable[[], Tensor]],
    normalise: bool = True,
) -> list[Tensor]:
    """Diagonal empirical Fisher of ``params`` (thesis section 7.3, approximations 2 and 3).

    ``example_losses`` yields one callable per example; each returns the scalar negative
    log-likelihood −log p_θ(y|x) of ONE example, with a graph to ``params`` (e.g.
    ``lambda: model.loss(example)`` on a batch of one). The result, one tensor per parameter
    (same shape and device; float32, or float64 for float64 parameters), is the mean over the
    examples of the squared per-example gradients; a parameter that an example does not use
    gets a zero gradient for it. With ``normalise`` the Fisher is rescaled so that the sum over
    all its entries equals the number of parameter entries.

    The model's mode is the caller's business: call this with the model in **eval mode** so
    that dropout does not randomise the Fisher. Gradients are enabled around each call, but it
    cannot run under ``torch.inference_mode`` (Lightning's validation and test loops): compute
    it e.g. in ``on_train_end`` or outside the trainer. ``.grad`` fields are left untouched.
    """
    params = list(params)
    if not params:
        raise ValueError("empirical_fisher: no parameters given")
    for i, p in enumerate(params):
        if not p.requires_grad:
            raise ValueError(f"empirical_fisher: parameter {i} (shape {tuple(p.shape)}) does not require grad")
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            "empirical_fisher cannot run under torch.inference_mode (no autograd graph); "
            "call it outside Lightning's validation/test loops"
        )
    fisher = [torch.zeros_like(p, dtype=_accumulation_dtype(p.dtype)) for p in params]
    n = 0
    for compute_loss in example_losses:
        with torch.enable_grad():
            loss = compute_loss()
            if loss.numel() != 1:
                raise ValueError(
                    f"empirical_fisher: example {n} gave a loss of shape {tuple(loss.shape)}; "
                    "each callable must return the scalar loss of ONE example"
                )
            grads = torch.autograd.grad(loss.reshape(()), params, allow_unused=True)
        for acc, g in zip(fisher, grads, strict=True):
            if g is not None:
                acc.addcmul_(g, g)
        n += 1
    if n == 0:
        raise ValueError("empirical_fisher: no examples given")
    for acc in fisher:
        acc.div_(n)
    total = sum(acc.sum(dtype=torch.float64) for acc in fisher)
    if not bool(torch.isfinite(total)):
        raise ValueError("empirical_fisher: the Fisher is not finite (a per-example gradient overflowed or is NaN)")
    if normalise:
        if float(total) <= 0.0:
            raise ValueError(
                "empirical_fisher: the Fisher is zero everywhere (the losses do not depend on these "
                "parameters, or every example is predicted with probability 1), so it cannot be "
                "normalised to sum to the number of parameters"
            )
        scale = sum(acc.numel() for acc in fisher) / total
        for acc in fisher:
            acc.mul_(scale.to(acc.device, acc.dtype))
    return fisher


class RollingFisher:
    """Rolling Fisher over a sequence of tasks (thesis Eq. 7.8–7.9, after online EWC):
    F̃_0 = (α/γ)·1 and, after task T_n, F̃_n = γ F_{T_n} + (1 − γ) F̃_{n−1} (γ = 0.9).

    ``shapes`` are tensors/parameters (their shape, device and dtype are used) or shapes
    (float32 on CPU, or ``device``/``dtype``). ``fisher`` is the current F̃ (a list of tensors),
    to give to `CoNaturalSGD.set_fisher`. `state_dict` holds tensors and numbers only
    (loadable with ``torch.load(weights_only=True)``).
    """

    def __init__(
        self,
        shapes: Sequence[Tensor | Sequence[int]],
        damping: float,
        gamma: float = 0.9,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"RollingFisher: gamma must be in (0, 1], got {gamma}")
        if damping < 0:
            raise ValueError(f"RollingFisher: damping must be >= 0, got {damping}")
        self.gamma = float(gamma)
        self.damping = float(damping)
        self.num_updates = 0
        init = self.damping / self.gamma
        self.fisher: list[Tensor] = []
        for s in shapes:
            if isinstance(s, Tensor):
                t = torch.full(s.shape, init, device=device or s.device, dtype=dtype or _accumulation_dtype(s.dtype))
            else:
                t = torch.full(tuple(s), init, device=device, dtype=dtype or torch.float32)
            self.fisher.append(t)

    def update(self, fisher: Sequence[Tensor]) -> list[Tensor]:
        """F̃ ← γ·F + (1 − γ)·F̃ with the (normalised) Fisher F of the task just finished."""
        fisher = list(fisher)
        if len(fisher) != len(self.fisher):
            raise ValueError(f"RollingFisher.update: got {len(fisher)} tensors, expected {len(self.fisher)}")
        new = []
        for i, (old, f) in enumerate(zip(self.fisher, fisher, strict=True)):
            if f.shape != old.shape:
                raise ValueError(f"RollingFisher.update: tensor {i} has shape {tuple(f.shape)}, expected {tuple(old.shape)}")
            new.append(self.gamma * f.detach().to(old.device, old.dtype) + (1.0 - self.gamma) * old)
        self.fisher = new
        self.num_updates += 1
        return self.fisher

    def state_dict(self) -> dict[str, Any]:
        return {
            "fisher": [t.clone() for t in self.fisher],
            "gamma": self.gamma,
            "damping": self.damping,
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        fisher = list(state["fisher"])
        if len(fisher) != len(self.fisher):
            raise ValueError(f"RollingFisher.load_state_dict: got {len(fisher)} tensors, expected {len(self.fisher)}")
        for i, (old, f) in enumerate(zip(self.fisher, fisher, strict=True)):
            if f.shape != old.shape:
                raise ValueError(
                    f"RollingFisher.load_state_dict: tensor {i} has shape {tuple(f.shape)}, expected {tuple(old.shape)}"
                )
        self.fisher = [f.to(old.device, old.dtype).clone() for old, f in zip(self.fisher, fisher, strict=True)]
        self.gamma = float(state["gamma"])
        self.damping = float(state["damping"])
        self.num_updates = int(state["num_updates"])


class CoNaturalSGD(torch.optim.Optimizer):
    """SGD preconditioned by a (source-task) diagonal Fisher: the co-natural gradient, Eq. 7.7.

    For the parameters of the preconditioned groups (the default; ``"precondition": False`` in a
    group excludes it, e.g. task heads), with g = ∇L (+ weight_decay·θ, coupled as in SGD)::

        δ_p = g_p / (F_p + α + eps)               (α = ``damping``, eps = 1e-12, section 7.3)
        δ  ← δ · ‖g‖ / ‖δ‖                         (one global norm over all preconditioned params)
        θ_p ← θ_p − lr · δ_p                        (plain SGD, as in all the thesis's experiments)

    Non-preconditioned groups take the plain SGD step θ ← θ − lr·g and are not part of the
    rescaling. Without a Fisher (``fisher=None`` and no `set_fisher`) every group takes the plain
    SGD step. ``fisher`` lists one tensor per preconditioned parameter, in group order (see
    `preconditioned_params`); it is copied into the optimiser state (key ``"fisher"``), so
    ``state_dict()`` / ``load_state_dict()`` round-trip it and the state loads with
    ``torch.load(weights_only=True)`` (Lightning checkpoints). ``lr``, ``damping``, ``eps`` and
    ``weight_decay`` may be set per group.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float,
        fisher: Sequence[Tensor] | None = None,
        damping: float = 1.0,
        eps: float = TINY_DAMPING,
        weight_decay: float = 0.0,
    ):
        for name, value in (("lr", lr), ("damping", damping), ("eps", eps), ("weight_decay", weight_decay)):
            if not value >= 0.0:
                raise ValueError(f"CoNaturalSGD: {name} must be >= 0, got {value}")
        defaults = {"lr": lr, "damping": damping, "eps": eps, "weight_decay": weight_decay, "precondition": True}
        super().__init__(params, defaults)
        if fisher is not None:
            self.set_fisher(fisher)

    def preconditioned_params(self) -> list[Tensor]:
        """The parameters the Fisher applies to, in the order `set_fisher` expects."""
        return [p for group in self.param_groups if group["precondition"] for p in group["params"]]

    def set_fisher(self, fisher: Sequence[Tensor] | None) -> None:
        """Store (a copy of) ``fisher``, one tensor per `preconditioned_params` entry, or remove
        it with ``None`` (plain SGD)."""
        params = self.preconditioned_params()
        if fisher is None:
            for p in params:
                self.state[p].pop("fisher", None)
            return
        fisher = list(fisher)
        if len(fisher) != len(params):
            raise ValueError(
                f"CoNaturalSGD.set_fisher: got {len(fisher)} tensors for {len(params)} preconditioned parameters"
            )
        for i, (p, f) in enumerate(zip(params, fisher, strict=True)):
            if f.shape != p.shape:
                raise ValueError(
                    f"CoNaturalSGD.set_fisher: tensor {i} has shape {tuple(f.shape)}, parameter has {tuple(p.shape)}"
                )
            if not bool(torch.isfinite(f).all()) or bool((f < 0).any()):
                raise ValueError(f"CoNaturalSGD.set_fisher: tensor {i} has negative or non-finite entries")
        for p, f in zip(params, fisher, strict=True):
            self.state[p]["fisher"] = f.detach().to(device=p.device, dtype=p.dtype).clone()

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor] | None = None) -> Tensor | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        # (param, lr, direction) of the preconditioned params, rescaled together below.
        pending: list[tuple[Tensor, float, Tensor]] = []
        g_sq: Tensor | None = None
        d_sq: Tensor | None = None
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("CoNaturalSGD does not support sparse gradients")
                g = p.grad if wd == 0 else p.grad.add(p, alpha=wd)
                fisher = self.state[p].get("fisher") if group["precondition"] else None
                if fisher is None:
                    p.add_(g, alpha=-lr)
                    continue
                d = g / (fisher + (group["damping"] + group["eps"]))
                gn = torch.linalg.vector_norm(g, dtype=torch.float64).square()
                dn = torch.linalg.vector_norm(d, dtype=torch.float64).square()
                g_sq = gn if g_sq is None else g_sq + gn.to(g_sq.device)
                d_sq = dn if d_sq is None else d_sq + dn.to(d_sq.device)
                pending.append((p, lr, d))
        if pending:
            assert g_sq is not None and d_sq is not None
            # ‖δ‖ = 0 only when g = 0 (F + α + eps > 0), so the step is zero either way.
            scale = torch.where(d_sq > 0, g_sq.sqrt() / d_sq.sqrt().clamp_min(math.ulp(0.0)), torch.zeros_like(d_sq))
            for p, lr, d in pending:
                p.add_(d * scale.to(device=p.device, dtype=d.dtype), alpha=-lr)
        return loss


def conatural_sgd(model: nn.Module, lr: float, damping: float, weight_decay: float) -> CoNaturalSGD:
    """``optimizer=conatural``: `CoNaturalSGD` over the SLU ``model`` (a JointBERT), its
    ``encoder`` preconditioned (weight decay on the weights only), every other parameter (the
    task heads) plain SGD without weight decay. No Fisher yet: `set_encoder_fisher` gives it."""
    heads = [p for n, p in model.named_parameters() if not n.startswith("encoder.")]
    return CoNaturalSGD([*weight_decay_groups(model.encoder, weight_decay),
                         {"params": heads, "precondition": False, "weight_decay": 0.0}], lr=lr, damping=damping)


def set_encoder_fisher(optimizer: CoNaturalSGD, encoder: nn.Module, fisher: Sequence[Tensor]) -> None:
    """Give ``optimizer`` (from `conatural_sgd`) the Fisher ``fisher``, one tensor per parameter
    of ``encoder`` in ``encoder.parameters()`` order."""
    by_param = dict(zip(map(id, encoder.parameters()), fisher, strict=True))
    optimizer.set_fisher([by_param[id(p)] for p in optimizer.preconditioned_params()])
