"""conlleval chunking: slot tags → typed spans, as core paper section 5.1's slot F1 counts them.

The rules are conlleval's, as `seqeval` implements them in its default mode
(``seqeval.metrics.f1_score(y_true, y_pred)`` without ``mode``): an ``I-x`` after ``O`` or
after a tag of another type opens a new span, ``B-x I-y`` is two spans, and the IOBES
prefixes ``E-``/``S-`` close a span after their token. Invalid BIO is therefore repaired the
conlleval way instead of rejected.
"""

from __future__ import annotations

from collections.abc import Sequence

#: (slot type, start token, end token exclusive).
Span = tuple[str, int, int]

_CHUNK_PREFIXES = frozenset("BIES")


def _parse_tag(tag: str) -> tuple[str, str | None]:
    """``"B-city"`` → ``("B", "city")``; ``"O"`` → ``("O", None)``."""
    if tag == "O":
        return "O", None
    if len(tag) > 2 and tag[0] in _CHUNK_PREFIXES and tag[1] == "-":
        return tag[0], tag[2:]
    raise ValueError(f"slot tag {tag!r} is not O, B-<type>, I-<type>, E-<type> or S-<type>")


def _span_ends(prev_prefix: str, prefix: str, prev_type: str | None, type_: str | None) -> bool:
    """Whether a span that covers the previous token ends before the current one."""
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return prev_prefix != "O" and prev_type != type_


def _span_starts(prev_prefix: str, prefix: str, prev_type: str | None, type_: str | None) -> bool:
    """Whether a new span starts at the current token."""
    if prefix in ("B", "S"):
        return True
    if prev_prefix in ("E", "S", "O") and prefix in ("E", "I"):
        return True
    return prefix != "O" and prev_type != type_


def extract_spans(tags: Sequence[str]) -> set[Span]:
    """The typed spans of one utterance's tags, with conlleval's (seqeval default-mode) rules.

    Equal to seqeval's ``get_entities(tags)`` with each inclusive end turned into an exclusive
    one. A tag that is not ``O`` or ``<B|I|E|S>-<type>`` raises ValueError (seqeval only warns
    and then chunks it arbitrarily).
    """
    spans: set[Span] = set()
    prev_prefix, prev_type = "O", None
    start = 0
    # A trailing "O" closes the span still open at the end of the utterance.
    for i, tag in enumerate([*tags, "O"]):
        prefix, type_ = _parse_tag(tag)
        if _span_ends(prev_prefix, prefix, prev_type, type_):
            spans.add((prev_type, start, i))
        if _span_starts(prev_prefix, prefix, prev_type, type_):
            start = i
        prev_prefix, prev_type = prefix, type_
    return spans
