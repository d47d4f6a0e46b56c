"""The n-gram fluency scorer (robustnlu/noise/fluency.py): interpolated Kneser-Ney numbers
checked by hand on a two-sentence corpus, normalisation, fluent > scrambled, ranking."""

from __future__ import annotations

import math

import pytest

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, RobustNLUError
from robustnlu.noise.fluency import EOS, NGramFluency, apply_case

D = 0.75
TINY = [["a", "b"], ["a", "c"]]
# Padded: <s> <s> a b </s> and <s> <s> a c </s>.
# Trigram counts: (<s>,<s>,a)=2, (<s>,a,b)=1, (a,b,</s>)=1, (<s>,a,c)=1, (a,c,</s>)=1.
# Bigram continuation counts N1+(. v w): (<s>,a)=1, (a,b)=1, (a,c)=1, (b,</s>)=1, (c,</s>)=1.
# Unigram continuation counts N1+(. w): a=1 (<s>), b=1, c=1, </s>=2 (b, c); 5 bigram types,
# 4 word types; vocabulary a, b, c, </s>, <unk>: V = 5.
P1_A = (1 - D) / 5 + D * 4 / 5 / 5  # 0.05 + 0.12 = 0.17 (same for b and c)
P1_EOS = (2 - D) / 5 + D * 4 / 5 / 5  # 0.25 + 0.12 = 0.37
P1_UNK = D * 4 / 5 / 5  # 0.12
# P2(a|<s>): context <s> has N1+(. <s> .) = 1 over 1 type -> (1 - D)/1 + D*1/1 * P1(a)
P2_A_BOS = (1 - D) + D * P1_A  # 0.3775
# P3(a|<s>,<s>): c(<s> <s> .) = 2, 1 type -> (2 - D)/2 + D*1/2 * P2(a|<s>)
P3_A = (2 - D) / 2 + D / 2 * P2_A_BOS  # 0.7665625
# P2(b|a): context a has N1+ total 2 over 2 types -> (1 - D)/2 + D*2/2 * P1(b)
P2_B_A = (1 - D) / 2 + D * P1_A  # 0.2525
# P3(b|<s>,a): c(<s> a .) = 2, 2 types -> (1 - D)/2 + D*2/2 * P2(b|a)
P3_B = (1 - D) / 2 + D * P2_B_A  # 0.314375
# P2(</s>|b) = (1 - D)/1 + D * P1(</s>); P3(</s>|a,b) = (1 - D)/1 + D * P2(</s>|b)
P2_EOS_B = (1 - D) + D * P1_EOS  # 0.5275
P3_EOS = (1 - D) + D * P2_EOS_B  # 0.645625


@pytest.fixture(scope="module")
def tiny():
    return NGramFluency(order=3, discount=D).fit(TINY)


def test_hand_computed_probabilities(tiny):
    assert P3_A == pytest.approx(0.7665625) and P3_B == pytest.approx(0.314375) and P3_EOS == pytest.approx(0.645625)
    assert tiny.vocab_size == 5
    assert tiny.prob("a", ["<s>", "<s>"]) == pytest.approx(P3_A)
    assert tiny.prob("a") == pytest.approx(P3_A)  # a short context is padded with <s>
    assert tiny.prob("b", ["<s>", "a"]) == pytest.approx(P3_B)
    assert tiny.prob("b", ["a"]) == pytest.approx(P3_B)
    assert tiny.prob(EOS, ["a", "b"]) == pytest.approx(P3_EOS)
    # unseen context (x, y): backs off to unigram continuation probabilities
    assert tiny.prob("a", ["x", "y"]) == pytest.approx(P1_A)
    assert tiny.prob(EOS, ["x", "y"]) == pytest.approx(P1_EOS)
    assert tiny.prob("zebra", ["x", "y"]) == pytest.approx(P1_UNK)


def test_score_is_mean_log_probability(tiny):
    expected = (math.log(P3_A) + math.log(P3_B) + math.log(P3_EOS)) / 3
    assert tiny.logprobs(["a", "b"]) == pytest.approx([math.log(P3_A), math.log(P3_B), math.log(P3_EOS)])
    assert tiny.score(["a", "b"]) == pytest.approx(expected)
    assert tiny.score(["A", "B"]) == pytest.approx(expected)  # lower-cased


@pytest.mark.parametrize("context", [[], ["a"], ["<s>", "a"], ["a", "b"], ["x", "y"], ["a", "zebra"], ["b", "a"]])
def test_distributions_sum_to_one(tiny, context):
    total = sum(tiny.prob(w, context) for w in ["a", "b", "c", EOS, "anything-unseen"])
    assert total == pytest.approx(1.0)


@pytest.mark.parametrize("order", [1, 2, 4])
def test_other_orders_normalised(order):
    lm = NGramFluency(order=order).fit([["book", "a", "flight"], ["book", "a", "table"], ["play", "a", "song"]])
    vocab = ["book", "a", "flight", "table", "play", "song", EOS, "unseen"]
    for context in ([], ["book"], ["book", "a"], ["a", "table", "x"]):
        assert sum(lm.prob(w, context) for w in vocab) == pytest.approx(1.0)


CORPUS = [
    "book a flight from boston to denver",
    "book a flight to new york",
    "i want to book a flight to chicago",
    "play a song by the beatles",
    "play some music by adele",
    "what is the weather in paris tomorrow",
    "book a table for two at a restaurant",
    "show me flights from dallas to boston",
]


@pytest.fixture(scope="module")
def lm():
    return NGramFluency().fit([s.split() for s in CORPUS])


def test_fluent_beats_scrambled(lm):
    fluent = "book a flight to boston".split()
    scrambled = "flight boston a to book".split()
    assert lm.score(fluent) > lm.score(scrambled)
    assert lm.best([scrambled, fluent]) == 1
    assert lm.rank([scrambled, fluent]) == [1, 0]


def test_best_ties_go_to_the_first(lm):
    same = "play a song".split()
    assert lm.best([same, list(same), list(same)]) == 0
    # two unseen words get the same probability: a tie
    assert lm.best([["zzz"], ["qqq"]]) == 0
    assert lm.rank([["zzz"], ["qqq"], ["book", "a", "flight"]]) == [2, 0, 1]
    with pytest.raises(ValueError):
        lm.best([])


def test_fit_accepts_utterances():
    utts = [Utterance(str(i), tuple(s.split()), ("O",) * len(s.split()), "x") for i, s in enumerate(CORPUS)]
    a = NGramFluency().fit(utts)
    b = NGramFluency().fit([s.split() for s in CORPUS])
    assert a.score("book a flight".split()) == b.score("book a flight".split())


def test_errors():
    with pytest.raises(RobustNLUError):
        NGramFluency().score(["a"])
    with pytest.raises(RobustNLUError):
        NGramFluency().fit([])
    for kwargs in ({"order": 0}, {"order": 2.5}, {"discount": 0}, {"discount": 1.0}, {"discount": True}):
        with pytest.raises(ConfigError):
            NGramFluency(**kwargs)


def test_apply_case():
    assert apply_case("book", ["reserve"]) == ["reserve"]
    assert apply_case("Book", ["motion", "picture"]) == ["Motion", "picture"]
    assert apply_case("BOOK", ["motion", "picture"]) == ["MOTION", "PICTURE"]
    assert apply_case("I", ["me"]) == ["Me"]
