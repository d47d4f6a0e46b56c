"""Casing noise (paper 002, section 3): the shared noise properties, hand-computed examples,
and the uncased-tokenizer check."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError
from robustnlu.noise.base import TARGET_TOKENS
from robustnlu.noise.casing import Casing, tokenizer_ignores_case
from tests.noise.strategies import assert_noise_properties, utterances

U = Utterance("u1", ("book", "a", "flight", "to", "San", "Jose", "st."), ("O", "O", "O", "O", "B-city", "I-city", "O"),
              "book_flight")


@pytest.mark.parametrize("target_tokens", TARGET_TOKENS)
@pytest.mark.parametrize("unit", ["token", "utterance"])
@pytest.mark.parametrize("style", ["upper", "title"])
@settings(max_examples=100, deadline=None)
@given(u=utterances(), seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.1, 0.5, 1.0]))
def test_noise_properties(style, unit, target_tokens, u, seed, rate):
    make = functools.partial(Casing, unit=unit, style=style, target_tokens=target_tokens)
    out = assert_noise_properties(make, u, seed, rate)
    assert out.tags == u.tags  # casing is 1→1
    assert [t.lower() for t in out.tokens] == [t.lower() for t in u.tokens]


def test_utterance_unit_rate_one_upper_cases_every_token():
    out = Casing(rate=1.0, unit="utterance", style="upper")(U)
    assert out.tokens == ("BOOK", "A", "FLIGHT", "TO", "SAN", "JOSE", "ST.")
    assert out.tags == U.tags


def test_token_unit_rate_one_equals_utterance_unit():
    assert Casing(rate=1.0, unit="token")(U) == Casing(rate=1.0, unit="utterance")(U)


def test_title_and_lower_styles():
    up = Utterance("u2", ("BOOK", "nyc", "st.", "o'clock"), ("O", "B-city", "O", "O"), "x")
    assert Casing(rate=1.0, style="title")(up).tokens == ("Book", "Nyc", "St.", "O'clock")
    assert Casing(rate=1.0, style="lower")(up).tokens == ("book", "nyc", "st.", "o'clock")


def test_carrier_only_leaves_slot_values():
    out = Casing(rate=1.0, target_tokens="carrier")(U)
    assert out.tokens == ("BOOK", "A", "FLIGHT", "TO", "San", "Jose", "ST.")
    out = Casing(rate=1.0, target_tokens="slots")(U)
    assert out.tokens == ("book", "a", "flight", "to", "SAN", "JOSE", "st.")


def test_utterance_unit_is_all_or_nothing():
    us = [Utterance(f"u{i}", ("play", "some", "music", "now"), ("O",) * 4, "play_music") for i in range(400)]
    outs = [Casing(rate=0.5, unit="utterance")(u).tokens for u in us]
    assert all(t in (("play", "some", "music", "now"), ("PLAY", "SOME", "MUSIC", "NOW")) for t in outs)
    upper = sum(t[0] == "PLAY" for t in outs)
    assert 140 < upper < 260  # Binomial(400, 0.5): mean 200, sd 10


def test_token_unit_rate():
    # Binomial(8000, 0.5): sd 0.0056 of the fraction; 0.03 is > 5 sd
    us = [Utterance(f"u{i}", ("play", "some", "music", "now"), ("O",) * 4, "play_music") for i in range(2000)]
    changed = sum(t.isupper() for u in us for t in Casing(rate=0.5)(u).tokens)
    assert abs(changed / 8000 - 0.5) < 0.03


def test_bad_config():
    with pytest.raises(ConfigError):
        Casing(unit="word")
    with pytest.raises(ConfigError):
        Casing(style="random")
    assert Casing(seed=3).config() == {"name": "casing", "rate": 0.5, "target_tokens": "all", "seed": 3,
                                       "unit": "token", "style": "upper"}


def test_tokenizer_ignores_case_uncased(tokenizer):
    # the tiny test tokenizer borrows the embedded (uncased) all-MiniLM-L6-v2 tokenizer
    assert tokenizer("WOULD", add_special_tokens=False)["input_ids"] == \
        tokenizer("would", add_special_tokens=False)["input_ids"]
    assert tokenizer_ignores_case(tokenizer)


def test_tokenizer_ignores_case_cased():
    from transformers import AutoTokenizer

    from robustnlu.model.encoders import embedded_model_path

    cased = AutoTokenizer.from_pretrained(embedded_model_path(), use_fast=True, do_lower_case=False)
    assert not tokenizer_ignores_case(cased)


def test_tokenizer_ignores_case_one_survivor_does_not_decide():
    class FakeTokenizer:  # case-blind on the first probe text only
        calls = 0

        def __call__(self, text, add_special_tokens=False):
            self.calls += 1
            if self.calls <= 2:
                return {"input_ids": [len(w) for w in text.split()]}
            return {"input_ids": [ord(c) for c in text]}

    assert not tokenizer_ignores_case(FakeTokenizer())
