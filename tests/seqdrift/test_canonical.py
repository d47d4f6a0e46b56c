"""One SeqDrift benchmark for everyone: the shipped canonical clusterings rebuild the
splits their manifest records, the default takes them, `drift.clusters` chooses, a computed
clustering does not follow the BLAS kernel, and concurrent processes compute a cache entry once."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import pytest

from integration_helpers import REPO, run_cli
from robustnlu.data.readers import load_corpus
from robustnlu.errors import ConfigError
from robustnlu.io import compute_once
from robustnlu.seqdrift import canonical, pipeline
from robustnlu.seqdrift.kmeans import stable_kmeans, tie_aware_argmin
from robustnlu.seqdrift.pipeline import make_drift_split
from racers import race_for_a_split, race_for_an_entry
from robustnlu.paths import DATA_DIR
from robustnlu.seqdrift.shipped import SHIPPED_DIR, manifest

SHIPPED = DATA_DIR / SHIPPED_DIR
SNIPS_CONTEXT = {"drift": "snips-slot_context"}


def test_every_canonical_clustering_is_shipped_with_its_checksums():
    entries = {e["name"]: e for e in manifest(SHIPPED).values()}
    assert sorted(entries) == sorted(canonical.CANONICAL)
    for entry in entries.values():
        path = SHIPPED / entry["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["file_sha256"]
        assert sorted(entry["splits"]) == sorted(entry["split_keys"]) == ["full-iid", "full-ood", "partial-iid", "partial-ood"]


@pytest.mark.parametrize("name", ["snips-slot_context", "atis-slot_value"])
def test_shipped_clusterings_rebuild_the_splits_of_the_manifest(name, capsys):
    """The split step is integer logic: the same clustering gives the same split.json bytes."""
    preset = canonical.load_preset(name)
    assert canonical.check(preset, SHIPPED)
    out = capsys.readouterr().out
    assert out.count("matches the manifest") == 4 and "DIFFERS" not in out


@pytest.fixture(scope="module")
def snips_cfg():
    return canonical.compose_run_config(["+experiment=snips_slot_context"])


@pytest.fixture(scope="module")
def snips(snips_cfg):
    return load_corpus(snips_cfg.dataset, REPO)


def no_clustering(utterances, cfg):
    raise AssertionError("the clustering was computed although a shipped one matches")


def test_the_default_takes_the_shipped_clustering(snips, snips_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "cluster_utterances", no_clustering)
    split = make_drift_split(snips, snips_cfg.drift, snips_cfg.validation, tmp_path, SHIPPED)
    record = split.info["clustering"]
    entry = manifest(SHIPPED)[record["clusters_key"]]
    assert record == {"source": "shipped", "clusters_key": entry["clusters_key"], "file": entry["file"],
                      "sha256": entry["clusters_sha256"]}
    assert hashlib.sha256(split.to_json().encode()).hexdigest() == entry["splits"]["full-iid"]
    # drift.clusters=shipped is the same split; nothing was computed (no cluster cache entry)
    shipped = make_drift_split(snips, {**snips_cfg.drift, "clusters": "shipped"}, snips_cfg.validation, tmp_path, SHIPPED)
    assert shipped.to_json() == split.to_json()
    assert not (tmp_path / "seqdrift" / "clusters").exists()


def test_clusters_shipped_refuses_a_config_without_one_and_compute_computes(snips, snips_cfg, tmp_path, monkeypatch):
    other_seed = {**snips_cfg.drift, "seed": 1, "clusters": "shipped"}
    with pytest.raises(ConfigError, match="drift.clusters: no shipped clustering"):
        make_drift_split(snips, other_seed, snips_cfg.validation, tmp_path, SHIPPED)
    calls = []
    entry = next(e for e in manifest(SHIPPED).values() if e["name"] == "snips-slot_context")

    def from_the_shipped_file(utterances, cfg):  # the shipped ids, so that only the source differs
        calls.append(len(utterances))
        return canonical.shipped_of(canonical.preset_of(snips_cfg, "snips"), SHIPPED).ids

    monkeypatch.setattr(pipeline, "cluster_utterances", from_the_shipped_file)
    computed = make_drift_split(snips, {**snips_cfg.drift, "clusters": "compute"}, snips_cfg.validation, tmp_path, SHIPPED)
    assert calls == [entry["n_utterances"]] and computed.info["clustering"]["source"] == "computed"
    assert computed.info["clustering"]["sha256"] == entry["clusters_sha256"]
    # same clusters, other source: another key, so a machine's computed split never poses as the canonical one
    shipped = make_drift_split(snips, snips_cfg.drift, snips_cfg.validation, tmp_path, SHIPPED)
    assert shipped.key != computed.key
    assert shipped.assignments == computed.assignments


def test_a_damaged_shipped_file_is_an_error_naming_it(snips, snips_cfg, tmp_path):
    from robustnlu.errors import DataError

    damaged = tmp_path / "shipped"
    damaged.mkdir()
    for path in SHIPPED.iterdir():
        (damaged / path.name).write_bytes(path.read_bytes())
    entry = next(e for e in manifest(SHIPPED).values() if e["name"] == "snips-slot_context")
    target = damaged / entry["file"]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 1  # one bit flipped
    target.write_bytes(bytes(data))
    with pytest.raises(DataError, match=f"{entry['file']}: sha256 differs"):
        make_drift_split(snips, snips_cfg.drift, snips_cfg.validation, tmp_path, damaged)


# --------------------------------------------------------------------------- the computed clustering


def test_tie_aware_argmin_takes_the_lowest_index_among_near_ties():
    values = np.array([[3.0, 1.0 + 1e-12, 1.0, 2.0], [1.0, 1.0 + 1e-6, 0.5, 0.5]])
    # row 0: columns 1 and 2 differ by 1e-12 < 1e-9 x 4: tied, 1 wins; row 1: 2 and 3 tie exactly
    np.testing.assert_array_equal(tie_aware_argmin(values, np.array([4.0, 1.0])), [1, 2])
    # a relative difference above the tolerance is no tie
    np.testing.assert_array_equal(tie_aware_argmin(np.array([[1.0 + 1e-7, 1.0]]), 1.0), [1])


def test_stable_kmeans_does_not_follow_last_bit_noise():
    """Near-equal optima (k = 40 on structureless points, with exact duplicates): labels must not
    move when every coordinate is perturbed by relative 1e-14, as another BLAS kernel does."""
    rng = np.random.default_rng(0)
    X = rng.random((300, 6))
    X = np.vstack([X, X[:60]])  # exact duplicates: exact distance ties
    reference = stable_kmeans(X, 40, np.random.RandomState(3))
    assert len(set(reference.tolist())) == 40
    for trial in range(4):
        noise = 1 + 1e-14 * np.random.default_rng(trial).standard_normal(X.shape)
        np.testing.assert_array_equal(stable_kmeans(X * noise, 40, np.random.RandomState(3)), reference)
    assert (stable_kmeans(X, 40, np.random.RandomState(4)) != reference).any()  # the seed matters


def test_stable_kmeans_is_as_good_as_scikit_learn():
    from sklearn.cluster import k_means

    rng = np.random.default_rng(1)
    X = np.vstack([rng.normal(c, 0.3, size=(40, 4)) for c in rng.normal(0, 3, size=(12, 4))])
    labels = stable_kmeans(X, 12, np.random.RandomState(0))
    ours = sum(((X[labels == c] - X[labels == c].mean(0)) ** 2).sum() for c in range(12))
    theirs = k_means(X, 12, random_state=0, n_init=10)[2]
    assert ours <= theirs * 1.01


def test_the_atis_clustering_is_the_shipped_one_under_another_blas_kernel(tmp_path):
    """`python -m robustnlu.seqdrift --verify` under OPENBLAS_CORETYPE=Haswell (other kernels than
    this machine's default; scikit-learn's k-means gave ARI 0.44 on SNIPS across these two)."""
    proc = run_cli(["dataset=atis", "drift=slot_context", "--verify", f"hydra.run.dir={tmp_path / 'run'}"],
                   cwd=tmp_path, module="robustnlu.seqdrift",
                   env={"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "atis-slot_context: the clustering computed here is identical" in proc.stdout


# --------------------------------------------------------------------------- concurrent caches


def test_compute_once_under_racing_processes(tmp_path):
    result, log = tmp_path / "entry", tmp_path / "log"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        answers = pool.map(race_for_an_entry, [(str(result), str(log), 1.0)] * 4)
    computed = log.read_text().split()
    assert len(computed) == 1  # one process computed, the others waited for its result
    assert {text for _, text in answers} == {f"computed by {computed[0]}"}
    assert not Path(f"{result}.claim").exists()


def test_a_dead_owners_claim_is_taken_over(tmp_path):
    result = tmp_path / "entry"
    claim = Path(f"{result}.claim")
    claim.write_text("elsewhere 1\n")
    os.utime(claim, (time.time() - 10, time.time() - 10))  # not touched for 10 s
    value = compute_once(result, lambda: None, lambda: "mine", stale_s=5, poll_s=0.01)
    assert value == "mine" and not claim.exists()


@pytest.mark.filterwarnings("ignore:eigenvalues .* coincide")
def test_racing_jobs_compute_one_split_and_one_clustering(tmp_path):
    """Three processes start on the same split at once (a Slurm array): one clustering, one
    split, the same bytes everywhere."""
    cache, log = tmp_path / "cache", tmp_path / "log"
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        texts = pool.map(race_for_a_split, [(str(cache), str(log))] * 3)
    assert log.read_text().split() == ["clustered"]
    assert len(set(texts)) == 1
    assert json.loads(texts[0])["info"]["clustering"]["source"] == "computed"
    assert len(list((cache / "seqdrift").glob("*/split.json"))) == 1
    assert not list((cache / "seqdrift").rglob("*.claim"))
