"""``format: conll_bio``: ``TAG<TAB>word`` per line, a blank line between sentences (the MIT
Movie and MIT Restaurant corpora, Liu et al. 2013).

These corpora have no intents: each corpus is one intent and one domain (``movie``,
``restaurant``), so a dataset joining several corpora gets one intent per corpus. They have
no dev split either: valid is carved from the joined train (`carve_valid`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from robustnlu.data.readers.common import (
    Row,
    SplitRows,
    carve_valid,
    config_value,
    make_uid,
    read_lines,
    split_mapping,
)
from robustnlu.data.bio import bio_violation
from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.io import data_file


def read_conll_bio(cfg: Mapping[str, Any], root: Path) -> SplitRows:
    """Read ``<folder>/<file>`` for each corpus of ``dataset.corpora`` (intent -> folder) and
    each split of ``dataset.files`` (train, test); valid is carved from the joined train."""
    name = config_value(cfg, "name")
    corpora = config_value(cfg, "corpora")
    if not isinstance(corpora, Mapping) or not corpora:
        raise ConfigError("dataset.corpora must map each corpus (= intent) to its folder")
    files = split_mapping(cfg, "files", ("train", "test"))
    splits: dict[str, list[Row]] = {"train": [], "test": []}
    for corpus, folder in corpora.items():
        for split, file in files.items():
            path = root / folder / file
            splits[split] += read_conll_file(path, name, f"{corpus}_{path.stem}", corpus)
    train, valid = carve_valid(splits["train"], cfg)
    return {"train": train, "valid": valid, "test": splits["test"]}


def read_conll_file(path: Path, dataset: str, source: str, corpus: str) -> list[Row]:
    """The sentences of the file ``path`` (`data_file`: or its compressed copy); uids are
    ``<dataset>-<source>-<sentence index>``. An error names the line of the offending token, not
    the first line of its sentence."""
    path = data_file(path)
    rows: list[Row] = []
    tokens: list[str] = []
    tags: list[str] = []
    lines: list[int] = []  # each token's line

    def end_sentence() -> None:
        if violation := bio_violation(tags):
            index, problem = violation
            raise DataError(path, lines[index], f"invalid BIO in the sentence starting at line {lines[0]}: {problem}")
        uid = make_uid(dataset, source, len(rows))
        utterance = Utterance(uid, tuple(tokens), tuple(tags), intent=corpus, domain=corpus)
        rows.append(Row(utterance, path, lines[0]))
        tokens.clear()
        tags.clear()
        lines.clear()

    for line, text in enumerate(read_lines(path), start=1):
        if not text.strip():
            if tokens:
                end_sentence()
            continue
        cells = text.split("\t")
        if len(cells) != 2 or not all(c.strip() for c in cells):
            raise DataError(path, line, f"expected TAG<TAB>word, got {text!r}")
        tag, word = (c.strip() for c in cells)
        if any(c.isspace() for c in word):
            raise DataError(path, line, f"the word {word!r} holds white space: one word per line")
        tags.append(tag)
        tokens.append(word)
        lines.append(line)
    if tokens:
        end_sentence()
    return rows
