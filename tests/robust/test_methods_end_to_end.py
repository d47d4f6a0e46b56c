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


@pytest.mark.parametrize("method", METHODS)
def test_method_trains_end_to_end(method, sample, tmp_path):
    overrides = [*FAST, *jsonl_overrides(sample), *SMALL_DRIFT, f"method={method}", "trainer.max_epochs=2",
                 f"paths.cache_dir={tmp_path / 'cache'}"]
    cfg = compose_config(overrides, tmp_path / "run")
    results = run(cfg)
    assert results["method"] == METHOD_NAMES.get(method, method)
    assert (tmp_path / "run" / "results.json").is_file()
    for split in ("valid", "test"):
        assert all(math.isfinite(results["metrics"][split][k]) for k in ("intent_acc", "slot_f1", "combined"))
