"""Hypothesis strategies and the property checks every noise transform must pass:
tags stay aligned (one per token, valid BIO), slot values are untouched in carrier-only mode,
a fixed seed gives identical output, rate 0 is the identity."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from robustnlu.data.bio import bio_problem
from robustnlu.data.utterance import Utterance
from robustnlu.data.bio import slot_spans
from robustnlu.noise.base import NoiseTransform

WORDS = ("book", "a", "flight", "from", "san", "jose", "to", "nyc", "please", "play", "music", "by",
         "the", "beatles", "tomorrow", "morning", "you", "are", "people", "tickets", "for", "at",
         "and", "with", "reserve", "flights", "booking", "weather", "in", "paris", "i", "d", "like",
         "playlist", "add", "song", "my", "cheapest", "fare", "as", "soon", "possible", "st.", "7", "pm")
SLOT_TYPES = ("city", "artist", "time")


@st.composite
def utterances(draw, words=WORDS) -> Utterance:
    """A random utterance of 1-14 tokens with valid BIO tags over `SLOT_TYPES`."""
    n = draw(st.integers(1, 14))
    tokens = draw(st.lists(st.sampled_from(words), min_size=n, max_size=n))
    tags: list[str] = []
    while len(tags) < n:
        if draw(st.booleans()):
            tags.append("O")
        else:
            typ = draw(st.sampled_from(SLOT_TYPES))
            length = draw(st.integers(1, n - len(tags)))
            tags += [f"B-{typ}"] + [f"I-{typ}"] * (length - 1)
    uid = draw(st.text("abcdef0123456789-", min_size=1, max_size=12))
    return Utterance(uid, tuple(tokens), tuple(tags), draw(st.sampled_from(("book_flight", "play_music"))))


def utt(text: str, tags: str | None = None, uid: str = "u1", intent: str = "x") -> Utterance:
    """An utterance from space-separated tokens and tags (all ``O`` when ``tags`` is None)."""
    tokens = tuple(text.split())
    return Utterance(uid, tokens, tuple(tags.split()) if tags else ("O",) * len(tokens), intent)


def slot_values(u: Utterance) -> list[tuple[str, tuple[str, ...]]]:
    """(type, value tokens) of every span, left to right."""
    return [(typ, u.tokens[s:e]) for typ, s, e in slot_spans(u.tags)]


def assert_noise_properties(make: Callable[..., NoiseTransform], u: Utterance, seed: int, rate: float) -> Utterance:
    """``make(rate=..., seed=...)`` builds a (fitted) transform. Checks the four properties on
    ``u`` and returns the noised utterance."""
    out = make(rate=rate, seed=seed)(u)
    assert len(out.tokens) == len(out.tags) and out.tokens, out
    assert bio_problem(out.tags) is None, out
    assert all(t and t.split() == [t] for t in out.tokens), out
    assert out.uid == u.uid and out.intent == u.intent
    assert make(rate=rate, seed=seed)(u) == out, "same seed, different output"
    assert make(rate=0.0, seed=seed)(u) == u, "rate 0 is not the identity"
    transform = make(rate=rate, seed=seed)
    if transform.target_tokens == "carrier":
        assert slot_values(out) == slot_values(u), (u, out)
    return out
