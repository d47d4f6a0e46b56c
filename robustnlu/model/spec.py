"""Small types shared by the model's users that own networks of their own (the objectives of
robustnlu/robust/, the adversaries of robustnlu/adversary/, the group sources of
robustnlu/groups/): what they may size themselves from, and how their running state loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    """What an objective may need to size its own networks: the SLU model's encoder hidden
    size, label counts, the tokenizer's vocabulary size and the encoder's HF config."""

    hidden_size: int
    n_intents: int
    n_tags: int
    vocab_size: int
    encoder_config: dict[str, Any]


class StateBuffers(nn.Module):
    """A module whose buffers are running state: loading a state dict whose buffer has another
    shape (state sized by the data, e.g. one weight per group) replaces the buffer instead of
    failing, so a checkpoint loads without the data (``robustnlu.predict``)."""

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name, buf in self._buffers.items():
            key = prefix + name
            if buf is not None and key in state_dict and state_dict[key].shape != buf.shape:
                self._buffers[name] = torch.empty_like(state_dict[key], device=buf.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
