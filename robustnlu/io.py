"""Atomic output: every file is written to a temporary sibling and renamed into place, so a
crash or a bad input never leaves a half-written result behind."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

UMASK = os.umask(0)  # read once (os.umask can only be read by setting it) and restored at once
os.umask(UMASK)


def atomic_write_with(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(file)`` on a temporary sibling of ``path`` opened in binary mode, then
    ``os.replace`` it into place (the temporary file is removed if ``write`` fails). The file
    gets the permissions of a plain ``open`` (0666 minus the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~UMASK)  # mkstemp's 0600 would hide results from colleagues
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file in the same folder and ``os.replace``."""
    return atomic_write_with(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
