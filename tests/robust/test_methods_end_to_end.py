"""Every method in conf/method/ trains end to end through the real configs (tiny encoder, a
small SeqDrift split so that group methods have clusters) and writes finite metrics."""

from __future__ import annotations

import math

import pytest

from integration_helpers import FAST, METHOD_NAMES, METHODS, SMALL_DRIFT, compose_config, jsonl_overrides, write_snips_sample_jsonl
from robustnlu.train import run


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_snips_sample_jsonl(tmp_path_factory.mktemp("snips"), n_train=600, n_eval=60)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One SeqDrift cache for every method: the split is the same for all, clustered once."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("method", METHODS)
def test_method_trains_end_to_end(method, sample, cache_dir, tmp_path):
    """Two epochs of 4 batches each (a method's state crosses an epoch end), then the whole
    validation and test splits."""
    overrides = [*FAST, *jsonl_overrides(sample), *SMALL_DRIFT, f"method={method}", "trainer.max_epochs=2",
                 "+trainer.limit_train_batches=4", f"paths.cache_dir={cache_dir}"]
    cfg = compose_config(overrides, tmp_path / "run")
    results = run(cfg)
    assert results["method"] == METHOD_NAMES.get(method, method)
    assert (tmp_path / "run" / "results.json").is_file()
    for split in ("valid", "test"):
        assert all(math.isfinite(results["metrics"][split][k]) for k in ("intent_acc", "slot_f1", "combined"))
