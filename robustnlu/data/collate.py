"""Model inputs from utterances, without Lightning: `encode_utterances` tokenises and aligns
words to sub-tokens, `Collator` pads a batch. Training (`robustnlu.data.datamodule`) and
prediction (`robustnlu.predictor`) both read them, so a prediction sees its inputs as training did.

Each word is represented by its first sub-token (JointBERT, Chen et al. 2019). Words cut off by
``max_length`` get no position: they are outside ``word_mask``, their labels are ignored in
training and they are predicted ``O``; `encode_utterances` warns (how many, the first's file:line).
A word the tokenizer maps to no sub-token at all (e.g. a lone control character) borrows the
previous position, so ``word_mask`` stays a prefix (the CRF needs that) and every word still gets
a prediction.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from robustnlu.data.utterance import LabelVocab, Utterance


@dataclass(frozen=True)
class EncodedUtterance:
    input_ids: list[int]
    word_index: list[int]  # first sub-token position of each kept word
    tag_ids: list[int]  # one per kept word (-100 = unseen in training)
    intent_id: int  # -100 = unseen in training
    group: int  # -1 = no group


def encode_utterances(
    utterances: Sequence[Utterance],
    tokenizer,
    vocab: LabelVocab,
    max_length: int,
    groups: Mapping[str, int] | None = None,
) -> list[EncodedUtterance]:
    """Tokenise a list of utterances in one fast-tokenizer call and align words to sub-tokens;
    one warning if some are longer than ``max_length`` sub-tokens (their last words are cut)."""
    if not utterances:
        return []
    enc = tokenizer([list(u.tokens) for u in utterances], is_split_into_words=True, truncation=True, max_length=max_length)
    encoded = []
    for i, u in enumerate(utterances):
        first = {}
        for pos, w in enumerate(enc.word_ids(i)):
            if w is not None and w not in first:
                first[w] = pos
        kept = max(first) + 1 if first else 0  # words after the last encoded one were truncated
        word_index, prev = [], 0
        for w in range(kept):
            prev = first.get(w, prev)
            word_index.append(prev)
        encoded.append(
            EncodedUtterance(
                input_ids=enc["input_ids"][i],
                word_index=word_index,
                tag_ids=vocab.tag_ids(u.tags[:kept]),
                intent_id=vocab.intent_id(u.intent),
                group=(groups or {}).get(u.uid, -1),
            )
        )
    cut = [u for u, e in zip(utterances, encoded, strict=True) if len(e.word_index) < len(u.tokens)]
    if cut:
        first = cut[0]
        warnings.warn(f"{len(cut)} of {len(utterances)} utterances are longer than max_length={max_length} "
                      f"sub-tokens: their words past it are not trained on and are predicted O (first: "
                      f"{first.source or first.uid}, {len(first.tokens)} words)", stacklevel=2)
    return encoded


class Collator:
    """Pads a batch to its own longest sequence (dynamic padding), or to ``pad_to`` tokens
    (fixed padding, JointBERT's default of 50; kept for the benchmark and for users who need
    static shapes). ``pad_to_multiple_of``: length buckets, the token and the word dimension each
    padded further up to a multiple of it, but not past ``max_length`` (where no utterance is
    longer): a few shapes instead of one per longest utterance, which ``torch.compile`` with
    static shapes needs (``trainer.compile``). Padding is masked, so losses and predictions are
    those of dynamic padding."""

    def __init__(self, pad_token_id: int, pad_to: int | None = None, pad_to_multiple_of: int | None = None,
                 max_length: int | None = None):
        self.pad_token_id = pad_token_id
        self.pad_to = pad_to
        self.pad_to_multiple_of = pad_to_multiple_of
        self.max_length = max_length
        #: the value padding fills in each batch tensor (0 where not listed)
        self.pad_values = {"input_ids": pad_token_id, "slot_labels": -100}

    def shape_count(self) -> int | None:
        """The most distinct (token, word) dimensions its batches can have: the number of length
        buckets up to ``max_length``, squared (None without buckets or ``max_length``)."""
        if self.pad_to_multiple_of is None or self.max_length is None:
            return None
        return (-(-self.max_length // self.pad_to_multiple_of)) ** 2

    def bucket(self, length: int) -> int:
        """``length`` rounded up to its length bucket (itself without ``pad_to_multiple_of``)."""
        multiple = self.pad_to_multiple_of
        if multiple is None:
            return length
        rounded = -(-length // multiple) * multiple
        return min(rounded, max(length, self.max_length)) if self.max_length is not None else rounded

    def __call__(self, items: Sequence[tuple[int, EncodedUtterance]]) -> dict[str, torch.Tensor]:
        b = len(items)
        seq_len = max(len(e.input_ids) for _, e in items)
        if self.pad_to is not None:
            seq_len = max(seq_len, self.pad_to)
        seq_len = self.bucket(seq_len)
        n_words = self.bucket(max(1, max(len(e.word_index) for _, e in items)))
        input_ids = torch.full((b, seq_len), self.pad_values["input_ids"], dtype=torch.long)
        attention_mask = torch.zeros((b, seq_len), dtype=torch.long)
        word_index = torch.zeros((b, n_words), dtype=torch.long)
        word_mask = torch.zeros((b, n_words), dtype=torch.bool)
        slot_labels = torch.full((b, n_words), self.pad_values["slot_labels"], dtype=torch.long)
        for row, (_, e) in enumerate(items):
            n, w = len(e.input_ids), len(e.word_index)
            input_ids[row, :n] = torch.tensor(e.input_ids)
            attention_mask[row, :n] = 1
            word_index[row, :w] = torch.tensor(e.word_index, dtype=torch.long)
            word_mask[row, :w] = True
            slot_labels[row, :w] = torch.tensor(e.tag_ids, dtype=torch.long)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "word_index": word_index,
            "word_mask": word_mask,
            "slot_labels": slot_labels,
            "intent_labels": torch.tensor([e.intent_id for _, e in items], dtype=torch.long),
            "groups": torch.tensor([e.group for _, e in items], dtype=torch.long),
            "index": torch.tensor([i for i, _ in items], dtype=torch.long),
        }
