"""The canonical SeqDrift clusterings shipped in ``data/seqdrift/`` (one benchmark for everyone).

A computed clustering can depend on the machine (the BLAS kernel decides float ties; README
"One benchmark for everyone"), so the clusterings of the presets (``+experiment=<dataset>_slot_
<kind>``, drift seed 0) ship with the data: ``data/seqdrift/<dataset>-<kind>.clusters.json.gz``
holds uid -> cluster id of the filtered utterances, and ``MANIFEST.json`` lists each file with
its `clusters_key` (the filtered corpus, the clustering options and `CLUSTERS_VERSION`), its
sha256 and the sha256 of the ``split.json`` of every scenario built from it. The split step
(integer logic) turns a clustering into the same split on every machine.

``drift.clusters`` chooses: ``auto`` (default) takes the shipped clustering whose key matches and
computes one otherwise (another dataset, config or seed); ``shipped`` requires the shipped one;
``compute`` always computes (then cached, `robustnlu.seqdrift.artifact`). The files are written,
and checked against a fresh computation, by ``python -m robustnlu.seqdrift.canonical``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from robustnlu.errors import DataError
from robustnlu.io import atomic_write_json, atomic_write_with
from robustnlu.seqdrift.artifact import Clustering

SHIPPED_DIR = Path("data") / "seqdrift"  # relative to the repository root (paths.root)
MANIFEST_FILE = "MANIFEST.json"
FORMAT = "robustnlu-seqdrift-clusters/1"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@lru_cache(maxsize=8)
def _manifest(path: Path, mtime_ns: int) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return {entry["clusters_key"]: entry for entry in doc["clusterings"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(path, None, f"not a readable clusterings manifest ({err})") from err


def manifest(shipped_dir: str | Path) -> dict[str, dict[str, Any]]:
    """clusters_key -> manifest entry of every shipped clustering ({} if there is no manifest)."""
    path = Path(shipped_dir) / MANIFEST_FILE
    if not path.is_file():
        return {}
    return _manifest(path, path.stat().st_mtime_ns)


def shipped_clustering(shipped_dir: str | Path, key: str, uids: Sequence[str]) -> Clustering | None:
    """The shipped clustering of ``key`` (checksum-checked), or None if none is shipped."""
    entry = manifest(shipped_dir).get(key)
    if entry is None:
        return None
    path = Path(shipped_dir) / entry["file"]
    if not path.is_file():
        raise DataError(path, None, f"listed in {MANIFEST_FILE} but missing")
    if file_sha256(path) != entry["file_sha256"]:
        raise DataError(path, None, f"sha256 differs from {MANIFEST_FILE}: the file is damaged or was changed")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    if doc["uids"] != list(uids):
        raise DataError(path, None, "its uids differ from the filtered corpus although the key matches")
    return Clustering(tuple(uids), np.asarray(doc["clusters"], dtype=np.int64), "shipped", key, entry["file"])


def write_clustering(shipped_dir: str | Path, name: str, clustering: Clustering, options: dict[str, Any]) -> Path:
    """``<name>.clusters.json.gz``, byte for byte the same for the same clustering (gzip mtime 0)."""
    doc = {"clusters": [int(c) for c in clustering.ids], "clusters_key": clustering.key, "format": FORMAT,
           "options": options, "uids": list(clustering.uids)}
    data = gzip.compress(json.dumps(doc, sort_keys=True).encode("utf-8"), compresslevel=9, mtime=0)
    return atomic_write_with(Path(shipped_dir) / f"{name}.clusters.json.gz", lambda f: f.write(data))


def write_manifest(shipped_dir: str | Path, entries: list[dict[str, Any]]) -> Path:
    return atomic_write_json(Path(shipped_dir) / MANIFEST_FILE, {"clusterings": entries, "format": FORMAT})


__all__ = ["FORMAT", "MANIFEST_FILE", "SHIPPED_DIR", "manifest", "shipped_clustering", "write_clustering", "write_manifest"]
