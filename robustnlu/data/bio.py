"""Slot tags and their spans: the one place that reads a tag sequence as typed spans.

`slot_spans` reads tags as ``(slot type, start, end)`` spans (``end`` exclusive), left to
right. Its default reading is conlleval's, as `seqeval` implements it in its default mode
(``seqeval.metrics.f1_score(y_true, y_pred)`` without ``mode``), the reading core paper section
5.1's slot F1 counts: an ``I-x`` after ``O`` or after a tag of another type opens a new span,
``B-x I-y`` is two spans, and the IOBES prefixes ``E-``/``S-`` close a span after their token.
Invalid BIO is therefore repaired the conlleval way instead of rejected. Two other readings
serve callers that count spans their own way (``scheme``):

- ``strict``: only a ``B-`` tag opens a span (the conlleval spans that start at a ``B-``); an
  ``I-`` that continues no span of its type belongs to none. SeqDrift's filtering counts slot
  types and spans this way (`robustnlu.seqdrift.filtering`).
- ``io``: the IO reading: a run of tokens of one slot type is one span, whatever the prefixes
  (``B-x B-x`` is one span). The released noisy test sets are IO-labelled, so the suite's
  control matching reads spans this way (`robustnlu.noise.suite.slot_pairs`).

On valid BIO (what every reader admits, `bio_problem`) the conlleval and strict readings agree.

`bio_violation` / `bio_problem` say whether tags are valid BIO (readers, noise transforms).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

#: (slot type, start token, end token exclusive).
Span = tuple[str, int, int]
Scheme = Literal["conlleval", "strict", "io"]

_CHUNK_PREFIXES = frozenset("BIES")


def tag_type(tag: str) -> str | None:
    """``X`` for ``B-X`` / ``I-X``, None for ``O``."""
    return None if tag == "O" else tag[2:]


def _parse_tag(tag: str) -> tuple[str, str | None]:
    """``"B-city"`` → ``("B", "city")``; ``"O"`` → ``("O", None)``."""
    if tag == "O":
        return "O", None
    if len(tag) > 2 and tag[0] in _CHUNK_PREFIXES and tag[1] == "-":
        return tag[0], tag[2:]
    raise ValueError(f"slot tag {tag!r} is not O, B-<type>, I-<type>, E-<type> or S-<type>")


def _span_ends(prev_prefix: str, prefix: str, prev_type: str | None, type_: str | None) -> bool:
    """Whether a span that covers the previous token ends before the current one (conlleval)."""
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return prev_prefix != "O" and prev_type != type_


def _span_starts(prev_prefix: str, prefix: str, prev_type: str | None, type_: str | None) -> bool:
    """Whether a new span starts at the current token (conlleval)."""
    if prefix in ("B", "S"):
        return True
    if prev_prefix in ("E", "S", "O") and prefix in ("E", "I"):
        return True
    return prefix != "O" and prev_type != type_


def _conlleval_spans(tags: Sequence[str]) -> list[Span]:
    spans: list[Span] = []
    prev_prefix, prev_type = "O", None
    start = 0
    # A trailing "O" closes the span still open at the end of the utterance.
    for i, tag in enumerate([*tags, "O"]):
        prefix, type_ = _parse_tag(tag)
        if _span_ends(prev_prefix, prefix, prev_type, type_):
            spans.append((prev_type, start, i))
        if _span_starts(prev_prefix, prefix, prev_type, type_):
            start = i
        prev_prefix, prev_type = prefix, type_
    return spans


def _io_spans(tags: Sequence[str]) -> list[Span]:
    spans: list[Span] = []
    prev = None
    for i, tag in enumerate(tags):
        type_ = tag_type(tag)
        if type_ is not None and type_ == prev:
            spans[-1] = (type_, spans[-1][1], i + 1)
        elif type_ is not None:
            spans.append((type_, i, i + 1))
        prev = type_
    return spans


def slot_spans(tags: Sequence[str], scheme: Scheme = "conlleval") -> list[Span]:
    """The typed spans of one utterance's tags, left to right, read by ``scheme`` (see the
    module docstring).

    With ``conlleval``, the set of spans equals seqeval's ``get_entities(tags)`` with each
    inclusive end turned into an exclusive one. A tag that is not ``O`` or
    ``<B|I|E|S>-<type>`` raises ValueError (seqeval only warns and then chunks it arbitrarily).
    """
    if scheme == "io":
        return _io_spans(tags)
    spans = _conlleval_spans(tags)
    if scheme == "strict":
        return [span for span in spans if tags[span[1]].startswith("B-")]
    if scheme != "conlleval":
        raise ValueError(f"unknown span scheme {scheme!r}; one of conlleval, strict, io")
    return spans


def bio_violation(tags: Sequence[str]) -> tuple[int, str] | None:
    """The 0-based position and a description of the first BIO violation in ``tags``, or None
    if valid.

    Valid tags are ``O``, ``B-<type>`` and ``I-<type>``; an ``I-<type>`` must follow a
    ``B-<type>`` or ``I-<type>`` of the same type.
    """
    prev = "O"
    for i, tag in enumerate(tags):
        if tag != "O" and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
            return i, f"tag {i + 1} {tag!r} is not O, B-<type> or I-<type>"
        if tag.startswith("I-") and (prev == "O" or prev[2:] != tag[2:]):
            return i, f"tag {i + 1} {tag!r} follows {prev!r} (I- without B-)"
        prev = tag
    return None


def bio_problem(tags: Sequence[str]) -> str | None:
    """A description of the first BIO violation in ``tags`` (`bio_violation`), or None if valid."""
    violation = bio_violation(tags)
    return None if violation is None else violation[1]


__all__ = ["Scheme", "Span", "bio_problem", "bio_violation", "slot_spans", "tag_type"]
