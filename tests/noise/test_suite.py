"""The released real-world noisy NLU suite (data/noisy_nlu, robustnlu.noise.suite): shipped files
and counts against SOURCE.md, control recovery, malformed rows, IO→BIO and normalisation."""

from __future__ import annotations

import hashlib
import itertools
import logging
import lzma
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from robustnlu.data.readers import load_corpus
from robustnlu.data.readers.noisy_tsv import io_to_bio, read_noisy_tsv
from robustnlu.data.utterance import Corpus, Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.data.bio import bio_problem, slot_spans
from robustnlu.noise.base import replace_each, replace_tokens
from robustnlu.noise.suite import NoisyPair, load_noisy_suite, normalise, slot_pairs
from robustnlu.paths import DATA_DIR, shipped_config

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "data/noisy_nlu"
HEADER = "u_id\tutterance\tbot_id\tslot-labels\tintent"

# "lines incl. header" of data/noisy_nlu/SOURCE.md's table, minus the header line.
SOURCE_ROWS = {
    ("atis", "abbreviations"): 99, ("atis", "allcaps"): 892, ("atis", "misspellings"): 892,
    ("atis", "morphological"): 115, ("atis", "paraphrase"): 218, ("atis", "punctuation"): 243,
    ("atis", "synonyms"): 224, ("snips", "abbreviations"): 98, ("snips", "allcaps"): 700,
    ("snips", "misspellings"): 700, ("snips", "morphological"): 101, ("snips", "paraphrase"): 197,
    ("snips", "synonyms"): 201,
}
# (dataset, noise): (matched by id, by content, unmatched, normalised rows), as found on the shipped
# data (SOURCE.md, "What robustnlu verified").
RECOVERED = {
    ("atis", "abbreviation"): (0, 99, 0, 1), ("atis", "casing"): (892, 0, 0, 0),
    ("atis", "misspelling"): (892, 0, 0, 5), ("atis", "morphology"): (0, 115, 0, 5),
    ("atis", "paraphrase"): (0, 218, 0, 12), ("atis", "punctuation"): (243, 0, 0, 0),
    ("atis", "synonym"): (0, 224, 0, 0), ("snips", "abbreviation"): (0, 98, 0, 94),
    ("snips", "casing"): (699, 0, 0, 345), ("snips", "misspelling"): (699, 0, 0, 664),
    ("snips", "morphology"): (0, 101, 0, 99), ("snips", "paraphrase"): (0, 197, 0, 176),
    ("snips", "synonym"): (0, 201, 0, 177),
}
MALFORMED = {
    ("snips", "casing"): "data/noisy_nlu/snips/allcaps/treatment_test.tsv:306: ",
    ("snips", "misspelling"): "data/noisy_nlu/snips/misspellings/treatment_test.tsv:306: ",
}


def suite_cfg(**overrides) -> dict:
    """The shipped suite config with its folder relative, read from ``ROOT`` (the shipped config
    names it under paths.data_dir, absolute): sources read as data/noisy_nlu/..."""
    cfg = shipped_config("suite", "noisy_nlu")
    assert cfg["path"] == str(DATA_DIR / "noisy_nlu")
    return {**cfg, "path": "data/noisy_nlu", **overrides}


@pytest.fixture(scope="module")
def corpora() -> dict[str, Corpus]:
    return {name: load_corpus(shipped_config("dataset", name)) for name in ("atis", "snips")}


@pytest.fixture(scope="module")
def pairs(corpora: dict[str, Corpus]) -> dict[tuple[str, str], NoisyPair]:
    return {(p.dataset, p.noise): p for p in load_noisy_suite(suite_cfg(), ROOT, corpora)}


# --- the shipped files -------------------------------------------------------------------------


def shipped_text(name: str) -> str:
    """``data/noisy_nlu/<name>``, shipped as ``<name>.xz``: decompressed with the standard library."""
    return lzma.decompress((SUITE / f"{name}.xz").read_bytes()).decode("utf-8")


def test_row_counts_match_source_table(pairs: dict[tuple[str, str], NoisyPair]) -> None:
    files = sorted(SUITE.glob("*/*/treatment_test.tsv.xz"))
    assert len(files) == 13 and not list(SUITE.glob("*/*/treatment_test.tsv"))
    for path in files:
        dataset, folder = path.parts[-3:-1]
        lines = shipped_text(f"{dataset}/{folder}/treatment_test.tsv").rstrip("\n").split("\n")
        assert lines[0] == HEADER
        assert len(lines) - 1 == SOURCE_ROWS[(dataset, folder)], path
    # a pair's source is the name the config gives, without the .xz it ships with
    assert {p.source for p in pairs.values()} == {str(f.relative_to(ROOT).with_suffix("")) for f in files}
    for pair in pairs.values():
        dataset, folder = pair.source.split("/")[2:4]
        assert pair.report["rows_read"] == SOURCE_ROWS[(dataset, folder)]


def test_sha256_match_source_md() -> None:
    listed = re.findall(r"^([0-9a-f]{64})  \./(\S+)$", (SUITE / "SOURCE.md").read_text(encoding="utf-8"), re.M)
    assert len(listed) == 13
    for digest, name in listed:
        assert hashlib.sha256(shipped_text(name).encode("utf-8")).hexdigest() == digest, name
    assert (SUITE / "LICENSE").is_file()


def test_noise_names_uids_and_table(pairs: dict[tuple[str, str], NoisyPair]) -> None:
    assert set(pairs) == set(RECOVERED)
    casing = pairs[("snips", "casing")]
    assert casing.source == "data/noisy_nlu/snips/allcaps/treatment_test.tsv"
    assert casing.treatment[0].uid == "noisy_nlu/snips/allcaps/2"
    assert all(u.domain is None for p in pairs.values() for u in p.treatment)


# --- control recovery ----------------------------------------------------------------------------


def test_every_row_gets_a_control(pairs: dict[tuple[str, str], NoisyPair]) -> None:
    for key, pair in pairs.items():
        r = pair.report
        assert (r["matched_by_id"], r["matched_by_content"], r["unmatched"], r["normalised_rows"]) == RECOVERED[key]
        assert r["rows_read"] == r["skipped"] + r["matched_by_id"] + r["matched_by_content"] + r["unmatched"]
        n = r["matched_by_id"] + r["matched_by_content"]
        assert len(pair.treatment) == len(pair.control) == len(pair.control_splits) == n
        assert sum(r["control_split_counts"].values()) == n
        for t, c in zip(pair.treatment, pair.control, strict=True):
            assert t.intent == c.intent, (t, c)


def test_controls_come_from_the_source_split(pairs: dict[tuple[str, str], NoisyPair]) -> None:
    """ATIS: the test split; SNIPS: the dev split (the release's SNIPS "test" rows)."""
    for (dataset, _), pair in pairs.items():
        assert set(pair.control_splits) == {"test" if dataset == "atis" else "valid"}


def test_allcaps_controls_are_the_id_rows(
    pairs: dict[tuple[str, str], NoisyPair], corpora: dict[str, Corpus]
) -> None:
    for dataset, split, least in (("snips", "valid", 0.95), ("atis", "test", 1.0)):
        pair = pairs[(dataset, "casing")]
        rows = {r.utterance.uid: r for r in read_noisy_tsv(ROOT / pair.source, f"noisy_nlu/{dataset}/allcaps")[0]}
        originals = corpora[dataset].split(split)
        for t, c in zip(pair.treatment, pair.control, strict=True):
            assert c is originals[int(rows[t.uid].u_id.removeprefix("test-"))]
        same = sum([tok.lower() for tok in t.tokens] == list(c.tokens) for t, c in zip(pair.treatment, pair.control))
        assert same >= least * len(pair.control)
        assert pair.report["id_verified"] == len(pair.control)
    # not the SNIPS test split: no row of it equals its allcaps row
    test = corpora["snips"].test
    pair = pairs[("snips", "casing")]
    assert not any([tok.lower() for tok in t.tokens] == list(test[i].tokens) for i, t in enumerate(pair.treatment))


def test_multi_intents_use_our_separator(pairs: dict[tuple[str, str], NoisyPair]) -> None:
    intents = {t.intent for t in pairs[("atis", "casing")].treatment}
    assert "atis_flight#atis_airfare" in intents and not any(";" in i for i in intents)


# --- malformed rows --------------------------------------------------------------------------------


def test_malformed_snips_rows_are_reported(pairs: dict[tuple[str, str], NoisyPair]) -> None:
    for key, pair in pairs.items():
        if key in MALFORMED:
            (problem,) = pair.report["malformed"]
            assert problem.startswith(MALFORMED[key]) and "16 slot labels for 15 tokens" in problem
            assert pair.report["skipped"] == 1
        else:
            assert pair.report["malformed"] == [] and pair.report["skipped"] == 0


def test_on_malformed_error_names_file_and_line(corpora: dict[str, Corpus]) -> None:
    cfg = suite_cfg(noise_types=["allcaps"], on_malformed="error")
    with pytest.raises(DataError, match=r"^data/noisy_nlu/snips/allcaps/treatment_test\.tsv:306: 16 slot labels"):
        load_noisy_suite(cfg, ROOT, {"snips": corpora["snips"]})


def write_tsv(path: Path, *rows: str, header: str = HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join((header, *rows)) + "\n", encoding="utf-8")
    return path


def test_reader_bad_header(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "tiny.tsv", "test-0\tplay jazz\t\tO genre\tPlayMusic", header="id\ttext")
    with pytest.raises(DataError, match=r"tiny\.tsv:1: header"):
        read_noisy_tsv(path, "x")


def test_reader_reports_bad_rows_with_their_line(tmp_path: Path) -> None:
    path = write_tsv(
        tmp_path / "tiny.tsv",
        "test-0\tplay some jazz\t\tO O genre\tPlayMusic",
        "test-1\tplay jazz\tO genre\tPlayMusic",
        "test-2\tplay jazz now\t\tO genre\tPlayMusic",
        "test-3\tplay jazz\t\tO genre\t",
    )
    rows, problems = read_noisy_tsv(path, "tiny")
    assert [(r.line, r.u_id, r.utterance.uid) for r in rows] == [(2, "test-0", "tiny/2")]
    assert [e.line for e in problems] == [3, 4, 5]
    assert str(problems[0]).endswith("tiny.tsv:3: expected 5 tab-separated columns (u_id, utterance, bot_id, "
                                     "slot-labels, intent), got 4")
    assert str(problems[1]).endswith("tiny.tsv:4: 2 slot labels for 3 tokens")
    assert str(problems[2]).endswith("tiny.tsv:5: empty intent")


def tiny_corpus() -> Corpus:
    dev = [Utterance("tiny-dev-00000", ("play", "jazz"), ("O", "B-genre"), "PlayMusic"),
           Utterance("tiny-dev-00001", ("play", "some", "rock"), ("O", "O", "B-genre"), "PlayMusic")]
    return Corpus("snips", [], dev, [])


def test_tiny_suite_skip_and_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_tsv(tmp_path / "data/noisy_nlu/snips/allcaps/treatment_test.tsv",
              "test-0\tPLAY JAZZ!\t\tO genre\tPlayMusic", "test-1\tPLAY SOME\t\tO O genre\tPlayMusic",
              "test-1\t?\t\tO\tPlayMusic")
    corpora = {"snips": tiny_corpus(), "top": tiny_corpus()}  # no suite for top: ignored
    with caplog.at_level(logging.WARNING):
        (pair,) = load_noisy_suite(suite_cfg(noise_types=["allcaps"]), tmp_path, corpora)
    source = "data/noisy_nlu/snips/allcaps/treatment_test.tsv"
    assert pair.report["malformed"] == [f"{source}:3: 3 slot labels for 2 tokens",
                                        f"{source}:4: no token left after normalisation"]
    assert f"{source}:3:" in caplog.text
    assert pair.treatment[0].tokens == ("PLAY", "JAZZ") and pair.control == [tiny_corpus().valid[0]]
    with pytest.raises(DataError, match=rf"^{re.escape(source)}:3: 3 slot labels for 2 tokens"):
        load_noisy_suite(suite_cfg(noise_types=["allcaps"], on_malformed="error"), tmp_path, corpora)


@pytest.mark.parametrize(
    ("key", "value"),
    [("on_malformed", "ignore"), ("normalise", "yes"), ("noise_types", ["allcap"]), ("kind", "synthetic")],
)
def test_bad_config(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        load_noisy_suite(suite_cfg(**{key: value}), ROOT, {})


# --- IO→BIO and normalisation ---------------------------------------------------------------------


def test_io_to_bio() -> None:
    labels = ["O", "round_trip", "round_trip", "O", "fromloc", "toloc", "toloc", "O", "toloc"]
    assert io_to_bio(labels) == ("O", "B-round_trip", "I-round_trip", "O", "B-fromloc", "B-toloc", "I-toloc", "O",
                                 "B-toloc")
    # two adjacent same-type slots cannot be told apart in IO: they become one span
    assert io_to_bio(["playlist", "playlist"]) == ("B-playlist", "I-playlist")


RAW = Utterance(
    "x", tuple("I'd like this track onto my Classical Relaxations playlist.".split()),
    io_to_bio("O O O music_item O playlist_owner playlist playlist O".split()), "AddToPlaylist",
)


def test_normalise_snips_hand_example() -> None:
    u = normalise(RAW, "snips", "synonyms")
    assert u.tokens == ("i", "d", "like", "this", "track", "onto", "my", "classical", "relaxations", "playlist")
    assert u.tags == ("O", "O", "O", "O", "B-music_item", "O", "B-playlist_owner", "B-playlist", "I-playlist", "O")
    casing = normalise(RAW, "snips", "allcaps")
    assert casing.tokens[:2] == ("I", "d") and casing.tokens[-2:] == ("Relaxations", "playlist")
    # a split slot token keeps its span; a lone "." goes
    time = Utterance("y", ("at", "7", "a.m", "."), ("O", "B-time", "I-time", "O"), "GetWeather")
    assert normalise(time, "snips", "misspellings").tags == ("O", "B-time", "I-time", "I-time")


def test_normalise_deleting_a_token_inside_a_slot_span_repairs_bio() -> None:
    """A punctuation-only token deleted at the start of a span: the span's next token becomes its
    B- (rule 4, `repair_bio`); deleted in the middle: the span goes on."""
    start = Utterance("a", ("play", "'", "smooth", "jazz", "now"), ("O", "B-genre", "I-genre", "I-genre", "O"), "Play")
    u = normalise(start, "snips", "synonyms")
    assert u.tokens == ("play", "smooth", "jazz", "now")
    assert u.tags == ("O", "B-genre", "I-genre", "O")
    middle = Utterance("b", ("play", "smooth", ".", "jazz"), ("O", "B-genre", "I-genre", "I-genre"), "Play")
    assert normalise(middle, "snips", "synonyms").tags == ("O", "B-genre", "I-genre")


def test_normalise_atis_keeps_punctuation() -> None:
    u = Utterance("z", ("What's", "the", "fare", "to", "St.", "Louis", "?"), ("O",) * 4 + ("B-city", "I-city", "O"), "f")
    assert normalise(u, "atis", "synonyms").tokens == ("what's", "the", "fare", "to", "st.", "louis", "?")
    assert normalise(u, "atis", "punctuation") == u


def test_casing_rows_stay_upper_case(pairs: dict[tuple[str, str], NoisyPair]) -> None:
    for dataset in ("atis", "snips"):
        tokens = [tok for u in pairs[(dataset, "casing")].treatment for tok in u.tokens]
        assert all(tok == tok.upper() for tok in tokens)
    first = pairs[("snips", "casing")].treatment[0]
    assert first.tokens[:3] == ("I", "D", "LIKE") and first.tokens[-1] == "PLAYLIST"
    assert pairs[("snips", "misspelling")].treatment[0].tokens[:3] == ("i", "d", "like")


def test_normalise_off_keeps_released_text(corpora: dict[str, Corpus]) -> None:
    (pair,) = load_noisy_suite(suite_cfg(noise_types=["allcaps"], normalise=False), ROOT, {"snips": corpora["snips"]})
    assert pair.treatment[0].tokens[0] == "I'D" and pair.report["normalised_rows"] == 0
    assert pair.report["matched_by_id"] == 699


def test_config_composes_under_suite_group() -> None:
    assert (ROOT / "conf/suite/noisy_nlu.yaml").read_text(encoding="utf-8").startswith("# @package suite.noisy_nlu\n")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(overrides=["+suite=noisy_nlu"])
    assert cfg.suite.noisy_nlu.kind == "released" and cfg.suite.noisy_nlu.on_malformed == "skip"


def test_slot_pairs_read_spans_the_io_way() -> None:
    """The release is IO-labelled: adjacent spans of one type are one value; an I- opens one."""
    u = Utterance("u", ("to", "new", "york", "city", "at", "Noon"), ("O", "B-city", "B-city", "I-city", "O", "I-time"), "x")
    assert slot_pairs(u) == (("city", "newyorkcity"), ("time", "noon"))



def test_deleting_the_first_token_of_a_span_right_after_a_span_of_its_type_keeps_two_spans() -> None:
    """B-X I-X [B-X] I-X I-X with the bracketed token dropped: the second span starts at its next
    token (before the fix it joined the first span); dropping a token inside a span or an O token
    changes no span."""
    u = Utterance("c", ("to", "new", "york", "st", "san", "jose"),
                  ("O", "B-city", "I-city", "B-city", "I-city", "I-city"), "f")
    dropped = replace_tokens(u, 3, 4, [])
    assert dropped.tokens == ("to", "new", "york", "san", "jose")
    assert dropped.tags == ("O", "B-city", "I-city", "B-city", "I-city")
    assert slot_spans(dropped.tags, "strict") == slot_spans(("O", "B-city", "I-city", "B-city", "I-city"), "strict")
    assert len(slot_spans(dropped.tags, "strict")) == 2
    assert replace_tokens(u, 4, 5, []).tags == ("O", "B-city", "I-city", "B-city", "I-city")
    assert replace_tokens(u, 0, 1, []).tags == ("B-city", "I-city", "B-city", "I-city", "I-city")
    # the whole second span's head dropped at the end of the utterance: nothing left to start
    assert replace_tokens(u, 3, 6, []).tags == ("O", "B-city", "I-city")


def test_normalising_away_the_first_token_of_a_span_right_after_a_span_of_its_type_keeps_two_spans() -> None:
    """The path the released suite takes (`normalise` → `replace_each`): a lone "'" that starts the
    second of two city spans goes; "san jose" starts its own span, it does not join "new york"."""
    u = Utterance("d", ("from", "new", "york", "'", "san", "jose"),
                  ("O", "B-city", "I-city", "B-city", "I-city", "I-city"), "f")
    out = normalise(u, "snips", "synonyms")
    assert out.tokens == ("from", "new", "york", "san", "jose")
    assert out.tags == ("O", "B-city", "I-city", "B-city", "I-city")
    assert slot_spans(out.tags) == [("city", 1, 3), ("city", 3, 5)]


def test_deleting_tokens_never_joins_or_splits_spans() -> None:
    """Every valid BIO sequence of up to 6 tokens over two slot types, every set of deleted tokens
    (`replace_each`, right to left as the transforms apply them): the spans left are the original
    spans less their deleted tokens, each span still one span (none joined to its neighbour)."""
    tags_of = ("O", "B-X", "I-X", "B-Y", "I-Y")
    for n in range(1, 7):
        for tags in itertools.product(tags_of, repeat=n):
            if bio_problem(tags):
                continue
            u = Utterance("e", tuple(f"w{i}" for i in range(n)), tags, "f")
            for k in range(1, n):
                for deleted in itertools.combinations(range(n), k):
                    kept = [i for i in range(n) if i not in deleted]
                    expected = []
                    for typ, start, end in slot_spans(tags, "strict"):
                        left = [kept.index(i) for i in range(start, end) if i in kept]
                        if left:
                            expected.append((typ, left[0], left[-1] + 1))
                    out = replace_each(u, {i: [] for i in deleted})
                    assert slot_spans(out.tags, "strict") == expected, (tags, deleted, out.tags)
