"""Greedy-Minmax model selection (Michel, thesis 5.3.3 eq. 5.10, R-PDRO variant 6.2.2 eqs.
6.7-6.8).

At every validation T the criterion holds the adversary set A = {ψ_0, …, ψ_T} as per-example
validation ratios (the sufficient statistics of 5.3.3) and one incumbent model θ*, as its
per-example validation scores s. With the current model θ_T and its adversary ψ_T:

1. r̂ = N · softmax(f_ψT) over the N validation examples (ratios of mean 1, 6.2.2 / digest 4.4);
2. KL filter (eq. 6.8): ψ_T joins A iff mean_j r̂_j log r̂_j ≤ κ_valid (log 10, 5.6.1: any
   subset of ≥ 10% of the data; the boundary is accepted up to a rounding tolerance of 1e-6);
3. R(θ) = max_{a∈A} mean_j r̂_aj s_j(θ) (eq. 5.10), s = 0-1 frame errors (``score: error``, the
   R-PDRO choice of 6.2.2) or losses l_slot + γ·l_intent (``score: loss``, P-DRO's 5.3.3);
4. the incumbent is re-scored on the enlarged A and replaced by θ_T iff R(θ_T) < R(θ*)
   (the first model becomes the incumbent).

A starts with the uniform adversary ψ_0 (r̂ = 1), so for a method without an adversary
(zero log-weights) A stays {uniform} and the criterion is the validation error (or loss).
An adversary equal to one already in A (up to rounding) is not added again. P-DRO's reference code does not
renormalise its ratios q_ψ/q_ψ0 (digest 2.5 [C]); here every adversary is renormalised to
mean 1 over the validation set, so r̂ is a distribution over it whichever method produced it.

`update` returns ``minmax_incumbent``, the number of times the incumbent changed (monotone, so a
checkpoint callback monitoring it with mode=max saves exactly the incumbents), ``minmax_risk``
R(θ_T), ``minmax_incumbent_risk`` R(θ*), ``adversaries`` |A| and ``adversary_kl`` (ψ_T's KL).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

SCORES = ("error", "loss")
#: rounding tolerance of the KL filter (a uniform 10% subset has KL = log 10 exactly)
KL_TOLERANCE = 1e-6


def normalised_ratios(log_weights: Tensor) -> Tensor:
    """r̂ = N · softmax(log_weights): ratios of mean 1 over the N validation examples."""
    return log_weights.numel() * torch.softmax(log_weights.double(), dim=0)


def validation_kl(ratios: Tensor) -> float:
    """mean_j r̂_j log r̂_j (eq. 6.8), with 0 log 0 = 0."""
    return torch.special.xlogy(ratios, ratios).mean().item()


def robust_risk(adversaries: Tensor, scores: Tensor) -> float:
    """max over the adversaries (rows of ``adversaries``) of mean_j r̂_aj s_j (eq. 5.10)."""
    return (adversaries @ scores.double() / scores.numel()).max().item()


class GreedyMinmax:
    def __init__(self, kl_threshold: float = math.log(10), score: str = "error"):
        """``kl_threshold`` κ_valid; ``score``: "error" (0-1) or "loss"."""
        if score not in SCORES:
            raise ValueError(f"score={score!r}: expected one of {SCORES}")
        self.kl_threshold = float(kl_threshold)
        self.score = score
        self.adversaries = torch.empty(0, 0, dtype=torch.float64)  # [|A|, N], set at the first update
        self.incumbent_scores = torch.empty(0, dtype=torch.float64)  # [N]; empty = no incumbent yet
        self.incumbent_changes = 0

    def update(self, errors: Tensor, losses: Tensor, log_weights: Tensor) -> dict[str, float]:
        """One validation of the current model: per-example ``errors``, ``losses`` and its
        adversary's ``log_weights`` (``[N]`` each, dataset order)."""
        scores = (errors if self.score == "error" else losses).double().cpu()
        n = scores.numel()
        if self.adversaries.numel() == 0:
            self.adversaries = torch.ones(1, n, dtype=torch.float64)  # ψ_0, the uniform adversary
        if self.adversaries.size(1) != n:
            raise ValueError(f"{n} validation examples, the adversary set has {self.adversaries.size(1)}")
        ratios = normalised_ratios(log_weights.cpu())
        kl = validation_kl(ratios)
        known = bool(torch.isclose(self.adversaries, ratios, rtol=1e-12, atol=0.0).all(1).any())
        if kl <= self.kl_threshold + KL_TOLERANCE and not known:
            self.adversaries = torch.cat([self.adversaries, ratios.unsqueeze(0)])
        risk = robust_risk(self.adversaries, scores)
        if self.incumbent_scores.numel() == 0 or risk < robust_risk(self.adversaries, self.incumbent_scores):
            self.incumbent_scores = scores
            self.incumbent_changes += 1
        return {"minmax_incumbent": float(self.incumbent_changes), "minmax_risk": risk,
                "minmax_incumbent_risk": robust_risk(self.adversaries, self.incumbent_scores),
                "adversaries": float(self.adversaries.size(0)), "adversary_kl": kl}

    def state_dict(self) -> dict[str, Tensor | int]:
        return {"adversaries": self.adversaries, "incumbent_scores": self.incumbent_scores,
                "incumbent_changes": self.incumbent_changes}

    def load_state_dict(self, state: dict[str, Tensor | int]) -> None:
        self.adversaries = state["adversaries"].double().cpu()
        self.incumbent_scores = state["incumbent_scores"].double().cpu()
        self.incumbent_changes = int(state["incumbent_changes"])
