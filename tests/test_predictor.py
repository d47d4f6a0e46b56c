"""`Predictor` on a randomly initialised tiny JointBERT (no training needed): it batches utterances
of similar length, so it computes less padding, and answers each utterance in the input's order
as it answers it alone."""

from __future__ import annotations

import pytest
import torch

from robustnlu.data.utterance import LabelVocab
from robustnlu.model.encoders import build_encoder, load_tokenizer
from robustnlu.model.trained import build_jointbert
from robustnlu.predictor import Predictor, text_utterances

#: conf/encoder/tiny.yaml
TINY = {"kind": "tiny", "hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 128}
#: words that are one sub-word token each in the tiny encoder's (MiniLM's) vocabulary
WORDS = ["play", "music", "book", "table", "song", "weather", "rain", "movie", "city", "today"]


def predictor(crf: bool) -> Predictor:
    torch.manual_seed(0)
    tokenizer = load_tokenizer(TINY)
    vocab = LabelVocab(("AddToPlaylist", "BookRestaurant", "GetWeather"), ("O", "B-city", "I-city", "B-music", "I-music"))
    model = build_jointbert({"dropout": 0.1, "crf": crf}, vocab, {}, build_encoder(TINY, tokenizer.vocab_size))
    return Predictor(model, vocab, tokenizer)


@pytest.mark.parametrize("crf", [False, True])
def test_batches_by_length_pad_less_and_answers_keep_the_input_order(crf):
    p = predictor(crf)
    words = [1, 10, 2, 9, 1, 10]
    texts = [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(n)) for i, n in enumerate(words)]
    utterances = text_utterances(texts)
    assert [len(ids) for ids in p.tokenizer(texts)["input_ids"]] == [n + 2 for n in words]  # with [CLS], [SEP]
    shapes = []
    collate = p.collate
    p.collate = lambda items: shapes.append(tuple(collate(items)["input_ids"].shape)) or collate(items)
    answers = p.predict_utterances(utterances, batch_size=2)
    # by length: tokens (3, 3), (4, 11), (12, 12) -> 2·3 + 2·11 + 2·12 = 52 computed, where the
    # input's order, (3, 12), (4, 11), (3, 12), pads to 2·12 + 2·11 + 2·12 = 70
    assert shapes == [(2, 3), (2, 11), (2, 12)]
    p.collate = collate
    assert answers == [p.predict_utterances([u], batch_size=1)[0] for u in utterances]
    assert [len(tags) for _, tags in answers] == words
