"""Helpers every format reader shares: strict UTF-8 line reading, uids, tag checks, config
access and carving a seeded dev split out of train."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustnlu.data.bio import bio_problem
from robustnlu.data.utterance import SPLITS, Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.io import read_data

_MISSING = "???"  # OmegaConf's mandatory-value marker, kept as a string by to_container
_NOT_A_SPACE = re.compile(r"[^\S ]")  # whitespace other than the plain space
_UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Row:
    """An utterance and where it was read (file, 1-based line), for precise duplicate errors."""

    utterance: Utterance
    path: Path
    line: int


SplitRows = dict[str, list[Row]]
"""A reader's result: the rows of each split in `SPLITS`, in file order."""

FormatReader = Callable[[Mapping[str, Any], Path], SplitRows]
"""``reader(dataset_cfg, root)``: one per ``dataset.format``."""


def read_lines(path: Path) -> list[str]:
    """The lines of ``path`` (without line ends; a final newline adds no line), decoded strictly
    as UTF-8 (a leading BOM is dropped); a ``.xz`` or ``.gz`` file is decompressed first
    (`robustnlu.io.read_data`), and its line numbers count the decompressed lines. Raises
    DataError for a missing, unreadable, corrupt, non-UTF-8 or empty file. A reader finds the
    file a config names with `robustnlu.io.data_file` (``train.tsv``, else ``train.tsv.xz``...)."""
    data = read_data(path).removeprefix(_UTF8_BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        line = data.count(b"\n", 0, err.start) + 1
        offset = err.start - line_start + 1
        problem = f"not valid UTF-8: byte 0x{data[err.start]:02x} at byte {offset} of the line"
        raise DataError(path, line, problem) from None
    if not text.strip():
        raise DataError(path, 1, "empty file")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def whitespace_problem(text: str) -> str | None:
    """Why ``text``, a space-separated token sequence, is not one: a tab, no-break space or other
    whitespace that a plain ``split()`` would silently take as a separator; or None."""
    if (found := _NOT_A_SPACE.search(text)) is None:
        return None
    char = found.group()
    name = unicodedata.name(char, f"U+{ord(char):04X}")
    return f"{name} ({char!r}) at character {found.start() + 1}: tokens are separated by plain spaces only"


def split_tokens(text: str, path: Path, line: int, what: str) -> list[str]:
    """The space-separated tokens of ``text`` (line ``line`` of ``path``; ``what`` names the
    field in the message); other whitespace inside raises DataError (`whitespace_problem`)."""
    if problem := whitespace_problem(text):
        raise DataError(path, line, f"{what}: {problem}")
    return text.split()


def make_uid(dataset: str, source: str, index: int) -> str:
    """``<dataset>-<source>-<index>``: ``source`` names the original file's split (``train``,
    ``dev``, ``eval``, ``movie_train``...), ``index`` is the 0-based row in that file."""
    return f"{dataset}-{source}-{index:05d}"


def tag_problem(tokens: Sequence[str], tags: Sequence[str]) -> str | None:
    """Why ``tags`` cannot label ``tokens`` (count mismatch, invalid BIO, no tokens), or None."""
    if not tokens:
        return "empty utterance (no tokens)"
    if len(tokens) != len(tags):
        return f"{len(tags)} tags for {len(tokens)} tokens"
    problem = bio_problem(tags)
    return None if problem is None else f"invalid BIO: {problem}"


def config_value(cfg: Mapping[str, Any], key: str) -> Any:
    """``cfg[key]``, which must be set (not absent, null or ``???``)."""
    value = cfg.get(key)
    if value is None or value == _MISSING:
        raise ConfigError(f"dataset.{key} must be set")
    return value


def split_mapping(
    cfg: Mapping[str, Any], key: str, splits: Sequence[str] = SPLITS
) -> dict[str, str]:
    """``cfg[key]`` as ``{split: name}``, one non-empty string for each of ``splits``."""
    mapping = config_value(cfg, key)
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"dataset.{key} must map each of {list(splits)} to a name")
    names: dict[str, str] = {}
    for split in splits:
        name = mapping.get(split)
        if not isinstance(name, str) or not name or name == _MISSING:
            raise ConfigError(f"dataset.{key}.{split} must be a file or folder name")
        names[split] = name
    return names


def carve_valid(train: list[Row], cfg: Mapping[str, Any]) -> tuple[list[Row], list[Row]]:
    """Split ``train`` into (train, valid) for datasets without a dev set.

    ``round(dataset.dev_fraction * len(train))`` rows go to valid: those with the smallest
    SHA-256 of ``"<dataset.dev_seed>:<uid>"``. The draw depends only on the seed and the uids,
    not on the Python version or the training seed, so a benchmark's dev split is fixed.
    Both parts keep file order and the original train uids.
    """
    fraction = config_value(cfg, "dev_fraction")
    seed = config_value(cfg, "dev_seed")
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise ConfigError(f"dataset.dev_fraction must be a number in (0, 1), got {fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"dataset.dev_seed must be an integer, got {seed!r}")
    n_valid = round(fraction * len(train))
    if not 0 < n_valid < len(train):
        raise ConfigError(
            f"dataset.dev_fraction={fraction} of {len(train)} training utterances "
            f"gives {n_valid} valid utterances; need at least one in train and in valid"
        )

    def draw_key(row: Row) -> str:
        return hashlib.sha256(f"{seed}:{row.utterance.uid}".encode()).hexdigest()

    valid_rows = set(sorted(range(len(train)), key=lambda i: draw_key(train[i]))[:n_valid])
    return (
        [row for i, row in enumerate(train) if i not in valid_rows],
        [row for i, row in enumerate(train) if i in valid_rows],
    )
