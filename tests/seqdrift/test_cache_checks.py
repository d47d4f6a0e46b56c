"""A SeqDrift cache entry is used only if it is what was written for its key: its files match
the sha256 in its SHA256SUMS, parse whole (no missing, renamed or extra field, no value of the
wrong type or an unknown split name) and record the key, config and clustering they are stored
under; a canonical scenario's split is also the one MANIFEST.json records. Otherwise the entry
is recomputed with one log line saying why, and where that cannot help (the split built from a
shipped clustering differs from the manifest) the run stops with one ``error:`` line."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess

import pytest

from integration_helpers import FAST, REPO, SMALL_DRIFT, compose_config, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.errors import DataError
from robustnlu.seqdrift.artifact import CLUSTERS_FILE, SPLIT_FILE, STATS_FILE, artifact_dir, clusters_dir
from robustnlu.seqdrift.entries import SUMS_FILE
from robustnlu.seqdrift.pipeline import make_drift_split
from robustnlu.paths import DATA_DIR
from robustnlu.seqdrift.shipped import MANIFEST_FILE, SHIPPED_DIR, manifest
from robustnlu.train import run

RECOMPUTING = "recomputing the cache entry"


def resum(folder):
    """Rewrite ``SHA256SUMS`` to match the folder's files, as a user who edits knowingly would:
    only the content checks are left to catch the edit."""
    files = [p for p in sorted(folder.iterdir()) if p.name != SUMS_FILE]
    (folder / SUMS_FILE).write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in files))


def recomputations(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if RECOMPUTING in r.getMessage()]


def move_test_rows_to_train(text: str, n: int) -> str:
    """The first ``n`` test rows moved to train, the rest of the file unchanged."""
    return text.replace('"split": "test"', '"split": "train"', n)


def test_an_entry_lists_the_sha256_of_its_files_for_sha256sum(hand_corpus, spy_clusters, hand_drift, tmp_path):
    corpus, _ = hand_corpus
    split = make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path)
    for folder, names in ((artifact_dir(tmp_path, split.key), [SPLIT_FILE, STATS_FILE]),
                          (clusters_dir(tmp_path, split.info["clustering"]["clusters_key"]), [CLUSTERS_FILE])):
        expected = "".join(f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
        assert (folder / SUMS_FILE).read_text() == expected
        check = subprocess.run(["sha256sum", "-c", SUMS_FILE], cwd=folder, capture_output=True, text=True)
        assert check.returncode == 0 and check.stdout == "".join(f"{n}: OK\n" for n in names)
    assert (artifact_dir(tmp_path, split.key) / SPLIT_FILE).read_text() == split.to_json()


# (edit of the file, SHA256SUMS rewritten to match it, what the log line says)
SPLIT_EDITS = {
    "test rows moved to train": (SPLIT_FILE, lambda t: move_test_rows_to_train(t, 5), False,
                                 "recorded in SHA256SUMS (edited or damaged since it was written)"),
    "stats edited": (STATS_FILE, lambda t: t.replace('"size": 40', '"size": 45', 1), False, "recorded in SHA256SUMS"),
    "split name misspelt": (SPLIT_FILE, lambda t: t.replace('"split": "test"', '"split": "tset"'), True,
                            ": split 'tset' is not one of train, valid, test, removed"),
    "field renamed": (SPLIT_FILE, lambda t: t.replace('"rows": [', '"ros": ['), True,
                      "the file: fields missing ['rows'], unknown ['ros']"),
    "row field missing": (SPLIT_FILE, lambda t: t.replace('"in_drift": false, ', "", 1), True, "row 1: fields missing ['in_drift']"),
    "cluster as a string": (SPLIT_FILE, lambda t: re.sub(r'"cluster": (\d+)', r'"cluster": "\1"', t, count=1), True,
                            "row 1: cluster is '"),
    "in_drift as a number": (SPLIT_FILE, lambda t: t.replace('"in_drift": false', '"in_drift": 0', 1), True,
                             "in_drift is 0, not of type bool"),
    "uid twice": (SPLIT_FILE, lambda t: t.replace('"uid": "u0001"', '"uid": "u0000"'), True, "uid 'u0000' appears twice"),
    "truncated": (SPLIT_FILE, lambda t: t[:300], True, "not JSON"),
    "another seed": (SPLIT_FILE, lambda t: t.replace('"seed": 0', '"seed": 1', 1), True,
                     "it records another config than its key stands for"),
    "another clustering": (SPLIT_FILE, lambda t: t.replace('"source": "computed"', '"source": "shipped"', 1), True,
                           "it records another clustering than its key stands for"),
    "stats not an object": (STATS_FILE, lambda t: "[]\n", True, "stats.json: not a JSON object"),
}


@pytest.mark.parametrize("edit", SPLIT_EDITS)
def test_an_edited_split_entry_is_recomputed_not_used(edit, hand_corpus, spy_clusters, hand_drift, tmp_path, caplog):
    name, change, matching_sums, reason = SPLIT_EDITS[edit]
    corpus, _ = hand_corpus
    first = make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path)
    folder = artifact_dir(tmp_path, first.key)
    written = {p.name: p.read_bytes() for p in folder.iterdir()}
    edited = change((folder / name).read_text())
    assert edited != (folder / name).read_text()
    (folder / name).write_text(edited)
    if matching_sums:
        resum(folder)
    with caplog.at_level(logging.INFO, logger="robustnlu"):
        again = make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path)
    (line,) = recomputations(caplog)  # one line, although the entry is looked at twice (before and after the claim)
    assert f"{folder / name}: " in line and reason in line
    assert "reusing cached split" not in caplog.text
    assert again.to_json() == first.to_json() and again.stats == first.stats
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == written  # the entry as it was written
    assert spy_clusters == [400]  # the clustering's entry was sound: reused


CLUSTERS_EDITS = {
    "an id changed": (lambda doc: {**doc, "clusters": [doc["clusters"][0] + 1, *doc["clusters"][1:]]}, False,
                      "recorded in SHA256SUMS"),
    "uids reordered": (lambda doc: {**doc, "uids": [doc["uids"][1], doc["uids"][0], *doc["uids"][2:]]}, True,
                       "it records another key or other uids than its key stands for"),
    "an id below -1": (lambda doc: {**doc, "clusters": [-2, *doc["clusters"][1:]]}, True, "not one integer >= -1 per uid"),
    "an id missing": (lambda doc: {**doc, "clusters": doc["clusters"][1:]}, True, "not one integer >= -1 per uid"),
    "an id as a bool": (lambda doc: {**doc, "clusters": [True, *doc["clusters"][1:]]}, True, "not one integer >= -1 per uid"),
    "key renamed": (lambda doc: {"clusters": doc["clusters"], "kye": doc["key"], "uids": doc["uids"]}, True,
                    "fields missing ['key'], unknown ['kye']"),
    "not JSON": (lambda doc: None, True, "not JSON"),
}


@pytest.mark.parametrize("edit", CLUSTERS_EDITS)
def test_an_edited_clusters_entry_is_recomputed_not_used(edit, hand_corpus, spy_clusters, hand_drift, tmp_path, caplog):
    change, matching_sums, reason = CLUSTERS_EDITS[edit]
    corpus, _ = hand_corpus
    first = make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path)
    folder = clusters_dir(tmp_path, first.info["clustering"]["clusters_key"])
    path = folder / CLUSTERS_FILE
    written = path.read_bytes()
    doc = change(json.loads(written))
    path.write_text("{" if doc is None else json.dumps(doc))
    if matching_sums:
        resum(folder)
    with caplog.at_level(logging.INFO, logger="robustnlu"):
        again = make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path)
    (line,) = recomputations(caplog)
    assert f"{path}: " in line and reason in line
    assert spy_clusters == [400, 400]  # clustered again
    assert path.read_bytes() == written
    assert again.to_json() == first.to_json()  # the same clustering, so the same (cached) split


# --------------------------------------------------------------------------- canonical scenarios


@pytest.fixture(scope="module")
def snips_full_iid():
    """The canonical SNIPS slot-context full/i.i.d. scenario: its manifest entry and config."""
    from robustnlu.data.readers import load_corpus
    from robustnlu.seqdrift.canonical import compose_run_config

    cfg = compose_run_config(["+experiment=snips_slot_context"])
    entry = next(e for e in manifest(DATA_DIR / SHIPPED_DIR).values() if e["name"] == "snips-slot_context")
    return load_corpus(cfg.dataset, REPO), cfg, entry


def test_a_canonical_split_is_checked_against_the_manifest(snips_full_iid, tmp_path, caplog):
    """Edited with its SHA256SUMS rewritten to match, a canonical split still differs from the
    sha256 MANIFEST.json records for its scenario: recomputed."""
    corpus, cfg, entry = snips_full_iid
    split = make_drift_split(corpus, cfg.drift, cfg.validation, tmp_path, DATA_DIR / SHIPPED_DIR)
    assert split.key == entry["split_keys"]["full-iid"]
    folder = artifact_dir(tmp_path, split.key)
    path = folder / SPLIT_FILE
    path.write_text(move_test_rows_to_train(path.read_text(), 100))
    resum(folder)
    with caplog.at_level(logging.INFO, logger="robustnlu"):
        again = make_drift_split(corpus, cfg.drift, cfg.validation, tmp_path, DATA_DIR / SHIPPED_DIR)
    (line,) = recomputations(caplog)
    assert f"{path}: its sha256 " in line and f"{MANIFEST_FILE} records for snips-slot_context full-iid" in line
    assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["splits"]["full-iid"]
    assert again.to_json() == split.to_json()


def test_a_canonical_split_that_differs_from_the_manifest_is_refused(snips_full_iid, tmp_path):
    """Built from the shipped clustering, the split is not what the manifest records (here the
    manifest was changed; in earnest: the code or the data changed): it cannot be recomputed
    into the canonical one, so the run stops, and nothing is cached."""
    corpus, cfg, entry = snips_full_iid
    shipped = tmp_path / "shipped"
    shutil.copytree(DATA_DIR / SHIPPED_DIR, shipped)
    doc = json.loads((shipped / MANIFEST_FILE).read_text())
    wrong = "0" * 64
    next(e for e in doc["clusterings"] if e["name"] == "snips-slot_context")["splits"]["full-iid"] = wrong
    (shipped / MANIFEST_FILE).write_text(json.dumps(doc))
    with pytest.raises(DataError) as err:
        make_drift_split(corpus, cfg.drift, cfg.validation, tmp_path / "cache", shipped)
    assert err.value.path == str(shipped / MANIFEST_FILE)
    assert "the snips-slot_context full-iid split built here from snips-slot_context.clusters.json.gz" in err.value.problem
    assert f"differs from the {wrong[:12]}..." in err.value.problem
    assert not list((tmp_path / "cache").rglob(SPLIT_FILE))


# --------------------------------------------------------------------------- through the command lines

SNIPS = ["dataset=snips", "drift=slot_context"]


def table(stdout: str) -> str:
    """The statistics table `python -m robustnlu.seqdrift` prints (its log lines left out)."""
    return "\n".join(line for line in stdout.splitlines() if not line.startswith("["))


def test_the_cli_recomputes_a_hand_edited_cached_split(tmp_path):
    """The user's case: 100 test rows of the cached canonical SNIPS split moved to train. The
    next run recomputes it (exit 0, one log line why) and prints the statistics of the real split."""
    first = run_cli([*SNIPS, "paths.cache_dir=cache", f"hydra.run.dir={tmp_path / 'run1'}"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert first.returncode == 0, first.stderr[-3000:]
    (path,) = (tmp_path / "cache" / "seqdrift").glob(f"*/{SPLIT_FILE}")
    path.write_text(move_test_rows_to_train(path.read_text(), 100))
    again = run_cli([*SNIPS, "paths.cache_dir=cache", f"hydra.run.dir={tmp_path / 'run2'}"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert again.returncode == 0, again.stderr[-3000:]
    log = again.stdout + again.stderr
    assert log.count(RECOMPUTING) == 1 and "recorded in SHA256SUMS" in log and "reusing cached split" not in log
    assert table(again.stdout) == table(first.stdout) and "1,446" in table(again.stdout)  # the test split's size
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha == hashlib.sha256((tmp_path / "run2" / SPLIT_FILE).read_bytes()).hexdigest()
    assert sha == next(e for e in manifest(DATA_DIR / SHIPPED_DIR).values() if e["name"] == "snips-slot_context")["splits"]["full-iid"]


def test_the_cli_refuses_a_canonical_split_that_differs_from_the_manifest(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "snips").symlink_to(DATA_DIR / "snips")
    shutil.copytree(DATA_DIR / SHIPPED_DIR, data / SHIPPED_DIR)
    path = data / SHIPPED_DIR / MANIFEST_FILE
    doc = json.loads(path.read_text())
    next(e for e in doc["clusterings"] if e["name"] == "snips-slot_context")["splits"]["full-iid"] = "0" * 64
    path.write_text(json.dumps(doc))
    proc = run_cli([*SNIPS, f"paths.data_dir={data}", "paths.cache_dir=cache", f"hydra.run.dir={tmp_path / 'run'}"],
                   cwd=tmp_path, module="robustnlu.seqdrift")
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {path}: the snips-slot_context full-iid split built here from ") and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists() and not list((tmp_path / "cache").rglob(SPLIT_FILE))


def test_training_recomputes_a_cached_split_with_a_misspelt_split_name(tmp_path, caplog):
    """The user's case: ``"test"`` renamed ``"tset"`` in a cached split.json, its SHA256SUMS
    rewritten to match (so only the split-name check can catch it). Neither
    `python -m robustnlu.seqdrift` nor a training run (`robustnlu.train.run`, which
    ``python -m robustnlu`` runs) uses it (used, training would stop on ``KeyError: 'tset'``)."""
    data = jsonl_overrides(write_snips_sample_jsonl(tmp_path / "data", n_train=600, n_eval=60))
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    made = run_cli([*data, *SMALL_DRIFT, cache, f"hydra.run.dir={tmp_path / 'split'}"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert made.returncode == 0, made.stderr[-3000:]
    (path,) = (tmp_path / "cache" / "seqdrift").glob(f"*/{SPLIT_FILE}")
    written = path.read_bytes()
    reason = re.compile(rf"{re.escape(str(path))}: row \d+: split 'tset' is not one of train, valid, test, removed")

    def misspell():
        path.write_text(path.read_text().replace('"split": "test"', '"split": "tset"'))
        resum(path.parent)

    misspell()
    again = run_cli([*data, *SMALL_DRIFT, cache, f"hydra.run.dir={tmp_path / 'split2'}"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert again.returncode == 0, again.stderr[-3000:]
    (line,) = [line for line in (again.stdout + again.stderr).splitlines() if RECOMPUTING in line]
    assert reason.search(line), line
    assert path.read_bytes() == (tmp_path / "split2" / SPLIT_FILE).read_bytes() == written
    misspell()
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="robustnlu"):
        run(compose_config([*FAST, *data, *SMALL_DRIFT, cache, "trainer.max_epochs=1", "+trainer.limit_train_batches=2",
                            "+trainer.limit_val_batches=1"], run_dir))
    (line,) = recomputations(caplog)
    assert reason.search(line), line
    results = json.loads((run_dir / "results.json").read_text())
    assert results["drift"]["split_key"] == path.parent.name and path.read_bytes() == written
    assert results["sizes"]["test"] == sum(row["split"] == "test" for row in json.loads(written)["rows"]) > 0


@pytest.mark.parametrize("module", ["robustnlu.seqdrift", "robustnlu"])
def test_a_cache_dir_that_cannot_be_written_is_one_error_line(tmp_path, module):
    """``paths.cache_dir`` under a plain file (so unwritable even for root): the split and the
    training run both stop with one line naming the key, and leave no run directory."""
    (tmp_path / "notes.txt").write_text("mine\n")
    extra = [*FAST, "trainer.max_epochs=1"] if module == "robustnlu" else []
    proc = run_cli([*SNIPS, *extra, f"paths.cache_dir={tmp_path / 'notes.txt' / 'cache'}",
                    f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, module=module)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: paths.cache_dir: cannot write {tmp_path / 'notes.txt' / 'cache' / 'seqdrift' / 'claims'}: Not a directory")
    assert not (tmp_path / "run").exists() and (tmp_path / "notes.txt").read_text() == "mine\n"
