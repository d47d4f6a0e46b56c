"""Dataset readers: `load_corpus` turns a ``dataset`` config into a `Corpus`.

One module per on-disk format, chosen by ``dataset.format``:

- ``bio_lines`` (SNIPS, ATIS): `robustnlu.data.readers.bio_lines`
- ``top_tree`` (TOP, TOPv2; non-nested trees only): `robustnlu.data.readers.top_tree`
- ``conll_bio`` (MIT Movie + MIT Restaurant): `robustnlu.data.readers.conll_bio`
- ``jsonl`` (the user's own data): `robustnlu.data.readers.jsonl`

Compressed files: a config names each file by its uncompressed name (``train.tsv``,
``seq.in``); a reader reads that file where it exists, else ``<name>.xz``, else ``<name>.gz``,
decompressed (`robustnlu.io.data_file`, `robustnlu.data.readers.common.read_lines`). The shipped
corpora are ``.xz`` (data/README.md); a user's uncompressed file, or one named with its
``.xz``/``.gz`` suffix, is read as well. Uids come from the configured name, so they are the
same either way; errors name the file read (``train.tsv.xz:12``: line 12 of the decompressed text).

Malformed input raises `DataError` (``file:line: problem``); a bad config raises `ConfigError`.
Readers only read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from robustnlu.data.readers.bio_lines import read_bio_lines
from robustnlu.data.readers.common import FormatReader, Row, SplitRows, config_value
from robustnlu.data.readers.conll_bio import read_conll_bio
from robustnlu.data.readers.jsonl import read_jsonl
from robustnlu.data.readers.top_tree import read_top_tree
from robustnlu.data.utterance import SPLITS, Corpus, Utterance
from robustnlu.errors import ConfigError, DataError

logger = logging.getLogger(__name__)

#: the most words an utterance may have: no encoder here has more than 512 positions, so a
#: longer one cannot be encoded whole by any of them; it is a formatting error (e.g. a missing
#: line break), not a spoken utterance. Longer than ``data.max_length`` sub-tokens but within
#: this limit: `robustnlu.data.collate.encode_utterances` warns.
MAX_WORDS = 512

READERS: dict[str, FormatReader] = {
    "bio_lines": read_bio_lines,
    "top_tree": read_top_tree,
    "conll_bio": read_conll_bio,
    "jsonl": read_jsonl,
}


def load_corpus(dataset_cfg: Mapping[str, Any], root: Path = Path()) -> Corpus:
    """Read the dataset described by ``dataset_cfg`` (a dict or the Hydra ``cfg.dataset``).

    Relative paths in the config are read from ``root``, by default the current folder (where
    the user runs the command; the shipped configs give their files under ``paths.data_dir``:
    `robustnlu.paths`). Every uid of the corpus is unique across its splits.
    """
    cfg = dataset_cfg
    if isinstance(cfg, DictConfig):  # mandatory values (???) stay the string "???"
        cfg = OmegaConf.to_container(cfg, resolve=True)
    name = config_value(cfg, "name")
    fmt = config_value(cfg, "format")
    if fmt not in READERS:
        raise ConfigError(f"dataset.format: unknown format {fmt!r}; one of {sorted(READERS)}")
    splits = READERS[fmt](cfg, Path(root))
    check_unique_uids(splits)
    corpus = Corpus(name, *([located(row) for row in splits[split]] for split in SPLITS))
    logger.info(
        "dataset %s: %s utterances, %d intents",
        name,
        " / ".join(f"{len(corpus.split(s)):,} {s}" for s in SPLITS),
        len(corpus.intents()),
    )
    return corpus


def located(row: Row) -> Utterance:
    """The row's utterance with its ``file:line``; more than `MAX_WORDS` words is a DataError."""
    if len(row.utterance.tokens) > MAX_WORDS:
        raise DataError(row.path, row.line, f"{len(row.utterance.tokens)} words: more than {MAX_WORDS}, the most "
                                            "an utterance may have (a missing line break?)")
    return replace(row.utterance, source=f"{row.path}:{row.line}")


def check_unique_uids(splits: SplitRows) -> None:
    """Raise DataError at the second occurrence of any uid (within or across splits)."""
    first_seen: dict[str, Row] = {}
    for split in SPLITS:
        for row in splits[split]:
            uid = row.utterance.uid
            if (first := first_seen.setdefault(uid, row)) is not row:
                where = f"{first.path}:{first.line}"
                raise DataError(row.path, row.line, f"duplicate uid {uid!r} (first at {where})")


__all__ = ["READERS", "load_corpus"]
