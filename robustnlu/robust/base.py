"""The interface every training objective implements (core paper section 4, Algorithm 1).

Algorithm 1 applies the method's reduction to the slot loss and to the intent loss separately
and forms L = L_slot + γ·L_intent (γ = the intent loss scaler of section 5 "SLU Model").
A subclass implements `reduce`; methods with their own parameters (an autoencoder, an
adversary) own them as sub-modules, and their state (running averages, group weights) lives in
buffers so that it is saved in checkpoints and loads with ``weights_only=True``.
"""

from __future__ import annotations

from torch import Tensor, nn

from robustnlu.model.jointbert import TaskLosses


class RobustObjective(nn.Module):
    #: "slot" and "intent": the two task losses Algorithm 1 reduces.
    TASKS = ("slot", "intent")

    def __init__(self, name: str = "", intent_loss_scale: float = 1.0):
        """``name`` is the method's config name (``method.name``), γ = ``intent_loss_scale``."""
        super().__init__()
        self.name = name
        self.intent_loss_scale = float(intent_loss_scale)

    def reduce(self, losses: Tensor, task: str, batch: TaskLosses) -> Tensor:
        """Reduce one task's per-example losses ``[b]`` to a scalar."""
        raise NotImplementedError

    def forward(self, batch: TaskLosses) -> Tensor:
        """L = reduce(l_slot) + γ · reduce(l_intent)."""
        slot = self.reduce(batch.slot, "slot", batch)
        intent = self.reduce(batch.intent, "intent", batch)
        return slot + self.intent_loss_scale * intent
