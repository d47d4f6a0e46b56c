"""Tokenisation/alignment, dynamic padding, deterministic and length-bucketed batching."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from robustnlu.data.collate import Collator, encode_utterances
from robustnlu.data.datamodule import ShuffledBatchSampler
from robustnlu.data.utterance import LabelVocab, Utterance


def test_first_subtoken_alignment(tokenizer):
    u = Utterance("u", ("play", "unbelievably", "adele"), ("O", "B-x", "B-artist"), "Play")
    vocab = LabelVocab.from_utterances([u])
    (e,) = encode_utterances([u], tokenizer, vocab, max_length=64)
    pieces = tokenizer.convert_ids_to_tokens(e.input_ids)
    # each word's index points at its first sub-token; continuation pieces start with ##
    assert [pieces[i] for i in e.word_index] == [tokenizer.tokenize(w)[0] for w in u.tokens]
    assert len(tokenizer.tokenize("unbelievably")) > 1  # the case is a real multi-piece word
    assert e.tag_ids == vocab.tag_ids(u.tags)


def test_truncated_words_are_dropped_and_unseen_labels_ignored(tokenizer):
    train = [Utterance("t", ("a",), ("B-known",), "Known")]
    vocab = LabelVocab.from_utterances(train)
    u = Utterance("u", tuple("w%d" % i for i in range(20)), ("B-new",) + ("O",) * 19, "Unseen")
    with pytest.warns(UserWarning, match="1 of 1 utterances are longer than max_length=8"):
        (e,) = encode_utterances([u], tokenizer, vocab, max_length=8)
    assert len(e.input_ids) == 8
    assert 0 < len(e.word_index) < 20 and len(e.tag_ids) == len(e.word_index)
    assert e.tag_ids[0] == -100 and e.intent_id == -100


def test_utterances_longer_than_max_length_get_one_warning(tokenizer):
    """Never cut silently: one warning with the count and the first one's file:line."""
    words = tuple(f"w{i}" for i in range(20))
    utts = [Utterance("s", ("a", "b"), ("O", "O"), "X", source="data/x.jsonl:1"),
            Utterance("l1", words, ("O",) * 20, "X", source="data/x.jsonl:2"),
            Utterance("l2", words, ("O",) * 20, "X", source="data/x.jsonl:5")]
    vocab = LabelVocab.from_utterances(utts)
    with pytest.warns(UserWarning) as record:
        encode_utterances(utts, tokenizer, vocab, max_length=8)
    assert [str(w.message) for w in record] == [
        "2 of 3 utterances are longer than max_length=8 sub-tokens: their words past it are not trained on and are "
        "predicted O (first: data/x.jsonl:2, 20 words)"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encode_utterances(utts, tokenizer, vocab, max_length=64)  # all fit: no warning


def test_word_without_subtokens_borrows_previous_position(tokenizer):
    u = Utterance("u", ("play", "\u200b", "adele"), ("O", "O", "B-artist"), "Play")
    vocab = LabelVocab.from_utterances([u])
    (e,) = encode_utterances([u], tokenizer, vocab, max_length=64)
    assert tokenizer.tokenize("\u200b") == []
    assert len(e.word_index) == 3 and e.word_index[1] == e.word_index[0]


def test_dynamic_padding_pads_to_the_batch_longest_and_fixed_padding_to_pad_to(tokenizer):
    utts = [Utterance(f"u{i}", ("hello",) * n, ("O",) * n, "I") for i, n in enumerate((1, 4, 2))]
    vocab = LabelVocab.from_utterances(utts)
    items = list(enumerate(encode_utterances(utts, tokenizer, vocab, max_length=64)))
    batch = Collator(tokenizer.pad_token_id)(items)
    assert batch["input_ids"].shape == (3, 4 + 2)  # [CLS] + 4 words + [SEP]
    assert batch["attention_mask"].sum(1).tolist() == [3, 6, 4]
    assert batch["word_mask"].sum(1).tolist() == [1, 4, 2]
    assert batch["slot_labels"][0, 1:].tolist() == [-100, -100, -100]
    fixed = Collator(tokenizer.pad_token_id, pad_to=50)(items)
    assert fixed["input_ids"].shape == (3, 50)


@pytest.mark.parametrize("bucketed", [False, True])
def test_batches_are_a_seeded_partition_that_changes_per_epoch(bucketed):
    lengths = np.random.default_rng(0).integers(3, 40, size=203).tolist()
    a = ShuffledBatchSampler(lengths, 16, seed=7, bucketed=bucketed)
    b = ShuffledBatchSampler(lengths, 16, seed=7, bucketed=bucketed)
    epoch0, epoch1 = list(a), list(a)
    assert epoch0 == list(b) and epoch1 == list(b)  # same seed → same order, epoch by epoch
    assert epoch0 != epoch1  # a new order each epoch
    assert sorted(i for batch in epoch0 for i in batch) == list(range(203))
    assert len(epoch0) == len(a) == 13
    assert list(ShuffledBatchSampler(lengths, 16, seed=8, bucketed=bucketed)) != epoch0
    a.resume_at(0)
    assert list(a) == epoch0  # resume_at replays an epoch (resume)


def test_a_mid_epoch_position_resumes_with_the_batches_the_epoch_had_left():
    lengths = list(range(3, 103))  # 100 examples, 7 batches of 16
    straight = ShuffledBatchSampler(lengths, 16, seed=3)
    epochs = [list(straight) for _ in range(3)]
    interrupted = ShuffledBatchSampler(lengths, 16, seed=3)
    list(interrupted)
    iter(interrupted)  # epoch 1 under way ...
    assert interrupted.position(4) == (1, 4)  # ... 4 of its batches trained when the checkpoint is written
    assert interrupted.position(7) == (2, 0)  # (an end-of-epoch checkpoint: the next epoch)
    resumed = ShuffledBatchSampler(lengths, 16, seed=3)
    resumed.resume_at(*interrupted.position(4))
    assert resumed.position(0) == (1, 4)  # a checkpoint before the first iteration keeps the position
    assert list(resumed) == epochs[1][4:]
    assert len(resumed) == 7  # Lightning counts the restored batches in
    assert resumed.position(5) == (1, 5) and list(resumed) == epochs[2]


def test_length_bucketing_reduces_padding():
    lengths = np.random.default_rng(1).integers(3, 60, size=3200)

    def padded_tokens(bucketed):
        sampler = ShuffledBatchSampler(lengths.tolist(), 32, seed=0, bucketed=bucketed)
        return sum(len(b) * lengths[b].max() for b in sampler)

    assert padded_tokens(True) < 0.7 * padded_tokens(False)
