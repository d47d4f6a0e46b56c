"""``python -m robustnlu.noise``: a noised copy of a dataset in the jsonl format that the jsonl
reader loads back, the same bytes for the same seed, clear errors."""

from __future__ import annotations

import errno
import json
import os

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from integration_helpers import CONF, file_bytes, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.data.readers import load_corpus
from robustnlu.errors import ConfigError
from robustnlu.noise.__main__ import write_noised_dataset


def noise_cli(sample, out_dir, *extra):
    return run_cli([*jsonl_overrides(sample), f"out_dir={out_dir}", *extra], cwd=out_dir.parent, module="robustnlu.noise")


def test_writes_a_noised_copy_that_reads_back(tmp_path):
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=120, n_eval=40)
    proc = noise_cli(sample, tmp_path / "noisy", "noise=misspelling", "splits=[test]", "seed=3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = {s: tmp_path / "noisy" / f"{s}.jsonl" for s in ("train", "valid", "test")}
    original = load_corpus(OmegaConf.create({"name": "s", "format": "jsonl", **{k: str(v) for k, v in sample.items()}}), tmp_path)
    noisy = load_corpus(OmegaConf.create({"name": "s", "format": "jsonl", **{k: str(v) for k, v in files.items()}}), tmp_path)
    assert noisy.train == original.train and noisy.valid == original.valid
    assert [u.uid for u in noisy.test] == [u.uid for u in original.test]
    assert [u.tags for u in noisy.test] == [u.tags for u in original.test]  # misspelling is 1→1
    changed = sum(a.tokens != b.tokens for a, b in zip(original.test, noisy.test))
    stats = json.loads((tmp_path / "noisy" / "noise_stats.json").read_text())
    assert stats["splits"]["test"]["utterances_changed"] == changed > 0
    assert stats["noise"]["name"] == "misspelling" and stats["seed"] == 3 and set(stats["splits"]) == {"test"}
    first = files["test"].read_bytes()
    assert noise_cli(sample, tmp_path / "noisy", "noise=misspelling", "splits=[test]", "seed=3").returncode == 0
    assert files["test"].read_bytes() == first
    assert noise_cli(sample, tmp_path / "noisy2", "noise=misspelling", "splits=[test]", "seed=4").returncode == 0
    assert (tmp_path / "noisy2" / "test.jsonl").read_bytes() != first
    # its own folder (hydra.run.dir; the launches may share one) holds nothing but Hydra's job log:
    # conf/noise_dataset.yaml's `outputs` are none, and the lock is released
    for run_dir in (tmp_path / "outputs" / "noise").iterdir():
        assert [p.name for p in run_dir.iterdir()] == ["__main__.log"]


def test_unknown_split_is_a_one_line_error_and_writes_nothing(tmp_path):
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=30, n_eval=10)
    proc = noise_cli(sample, tmp_path / "noisy", "splits=[dev]")
    assert proc.returncode == 2 and proc.stderr.startswith("error: splits[0]: must be one of train, valid, test (got dev)")
    assert not (tmp_path / "noisy").exists() and not (tmp_path / "outputs").exists()


def test_an_out_dir_holding_the_inputs_is_refused_and_the_inputs_stay_whole(tmp_path):
    """Before, out_dir = the folder of the input train.jsonl / test.jsonl overwrote them, exit 0."""
    data = tmp_path / "data"
    sample = write_snips_sample_jsonl(data, n_train=200, n_eval=40)
    before = file_bytes(data)
    proc = noise_cli(sample, data, "splits=[train,test]")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: out_dir: {data / 'train.jsonl'} is an input of this command; writing it would "
                           "overwrite the input: choose another out_dir\n")
    # the same folder by another name: a symbolic link to it
    (tmp_path / "link").symlink_to(data)
    proc = noise_cli(sample, tmp_path / "link", "splits=[train,test]")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: out_dir: {tmp_path / 'link' / 'train.jsonl'} is an input of this command "
                           f"({data / 'train.jsonl'}); writing it would overwrite the input: choose another out_dir\n")
    assert file_bytes(data) == before and not (tmp_path / "outputs").exists()


def noise_config(sample, out_dir, *extra):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="noise_dataset", overrides=[*jsonl_overrides(sample), f"out_dir={out_dir}", *extra])


def test_a_disk_full_on_the_third_file_leaves_out_dir_as_it_was(tmp_path, monkeypatch):
    """The four files are written as one: the third failing (its data cannot be flushed to disk)
    replaces none of the earlier noised copy and leaves no temporary file. The new copy noises
    every split with another seed, so that each of its files differs from the earlier one's."""
    sample = write_snips_sample_jsonl(tmp_path / "data", n_train=60, n_eval=20)
    out_dir = tmp_path / "noisy"
    write_noised_dataset(noise_config(sample, out_dir, "splits=[test]", "seed=1"))
    before = file_bytes(out_dir)
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    cfg = noise_config(sample, out_dir, "splits=[train,valid,test]", "seed=2")
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(ConfigError, match="^out_dir: cannot write: No space left on device$"):
        write_noised_dataset(cfg)
    assert len(calls) == 3
    assert file_bytes(out_dir) == before
