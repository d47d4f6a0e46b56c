"""JointBERT (Chen et al. 2019, "BERT for Joint Intent Classification and Slot Filling") as
used in the core paper (Broscheit et al. 2022, section 5 "SLU Model").

- intent head on the pooled [CLS] representation (BERT's pooler where the encoder has one);
- slot head on the first sub-token of every word; softmax by default, a linear-chain CRF with
  ``crf=True`` (the paper's change (ii): softmax instead of CRF, found better in its study);
- dropout before each head;
- the joint loss L = L_slot + γ·L_intent (the paper's change (i), γ = ``intent_loss_scale``) is
  formed by the training objective, not here: the forward pass returns **per-example** losses
  (``TaskLosses``, no batch reduction) and the mean-pooled token representation
  X_enc ∈ R^{b×d} (paper section 4.1), the contract every robust objective reduces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from robustnlu.model.crf import LinearChainCRF
from robustnlu.precision import fp32

IGNORE_INDEX = -100


@dataclass
class TaskLosses:
    """Per-example task losses of one batch (shape ``[b]`` each), the encoder's mean-pooled
    representation ``x_enc`` (``[b, d]``) and the collated batch they come from (``inputs``:
    token ids, labels, ``index`` = positions in the split's dataset, ``groups`` = SeqDrift
    cluster ids, -1 = none): what a robust objective may look at."""

    slot: Tensor
    intent: Tensor
    x_enc: Tensor
    inputs: Mapping[str, Tensor]


@dataclass
class JointBERTOutput:
    intent_logits: Tensor  # [b, n_intents]
    slot_logits: Tensor  # [b, n_words, n_tags]
    x_enc: Tensor  # [b, d]


class ClassifierHead(nn.Module):
    """Dropout + linear layer: the intent head (on the pooled [CLS] representation) and the
    slot head (on each word's first sub-token representation) are both one of these."""

    def __init__(self, hidden_size: int, n_labels: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(hidden_size, n_labels)

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(self.dropout(features))


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Average of the token representations under the attention mask (paper section 4.1)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)


def encoder_attention_mask(encoder: nn.Module, attention_mask: Tensor) -> Tensor:
    """The padding mask ``attention_mask`` ([b, n], 1 = token) in the form the transformers
    ``encoder``'s attention takes it, always built: for SDPA a boolean [b, 1, n, n], for eager
    attention an additive one (transformers' ``create_bidirectional_mask``). Given the 2-D mask,
    the encoder builds the same one, after reading on the host whether every token is real (to
    pass SDPA no mask then): on a GPU a wait for the kernels queued before it, every forward pass.
    A 4-D mask it takes as it is, unread. Where every token is real, the all-true mask gives the
    outputs of no mask: bit for bit on the CPU (tests/model/test_jointbert.py); CUDA may run its
    memory-efficient attention kernel for it instead of flash attention."""
    from transformers.masking_utils import create_bidirectional_mask  # here: jointbert loads no transformers

    b, n = attention_mask.shape
    like = attention_mask.new_empty((b, n, 0), dtype=encoder.dtype)  # the batch size, length, dtype and device it reads
    return create_bidirectional_mask(config=encoder.config, inputs_embeds=like, attention_mask=attention_mask,
                                     allow_is_bidirectional_skip=False)


class JointBERT(nn.Module):
    def __init__(self, encoder: nn.Module, n_intents: int, n_tags: int, dropout: float = 0.1, crf: bool = False):
        super().__init__()
        self.encoder = encoder
        hidden = encoder.config.hidden_size
        self.intent_classifier = ClassifierHead(hidden, n_intents, dropout)
        self.slot_classifier = ClassifierHead(hidden, n_tags, dropout)
        self.crf = LinearChainCRF(n_tags) if crf else None

    def forward(self, batch: Mapping[str, Tensor]) -> JointBERTOutput:
        out = self.encoder(input_ids=batch["input_ids"],
                           attention_mask=encoder_attention_mask(self.encoder, batch["attention_mask"]))
        hidden = out.last_hidden_state
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:
            pooled = hidden[:, 0]
        index = batch["word_index"].unsqueeze(-1).expand(-1, -1, hidden.size(-1))
        words = hidden.gather(1, index)
        return JointBERTOutput(
            intent_logits=self.intent_classifier(pooled),
            slot_logits=self.slot_classifier(words),
            x_enc=mean_pool(hidden, batch["attention_mask"]),
        )

    def task_losses(self, output: JointBERTOutput, batch: Mapping[str, Tensor]) -> TaskLosses:
        """Per-example losses. Slot loss: the mean over the utterance's labelled words of the
        token cross-entropy (softmax), or the CRF's sequence negative log-likelihood divided by
        the number of words (so both heads give per-word scales). Labels ``-100`` (padding,
        truncated words, tags unseen in training) are ignored by the softmax loss. Computed in
        float32 from float32 logits whatever the training precision (`robustnlu.precision`)."""
        with fp32(output.slot_logits.device):
            return self._task_losses(output.slot_logits.float(), output.intent_logits.float(), output.x_enc.float(), batch)

    def _task_losses(self, slot_logits: Tensor, intent_logits: Tensor, x_enc: Tensor,
                     batch: Mapping[str, Tensor]) -> TaskLosses:
        slot_labels = batch["slot_labels"]
        if self.crf is None:
            per_word = F.cross_entropy(slot_logits.transpose(1, 2), slot_labels, ignore_index=IGNORE_INDEX, reduction="none")
            n_words = (slot_labels != IGNORE_INDEX).sum(1)
        else:
            mask = batch["word_mask"]
            per_word = self.crf.neg_log_likelihood(slot_logits, slot_labels, mask)
            n_words = mask.sum(1)
        slot = per_word.sum(1) if per_word.dim() == 2 else per_word
        slot = slot / n_words.clamp_min(1).to(slot.dtype)
        intent = F.cross_entropy(intent_logits, batch["intent_labels"], ignore_index=IGNORE_INDEX, reduction="none")
        return TaskLosses(slot=slot, intent=intent, x_enc=x_enc, inputs=batch)

    @torch.no_grad()
    def decode(self, output: JointBERTOutput, word_mask: Tensor) -> tuple[list[int], list[list[int]]]:
        """Predicted intent ids and, per utterance, one tag id per word under ``word_mask``."""
        intents = output.intent_logits.float().argmax(-1).tolist()
        slot_logits = output.slot_logits.float()  # the CRF's Viterbi in float32 (`robustnlu.precision`)
        if self.crf is not None:
            with fp32(slot_logits.device):
                return intents, self.crf.decode(slot_logits, word_mask)
        best = slot_logits.argmax(-1)
        lengths = word_mask.sum(1).tolist()
        return intents, [row[:n] for row, n in zip(best.tolist(), lengths, strict=True)]
