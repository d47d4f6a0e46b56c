"""A shipped clustering (robustnlu/seqdrift/shipped.py) is used only as the manifest lists it
(the file's sha256, the sha256 of its uid -> cluster rows) and only for the filtered corpus it
was made for: the same uids in the same order, or a `DataError` naming the file."""

from __future__ import annotations

import numpy as np
import pytest

from robustnlu.errors import DataError
from robustnlu.seqdrift.artifact import Clustering
from robustnlu.seqdrift.shipped import file_sha256, shipped_clustering, write_clustering, write_manifest

KEY = "k" * 64
UIDS = ("hand-train-0", "hand-train-1", "hand-train-2", "hand-test-0")
IDS = [0, 1, 0, -1]


def ship(folder, uids=UIDS, ids=IDS, rows_sha256=None):
    """A shipped clustering of ``uids`` under `KEY`, with its manifest (which records
    ``rows_sha256`` as its clusters_sha256 when given)."""
    clustering = Clustering(tuple(uids), np.asarray(ids), "shipped", KEY)
    path = write_clustering(folder, "hand-slot_context", clustering, {"n_clusters": 2})
    write_manifest(folder, [{"clusters_key": KEY, "clusters_sha256": rows_sha256 or clustering.sha256, "file": path.name,
                             "file_sha256": file_sha256(path), "name": "hand-slot_context", "split_keys": {}, "splits": {}}])
    return path


def test_the_shipped_clustering_of_the_same_uids_is_used(tmp_path):
    path = ship(tmp_path)
    clustering = shipped_clustering(tmp_path, KEY, UIDS)
    assert clustering.uids == UIDS and clustering.ids.tolist() == IDS
    assert (clustering.source, clustering.key, clustering.file) == ("shipped", KEY, path.name)
    assert shipped_clustering(tmp_path, "x" * 64, UIDS) is None  # no clustering shipped for that key


@pytest.mark.parametrize("uids", [
    (UIDS[1], UIDS[0], *UIDS[2:]),  # the same uids, two of them swapped: the ids would go to the wrong utterances
    UIDS[:3],  # one missing
    (*UIDS, "hand-test-1"),  # one more
    (*UIDS[:3], "hand-test-9"),  # one other
], ids=["swapped", "missing", "extra", "other"])
def test_a_shipped_clustering_of_other_uids_is_refused(uids, tmp_path):
    path = ship(tmp_path)
    with pytest.raises(DataError) as err:
        shipped_clustering(tmp_path, KEY, uids)
    assert err.value.path == str(path)
    assert err.value.problem == "its uids differ from the filtered corpus although the key matches"


def test_a_shipped_clustering_whose_rows_differ_from_the_manifest_is_refused(tmp_path):
    """The file's own sha256 matches its manifest line, but not its rows' (a file replaced and
    its file_sha256 updated by hand)."""
    other_rows = Clustering(UIDS, np.asarray([1, 0, 1, -1]), "shipped", KEY).sha256
    path = ship(tmp_path, rows_sha256=other_rows)
    with pytest.raises(DataError) as err:
        shipped_clustering(tmp_path, KEY, UIDS)
    assert err.value.path == str(path)
    assert "its uid -> cluster rows differ from the clusters_sha256 in MANIFEST.json" in err.value.problem
