"""Synonym noise (paper 002, section 3, Table 1 "reserve a flight ..."): the shipped WordNet 3.0,
the shared noise properties, WordNet candidates, re-inflection, 1→n tags and fluency ranking."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from robustnlu.paths import REPO_ROOT
from robustnlu.errors import ConfigError, DataError, RobustNLUError
from robustnlu.noise.base import TARGET_TOKENS
from robustnlu.noise.synonym import FUNCTION_WORDS, Synonym, inflect, inflection_tag
from robustnlu.noise.wordnet import load_wordnet
from tests.noise.strategies import assert_noise_properties, utt, utterances



CORPUS = [
    ("reserve a flight from boston to denver", "O O O O B-city O B-city"),
    ("reserve a table for two", "O O O O B-n"),
    ("i want to reserve a flight to chicago", "O O O O O O O B-city"),
    ("play the motion picture trailer", "O O O O O"),
    ("show me the motion picture times", "O O O O O O"),
    ("show me films at the cinema", "O O O O O O"),
    ("play a vocals playlist", "O O O O"),
    ("i am reserving a table", "O O O O O"),
]
TRAIN = [utt(text, tags, uid=f"t{i}") for i, (text, tags) in enumerate(CORPUS)]
FLIGHT = utt("book a flight from san jose to nyc", "O O B-item O B-fromloc I-fromloc O B-toloc")


@pytest.fixture(scope="module")
def wn():
    return load_wordnet()  # ~5 s once per process; Synonym.fit reuses the cached reader


@pytest.fixture(scope="module")
def syn(wn):
    return Synonym(rate=1.0).fit(TRAIN)


def test_shipped_wordnet_is_3_0(wn):
    assert wn.get_version() == "3.0"
    # WordNet 3.0 statistics (wnstats(7WN)): 117,798 noun and 11,529 verb lemmas
    assert sum(1 for _ in wn.all_lemma_names("n")) == 117798
    assert sum(1 for _ in wn.all_lemma_names("v")) == 11529
    assert (len(wn.synsets("book", "n")), len(wn.synsets("book", "v"))) == (11, 4)
    assert wn.synset("reserve.v.04").lemma_names() == ["reserve", "hold", "book"]
    assert wn.morphy("flights", "n") == "flight" and wn.morphy("booking", "v") == "book"
    assert load_wordnet() is wn
    assert (REPO_ROOT / "data" / "nltk_data" / "LICENSE-wordnet").is_file()


def test_missing_wordnet_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="wordnet.zip"):
        load_wordnet(tmp_path)
    with pytest.raises(DataError):
        Synonym(data_dir=str(tmp_path)).fit(TRAIN)


@pytest.mark.parametrize("target_tokens", TARGET_TOKENS)
@settings(max_examples=25, deadline=None)
@given(u=utterances(), seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.1, 0.5, 1.0]))
def test_noise_properties(wn, target_tokens, u, seed, rate):
    assert_noise_properties(lambda **kw: Synonym(target_tokens=target_tokens, **kw).fit(TRAIN), u, seed, rate)


def test_candidates_from_wordnet(syn):
    # independent expectations: WordNet 3.0 verb "book" sense 2 is {reserve, hold, book}
    assert ("reserve",) in syn.candidates("book") and ("hold",) in syn.candidates("book")
    assert ("volume",) in syn.candidates("book")  # noun book.n.02 {volume}: no POS tagger
    assert syn.candidates("Book") == syn.candidates("book")
    # a name containing the word itself is no synonym change (record_book)
    assert all("book" not in c for c in syn.candidates("book"))
    assert syn.candidates("song") == (("vocal",), ("strain",))


def test_candidates_are_reinflected(syn):
    assert ("vocals",) in syn.candidates("songs")  # NNS
    assert ("films",) in syn.candidates("movies") and ("motion", "pictures") in syn.candidates("movies")
    assert ("reserving",) in syn.candidates("booking")  # VBG
    assert ("reserved",) in syn.candidates("booked")  # VBD
    assert ("more", "inexpensive") in syn.candidates("cheaper")  # JJR, periphrastic
    assert inflection_tag("flights", "flight", "n") == "NNS"
    assert inflection_tag("book", "book", "v") is None
    assert inflect(["look", "up"], "VBG", "v") == ["looking", "up"]
    assert inflect(["flight", "of", "stairs"], "NNS", "n") == ["flights", "of", "stairs"]
    assert inflect(["air", "travel"], None, "n") == ["air", "travel"]


@pytest.mark.parametrize("word", ["a", "in", "i", "it", "be", "is", "please", "one", "to", "d", "st.", "7", "i'd"])
def test_function_words_and_non_words_have_no_candidates(syn, word):
    assert syn.candidates(word) == ()


def test_function_word_list():
    assert {"a", "in", "i", "be", "it"} <= FUNCTION_WORDS
    assert not {"book", "flight", "play", "reserve"} & FUNCTION_WORDS


def test_book_a_flight_becomes_reserve(syn):
    # Only "book" is an eligible carrier token ("a", "from", "to" are function words).
    out = syn(FLIGHT)
    assert out.tokens == ("reserve", *FLIGHT.tokens[1:]) and out.tags == FLIGHT.tags
    # the choice is the LM's most fluent candidate
    cands = syn.candidates("book")
    scores = [syn.lm.score([*c, *FLIGHT.tokens[1:]]) for c in cands]
    assert cands[scores.index(max(scores))] == ("reserve",)


def test_casing_follows_the_original(syn):
    assert syn(utt("Book a flight", "O O B-x")).tokens[0] == "Reserve"
    assert syn(utt("BOOK A FLIGHT", "O O B-x")).tokens[:2] == ("RESERVE", "A")


def test_plural_synonym(syn):
    out = syn(utt("play some songs", "B-act O O"))
    assert out.tokens == ("play", "some", "vocals") and out.tags == ("B-act", "O", "O")
    assert syn(utt("show me movies", "B-a I-a O")).tokens == ("show", "me", "films")


def test_multi_word_synonym_is_one_to_n(wn):
    slots = Synonym(rate=1.0, target_tokens="slots").fit(TRAIN)
    out = slots(utt("play the movie", "O O B-object_type"))
    assert out.tokens == ("play", "the", "motion", "picture")
    assert out.tags == ("O", "O", "B-object_type", "I-object_type")
    out = slots(utt("the movie", "B-object_type I-object_type"))  # I-X -> I-X I-X
    assert out.tokens == ("the", "motion", "picture")
    assert out.tags == ("B-object_type", "I-object_type", "I-object_type")


def test_rate_zero_and_unknown_words(syn):
    assert Synonym(rate=0.0).fit(TRAIN)(FLIGHT) == FLIGHT
    u = utt("zxqv blorp")
    assert syn(u) == u


def test_top_k_samples_among_the_most_fluent(wn):
    cands = Synonym(rate=1.0).fit(TRAIN).candidates("book")
    seen = set()
    for seed in range(20):
        out = Synonym(rate=1.0, top_k=2, seed=seed).fit(TRAIN)(FLIGHT)
        assert out == Synonym(rate=1.0, top_k=2, seed=seed).fit(TRAIN)(FLIGHT)
        seen.add((out.tokens[0],))
    assert len(seen) == 2 and seen <= set(cands)


def test_errors():
    with pytest.raises(RobustNLUError, match="fit"):
        Synonym(rate=1.0)(FLIGHT)
    for kwargs in ({"max_senses": 0}, {"top_k": 0}, {"rate": 2}, {"target_tokens": "nope"}):
        with pytest.raises(ConfigError):
            Synonym(**kwargs)


def test_hydra_config():
    cfg = OmegaConf.load(Path(REPO_ROOT) / "conf" / "noise" / "synonym.yaml")
    t = instantiate(cfg, seed=5)
    assert isinstance(t, Synonym)
    assert t.config() == {"name": "synonym", "rate": 0.1, "target_tokens": "carrier", "seed": 5, "top_k": 1,
                          "max_senses": 3}
