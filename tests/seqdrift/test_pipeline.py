"""`make_drift_split` end to end: the cache (reuse, atomic writes, byte-identical files), the
real features + clustering on a small SNIPS sample, and the command line."""

from __future__ import annotations

import json
import logging

import pytest

from integration_helpers import REPO, run_cli, write_snips_sample_jsonl
from robustnlu.data.readers import load_corpus
from robustnlu.errors import ConfigError
from robustnlu.paths import shipped_config
from robustnlu.seqdrift.artifact import CLUSTERS_FILE, SPLIT_FILE, STATS_FILE, artifact_dir
from robustnlu.seqdrift.entries import SUMS_FILE
from robustnlu.seqdrift.pipeline import make_drift_split


def test_second_call_reuses_the_cached_split(hand_corpus, spy_clusters, tmp_path, caplog, hand_drift):
    corpus, _ = hand_corpus
    first = make_drift_split(corpus, hand_drift, {"kind": "ood"}, tmp_path)
    folder = artifact_dir(tmp_path, first.key)
    assert sorted(p.name for p in folder.iterdir()) == [SUMS_FILE, SPLIT_FILE, STATS_FILE]  # no temp file left
    mtime = (folder / SPLIT_FILE).stat().st_mtime_ns
    with caplog.at_level(logging.INFO, logger="robustnlu.seqdrift"):
        second = make_drift_split(corpus, hand_drift, {"kind": "ood"}, tmp_path)
    assert spy_clusters == [400]  # clustered once
    assert "reusing cached split" in caplog.text
    assert (folder / SPLIT_FILE).stat().st_mtime_ns == mtime
    assert second.to_json() == first.to_json() == (folder / SPLIT_FILE).read_text()
    assert second.stats == first.stats == json.loads((folder / STATS_FILE).read_text())
    assert second.apply(corpus).test == first.apply(corpus).test
    # another option or seed: another key
    other = make_drift_split(corpus, {**hand_drift, "seed": 1}, {"kind": "ood"}, tmp_path)
    assert other.key != first.key and spy_clusters == [400, 400]
    assert other.to_json() != first.to_json()
    # partial drift and i.i.d. validation: new splits, the same clustering (cached on its own)
    with caplog.at_level(logging.INFO, logger="robustnlu.seqdrift"):
        variant = make_drift_split(corpus, {**hand_drift, "partial": True}, {"kind": "iid"}, tmp_path)
    assert variant.key not in (first.key, other.key) and spy_clusters == [400, 400]
    assert "reusing cached clusters" in caplog.text


def test_same_inputs_give_byte_identical_files_in_separate_caches(hand_corpus, spy_clusters, tmp_path, hand_drift):
    corpus, _ = hand_corpus
    a = make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path / "a")
    b = make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path / "b")
    assert a.key == b.key
    files = [artifact_dir(tmp_path / d, a.key) / SPLIT_FILE for d in ("a", "b")]
    assert files[0].read_bytes() == files[1].read_bytes()


def test_a_failed_write_leaves_no_split_file_and_the_next_call_recomputes(hand_corpus, spy_clusters, tmp_path, monkeypatch, hand_drift):
    import robustnlu.io

    corpus, _ = hand_corpus
    real_replace = robustnlu.io.os.replace

    def crash(src, dst):
        if str(dst).endswith(SPLIT_FILE):
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(robustnlu.io.os, "replace", crash)
    with pytest.raises(ConfigError, match="^paths.cache_dir: cannot write: disk full$"):
        make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path)
    written = sorted(p.relative_to(tmp_path / "seqdrift").parts for p in (tmp_path / "seqdrift").rglob("*") if p.is_file())
    # the clustering's entry is complete; the split's has its stats.json but neither split.json nor SHA256SUMS
    assert [w[-1] for w in written if w[0] == "clusters"] == [SUMS_FILE, CLUSTERS_FILE]
    assert [w[-1] for w in written if w[0] != "clusters"] == [STATS_FILE]
    assert not list((tmp_path / "seqdrift").rglob(SPLIT_FILE))  # no split.json,
    assert not list((tmp_path / "seqdrift").rglob("*.tmp"))  # no temp file
    monkeypatch.setattr(robustnlu.io.os, "replace", real_replace)
    split = make_drift_split(corpus, hand_drift, {"kind": "iid"}, tmp_path)
    assert spy_clusters == [400]  # the clustering was saved before the crash
    assert (artifact_dir(tmp_path, split.key) / SPLIT_FILE).is_file()


def test_drift_none_is_the_dataset_split_without_cache(hand_corpus, spy_clusters, tmp_path):
    corpus, _ = hand_corpus
    split = make_drift_split(corpus, {"kind": "none"}, {"kind": "ood"}, tmp_path)
    new = split.apply(corpus)
    assert (new.train, new.valid, new.test) == (corpus.train, corpus.valid, corpus.test)
    assert spy_clusters == [] and not (tmp_path / "seqdrift").exists()
    assert split.stats["splits"]["test"]["percent_drift"] == 0.0


# --------------------------------------------------------------------------- real clustering


@pytest.fixture(scope="module")
def snips_sample():
    """Every 6th SNIPS utterance (2,414 of 14,484, all 7 intents)."""
    corpus = load_corpus(shipped_config("dataset", "snips"))
    corpus.train, corpus.valid, corpus.test = (corpus.split(s)[::6] for s in ("train", "valid", "test"))
    return corpus


@pytest.mark.filterwarnings("ignore:eigenvalues .* coincide")  # more components than clusters
@pytest.mark.parametrize("kind", ["slot_context", "slot_value"])
def test_real_features_and_clusters_on_a_snips_sample(snips_sample, tmp_path, kind):
    drift = {"kind": kind, "n_clusters": 20, "min_intent_freq": 30, "min_slot_freq": 10, "partial": True}
    split = make_drift_split(snips_sample, drift, {"kind": "ood"}, tmp_path)
    n = split.info["n_filtered"]
    stats = split.stats
    assert split.info["test_clusters"] and stats["clusters"]["count"] >= 10
    for name, target in (("test", split.info["targets"]["test"]), ("valid", split.info["targets"]["valid"])):
        assert target - 10 <= stats["splits"][name]["size"] <= target == round(0.1 * n)
    assert 0 < stats["splits"]["train"]["percent_drift"] < 5  # the 10% partial leftovers
    assert not set(split.info["test_clusters"]) & set(split.info["valid_clusters"])
    assert stats["train_vs_test"]["intent_tvd"] < 0.05
    for cluster in split.info["test_clusters"]:
        where = {a.split for a in split.assignments.values() if a.cluster == cluster}
        assert where <= {"test", "train"}
    new = split.apply(snips_sample)
    assert len(new.train) + len(new.valid) + len(new.test) == n


# --------------------------------------------------------------------------- command line


def compose_seqdrift(overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="seqdrift", overrides=overrides)


@pytest.mark.parametrize("drift", sorted(p.stem for p in (REPO / "conf/drift").glob("*.yaml")))
@pytest.mark.parametrize("validation", ["iid", "ood"])
def test_every_drift_and_validation_config_composes_and_checks(drift, validation):
    from robustnlu.seqdrift.config import SplitConfig

    cfg = compose_seqdrift([f"drift={drift}", f"validation={validation}"])
    split_cfg = SplitConfig.from_configs(cfg.drift, cfg.validation)
    assert split_cfg.kind == drift and split_cfg.validation == validation
    if drift != "none":
        assert (split_cfg.ngram_max, split_cfg.partial_fraction, split_cfg.min_projected_size) == (6, 0.9, 10)
        assert split_cfg.ngram_min == (1 if drift.startswith("slot_value") else 2)
        assert split_cfg.test_fraction == split_cfg.valid_fraction == 0.1 and not split_cfg.partial


def test_cli_bad_option_one_line_error_exit_2(tmp_path):
    run_dir = tmp_path / "outputs" / "run"
    proc = run_cli(["drift=slot_value", "drift.n_clusters=1", f"hydra.run.dir={run_dir}"], cwd=tmp_path,
                   module="robustnlu.seqdrift")
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: drift.n_clusters: ") and "Traceback" not in proc.stderr
    assert not (tmp_path / "outputs").exists()
    proc = run_cli(["drift=none", f"hydra.run.dir={run_dir}", "--inspect=lots"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("error: inspect: ")
    assert "Traceback" not in proc.stderr and not (tmp_path / "outputs").exists()


def test_cli_writes_split_and_stats_and_inspects_clusters(tmp_path):
    paths = write_snips_sample_jsonl(tmp_path / "data", n_train=400, n_eval=100)
    args = ["dataset=jsonl", *(f"dataset.{k}={v}" for k, v in paths.items()), "drift=slot_context",
            "validation=ood", "drift.n_clusters=12", "drift.min_intent_freq=20", "drift.min_slot_freq=5", "paths.cache_dir=cache"]
    proc = run_cli([*args, f"hydra.run.dir={tmp_path / 'run'}", "--inspect=2"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "% drift" in proc.stdout and "cluster " in proc.stdout
    run_dir = tmp_path / "run"
    split_file = run_dir / SPLIT_FILE
    assert json.loads((run_dir / STATS_FILE).read_text())["splits"]["test"]["size"] > 0
    cached = list((tmp_path / "cache" / "seqdrift").glob(f"*/{SPLIT_FILE}"))
    assert len(cached) == 1 and cached[0].read_bytes() == split_file.read_bytes()
    again = run_cli([*args, f"hydra.run.dir={tmp_path / 'run2'}"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert again.returncode == 0 and "reusing cached split" in again.stdout + again.stderr


def test_inspect_shows_each_slot_span_in_brackets():
    from robustnlu.data.utterance import Utterance
    from robustnlu.seqdrift.__main__ import render

    u = Utterance("u", ("play", "too", "poetic", "by", "x"), ("O", "B-artist", "I-artist", "O", "I-song"), "Play")
    assert render(u) == f"{'Play':<24} play [artist: too poetic] by [song: x]"
