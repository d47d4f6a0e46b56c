"""``format: bio_lines``: the Goo et al. (2018) / JointBERT layout used by SNIPS and ATIS.

Each split folder holds three line-aligned files: ``seq.in`` (a space-tokenised utterance),
``seq.out`` (one BIO tag per token) and ``label`` (the intent).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from robustnlu.data.readers.common import (
    Row,
    SplitRows,
    config_value,
    make_uid,
    read_lines,
    split_mapping,
    split_tokens,
    tag_problem,
)
from robustnlu.data.utterance import Utterance
from robustnlu.errors import DataError
from robustnlu.io import data_file

FILES = ("seq.in", "seq.out", "label")


def read_bio_lines(cfg: Mapping[str, Any], root: Path) -> SplitRows:
    """Read ``<path>/<folder>/{seq.in,seq.out,label}`` for each split of ``dataset.folders``."""
    name = config_value(cfg, "name")
    base = root / config_value(cfg, "path")
    return {
        split: read_folder(base / folder, name, folder)
        for split, folder in split_mapping(cfg, "folders").items()
    }


def read_folder(folder: Path, dataset: str, source: str) -> list[Row]:
    """One split folder; uids are ``<dataset>-<source>-<line index>``."""
    seq_in, seq_out, label = (data_file(folder / f) for f in FILES)
    token_lines, tag_lines, intents = (read_lines(p) for p in (seq_in, seq_out, label))
    for path, lines in ((seq_out, tag_lines), (label, intents)):
        if len(lines) != len(token_lines):
            raise DataError(
                path,
                min(len(lines), len(token_lines)) + 1,
                f"line-count mismatch: {len(lines)} lines but seq.in has {len(token_lines)}",
            )
    rows = []
    for index, (token_line, tag_line, intent) in enumerate(zip(token_lines, tag_lines, intents)):
        line = index + 1
        tokens, tags = split_tokens(token_line, seq_in, line, "tokens"), split_tokens(tag_line, seq_out, line, "tags")
        if not tokens:
            raise DataError(seq_in, line, "empty utterance (no tokens)")
        if problem := tag_problem(tokens, tags):
            raise DataError(seq_out, line, problem)
        if not intent.strip():
            raise DataError(label, line, "empty intent label")
        uid = make_uid(dataset, source, index)
        rows.append(Row(Utterance(uid, tuple(tokens), tuple(tags), intent.strip()), seq_in, line))
    return rows
