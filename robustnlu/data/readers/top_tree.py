"""``format: top_tree``: TOP (Gupta et al. 2018) and TOPv2 (Chen et al. 2020) bracketed trees.

A tree such as ``[IN:GET_EVENT [SL:CATEGORY_EVENT Art fairs ] in [SL:LOCATION Detroit ] ]``
is flattened to its leaf tokens with BIO tags (``B-CATEGORY_EVENT I-CATEGORY_EVENT O
B-LOCATION``) and the intent ``GET_EVENT``. Like the core paper (section 5.1, Table 6: "For
TOP we only use non-nested intents"), only trees with exactly one intent are kept; nested
trees are skipped (counted and logged), since a flat intent + BIO labelling cannot hold them.
Every tree is still parsed, so a malformed nested tree is reported, not silently dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustnlu.data.readers.common import (
    Row,
    SplitRows,
    config_value,
    make_uid,
    read_lines,
    split_mapping,
    whitespace_problem,
)
from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.io import data_file

logger = logging.getLogger(__name__)

TREE, TOKENIZED, DOMAIN = "tree", "tokenized", "domain"
"""Column roles the reader uses; other column names (``raw``, ``utterance``) are ignored."""


class TreeSyntaxError(ValueError):
    """A TOP tree that does not parse; the message is the problem (no file or line)."""


@dataclass(frozen=True)
class ParsedTree:
    """A parsed tree: its root intent, leaf tokens, how many intents it holds, and the flat
    BIO tags of its leaves (words in ``[SL:Y ...]`` get B-Y/I-Y, words directly under the
    intent get O). The tags are the tree's labelling only when ``n_intents == 1``.

    An empty slot ``[SL:Y ]`` labels no word and leaves no trace in the tags (TOPv2 has 24
    such rows, e.g. alarm_train.tsv line 3071; TOP has none).
    """

    intent: str
    tokens: list[str]
    tags: list[str]
    n_intents: int


@dataclass(slots=True)
class _OpenLabel:
    kind: str  # "IN" or "SL"
    name: str
    n_words: int = 0


def parse_tree(tree: str) -> ParsedTree:
    """Parse a whitespace-separated TOP tree.

    Grammar: the root is an intent; an intent holds words and slots, a slot holds words and
    intents; every ``[IN:<name>``/``[SL:<name>`` is closed by a ``]`` token.
    """
    stack: list[_OpenLabel] = []
    intent: str | None = None
    tokens: list[str] = []
    tags: list[str] = []
    n_intents = 0
    for token in tree.split():
        if token == "]":
            if not stack:
                raise TreeSyntaxError("unbalanced brackets: ']' without a matching '['")
            stack.pop()
        elif token.startswith("["):
            kind, colon, name = token[1:].partition(":")
            if kind not in ("IN", "SL") or not colon:
                raise TreeSyntaxError(f"{token!r}: '[' must open [IN:<name> or [SL:<name>")
            if not name:
                raise TreeSyntaxError(f"label token {token!r} has no name")
            if not stack:
                if intent is not None:
                    raise TreeSyntaxError(f"{token!r} outside the root intent")
                if kind != "IN":
                    raise TreeSyntaxError(f"the root must be an intent [IN:<name>, got {token!r}")
                intent = name
            elif stack[-1].kind == kind:
                raise TreeSyntaxError(f"{token!r} directly inside [{kind}:{stack[-1].name}")
            stack.append(_OpenLabel(kind, name))
            n_intents += kind == "IN"
        else:
            if not stack:
                raise TreeSyntaxError(f"word {token!r} outside the root intent")
            parent = stack[-1]
            tokens.append(token)
            prefix = "I" if parent.n_words else "B"
            tags.append("O" if parent.kind == "IN" else f"{prefix}-{parent.name}")
            parent.n_words += 1
    if intent is None:
        raise TreeSyntaxError("empty tree")
    if stack:
        raise TreeSyntaxError(f"unbalanced brackets: {len(stack)} '[' not closed")
    return ParsedTree(intent, tokens, tags, n_intents)


@dataclass(frozen=True)
class TreeFileLayout:
    """How one dataset's TSV files are laid out (column roles, header) and named."""

    dataset: str
    columns: list[str]
    header: list[str] | None  # the header row's column names, checked; None: no header row
    domain: str | None

    def read(self, name: Path) -> list[Row]:
        """Rows of the non-nested trees of the file ``name`` (`data_file`: or its compressed
        copy); uids count every data row (header excluded), so skipped nested rows leave gaps."""
        path = data_file(name)
        lines = read_lines(path)
        first = 1 if self.header else 0
        if self.header and lines[0].split("\t") != self.header:
            raise DataError(path, 1, f"header {'|'.join(lines[0].split(chr(9)))!r}, expected "
                                     f"{'|'.join(self.header)!r} (dataset.header)")
        if len(lines) <= first:
            raise DataError(path, first + 1, "no data rows after the header")
        rows = []
        for index, text in enumerate(lines[first:]):
            line = first + index + 1
            uid = make_uid(self.dataset, name.stem, index)
            if utterance := self.parse_row(path, line, text, uid):
                rows.append(Row(utterance, path, line))
        n_rows = len(lines) - first
        if not rows:
            raise DataError(path, None, f"all {n_rows} trees are nested: no non-nested row to keep")
        logger.info(
            "%s: kept %d non-nested trees, skipped %d nested (of %d rows)",
            path, len(rows), n_rows - len(rows), n_rows,
        )
        return rows

    def check_columns(self, path: Path, line: int, text: str) -> list[str]:
        cells = text.split("\t")
        if len(cells) != len(self.columns):
            raise DataError(
                path,
                line,
                f"expected {len(self.columns)} tab-separated columns "
                f"({', '.join(self.columns)}), got {len(cells)}",
            )
        return cells

    def parse_row(self, path: Path, line: int, text: str, uid: str) -> Utterance | None:
        """The row's utterance, or None for a (valid) nested tree."""
        cell = dict(zip(self.columns, self.check_columns(path, line, text)))
        for role in (TREE, TOKENIZED):
            if role in cell and (problem := whitespace_problem(cell[role])):
                raise DataError(path, line, f"{role} column: {problem}")
        try:
            tree = parse_tree(cell[TREE])
        except TreeSyntaxError as err:
            raise DataError(path, line, str(err)) from None
        if TOKENIZED in cell and tree.tokens != cell[TOKENIZED].split():
            raise DataError(
                path,
                line,
                f"tree leaves {' '.join(tree.tokens)!r} differ from the tokenized column "
                f"{cell[TOKENIZED]!r}",
            )
        if tree.n_intents != 1:
            return None
        if not tree.tokens:
            raise DataError(path, line, "empty utterance (the tree has no words)")
        domain = cell.get(DOMAIN, self.domain)
        if DOMAIN in cell and self.domain is not None and domain != self.domain:
            raise DataError(path, line, f"domain column is {domain!r}, expected {self.domain!r}")
        return Utterance(uid, tuple(tree.tokens), tuple(tree.tags), tree.intent, domain)


def read_top_tree(cfg: Mapping[str, Any], root: Path) -> SplitRows:
    """Read ``<path>/<file>`` for each split of ``dataset.files``.

    ``dataset.columns`` names each tab-separated column; the ``tree`` column is required, a
    ``tokenized`` column (TOP v1) must equal the tree's leaves, a ``domain`` column (TOPv2)
    must equal ``dataset.domain``. ``dataset.header``: the names of the header row's columns,
    which every file's first row must hold (false or null: no header row).
    """
    columns = list(config_value(cfg, "columns"))
    if TREE not in columns:
        raise ConfigError(f"dataset.columns must name a {TREE!r} column, got {columns}")
    header = cfg.get("header") or None
    if header is not None and (isinstance(header, str) or not isinstance(header, Sequence)
                               or [str(h) for h in header] != list(header) or len(header) != len(columns)):
        raise ConfigError(f"dataset.header: the {len(columns)} column names of the files' header row, or false "
                          f"(got {header!r})")
    layout = TreeFileLayout(
        dataset=config_value(cfg, "name"),
        columns=columns,
        header=list(header) if header else None,
        domain=cfg.get("domain"),
    )
    base = root / config_value(cfg, "path")
    return {split: layout.read(base / file) for split, file in split_mapping(cfg, "files").items()}
