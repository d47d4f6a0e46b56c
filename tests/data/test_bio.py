"""`robustnlu.data.bio.slot_spans`, the one reader of tags as spans, in each of its readings, on
hand-written tags (conlleval's reading is also checked against seqeval in
tests/metrics/test_slu_metrics.py)."""

from __future__ import annotations

import pytest

from robustnlu.data.bio import bio_problem, slot_spans, tag_type

#: tags -> (conlleval, strict, io) spans, left to right
CASES = [
    ([], [], [], []),
    (["O", "O"], [], [], []),
    (["B-a", "I-a", "O", "B-b"], [("a", 0, 2), ("b", 3, 4)], [("a", 0, 2), ("b", 3, 4)], [("a", 0, 2), ("b", 3, 4)]),
    # two adjacent spans of one type: two spans, except in the IO reading
    (["B-a", "B-a", "I-a"], [("a", 0, 1), ("a", 1, 3)], [("a", 0, 1), ("a", 1, 3)], [("a", 0, 3)]),
    # an I- after O: conlleval and IO open a span, strict leaves it in none
    (["O", "I-a", "I-a"], [("a", 1, 3)], [], [("a", 1, 3)]),
    # a type change inside a span: two spans, the second opened by an I-
    (["B-a", "I-b", "O"], [("a", 0, 1), ("b", 1, 2)], [("a", 0, 1)], [("a", 0, 1), ("b", 1, 2)]),
    (["B-from-city", "I-from-city"], [("from-city", 0, 2)], [("from-city", 0, 2)], [("from-city", 0, 2)]),
]


@pytest.mark.parametrize(("tags", "conlleval", "strict", "io"), CASES)
def test_each_reading_on_hand_written_tags(tags, conlleval, strict, io):
    assert slot_spans(tags) == conlleval
    assert slot_spans(tags, "strict") == strict
    assert slot_spans(tags, "io") == io


def test_on_valid_bio_conlleval_and_strict_agree():
    tags = ["B-a", "I-a", "B-a", "O", "B-b", "I-b", "I-b"]
    assert bio_problem(tags) is None
    assert slot_spans(tags) == slot_spans(tags, "strict") == [("a", 0, 2), ("a", 2, 3), ("b", 4, 7)]


def test_iobes_prefixes_close_a_span_the_conlleval_way():
    assert slot_spans(["S-a", "B-a", "E-a", "I-a"]) == [("a", 0, 1), ("a", 1, 3), ("a", 3, 4)]


def test_malformed_tags_and_unknown_schemes_are_errors():
    with pytest.raises(ValueError, match="is not O, B-<type>"):
        slot_spans(["O", "B-"])
    with pytest.raises(ValueError, match="unknown span scheme"):
        slot_spans(["O"], "bioes")


def test_tag_type_and_bio_problem():
    assert (tag_type("O"), tag_type("B-a"), tag_type("I-from-city")) == (None, "a", "from-city")
    assert bio_problem(["O", "I-a"]) == "tag 2 'I-a' follows 'O' (I- without B-)"
    assert bio_problem(["B-a", "I-b"]) == "tag 2 'I-b' follows 'B-a' (I- without B-)"
    assert bio_problem(["X"]) == "tag 1 'X' is not O, B-<type> or I-<type>"
