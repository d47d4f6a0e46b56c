"""`GroupedObjective`: the base of the methods that reduce losses per group (TopK-Group,
Group-DRO, Topic-CVaR): the group source (``method.groups``, conf/groups/) gives each training example its
membership over G groups; a batch's memberships are looked up by the examples' dataset index."""

from __future__ import annotations

import torch
from torch import Tensor

from robustnlu.config_spec import SAMPLING
from robustnlu.groups.base import GroupSource
from robustnlu.hparams import HParam, Part
from robustnlu.model.jointbert import TaskLosses
from robustnlu.robust.base import RobustObjective


def group_mean_losses(losses: Tensor, membership: Tensor) -> tuple[Tensor, Tensor]:
    """Per-group mean losses L_g = Σ_i M_ig l_i / Σ_i M_ig (Sagawa et al.'s ``compute_group_avg``
    for memberships M ``[b, G]``) of ``losses`` ``[..., b]``, 0 for groups without members in the
    batch; returns (L ``[..., G]``, present ``[G]``)."""
    mass = membership.sum(0)
    present = mass > 0
    weighted = (losses.unsqueeze(-1) * membership).sum(-2)  # no mm: tiny, and slow on busy CPUs
    return weighted / torch.where(present, mass, torch.ones_like(mass)), present


def group_topk_losses(losses: Tensor, membership: Tensor, k: int) -> Tensor:
    """Per-group top-k loss of the groups present in the batch (core paper App. B, TopK-AE-Prob;
    section 4.3, TopK-Group): Ĥ = H ∘ l (``membership`` H ``[b, G]`` times the per-example
    losses l ``[b]``), truncated to each column's k largest entries and averaged per group.

    The divisor is min(k, number of examples with non-zero membership): for soft memberships
    (every example belongs to every group a little) that is exactly k, as in App. B; for hard
    memberships a group with fewer than k members in the batch averages over the members it has
    (TopK-Group's "TopK loss per group"), rather than counting non-members as zero losses.
    Returns ``[G']``, one entry per group with at least one member in the batch.
    """
    k = min(k, losses.numel())
    weighted = membership * losses.unsqueeze(1)
    top = weighted.topk(k, dim=0).values
    members = (membership > 0).sum(0)
    present = members > 0
    return top.sum(0)[present] / members[present].clamp(max=k).to(losses.dtype)


class GroupedObjective(RobustObjective):
    HPARAMS = {
        "groups": Part(GroupSource, "which group(s) each training example belongs to (method.groups, conf/groups/)"),
        # uniform batches as for every method but Group-DRO: the paper names no sampling for TopK-Group, and
        # Oren et al. sample uniformly for Topic-CVaR
        "sampling": HParam(SAMPLING, "shuffle", "training batches: shuffle (uniform) | group_balanced (each group "
                           "drawn equally often, Sagawa et al. 2020)"),
    }

    def __init__(self, groups: GroupSource, **kwargs):
        super().__init__(**kwargs)
        self.group_source = groups
        self.sampling = self.hparams["sampling"]
        self.register_buffer("membership", None, persistent=False)

    @property
    def n_groups(self) -> int:
        return self.membership.size(1)

    def setup(self, datamodule, model) -> None:
        self.membership = self.group_source.memberships(datamodule)
        self.on_groups(self.n_groups)

    def on_groups(self, n_groups: int) -> None:
        """Size the method's per-group state once the number of groups is known."""

    def batch_membership(self, step: TaskLosses) -> Tensor:
        """``[b, G]`` memberships of the batch's examples (training batches only)."""
        if self.membership.device != step.slot.device:  # set up before the model moved
            self.membership = self.membership.to(step.slot.device)
        return self.membership[step.inputs["index"]].to(step.slot.dtype)

    def sample_weights(self) -> Tensor | None:
        """Group-balanced sampling (Sagawa et al. 2020): example i is drawn with probability
        ∝ Σ_g M_ig / n_g with n_g = Σ_i M_ig, i.e. reciprocal to its group's frequency (for hard
        groups every group is drawn equally often)."""
        if self.sampling != "group_balanced":
            return None
        sizes = self.membership.sum(0).clamp_min(1e-12)
        return (self.membership / sizes).sum(1).cpu()
