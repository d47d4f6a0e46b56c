"""The real configs compose: every preset and every group option, with the paper's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration_helpers import CONF, compose_config
from robustnlu.data.readers import load_corpus
from robustnlu.paths import DATA_DIR

PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def test_default_config_is_snips_embedded_erm_with_table9_defaults(tmp_path):
    cfg = compose_config([], tmp_path)
    assert (cfg.dataset.name, cfg.encoder.kind, cfg.method.name) == ("snips", "embedded", "erm")
    assert cfg.data.batch_size == 32 and cfg.optimizer.weight_decay == 0.02  # paper Table 9
    assert cfg.optimizer.warmup_steps == 0 and cfg.trainer.max_epochs == 100
    assert "experiment" not in cfg  # `+experiment=` form: not in the defaults list


@pytest.mark.parametrize("preset", PRESETS)
def test_every_experiment_preset_composes_and_names_a_loadable_dataset(preset, tmp_path):
    cfg = compose_config([f"+experiment={preset}"], tmp_path)
    dataset, _, drift = preset.partition("_slot_")
    assert cfg.dataset.name == dataset
    assert cfg.drift.kind == (f"slot_{drift}" if drift else "none")
    assert cfg.optimizer.weight_decay == (0.002 if preset.startswith("top") else 0.02)  # Table 9
    if drift:  # Table 7: n-grams up to 5 for TOP, 6 for SNIPS (and the others)
        assert cfg.drift.ngram_max == (5 if dataset == "top" else 6)
    folders = [cfg.dataset.path] if "path" in cfg.dataset else list(cfg.dataset.corpora.values())
    assert folders and all(Path(f).is_dir() and Path(f).parent == DATA_DIR for f in folders)


def test_presets_cover_every_shipped_dataset_and_the_papers_drift_scenarios():
    datasets = {p.stem for p in (CONF / "dataset").glob("*.yaml")} - {"jsonl"}
    assert datasets == {p for p in PRESETS if "_slot_" not in p}
    drift_presets = {f"{d}_slot_{k}" for d in ("snips", "atis", "top", "mit") for k in ("value", "context")}
    assert drift_presets == {p for p in PRESETS if "_slot_" in p}


def test_trainer_callbacks_and_loggers_instantiate(tmp_path):
    from robustnlu.train import build_trainer

    cfg = compose_config(["logger=csv"], tmp_path)
    trainer = build_trainer(cfg)
    names = {type(c).__name__ for c in trainer.callbacks}
    assert {"RelocatableModelCheckpoint", "EarlyStopping", "LossProgressBar"} <= names
    assert trainer.checkpoint_callback.monitor == "valid/combined"
    assert [type(lg).__name__ for lg in trainer.loggers] == ["ResumableCSVLogger"]


def test_mit_preset_loads_with_seeded_valid(tmp_path):
    cfg = compose_config(["+experiment=mit"], tmp_path)
    corpus = load_corpus(cfg.dataset)
    assert sum(len(corpus.split(s)) for s in ("train", "valid", "test")) == 21_399
