"""The released real-world noisy NLU test suite's TSV files (Sengupta, Krone, Mansour 2021; paper
002 section 3, digest A.2 / A.5; format in data/noisy_nlu/SOURCE.md).

Each ``treatment_test.tsv`` has the header ``u_id utterance bot_id slot-labels intent`` (tab
separated), a whitespace-tokenised utterance and one **IO** slot label per token (``O`` or a
bare slot type, no ``B-`` / ``I-``). `io_to_bio` starts a new span at each change of label, so two
adjacent spans of the same type become one span: the IO labels cannot tell them apart.

A row that cannot be read (wrong column count, empty utterance or intent, label / token count
mismatch) is not fatal here: `read_noisy_tsv` returns it as a `DataError` (``file:line: problem``)
and the caller skips it or raises it (``on_malformed``). A bad header or an unreadable file
raises at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from robustnlu.data.readers.common import read_lines, tag_problem, whitespace_problem
from robustnlu.data.utterance import Utterance
from robustnlu.errors import DataError
from robustnlu.io import data_file

COLUMNS = ("u_id", "utterance", "bot_id", "slot-labels", "intent")


class NoisyRow(NamedTuple):
    """One readable row: its 1-based line in the file, its released ``u_id`` and the utterance
    (tags converted to BIO, text as released)."""

    line: int
    u_id: str
    utterance: Utterance


def io_to_bio(labels: Sequence[str]) -> tuple[str, ...]:
    """IO labels (``O`` / a slot type) as BIO tags: ``B-X`` where the label changes to ``X``,
    ``I-X`` where it repeats. Adjacent same-type slots merge into one span (IO cannot separate
    them)."""
    tags: list[str] = []
    prev = "O"
    for label in labels:
        if label == "O":
            tags.append("O")
        else:
            tags.append(("I-" if label == prev else "B-") + label)
        prev = label
    return tuple(tags)


def row_problem(cells: Sequence[str], tokens: Sequence[str], tags: Sequence[str]) -> str | None:
    """Why a row (its tab-separated cells, tokens and BIO tags) cannot be used, or None."""
    if len(cells) != len(COLUMNS):
        return f"expected {len(COLUMNS)} tab-separated columns ({', '.join(COLUMNS)}), got {len(cells)}"
    if not cells[0].strip():
        return "empty u_id"
    if not cells[4].strip():
        return "empty intent"
    for column, text in (("utterance", cells[1]), ("slot-labels", cells[3])):
        if problem := whitespace_problem(text.strip()):
            return f"{column}: {problem}"
    if len(tokens) != len(tags):
        hint = " (the utterance has a double space)" if "  " in cells[1].strip() else ""
        return f"{len(tags)} slot labels for {len(tokens)} tokens{hint}"
    return tag_problem(tokens, tags)


def read_noisy_tsv(path: Path, uid_prefix: str) -> tuple[list[NoisyRow], list[DataError]]:
    """The readable rows of the file ``path`` (`data_file`: or its compressed copy; uid
    ``<uid_prefix>/<line>``, domain None) and one `DataError` per malformed row, both in file
    order. Raises DataError for a missing, non-UTF-8 or empty file or a wrong header."""
    path = data_file(path)
    lines = read_lines(path)
    header = tuple(lines[0].split("\t"))
    if header != COLUMNS:
        raise DataError(path, 1, f"header {'|'.join(header)!r}, expected {'|'.join(COLUMNS)!r}")
    rows: list[NoisyRow] = []
    problems: list[DataError] = []
    for line, text in enumerate(lines[1:], start=2):
        cells = text.split("\t")
        tokens = tuple(cells[1].split()) if len(cells) > 1 else ()
        tags = io_to_bio(cells[3].split()) if len(cells) > 3 else ()
        if problem := row_problem(cells, tokens, tags):
            problems.append(DataError(path, line, problem))
            continue
        utterance = Utterance(f"{uid_prefix}/{line}", tokens, tags, cells[4].strip())
        rows.append(NoisyRow(line, cells[0].strip(), utterance))
    return rows, problems
