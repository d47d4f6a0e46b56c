"""``format: jsonl``: the user's own data, one JSON object per line::

    {"tokens": ["wake", "me", "at", "7"], "tags": ["O", "O", "O", "B-time"],
     "intent": "set_alarm", "uid": "optional", "domain": "optional"}

``dataset.train`` and ``dataset.test`` are required; ``dataset.valid`` may be null, and then
valid is carved from train (`carve_valid`). Blank lines are skipped.
"""

from __future__ import annotations

import json
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
    tag_problem,
)
from robustnlu.data.utterance import Utterance
from robustnlu.errors import DataError
from robustnlu.io import data_file


def read_jsonl(cfg: Mapping[str, Any], root: Path) -> SplitRows:
    """Read ``dataset.train``, ``dataset.valid`` (or carve it from train) and ``dataset.test``."""
    name = config_value(cfg, "name")

    def read(split: str) -> list[Row]:
        return read_jsonl_file(root / config_value(cfg, split), name, split)

    if cfg.get("valid") is None:
        train, valid = carve_valid(read("train"), cfg)
    else:
        train, valid = read("train"), read("valid")
    return {"train": train, "valid": valid, "test": read("test")}


def read_jsonl_file(path: Path, dataset: str, split: str) -> list[Row]:
    """The utterances of the file ``path`` (`data_file`: or its compressed copy); a missing uid
    becomes ``<dataset>-<split>-<0-based line index>``."""
    path = data_file(path)
    rows = []
    for index, text in enumerate(read_lines(path)):
        if text.strip():
            line = index + 1
            try:
                utterance = parse_record(text, make_uid(dataset, split, index))
            except ValueError as err:
                raise DataError(path, line, str(err)) from None
            rows.append(Row(utterance, path, line))
    return rows


def is_token(value: object) -> bool:
    """A non-empty string without whitespace (a token or a tag)."""
    return isinstance(value, str) and value.split() == [value]


def parse_record(text: str, default_uid: str) -> Utterance:
    """One JSON line as an Utterance; raises ValueError naming the problem."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"invalid JSON: {err.msg} (column {err.colno})") from None
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    for key in ("tokens", "tags", "intent"):
        if key not in record:
            raise ValueError(f"missing key {key!r}")
    tokens, tags, intent = record["tokens"], record["tags"], record["intent"]
    for key, items in (("tokens", tokens), ("tags", tags)):
        if not isinstance(items, list) or not all(is_token(x) for x in items):
            raise ValueError(f"{key!r} must be a list of non-empty strings without whitespace")
    if problem := tag_problem(tokens, tags):
        raise ValueError(problem)
    if not isinstance(intent, str) or not intent.strip():
        raise ValueError("'intent' must be a non-empty string")
    uid, domain = record.get("uid"), record.get("domain")
    for key, value in (("uid", uid), ("domain", domain)):
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise ValueError(f"{key!r} must be a non-empty string when given")
    return Utterance(uid or default_uid, tuple(tokens), tuple(tags), intent, domain)
