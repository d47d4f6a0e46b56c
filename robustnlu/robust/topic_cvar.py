"""Topic-CVaR (core paper 4.2 "TOPIC-CVAR" and App. C; Oren et al. 2019, "Distributionally
Robust Language Modeling"): "accumulate the losses for each topic over the course of training.
In each update a subset of losses in l_task is selected, i.e., the losses of those batch items
that are assigned to the topic that currently lies in the upper α percentile of accumulated
losses"."""

from __future__ import annotations

import torch
from torch import Tensor

from robustnlu.config_spec import flag, number
from robustnlu.groups.base import GroupSource
from robustnlu.hparams import HParam, log_uniform, uniform
from robustnlu.model.jointbert import TaskLosses
from robustnlu.robust.base import entropy
from robustnlu.robust.grouped import GroupedObjective, group_mean_losses


def cvar_weights(scores: Tensor, prior: Tensor, alpha: float) -> Tensor:
    """The CVaR adversary over topics (Oren et al. 2019): q maximising Σ_z q_z·scores_z subject
    to 0 ≤ q_z ≤ p_z/α and Σ_z q_z = 1. Going down the topics by decreasing score, each takes
    its cap p_z/α until the mass reaches 1; the topic that crosses 1 takes the remainder, the
    rest get 0 (the upper-α tail of the prior p). Ties keep the topics' order. ``scores``
    ``[..., G]`` (one adversary per row), ``prior`` ``[G]``."""
    order = scores.argsort(dim=-1, descending=True, stable=True)
    mass = (prior[order].cumsum(-1) / alpha).clamp(max=1)
    weights = torch.diff(mass, dim=-1, prepend=torch.zeros_like(mass[..., :1]))
    return torch.empty_like(weights).scatter_(-1, order, weights)


class TopicCVaR(GroupedObjective):
    """Per task (Algorithm 1 reduces l_slot and l_intent separately, so each task keeps its own
    averages, computed together in one pass) and per batch, L = Σ_z q_z L_z^slot + γ·(the same
    for intent):

    1. per-topic batch losses L_z = Σ_i M_iz l_i / Σ_i M_iz over the topics with membership in
       the batch (M = the group source's memberships: one-hot or topic proportions);
    2. exponential averages L̄_z ← (1−η)·L̄_z + η·L_z for those topics (η = ``ema_step``, Table 9's
       "gamma"); a topic seen for the first time starts at its L_z, topics absent from the
       batch keep their average;
    3. q = `cvar_weights`(L̄, p, α) with p_z = Σ_i M_iz / n the topic's share of the training
       set; topics never seen yet have L̄_z = 0 and rank last (losses are ≥ 0);
    4. loss = Σ_z q_z L_z with q fixed (no gradient through the selection).

    The paper does not say in which order 2 and 3 happen nor what an absent topic contributes;
    like the Group-DRO authors' implementation of the method (``btl``, which the core paper
    used, section 5.2) we update the averages before selecting, and an absent topic contributes
    L_z = 0 (its weight is lost for this batch) unless ``renormalize`` spreads q over the topics
    present in the batch (a batch with none of the selected topics then has loss 0).
    """

    HPARAMS = {
        # the defaults are those of the Group-DRO authors' code; search: Table 9 TOPIC-CVAR "alpha",
        # uniform 1e-4 - 0.5, and "gamma", loguniform 1e-4 - 0.5
        "alpha": HParam(number("(0, 1]"), 0.2, "CVaR level α: topic weight q_z ≤ p_z/α", search=uniform(1e-4, 0.5)),
        "ema_step": HParam(number("(0, 1]"), 0.1, "step size η of the per-topic exponential loss averages "
                           "(Table 9's gamma)", search=log_uniform(1e-4, 0.5)),
        "renormalize": HParam(flag(), False, "false: topics absent from the batch contribute 0 (the authors' "
                              "code); true: q renormalised over the batch's topics"),
    }

    def __init__(self, groups: GroupSource, **kwargs):
        super().__init__(groups=groups, **kwargs)
        self.alpha = self.hparams["alpha"]
        self.ema_step = self.hparams["ema_step"]
        self.renormalize = self.hparams["renormalize"]
        self.register_buffer("topic_loss_ema", torch.zeros(len(self.TASKS), 0))
        self.register_buffer("topic_seen", torch.zeros(len(self.TASKS), 0, dtype=torch.bool))
        self.register_buffer("prior", None, persistent=False)

    def on_groups(self, n_groups: int) -> None:
        device = self.membership.device
        self.topic_loss_ema = torch.zeros(len(self.TASKS), n_groups, device=device)
        self.topic_seen = torch.zeros(len(self.TASKS), n_groups, dtype=torch.bool, device=device)
        self.prior = self.membership.sum(0) / self.membership.size(0)

    def forward(self, step: TaskLosses) -> Tensor:
        losses = torch.stack([step.slot, step.intent])  # [2, b], rows in TASKS order
        topic_losses, present = group_mean_losses(losses, self.batch_membership(step))  # [2, G]
        self.update_averages(topic_losses.detach(), present)
        q = cvar_weights(self.topic_loss_ema, self.prior, self.alpha).to(losses.dtype)
        if self.renormalize:
            q = q * present
            q = q / q.sum(-1, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)
        slot, intent = (q * topic_losses).sum(-1)
        return slot + self.intent_loss_scale * intent

    @torch.no_grad()
    def update_averages(self, topic_losses: Tensor, present: Tensor) -> None:
        """L̄ ← L̄ + w·(L − L̄), w = η for seen topics, 1 for first-seen, 0 for absent ones."""
        step = torch.where(self.topic_seen, self.ema_step, 1.0) * present
        self.topic_loss_ema += step * (topic_losses.to(self.topic_loss_ema.dtype) - self.topic_loss_ema)
        self.topic_seen |= present

    def logged_state(self) -> dict[str, float]:
        """Per task: the entropy of the CVaR weights q over the topics and how many topics they select."""
        q = cvar_weights(self.topic_loss_ema, self.prior, self.alpha)
        return {key: value for task, weights in zip(self.TASKS, q, strict=True)
                for key, value in ((f"q_{task}/entropy", entropy(weights).item()),
                                   (f"q_{task}/topics", int((weights > 0).sum())))}
