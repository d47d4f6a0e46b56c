"""SeqDrift n-gram features: the core paper's Table 1 / Table 2 examples, the n² indicator
weights, the document-frequency top-n cut and empty rows (paper section 3.2, appendix A)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from robustnlu.data.readers import load_corpus
from robustnlu.paths import shipped_config
from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError
from robustnlu.seqdrift.features import (
    build_features,
    slot_context_ngrams,
    slot_value_ngrams,
)

REPO = Path(__file__).resolve().parents[2]


def utt(text: str, tags: str, uid: str = "u") -> Utterance:
    return Utterance(uid, tuple(text.split()), tuple(tags.split()), "Intent")


# Paper Table 1 / Table 2.
PAPER = utt(
    "add song by too poetic to my piano-ballads playlist",
    "O B-SONG O B-ARTIST I-ARTIST O O B-PLAYLIST O",
)
COLLAPSED = "add B-SONG by B-ARTIST to my B-PLAYLIST playlist".split()
LABEL_AT = {1, 3, 6}  # positions of the slot symbols in COLLAPSED


def grams(*texts: str) -> set[tuple[str, ...]]:
    return {tuple(t.split()) for t in texts}


def test_slot_value_paper_example() -> None:
    assert slot_value_ngrams(PAPER, 1, 6) == grams("song", "too", "poetic", "too poetic",
                                                   "piano-ballads")
    assert slot_value_ngrams(PAPER, 2, 6) == grams("too poetic")
    assert slot_value_ngrams(PAPER, 1, 1) == grams("song", "too", "poetic", "piano-ballads")


def test_slot_value_ngrams_stay_inside_each_span() -> None:
    # two adjacent spans: no n-gram may cross from "new york" into "tomorrow morning"
    u = utt("fly new york tomorrow morning", "O B-city I-city B-time I-time")
    assert slot_value_ngrams(u, 2, 6) == grams("new york", "tomorrow morning")
    # an I- tag of another type (invalid BIO) starts a new span (conlleval convention)
    v = utt("new york today", "B-city I-city I-time")
    assert slot_value_ngrams(v, 1, 6) == grams("new", "york", "new york", "today")


def brute_force_context(n_min: int, n_max: int) -> set[tuple[str, ...]]:
    """Independent enumeration over COLLAPSED: windows that overlap a label position."""
    out = set()
    for n in range(n_min, n_max + 1):
        for i in range(len(COLLAPSED) - n + 1):
            if LABEL_AT & set(range(i, i + n)):
                out.add(tuple(COLLAPSED[i : i + n]))
    return out


def test_slot_context_paper_example() -> None:
    feats = slot_context_ngrams(PAPER, 2, 6)
    assert grams("add B-SONG by B-ARTIST", "to my B-PLAYLIST") <= feats
    assert ("to", "my") not in feats
    assert feats == brute_force_context(2, 6)
    # 7+6+5+4+3 = 25 windows of an 8-symbol sequence, of which only "to my" has no label
    assert len(feats) == 24
    assert slot_context_ngrams(PAPER, 2, 2) == grams(
        "add B-SONG", "B-SONG by", "by B-ARTIST", "B-ARTIST to", "my B-PLAYLIST",
        "B-PLAYLIST playlist",
    )
    assert slot_context_ngrams(PAPER, 1, 6) == brute_force_context(1, 6)
    assert slot_context_ngrams(PAPER, 1, 1) == grams("B-SONG", "B-ARTIST", "B-PLAYLIST")


def test_slot_context_keeps_label_case_and_position() -> None:
    u = utt("flights to new york", "O O B-toloc.city_name I-toloc.city_name")
    assert slot_context_ngrams(u, 2, 3) == grams("to B-toloc.city_name",
                                                 "flights to B-toloc.city_name")
    # a token that merely reads like a label is not a slot symbol
    v = utt("say B-SONG now", "O O O")
    assert slot_context_ngrams(v, 1, 3) == set()


def test_bad_sizes_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        slot_value_ngrams(PAPER, 0, 3)
    with pytest.raises(ConfigError):
        slot_context_ngrams(PAPER, 3, 2)
    with pytest.raises(ConfigError):
        build_features([PAPER], "slot_words", 2, 6, 10)  # type: ignore[arg-type]


def test_matrix_entries_are_n_squared_indicators() -> None:
    feats = build_features([PAPER], "slot_context", 2, 6, 10_000)
    m = feats.matrix
    assert m.dtype == np.float64 and m.shape == (1, 24) and m.nnz == 24
    col = {g: k for k, g in enumerate(feats.vocabulary)}
    assert m[0, col[("add", "B-SONG", "by", "B-ARTIST")]] == 16
    assert m[0, col[("to", "my", "B-PLAYLIST")]] == 9
    assert m[0, col[("B-SONG", "by")]] == 4
    assert m[0, col[("add", "B-SONG", "by", "B-ARTIST", "to", "my")]] == 36
    # indicator, not count: the same value twice in one utterance still weighs n²
    twice = utt("from new york to new york", "O B-city I-city O B-city I-city")
    f2 = build_features([twice], "slot_value", 2, 6, 10)
    assert f2.vocabulary == [("new", "york")] and f2.matrix.toarray().tolist() == [[4.0]]


def test_top_n_by_document_frequency_with_deterministic_ties() -> None:
    corpus = [
        # ("la", "la") occurs three times, but in one utterance only
        utt("play la la la la by abba", "O B-song I-song I-song I-song O B-artist"),
        utt("play new york by abba", "O B-city I-city O B-artist"),
        utt("fly new york", "O B-city I-city"),
        utt("go new york now", "O B-city I-city O"),
        utt("visit san jose", "O B-city I-city"),
        utt("to san jose", "O B-city I-city"),
        utt("hear the beatles", "O B-artist I-artist"),
        utt("hear the", "O O"),
    ]
    f = build_features(corpus, "slot_value", 2, 2, 3)
    # document frequencies: new york 3, san jose 2, la la 1, the beatles 1 -> tie broken by tuple
    assert f.vocabulary == [("new", "york"), ("san", "jose"), ("la", "la")]
    assert f.matrix.toarray()[:, 2].tolist() == [4, 0, 0, 0, 0, 0, 0, 0]
    assert f.empty_rows.tolist() == [False, False, False, False, False, False, True, True]
    assert f.kind == "slot_value"
    shuffled = build_features(corpus[::-1], "slot_value", 2, 2, 3)
    assert shuffled.vocabulary == f.vocabulary
    np.testing.assert_array_equal(shuffled.matrix.toarray(), f.matrix.toarray()[::-1])


def test_empty_rows_flag_featureless_utterances() -> None:
    corpus = [
        PAPER,
        utt("play abba", "O B-artist"),  # only a single-token value: no 2-gram
        utt("hello there", "O O"),  # no slot at all
    ]
    sv = build_features(corpus, "slot_value", 2, 6, 100)
    assert sv.empty_rows.tolist() == [False, True, True]
    sc = build_features(corpus, "slot_context", 2, 6, 100)
    assert sc.empty_rows.tolist() == [False, False, True]
    assert build_features(corpus, "slot_value", 1, 6, 100).empty_rows.tolist() == [
        False, False, True
    ]


def test_atis_matrix_matches_a_set_based_recount() -> None:
    corpus = load_corpus(shipped_config("dataset", "atis")).all()
    top_n = 2_000
    f = build_features(corpus, "slot_context", 2, 6, top_n)
    per_utt = [slot_context_ngrams(u, 2, 6) for u in corpus]
    df = Counter(g for s in per_utt for g in s)
    ranked = sorted(df, key=lambda g: (-df[g], g))
    assert f.vocabulary == ranked[:top_n]
    assert f.matrix.shape == (len(corpus), top_n)
    col_df = np.diff(f.matrix.tocsc().indptr)
    assert col_df.tolist() == [df[g] for g in f.vocabulary]
    column = {g: k for k, g in enumerate(f.vocabulary)}
    for i in random.Random(0).sample(range(len(corpus)), 200):
        row = f.matrix.getrow(i)
        assert set(row.indices) == {column[g] for g in per_utt[i] if g in column}
        assert all(v == len(f.vocabulary[c]) ** 2 for c, v in zip(row.indices, row.data))
    assert f.empty_rows.tolist() == [not any(g in column for g in s) for s in per_utt]
