"""The canonical SeqDrift clusterings shipped in ``data/seqdrift/`` (one benchmark for everyone).

A computed clustering can depend on the machine (the BLAS kernel decides float ties; README
"One benchmark for everyone"), so the clusterings of the presets (``+experiment=<dataset>_slot_
<kind>``, drift seed 0) ship with the data: ``data/seqdrift/<dataset>-<kind>.clusters.json.gz``
holds uid -> cluster id of the filtered utterances, and ``MANIFEST.json`` lists each file with
its `clusters_key` (the filtered corpus, the clustering options and `CLUSTERS_VERSION`), its
sha256, and the cache key and the sha256 of the ``split.json`` of every scenario built from it.
The split step (integer logic) turns a clustering into the same split on every machine; a
canonical scenario's split, computed or read from the cache, is checked against the manifest
(`canonical_split`).

``drift.clusters`` chooses: ``auto`` (default) takes the shipped clustering whose key matches and
computes one otherwise (another dataset, config or seed); ``shipped`` requires the shipped one;
``compute`` always computes (then cached, `robustnlu.seqdrift.artifact`). The files are written,
and checked against a fresh computation, by ``python -m robustnlu.seqdrift.canonical``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from robustnlu.errors import DataError
from robustnlu.io import atomic_write_compressed, atomic_write_json
from robustnlu.seqdrift.artifact import Clustering
from robustnlu.seqdrift.entries import sha256_text

SHIPPED_DIR = Path("seqdrift")  # relative to the datasets' folder (paths.data_dir; robustnlu.paths.DATA_DIR)
MANIFEST_FILE = "MANIFEST.json"
FORMAT = "robustnlu-seqdrift-clusters/1"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: what every manifest entry must have, and its type (the rest is for people)
ENTRY_FIELDS = {"clusters_key": str, "clusters_sha256": str, "file": str, "file_sha256": str, "name": str,
                "split_keys": dict, "splits": dict}


@lru_cache(maxsize=8)
def _manifest(path: Path, mtime_ns: int) -> dict[str, dict[str, Any]]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["clusterings"]
        for entry in entries:
            wrong = [name for name, typ in ENTRY_FIELDS.items() if not isinstance(entry.get(name), typ)]
            if wrong or entry["split_keys"].keys() != entry["splits"].keys():
                raise ValueError(f"clustering {entry.get('name')!r}: {', '.join(wrong) or 'split_keys'} missing or wrong")
        return {entry["clusters_key"]: entry for entry in entries}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise DataError(path, None, f"not a readable clusterings manifest ({err})") from err


def manifest(shipped_dir: str | Path) -> dict[str, dict[str, Any]]:
    """clusters_key -> manifest entry of every shipped clustering ({} if there is no manifest)."""
    path = Path(shipped_dir) / MANIFEST_FILE
    if not path.is_file():
        return {}
    return _manifest(path, path.stat().st_mtime_ns)


def shipped_clustering(shipped_dir: str | Path, key: str, uids: Sequence[str]) -> Clustering | None:
    """The shipped clustering of ``key``, or None if none is shipped. The file must be the one
    the manifest lists (its sha256, then the sha256 of its uid -> cluster rows) and hold the
    uids of the filtered corpus in their order (the key matching, they can differ only if the
    manifest is wrong); otherwise `DataError`: a shipped file cannot be recomputed here."""
    entry = manifest(shipped_dir).get(key)
    if entry is None:
        return None
    path = Path(shipped_dir) / entry["file"]
    if not path.is_file():
        raise DataError(path, None, f"listed in {MANIFEST_FILE} but missing")
    if file_sha256(path) != entry["file_sha256"]:
        raise DataError(path, None, f"sha256 differs from {MANIFEST_FILE}: the file is damaged or was changed")
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        shipped = Clustering(tuple(doc["uids"]), np.asarray(doc["clusters"], dtype=np.int64), "shipped", key, entry["file"])
        if shipped.sha256 != entry["clusters_sha256"]:
            raise ValueError(f"its uid -> cluster rows differ from the clusters_sha256 in {MANIFEST_FILE}")
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError) as err:
        raise DataError(path, None, f"not the clusterings file {MANIFEST_FILE} lists ({err})") from err
    if shipped.uids != tuple(uids):
        raise DataError(path, None, "its uids differ from the filtered corpus although the key matches")
    return shipped


@dataclass(frozen=True)
class CanonicalSplit:
    """What the manifest records of one canonical scenario's ``split.json`` (a shipped
    clustering's full/partial x i.i.d./o.o.d. split, found by the split's cache key)."""

    manifest: Path
    name: str  # "<clustering> <scenario>", e.g. "snips-slot_context full-iid"
    sha256: str

    def mismatch(self, split_json: str) -> str | None:
        """None if ``split_json`` is this scenario's split.json, else what differs."""
        digest = sha256_text(split_json)
        if digest == self.sha256:
            return None
        return f"its sha256 {digest[:12]}... differs from the {self.sha256[:12]}... that {self.manifest} records for {self.name}"


def canonical_split(shipped_dir: str | Path, split_key: str) -> CanonicalSplit | None:
    """The manifest's record of the split whose cache key is ``split_key``; None if that split
    is no canonical scenario (another config, seed or corpus; a computed clustering)."""
    for entry in manifest(shipped_dir).values():
        for scenario, key in entry["split_keys"].items():
            if key == split_key:
                return CanonicalSplit(Path(shipped_dir) / MANIFEST_FILE, f"{entry['name']} {scenario}", entry["splits"][scenario])
    return None


def write_clustering(shipped_dir: str | Path, name: str, clustering: Clustering, options: dict[str, Any]) -> Path:
    """``<name>.clusters.json.gz``, byte for byte the same for the same clustering (gzip mtime 0)."""
    doc = {"clusters": [int(c) for c in clustering.ids], "clusters_key": clustering.key, "format": FORMAT,
           "options": options, "uids": list(clustering.uids)}
    return atomic_write_compressed(Path(shipped_dir) / f"{name}.clusters.json.gz",
                                   json.dumps(doc, sort_keys=True).encode("utf-8"))


def write_manifest(shipped_dir: str | Path, entries: list[dict[str, Any]]) -> Path:
    return atomic_write_json(Path(shipped_dir) / MANIFEST_FILE, {"clusterings": entries, "format": FORMAT})


__all__ = ["FORMAT", "MANIFEST_FILE", "SHIPPED_DIR", "CanonicalSplit", "canonical_split", "manifest", "shipped_clustering",
           "write_clustering", "write_manifest"]
