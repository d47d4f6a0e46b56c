"""`GenerativeLM`: P-DRO's generative adversary q_ψ(x, y), a small LSTM language model over the
encoder's sub-words with a label token prepended (thesis 5.4.6 and 5.6.2; digest 2.4).

Architecture (thesis 5.6.2 "a one layer LSTM with embedding and hidden dimension 256"; [C]
``small_lstm_generative``: tied input/output embeddings, dropout 0.2, here on the LSTM's inputs
and outputs). The embedding has one row
per sub-word of the tokenizer, one per intent (the label tokens ⟨y⟩) and one out-of-vocabulary
row, all sized from the `ModelSpec` at construction, so a checkpoint loads without data.

The modelled sequence (thesis 5.4.6: "we pre-pend a special label-specific token"). A collated
row ``[CLS] x_1 … x_n [SEP]`` becomes

    inputs   [CLS] ⟨y⟩  x_1 … x_n
    targets  ⟨y⟩  x_1  … x_n [SEP]

    log q(x, y) = log q(⟨y⟩ | [CLS]) + Σ_t log q(x_t | [CLS], ⟨y⟩, x_<t) + log q([SEP] | …)

The first position (the tokenizer's [CLS], always present) is the begin-of-sequence input and
is not scored; [SEP] is scored as the end-of-sequence event, so q is a distribution over
utterances of every length, and the prior of the intent is part of q. Padding (outside
``attention_mask``) is never scored; the LSTM is causal, so it never influences real positions.

Slot tags are not modelled. P-DRO only uses q_ψ through the ratio q_ψ/q_ψ0 (eq. 5.5) and the
gradient of log q_ψ (eq. 5.8). With a family q(x, intent, tags) = q_ψ(x, intent)·p(tags | x,
intent), i.e. the tags given the utterance shift with neither player (covariate shift, as the
toy task's q_ψ(x)p(y|x) of thesis 5.4.7), p(tags | x, intent) cancels in the ratio and is
constant in ψ, so modelling it would change neither loss.

Output vocabulary (``output_vocab``, our choice for speed): ``"full"`` scores every row of the
embedding; ``"train"`` (after `fit_output_vocabulary` with the training set's sub-words) scores
only the sub-word types seen in training, the label tokens and the OOV row, and maps every
other sub-word, as input and as target, to the OOV row: a closed-vocabulary LM. SNIPS uses 9.3k
of MiniLM's 30.5k sub-words, so the softmax, the bulk of the cost, is 3x cheaper.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from robustnlu.config_spec import AT_LEAST_1, DROPOUT, choice, integer, number
from robustnlu.hparams import HParam, hparam_values
from robustnlu.model.spec import ModelSpec, StateBuffers

OUTPUT_VOCABS = ("train", "full")


class GenerativeLM(StateBuffers):
    # none is searched in the thesis
    HPARAMS = {
        # tied embeddings [C]: thesis 5.6.2 "embedding and hidden dimension 256"
        "hidden_size": HParam(integer(AT_LEAST_1), 256, "embedding = hidden size of the LSTM"),
        "num_layers": HParam(integer(AT_LEAST_1), 1, "LSTM layers (thesis 5.6.2: \"one layer\")"),
        # [C] small_lstm_generative (digest 2.4); during DRO training the adversary runs in eval mode (digest 2.3 [C])
        "dropout": HParam(number(DROPOUT), 0.2, "dropout, active only while ψ0 is pre-trained"),
        # train is ours, for speed: 9.3k of 30.5k sub-words on SNIPS
        "output_vocab": HParam(choice(*OUTPUT_VOCABS), "train", "the softmax classes. train: the training set's "
                               "sub-word types + intents + one OOV class | full: the tokenizer's whole vocabulary"),
    }

    def __init__(self, spec: ModelSpec, **hparams):
        super().__init__()
        self.hparams = hparam_values(type(self), hparams)
        hidden_size, num_layers = self.hparams["hidden_size"], self.hparams["num_layers"]
        self.output_vocab = self.hparams["output_vocab"]
        self.vocab_size = spec.vocab_size
        n_rows = spec.vocab_size + spec.n_intents + 1  # sub-words, label tokens, OOV
        self.oov_row = n_rows - 1
        self.embedding = nn.Embedding(n_rows, hidden_size)
        self.dropout = nn.Dropout(self.hparams["dropout"])
        self.lstm = nn.LSTM(hidden_size, hidden_size, num_layers, batch_first=True)
        # the softmax classes (embedding rows, data-sized after `fit_output_vocabulary`) and
        # each row's class (rows outside the classes go to the OOV class)
        self.register_buffer("class_rows", torch.arange(n_rows))
        self.register_buffer("row_class", torch.arange(n_rows))

    def fit_output_vocabulary(self, token_ids: Tensor) -> None:
        """With ``output_vocab="train"``: restrict the softmax to ``token_ids`` (the training
        set's sub-words), the label tokens and the OOV row."""
        if self.output_vocab == "full":
            return
        device = self.class_rows.device
        labels = torch.arange(self.vocab_size, self.oov_row + 1, device=device)  # label tokens and OOV
        rows = torch.unique(torch.cat([token_ids.to(device), labels]))  # sorted: OOV is the last class
        self.row_class = torch.full_like(self.row_class, len(rows) - 1)
        self.row_class[rows] = torch.arange(len(rows), device=device)
        self.class_rows = rows

    def train(self, mode: bool = True) -> GenerativeLM:
        """Eval mode turns the dropout off. The LSTM itself has no dropout (``dropout`` applies
        to its inputs and outputs), so its mode only gates cuDNN, whose backward refuses eval
        mode: it stays in train mode, and the adversary can train without dropout."""
        super().train(mode)
        self.lstm.train()
        return self

    def log_prob(self, input_ids: Tensor, attention_mask: Tensor, intents: Tensor) -> Tensor:
        """log q(x, y) ``[b]`` of collated rows ``input_ids`` ``[b, L]`` with intent ids
        ``intents`` ``[b]`` (valid ids: ≥ 0), in float32 whatever the autocast context."""
        with torch.autocast(input_ids.device.type, enabled=False):
            weight = self.embedding.weight[self.class_rows]  # [classes, d], tied input/output embedding
            classes = self.row_class[input_ids]  # sub-word → class (OOV for unseen types)
            labels = self.row_class[self.vocab_size + intents].unsqueeze(1)
            sequence = torch.cat([classes[:, :1], labels, classes[:, 1:]], 1)  # [CLS] ⟨y⟩ x … [SEP]
            inputs, targets = sequence[:, :-1], sequence[:, 1:]
            hidden, _ = self.lstm(self.dropout(F.embedding(inputs, weight)))
            scored = torch.cat([attention_mask.new_ones(len(intents), 1), attention_mask[:, 1:]], 1).bool()
            # the softmax, the bulk of the cost, only at scored positions (no padding)
            logits = self.dropout(hidden[scored]) @ weight.T
            nll = F.cross_entropy(logits, targets[scored], reduction="none")
            rows = torch.arange(len(intents), device=nll.device).unsqueeze(1).expand_as(scored)[scored]
            return -torch.zeros(len(intents), device=nll.device).index_add_(0, rows, nll)

def scored_tokens(attention_mask: Tensor) -> Tensor:
    """The number of tokens `GenerativeLM.log_prob` scores per row: the label token and every
    real token after [CLS], i.e. the row's real tokens."""
    return attention_mask.sum(1)
