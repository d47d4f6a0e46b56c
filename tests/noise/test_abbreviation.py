"""Abbreviation noise (paper 002, section 3): the shared noise properties, the shipped knowledge
base, the three rules, their order, case and slot boundaries."""

from __future__ import annotations

import functools
import lzma
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robustnlu.errors import ConfigError, DataError
from robustnlu.io import data_file, read_data
from robustnlu.data.bio import slot_spans
from robustnlu.noise.abbreviation import DEFAULT_KB, HOMOPHONES, Abbreviation, drop_vowels, load_abbreviations
from robustnlu.noise.base import TARGET_TOKENS
from tests.noise.strategies import assert_noise_properties, utt, utterances



@pytest.fixture
def small_kb(tmp_path):
    path = tmp_path / "kb.tsv"
    path.write_text("# test list\n\nas soon as possible\tasap\nsee you\tcu\nsee you later\tcya\nat\t@\n"
                    "tickets\ttix\nnew york city\tnyc\n", encoding="utf-8")
    return path


def only_kb(kb, **kwargs):
    return Abbreviation(rate=1.0, kb_file=kb, vowel_drop=False, homophones=False, **kwargs)


@pytest.mark.parametrize("target_tokens", TARGET_TOKENS)
@settings(max_examples=150, deadline=None)
@given(u=utterances(), seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.15, 0.5, 1.0]))
def test_noise_properties(target_tokens, u, seed, rate):
    out = assert_noise_properties(functools.partial(Abbreviation, target_tokens=target_tokens), u, seed, rate)
    assert len(out.tokens) <= len(u.tokens)  # 1→1 or n→1
    # every slot survives (as one span of the same type, possibly shorter)
    assert [t for t, _, _ in slot_spans(out.tags)] == \
        [t for t, _, _ in slot_spans(u.tags)]


# --- the shipped knowledge base


def test_shipped_list_loads_and_is_well_formed():
    text = read_data(data_file(DEFAULT_KB)).decode("utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert 150 <= len(lines) <= 260
    assert "robustnlu" in text.splitlines()[0]  # header comment
    phrases = []
    for line in lines:
        fields = line.split("\t")
        assert len(fields) == 2, line
        assert line == line.lower(), line
        phrase, abbreviation = fields
        assert phrase.strip() == phrase and abbreviation.strip() == abbreviation and " " not in abbreviation, line
        assert phrase != abbreviation
        phrases.append(phrase)
    assert len(phrases) == len(set(phrases)), "duplicate phrases"
    kb = load_abbreviations(DEFAULT_KB)
    assert len(kb) == len(lines)
    assert any(len(p) > 1 for p in kb)  # multi-word phrases (n→1)
    # the numeral homophones are a separate rule, switched by `homophones`
    assert not set(HOMOPHONES) & {p[0] for p in kb if len(p) == 1}


@pytest.mark.parametrize("phrase,abbreviation", [
    ("please", "pls"), ("tickets", "tix"), ("tomorrow", "tmrw"), ("you", "u"), ("are", "r"), ("at", "@"),
    ("and", "&"), ("with", "w/"), ("before", "b4"), ("as soon as possible", "asap"), ("minutes", "mins"),
    ("information", "info")])
def test_shipped_list_has_the_common_ones(phrase, abbreviation):
    assert load_abbreviations(DEFAULT_KB)[tuple(phrase.split())] == abbreviation


def test_a_compressed_list_is_read_by_its_uncompressed_name(tmp_path, small_kb):
    """Read as every data file is (`robustnlu.io.data_file`): ``kb.tsv`` names ``kb.tsv.xz`` when
    only that exists, and the line numbers of an error count its decompressed lines."""
    packed = tmp_path / "packed" / "kb.tsv"
    packed.parent.mkdir()
    packed.with_name("kb.tsv.xz").write_bytes(lzma.compress(small_kb.read_bytes()))
    assert load_abbreviations(packed) == load_abbreviations(small_kb)
    packed.with_name("kb.tsv.xz").write_bytes(lzma.compress(b"# list\nplease\tpls\textra\n"))
    with pytest.raises(DataError, match=r"kb\.tsv\.xz:2: expected"):
        load_abbreviations(packed)


def test_an_unreadable_list_is_a_config_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^noise\.kb_file: .*missing\.tsv: file not found$"):
        Abbreviation(kb_file=tmp_path / "missing.tsv")
    (tmp_path / "latin1.tsv").write_bytes("caf\xe9\tcf\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"^noise\.kb_file: .*latin1\.tsv:1: not valid UTF-8"):
        load_abbreviations(tmp_path / "latin1.tsv")


def test_malformed_lists_are_rejected(tmp_path):
    for text in ("please\tpls\textra\n", "please pls\n", "please\tpls\nPlease\tplz\n", "please\tp l s\n"):
        path = tmp_path / "bad.tsv"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(DataError):
            load_abbreviations(path)


# --- the rules


def test_vowel_drop():
    assert drop_vowels("people") == "ppl"  # paper 002, section 3
    assert drop_vowels("flights") == "flghts"
    assert drop_vowels("PEOPLE") == "PPL"
    assert drop_vowels("Airport") == "Arprt"  # the first character is kept even if a vowel
    for token in ("nyc", "boo", "st.", "rhythm", "aeiou", "7pm", "café"):
        assert drop_vowels(token) is None, token


def test_as_soon_as_possible_with_tags(small_kb):
    u = utt("remind me as soon as possible at 7 pm", "O O O O O O O B-time I-time")
    out = only_kb(small_kb, target_tokens="carrier")(u)
    assert out.tokens == ("remind", "me", "asap", "@", "7", "pm")
    assert out.tags == ("O", "O", "O", "O", "B-time", "I-time")


def test_phrase_inside_one_span(small_kb):
    u = utt("by as soon as possible please", "B-time I-time I-time I-time I-time O")
    out = only_kb(small_kb, target_tokens="all")(u)
    assert out.tokens == ("by", "asap", "please") and out.tags == ("B-time", "I-time", "O")
    u = utt("flights to new york city", "O O B-city I-city I-city")
    out = only_kb(small_kb, target_tokens="slots")(u)
    assert out.tokens == ("flights", "to", "nyc") and out.tags == ("O", "O", "B-city")
    assert only_kb(small_kb, target_tokens="carrier")(u) == u


def test_phrase_crossing_a_slot_boundary_is_not_replaced(small_kb):
    for tags in ("O O B-time I-time", "B-time I-time B-time I-time", "B-time I-time I-time B-city"):
        u = utt("as soon as possible", tags)
        assert only_kb(small_kb, target_tokens="all")(u) == u, tags
    # one token of the phrase is not a target token
    u = utt("as soon as possible", "O O O B-time")
    assert only_kb(small_kb, target_tokens="carrier")(u) == u


def test_longest_phrase_wins(small_kb):
    assert only_kb(small_kb)(utt("see you later")).tokens == ("cya",)
    assert only_kb(small_kb)(utt("see you soon")).tokens == ("cu", "soon")


def test_rule_order_kb_then_homophone_then_vowel_drop(tmp_path):
    path = tmp_path / "kb.tsv"
    path.write_text("tomorrow\ttmrw\nto\tt\n", encoding="utf-8")
    t = Abbreviation(rate=1.0, kb_file=path)
    # kb beats vowel drop ('tmrrw') and homophone ('2'); homophone beats vowel drop for 'four'
    assert t(utt("tomorrow to four people at")).tokens == ("tmrw", "t", "4", "ppl", "at")
    assert Abbreviation(rate=1.0, kb_file=path, homophones=False)(utt("four")).tokens == ("fr",)
    assert Abbreviation(rate=1.0, kb_file=path, vowel_drop=False)(utt("people")).tokens == ("people",)


def test_shipped_rules_end_to_end():
    u = utt("book tickets for two people to nyc tomorrow", "O O O O O O B-city B-date")
    out = Abbreviation(rate=1.0)(u)
    assert out.tokens == ("bk", "tix", "4", "2", "ppl", "2", "nyc", "tomorrow")
    assert out.tags == u.tags


def test_case_style_is_kept(small_kb):
    assert only_kb(small_kb)(utt("AS SOON AS POSSIBLE")).tokens == ("ASAP",)
    assert only_kb(small_kb)(utt("As soon as possible")).tokens == ("Asap",)
    assert only_kb(small_kb)(utt("Tickets TICKETS tickets")).tokens == ("Tix", "TIX", "tix")
    drop = Abbreviation(rate=1.0, kb_file=small_kb, homophones=False)
    assert drop(utt("People PEOPLE people")).tokens == ("Ppl", "PPL", "ppl")
    assert Abbreviation(rate=1.0)(utt("TO FOR")).tokens == ("2", "4")


def test_no_homophone_reverse_direction():
    u = utt("2 tickets")
    assert Abbreviation(rate=1.0, kb_file=None, vowel_drop=False)(u).tokens == ("2", "tix")


def test_rate_selects_tokens(tmp_path):
    """At rate 0.15 with only the vowel rule, every selected token changes: the changed fraction
    of 8,000 tokens is Binomial sd sqrt(.15*.85/8000) = 0.004; the tolerance 0.02 is 5 sd."""
    us = [utt("people weather morning flights", uid=f"u{i}") for i in range(2000)]
    (tmp_path / "empty.tsv").write_text("# no entries\n", encoding="utf-8")
    t = Abbreviation(rate=0.15, vowel_drop=True, homophones=False, kb_file=tmp_path / "empty.tsv", seed=1)
    changed = sum(a != b for u in us for a, b in zip(u.tokens, t(u).tokens, strict=True))
    assert abs(changed / 8000 - 0.15) < 0.02


def test_config_and_hydra():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(__file__).parents[2] / "conf" / "noise" / "abbreviation.yaml")
    assert "seed" not in cfg
    t = instantiate(cfg, seed=9)
    assert isinstance(t, Abbreviation) and t.seed == 9 and t.rate == 0.15 and t.target_tokens == "carrier"
    c = t.config()
    assert c["kb_file"] == "shipped" and c["kb_entries"] == len(load_abbreviations(DEFAULT_KB))
    assert c["vowel_drop"] is True and c["homophones"] is True
