"""The ratio adversary of R-PDRO (thesis ch. 6): r_ψ(x, y) = exp(f_ψ(x, y)) (section 6.1.2).

f_ψ is a discriminative classifier's raw logit at the gold label (section 6.2.2: "the raw logit
output by a BiLSTM architecture identical to that of the classifier"; for a BERT classifier a
smaller pre-trained DistilBERT). Here the classifier is a JointBERT whose encoder is the SLU
model's encoder truncated to its first ``n_layers`` layers, initialised from the SLU model's
pre-trained embeddings and first layers (`init_from`), with fresh heads.

Extension to SLU (the thesis has one label per example): f = the intent logit at the gold
intent + the mean over the utterance's labelled words of the slot logit at the gold tag
(`gold_logit_score`); labels -100 (padding, unseen in training) contribute nothing.

Choices the thesis leaves open:
- the heads start at zero, so f = 0 and r̃ is uniform at the first step: training starts as
  ERM, as P-DRO's adversary starts at ψ0 (ratio 1, thesis 5.3.1);
- dropout is always off (`train` keeps eval mode), as in the reference P-DRO code (digest
  2.3 [C]): a dropout mask would make the weights of the same example random.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from transformers import AutoConfig, AutoModel

from robustnlu.config_spec import AT_LEAST_1, integer
from robustnlu.hparams import HParam, hparam_values
from robustnlu.model.jointbert import IGNORE_INDEX, JointBERT


def gold_logit_score(intent_logits: Tensor, slot_logits: Tensor, intent_labels: Tensor, slot_labels: Tensor) -> Tensor:
    """f ``[b]``: intent logit at the gold intent + mean over labelled words of the slot logit
    at the gold tag (``intent_logits`` ``[b, n_intents]``, ``slot_logits`` ``[b, w, n_tags]``)."""
    intent_known = intent_labels != IGNORE_INDEX
    intent = intent_logits.gather(1, intent_labels.clamp_min(0).unsqueeze(1)).squeeze(1)
    intent = torch.where(intent_known, intent, torch.zeros_like(intent))
    labelled = slot_labels != IGNORE_INDEX
    per_word = slot_logits.gather(2, slot_labels.clamp_min(0).unsqueeze(2)).squeeze(2)
    per_word = torch.where(labelled, per_word, torch.zeros_like(per_word))
    return intent + per_word.sum(1) / labelled.sum(1).clamp_min(1).to(per_word.dtype)


class RatioAdversary(nn.Module):
    HPARAMS = {
        # the thesis pairs BERT-base (12 layers) with DistilBERT (6), i.e. a smaller pre-trained model; 2 of
        # MiniLM's 6 keep a step ≈ 1.3x ERM's
        "n_layers": HParam(integer(AT_LEAST_1), 2, "the SLU encoder's first layers kept (at most all of them)"),
    }

    def __init__(self, spec, **hparams):
        """``spec``: the `ModelSpec` (its ``encoder_config`` is the SLU encoder's HF config, from
        which the architecture is rebuilt without weights)."""
        super().__init__()
        self.hparams = hparam_values(type(self), hparams)
        n_layers = self.hparams["n_layers"]
        encoder_config = spec.encoder_config
        if isinstance(encoder_config, DictConfig):
            encoder_config = OmegaConf.to_container(encoder_config, resolve=True)
        encoder_config = dict(encoder_config)
        config = AutoConfig.for_model(encoder_config.pop("model_type"), **encoder_config)
        if not 1 <= n_layers <= config.num_hidden_layers:
            raise ValueError(f"n_layers={n_layers}: the encoder has {config.num_hidden_layers} layers")
        config.num_hidden_layers = n_layers
        self.classifier = JointBERT(AutoModel.from_config(config), n_intents=spec.n_intents, n_tags=spec.n_tags)
        for head in (self.classifier.intent_classifier, self.classifier.slot_classifier):
            nn.init.zeros_(head.linear.weight)
            nn.init.zeros_(head.linear.bias)
        self.train(False)

    def train(self, mode: bool = True) -> RatioAdversary:
        """Always in eval mode: no dropout (module docstring)."""
        return super().train(False)

    @torch.no_grad()
    def init_from(self, encoder: nn.Module) -> None:
        """Copy the SLU encoder's embeddings and first layers (every encoder weight whose name
        and shape this truncated encoder shares)."""
        source = encoder.state_dict()
        target = self.classifier.encoder.state_dict()
        missing = [k for k, v in target.items() if k not in source or source[k].shape != v.shape]
        if missing:
            raise ValueError(f"the SLU encoder has no weights for the adversary's {missing[:5]}")
        self.classifier.encoder.load_state_dict({k: source[k] for k in target})

    def forward(self, inputs: Mapping[str, Tensor]) -> Tensor:
        """f_ψ(x, y) ``[b]`` of a collated batch (token ids, word positions, gold labels)."""
        output = self.classifier(inputs)
        labels = inputs["intent_labels"], inputs["slot_labels"]
        return gold_logit_score(output.intent_logits, output.slot_logits, *labels)
