"""Cache entries that are checked before use: a folder of files and their ``SHA256SUMS``.

`write_entry` writes each file atomically, then ``SHA256SUMS`` (the format of ``sha256sum``, so
``sha256sum -c SHA256SUMS`` checks an entry by hand) last: a folder with ``SHA256SUMS`` is a
complete entry, one without it is none (being written, or interrupted). `read_entry` returns the
files' text only when every one of them is listed there and has that sha256; otherwise it raises
`UnusableEntry`, which says what is wrong. A cache recomputes such an entry; it never uses it: a
hand-edited ``split.json`` would otherwise pose as the split of the options its key stands for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from robustnlu.io import atomic_write_text

SUMS_FILE = "SHA256SUMS"


class UnusableEntry(ValueError):
    """A cache entry that exists but must not be used: ``str(err)`` is ``"<path>: <problem>"``."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_entry(folder: str | Path, files: Mapping[str, str]) -> Path:
    """Write ``files`` (name -> text) into ``folder``, then their ``SHA256SUMS``; return ``folder``.
    An older ``SHA256SUMS`` is removed first, so that no reader takes the folder for complete
    while its files are replaced."""
    folder = Path(folder)
    (folder / SUMS_FILE).unlink(missing_ok=True)
    for name, text in files.items():
        atomic_write_text(folder / name, text)
    atomic_write_text(folder / SUMS_FILE, "".join(f"{sha256_text(text)}  {name}\n" for name, text in sorted(files.items())))
    return folder


def _read_sums(path: Path) -> dict[str, str]:
    """name -> sha256 of a ``SHA256SUMS`` file; `UnusableEntry` if a line is not ``<sha256>  <name>``."""
    sums = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name:
            raise UnusableEntry(path, f"line {number} is not '<sha256>  <file name>'")
        sums[name] = digest
    return sums


def read_entry(folder: str | Path, names: Iterable[str]) -> dict[str, str] | None:
    """name -> text of the files ``names`` of the entry ``folder``, each checked against its
    ``SHA256SUMS`` line; None if there is no complete entry (no ``SHA256SUMS``)."""
    folder = Path(folder)
    sums_path = folder / SUMS_FILE
    try:
        sums = _read_sums(sums_path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise UnusableEntry(sums_path, f"unreadable ({err})") from err
    files = {}
    for name in names:
        path = folder / name
        if name not in sums:
            raise UnusableEntry(path, f"no sha256 recorded for it in {SUMS_FILE}")
        try:
            data = path.read_bytes()
        except OSError as err:
            raise UnusableEntry(path, f"unreadable ({err.strerror or err})") from err
        digest = hashlib.sha256(data).hexdigest()
        if digest != sums[name]:
            raise UnusableEntry(path, f"its sha256 {digest[:12]}... differs from the {sums[name][:12]}... recorded in "
                                      f"{SUMS_FILE} (edited or damaged since it was written)")
        try:
            files[name] = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UnusableEntry(path, f"not UTF-8 ({err})") from err
    return files


def parse_json(text: str) -> Any:
    """``json.loads``, with a ValueError that says the text is not JSON."""
    try:
        return json.loads(text)
    except ValueError as err:
        raise ValueError(f"not JSON ({err})") from err


def check_fields(obj: Any, types: Mapping[str, type], where: str) -> None:
    """ValueError unless ``obj`` (parsed JSON) is an object with exactly the fields of ``types``,
    each of its type (an int is no bool: JSON's ``true`` is no cluster id): a renamed or missing
    field is an error here, not a KeyError wherever the file is used."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: not a JSON object")
    if obj.keys() != types.keys():
        missing, unknown = sorted(types.keys() - obj.keys()), sorted(obj.keys() - types.keys())
        raise ValueError(f"{where}: fields missing {missing}, unknown {unknown}")
    for name, typ in types.items():
        value = obj[name]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise ValueError(f"{where}: {name} is {value!r}, not of type {typ.__name__}")


__all__ = ["SUMS_FILE", "UnusableEntry", "check_fields", "parse_json", "read_entry", "sha256_text", "write_entry"]
