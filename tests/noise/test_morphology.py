"""Morphological-variant noise (paper 002, section 3, Table 1 "start booking a flight ..."): the
shared noise properties, lemminflect candidates, function words, fluency ranking."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from robustnlu.paths import REPO_ROOT
from robustnlu.errors import ConfigError, RobustNLUError
from robustnlu.noise.base import TARGET_TOKENS
from robustnlu.noise.morphology import AUX_FORMS, SKIP_WORDS, Morphology
from tests.noise.strategies import assert_noise_properties, utt, utterances



CORPUS = [
    ("booking a flight from boston to denver", "O O O O B-city O B-city"),
    ("i am booking a table for two", "O O O O O O B-n"),
    ("what are the flights to chicago", "O O O O O B-city"),
    ("play the songs by adele", "O O O O B-artist"),
]
TRAIN = [utt(text, tags, uid=f"t{i}") for i, (text, tags) in enumerate(CORPUS)]
FLIGHT = utt("book a flight from san jose to nyc", "O O B-item O B-fromloc I-fromloc O B-toloc")


@pytest.fixture(scope="module")
def morph():
    return Morphology(rate=1.0).fit(TRAIN)


@pytest.mark.parametrize("target_tokens", TARGET_TOKENS)
@settings(max_examples=40, deadline=None)
@given(u=utterances(), seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.1, 0.5, 1.0]))
def test_noise_properties(target_tokens, u, seed, rate):
    assert_noise_properties(lambda **kw: Morphology(target_tokens=target_tokens, **kw).fit(TRAIN), u, seed, rate)


def test_candidates_are_the_other_inflections(morph):
    # NOUN book -> books; VERB book -> booked, booking, books (deduplicated, lemminflect order)
    assert morph.candidates("book") == (("books",), ("booked",), ("booking",))
    assert set(morph.candidates("booking")) == {("bookings",), ("booked",), ("books",), ("book",)}
    assert morph.candidates("flights") == (("flight",),)
    assert morph.candidates("cheap") == (("cheaper",), ("cheapest",))
    assert {("went",), ("goes",), ("going",), ("gone",)} <= set(morph.candidates("go"))
    assert morph.candidates("Book") == morph.candidates("book")


def test_auxiliaries_change_but_function_words_do_not(morph):
    assert {("are",), ("was",), ("were",), ("am",), ("be",)} <= set(morph.candidates("is"))
    assert ("doe",) not in morph.candidates("does") and ("did",) in morph.candidates("does")
    assert ("has",) in morph.candidates("have")
    for word in ("me", "i", "the", "a", "to", "please", "can", "will", "one", "d", "st.", "7"):
        assert morph.candidates(word) == (), word
    assert "is" in AUX_FORMS and "is" not in SKIP_WORDS and "me" in SKIP_WORDS
    assert morph.candidates("zxqvblorp") == ()  # unknown to lemminflect


def test_book_becomes_an_inflection_the_lm_prefers(morph):
    # only "book" is an eligible carrier token; the corpus says "booking a flight ..."
    out = morph(FLIGHT)
    assert out.tokens == ("booking", *FLIGHT.tokens[1:]) and out.tags == FLIGHT.tags
    assert (out.tokens[0],) in morph.candidates("book")


def test_auxiliary_agreement_and_plural(morph):
    out = morph(utt("what is the flight to nyc", "O O O B-x O B-y"))
    assert out.tokens == ("what", "are", "the", "flight", "to", "nyc")
    out = morph(utt("play the song by adele", "B-a O O O B-artist"))
    assert out.tokens == ("play", "the", "songs", "by", "adele") and out.tags == ("B-a", "O", "O", "O", "B-artist")


def test_casing_and_slots(morph):
    assert morph(utt("BOOK a x", "O O B-y")).tokens[0] == "BOOKING"
    slots = Morphology(rate=1.0, target_tokens="slots").fit(TRAIN)
    out = slots(utt("book flights", "O B-item"))
    assert out.tokens == ("book", "flight") and out.tags == ("O", "B-item")


def test_top_k_and_determinism():
    outs = {Morphology(rate=1.0, top_k=3, seed=s).fit(TRAIN)(FLIGHT).tokens[0] for s in range(30)}
    assert len(outs) > 1 and outs <= {"books", "booked", "booking"}
    assert Morphology(rate=0.5, seed=3).fit(TRAIN)(FLIGHT) == Morphology(rate=0.5, seed=3).fit(TRAIN)(FLIGHT)


def test_errors():
    with pytest.raises(RobustNLUError, match="fit"):
        Morphology(rate=1.0)(FLIGHT)
    for kwargs in ({"top_k": 0}, {"rate": -0.1}, {"target_tokens": "nope"}):
        with pytest.raises(ConfigError):
            Morphology(**kwargs)


def test_hydra_config():
    t = instantiate(OmegaConf.load(Path(REPO_ROOT) / "conf" / "noise" / "morphology.yaml"), seed=5)
    assert isinstance(t, Morphology)
    assert t.config() == {"name": "morphology", "rate": 0.1, "target_tokens": "carrier", "seed": 5, "top_k": 1}
