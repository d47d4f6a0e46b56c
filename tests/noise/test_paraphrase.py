"""Paraphrase noise (paper 002, section 3, utterance level; ours: carrier swaps between training
templates of the same intent and slot types): the shared noise properties, templates, filling,
the unchanged cases, the utterance-level rate."""

from __future__ import annotations

from functools import partial

from pathlib import Path

import pytest
from hydra.utils import instantiate
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from robustnlu.paths import REPO_ROOT
from robustnlu.errors import ConfigError, RobustNLUError
from robustnlu.noise.paraphrase import Paraphrase, fill, split_template
from tests.noise.strategies import assert_noise_properties, slot_values, utt, utterances


utt = partial(utt, intent="book_flight")


CORPUS = [
    ("book a flight to boston", "O O O O B-city", "book_flight"),
    ("i need a plane ticket to new york", "O O O O O O B-city I-city", "book_flight"),
    ("BOOK A FLIGHT TO DENVER", "O O O O B-city", "book_flight"),  # same template as the first
    ("fly me from boston to denver", "O O O B-city O B-city", "book_flight"),
    ("book a flight at 7 pm from paris", "O O O O B-time I-time O B-city", "book_flight"),
    ("play something by adele", "O O O B-artist", "play_music"),
    ("put on the beatles", "O O B-artist I-artist", "play_music"),
    ("i d like to hear music by adele", "O O O O O O O B-artist", "play_music"),
    ("play music", "O O", "play_music"),
    ("play some music please", "O O O O", "play_music"),
    ("tomorrow morning play jazz by adele", "B-time I-time O O O B-artist", "play_music"),
    ("with adele at 7 pm play it", "O B-artist O B-time I-time O O", "play_music"),
]
TRAIN = [utt(text, tags, uid=f"t{i}", intent=intent) for i, (text, tags, intent) in enumerate(CORPUS)]


@pytest.fixture(scope="module")
def para():
    return Paraphrase(rate=1.0).fit(TRAIN)


@settings(max_examples=150, deadline=None)
@given(u=utterances(), seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.05, 0.15, 0.5, 1.0]))
def test_noise_properties(u, seed, rate):
    assert_noise_properties(lambda **kw: Paraphrase(**kw).fit(TRAIN), u, seed, rate)


@settings(max_examples=60, deadline=None)
@given(u=utterances(), seed=st.integers(0, 2**32 - 1))
def test_multiset_signature_keeps_the_slot_values(u, seed):
    out = Paraphrase(rate=1.0, seed=seed, signature="multiset").fit(TRAIN)(u)
    assert sorted(slot_values(out)) == sorted(slot_values(u))
    assert out.intent == u.intent


def test_templates(para):
    template, values = split_template(TRAIN[1])
    assert template == (("w", "i"), ("w", "need"), ("w", "a"), ("w", "plane"), ("w", "ticket"), ("w", "to"),
                        ("s", "city"))
    assert values == [("city", ("new", "york"))]
    # corpus order, one copy of each template (case-insensitive), own template excluded
    u = utt("book a flight to san jose", "O O O O B-city I-city")
    assert para.templates(u) == [split_template(TRAIN[1])[0]]
    assert para.templates(utt("i need a plane ticket to x", "O O O O O O B-city")) == [split_template(TRAIN[0])[0]]


def test_swaps_the_carrier_and_keeps_slot_values_and_tags(para):
    u = utt("book a flight to san jose", "O O O O B-city I-city")
    out = para(u)
    assert out.tokens == ("i", "need", "a", "plane", "ticket", "to", "san", "jose")
    assert out.tags == ("O", "O", "O", "O", "O", "O", "B-city", "I-city")
    assert (out.uid, out.intent) == (u.uid, u.intent)
    back = para(utt("i need a plane ticket to denver", "O O O O O O B-city"))
    assert back.tokens == ("book", "a", "flight", "to", "denver")  # the first spelling of the template


def test_values_fill_in_order_per_type(para):
    u = utt("from san jose to nyc please fly me", "O B-city I-city O B-city O O O")
    out = para(u)
    assert out.tokens == ("fly", "me", "from", "san", "jose", "to", "nyc")
    assert out.tags == ("O", "O", "O", "B-city", "I-city", "O", "B-city")


def test_unchanged_without_another_template(para):
    same_template = utt("book a flight to paris", "O O O O B-city", intent="play_music")  # no play_music+city
    assert para(same_template) == same_template
    only_own = utt("Fly me from rome to oslo", "O O O B-city O B-city")  # its own template only
    assert para(only_own) == only_own
    no_slots = utt("book a flight")  # book_flight with no slot: no template
    assert para(no_slots) == no_slots


def test_no_slot_templates_and_adjacent_spans(para):
    assert para(utt("play music", intent="play_music")).tokens == ("play", "some", "music", "please")
    u = utt("adele adele please", "B-artist B-artist O", intent="play_music")
    multi = Paraphrase(rate=1.0, signature="multiset").fit(TRAIN + [utt("hear a and b", "O B-artist O B-artist",
                                                                        intent="play_music")])
    out = multi(u)
    assert out.tokens == ("hear", "adele", "and", "adele") and out.tags == ("O", "B-artist", "O", "B-artist")
    assert para(u) == u


def test_multiset_signature_reorders_types():
    u = utt("play jazz by adele at 7 pm", "O O O B-artist O B-time I-time", intent="play_music")
    outs = {Paraphrase(rate=1.0, seed=s, signature="multiset").fit(TRAIN)(u) for s in range(20)}
    assert {o.tokens for o in outs} == {("7", "pm", "play", "jazz", "by", "adele"),
                                        ("with", "adele", "at", "7", "pm", "play", "it")}
    assert {o.tags for o in outs} == {("B-time", "I-time", "O", "O", "O", "B-artist"),
                                      ("O", "B-artist", "O", "B-time", "I-time", "O", "O")}
    # sequence signature (artist, time): only "with <artist> at <time> play it"
    assert {Paraphrase(rate=1.0, seed=s).fit(TRAIN)(u).tokens for s in range(20)} == {
        ("with", "adele", "at", "7", "pm", "play", "it")}


def test_fill():
    template, _ = split_template(TRAIN[3])
    u = utt("a b", "B-city B-city")
    assert fill(template, u).tokens == ("fly", "me", "from", "a", "to", "b")
    with pytest.raises(ValueError):
        fill(template, utt("a", "B-city"))
    with pytest.raises(ValueError):
        fill(template, utt("a b c", "B-city B-city B-city"))


def test_rate_is_per_utterance():
    p = Paraphrase(rate=0.15, seed=1).fit(TRAIN)
    us = [utt("book a flight to boston", "O O O O B-city", uid=f"x{i}") for i in range(2000)]
    changed = sum(p(u) != u for u in us) / len(us)
    assert 0.12 < changed < 0.18
    assert [p(u) for u in us[:50]] == [Paraphrase(rate=0.15, seed=1).fit(TRAIN)(u) for u in us[:50]]


def test_deterministic_template_order():
    a, b = Paraphrase().fit(TRAIN), Paraphrase().fit(list(TRAIN))
    assert a._templates == b._templates
    assert list(a._templates) == [("book_flight", ("city",)), ("book_flight", ("city", "city")),
                                  ("book_flight", ("time", "city")), ("play_music", ("artist",)),
                                  ("play_music", ()), ("play_music", ("time", "artist")),
                                  ("play_music", ("artist", "time"))]


def test_errors():
    with pytest.raises(RobustNLUError, match="fit"):
        Paraphrase(rate=1.0)(TRAIN[0])
    with pytest.raises(ConfigError):
        Paraphrase(signature="bag")
    with pytest.raises(ConfigError):
        Paraphrase(rate=1.5)


def test_hydra_config():
    t = instantiate(OmegaConf.load(Path(REPO_ROOT) / "conf" / "noise" / "paraphrase.yaml"), seed=5)
    assert isinstance(t, Paraphrase)
    assert t.config() == {"name": "paraphrase", "rate": 0.15, "target_tokens": "carrier", "seed": 5,
                          "signature": "sequence"}
