"""Synthetic misspellings (paper 002, App. A.7 / Table 5): the shared noise properties, the
edit-type frequencies, QWERTY neighbours, case, the token-level rate and the impossible-edit rule."""

from __future__ import annotations

import functools
import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError
from robustnlu.noise.base import TARGET_TOKENS
from robustnlu.noise.misspelling import EDIT_TYPES, QWERTY_NEIGHBOURS, TABLE5_EDIT_PROBS, Misspelling
from tests.noise.strategies import assert_noise_properties, utterances

# Written by hand from a US keyboard, independently of the geometry in misspelling.py: the keys
# left/right, and the two keys touching each one in the row above and in the row below.
HAND_NEIGHBOURS = {
    "d": set("sferxc"),  # the paper's d → f, s, e, c plus the diagonals r, x
    "o": set("ip90kl"),  # 'Bo0k' (paper 002, section 3)
    "a": set("qwsz"),
    "g": set("fhtyvb"),
    "m": set("njk"),
    "q": set("12wa"),
    "5": set("46rt"),
    "p": set("o0l"),
}
HAND_WORDS = ("dog", "god", "mad", "gamma", "ado", "goad", "dam", "map", "mop", "pod", "5am", "DOG", "Mad", "qapo")

WORDS = ("flights", "list", "from", "vegas", "phoenix", "book", "reserve", "weather", "tomorrow", "music",
         "play", "please", "cheapest", "morning", "restaurant", "reminder", "boston", "denver", "airline", "fare")


def diff_kind(old: str, new: str) -> tuple[str, int, str] | None:
    """(edit type, anchor index in old, new character) when ``new`` is one edit of ``old``."""
    if len(new) == len(old):
        diffs = [i for i in range(len(old)) if old[i] != new[i]]
        if len(diffs) == 1:
            return "substitution", diffs[0], new[diffs[0]]
        if len(diffs) == 2 and diffs[1] == diffs[0] + 1 and old[diffs[0]] == new[diffs[1]] \
                and old[diffs[1]] == new[diffs[0]]:
            return "transposition", diffs[0], ""
    if len(new) == len(old) - 1 and any(old[:i] + old[i + 1:] == new for i in range(len(old))):
        return "deletion", -1, ""
    if len(new) == len(old) + 1:
        # the inserted character follows its anchor; with repeated letters several anchors fit
        for i in range(len(old)):
            if new[:i + 1] == old[:i + 1] and new[i + 2:] == old[i + 1:]:
                if new[i + 1].lower() in QWERTY_NEIGHBOURS.get(old[i].lower(), ""):
                    return "insertion", i, new[i + 1]
    return None


@pytest.mark.parametrize("target_tokens", TARGET_TOKENS)
@settings(max_examples=150, deadline=None)
@given(u=utterances(), seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.1, 0.2, 0.5, 1.0]))
def test_noise_properties(target_tokens, u, seed, rate):
    out = assert_noise_properties(functools.partial(Misspelling, target_tokens=target_tokens), u, seed, rate)
    assert out.tags == u.tags  # 1→1


@settings(max_examples=200, deadline=None)
@given(token=st.text(st.characters(exclude_categories=("Zs", "Zl", "Zp", "Cc", "Cs")), min_size=1, max_size=8),
       seed=st.integers(0, 2**32 - 1))
def test_misspell_never_empties_and_changes_when_it_edits(token, seed):
    new, kind = Misspelling().misspell(token, random.Random(seed))
    assert new and new.split() == [new]
    assert kind in (*EDIT_TYPES, "none")
    assert (new == token) == (kind == "none")
    if kind != "none":
        assert diff_kind(token, new) is not None and diff_kind(token, new)[0] == kind


def test_edit_type_frequencies_100k():
    m, rng = Misspelling(), random.Random(0)
    words = WORDS * 5000  # 100,000 draws, every word admits all four edits
    counts = Counter(m.misspell(w, rng)[1] for w in words)
    freqs = {k: counts[k] / len(words) for k in EDIT_TYPES}
    # Binomial sd at n = 1e5 is at most 0.0016, so 0.01 is > 6 sd
    for k, p in TABLE5_EDIT_PROBS.items():
        assert abs(freqs[k] - p) < 0.01, freqs


def test_neighbour_map_matches_hand_written_keys():
    for key, hand in HAND_NEIGHBOURS.items():
        assert set(QWERTY_NEIGHBOURS[key]) == hand, key
    assert set(QWERTY_NEIGHBOURS) == set("abcdefghijklmnopqrstuvwxyz1234567890")
    for key, ns in QWERTY_NEIGHBOURS.items():  # symmetric, no self, no punctuation
        assert key not in ns and all(key in QWERTY_NEIGHBOURS[n] for n in ns) and ns.isalnum()


def test_substitution_and_insertion_use_neighbours_and_keep_case():
    rng = random.Random(1)
    seen = Counter()
    for kind in ("substitution", "insertion"):
        m = Misspelling(edit_probs={kind: 1.0})
        for _ in range(400):
            for word in HAND_WORDS:
                new, got = m.misspell(word, rng)
                edit, i, char = diff_kind(word, new)
                assert got == edit == kind, (word, new)
                anchor = word[i]
                assert char.lower() in HAND_NEIGHBOURS[anchor.lower()], (word, new)
                if anchor.isalpha() and char.isalpha():
                    assert char.isupper() == anchor.isupper(), (word, new)
                seen[kind, anchor.lower(), char.lower()] += 1
    # every hand-written neighbour of 'd' is reached by both edits
    assert {c for (k, a, c) in seen if k == "substitution" and a == "d"} == HAND_NEIGHBOURS["d"]
    assert {c for (k, a, c) in seen if k == "insertion" and a == "d"} == HAND_NEIGHBOURS["d"]


def test_upper_case_tokens_stay_upper_case():
    m, rng = Misspelling(), random.Random(2)
    for _ in range(3000):
        new, _ = m.misspell("FLIGHTS", rng)
        assert all(c.isupper() or c.isdigit() for c in new), new


def test_paper_examples():
    m = Misspelling(edit_probs={"substitution": 1.0})
    outs = {m.misspell("d", random.Random(s))[0] for s in range(200)}
    assert {"f", "s", "e", "c"} <= outs <= HAND_NEIGHBOURS["d"]  # App. A.7
    m = Misspelling(edit_probs={"transposition": 1.0})
    outs = {m.misspell("flights", random.Random(s))[0] for s in range(300)}
    assert "filghts" in outs and len(outs) == 6  # Table 5 (l ↔ i); 6 adjacent pairs


def test_impossible_edits_are_redrawn_among_possible_ones():
    m, rng = Misspelling(), random.Random(3)
    # "a": deletion and transposition impossible → substitution : insertion = 0.43 : 0.33
    counts = Counter(m.misspell("a", rng)[1] for _ in range(20000))
    assert set(counts) == {"substitution", "insertion"}
    assert abs(counts["substitution"] / 20000 - 0.43 / 0.76) < 0.015  # sd 0.0035
    # "ll": no transposition (equal characters) → the other three keep their relative weights
    counts = Counter(m.misspell("ll", rng)[1] for _ in range(20000))
    assert set(counts) == {"substitution", "insertion", "deletion"}
    assert abs(counts["deletion"] / 20000 - 0.18 / 0.94) < 0.015
    # punctuation, non-keyboard single characters and impossible-only configurations: unchanged
    assert m.misspell(",", rng) == (",", "none")
    assert m.misspell("?!", rng) == ("?!", "none")
    assert m.misspell("é", rng) == ("é", "none")
    assert Misspelling(edit_probs={"transposition": 1.0}).misspell("a", rng) == ("a", "none")
    assert Misspelling(edit_probs={"deletion": 1.0}, min_token_len=5).misspell("nyc", rng) == ("nyc", "none")
    assert Misspelling(edit_probs={"deletion": 1.0}, min_token_len=5).misspell("boston", rng)[1] == "deletion"


def test_token_level_rate():
    """Changed fraction over 24,000 eligible tokens at rate 0.2: Binomial sd sqrt(.2*.8/24000) =
    0.0026, the tolerance 0.013 is 5 sd (every selected eligible token is changed)."""
    rng = random.Random(4)
    us = [Utterance(f"u{i}", tuple(rng.choices(WORDS, k=8)), ("O",) * 8, "x") for i in range(3000)]
    m = Misspelling(rate=0.2, seed=5)
    changed = sum(a != b for u in us for a, b in zip(u.tokens, m(u).tokens, strict=True))
    assert abs(changed / 24000 - 0.2) < 0.013


def test_carrier_mode_changes_only_o_tokens():
    u = Utterance("u", ("flights", "from", "boston", "to", "denver"), ("O", "O", "B-city", "O", "B-city"), "x")
    out = Misspelling(rate=1.0, target_tokens="carrier")(u)
    assert out.tokens[2] == "boston" and out.tokens[4] == "denver"
    assert all(out.tokens[i] != u.tokens[i] for i in (0, 1, 3))
    out = Misspelling(rate=1.0, target_tokens="slots")(u)
    assert [out.tokens[i] == u.tokens[i] for i in range(5)] == [True, True, False, True, False]


def test_bad_config():
    for kwargs in ({"min_token_len": 1}, {"edit_probs": {"swap": 1.0}}, {"edit_probs": {"insertion": -1}},
                   {"edit_probs": {"insertion": 0}}, {"rate": 1.5}):
        with pytest.raises(ConfigError):
            Misspelling(**kwargs)


def test_hydra_config():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(__file__).parents[2] / "conf" / "noise" / "misspelling.yaml")
    assert "seed" not in cfg
    m = instantiate(cfg, seed=7)
    assert isinstance(m, Misspelling) and m.seed == 7 and m.rate == 0.2
    assert m.edit_probs == TABLE5_EDIT_PROBS
    assert m.config()["edit_probs"] == TABLE5_EDIT_PROBS
