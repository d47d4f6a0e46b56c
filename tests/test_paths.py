"""Where the configs and the datasets are found and how the paths of a config are read
(`robustnlu.paths`): a path the user gives from the folder the command runs in, the shipped
datasets under ``paths.data_dir``, a wrong data folder as one error line, and the run configs of
another installation or from before a setting existed (``paths.data_dir``, the optimizer's
factory and AdamW's ``fused``, a top-level ``adversary``: resume, evaluate, a report's pooling). The
installed wheel: tests/test_wheel.py."""

from __future__ import annotations

import json
from pathlib import Path

from integration_helpers import REPO, compose_config, run_cli, write_snips_sample_jsonl
from robustnlu.data.readers import load_corpus
from robustnlu.paths import CONF_DIR, DATA_DIR, PROJECT_DIR, relocate_data, shipped_config, upgrade_run_config
from robustnlu.sweep_jobs import changed_settings

JSONL = ["dataset=jsonl", "dataset.train=mine/train.jsonl", "dataset.valid=mine/valid.jsonl", "dataset.test=mine/test.jsonl"]


def test_a_checkout_reads_its_top_level_conf_and_data():
    assert (CONF_DIR, DATA_DIR, PROJECT_DIR) == (REPO / "conf", REPO / "data", REPO)


def test_the_shipped_configs_name_their_files_under_paths_data_dir(tmp_path):
    cfg = compose_config(["+experiment=mit", "suite=[noisy_nlu]"], tmp_path)
    assert cfg.paths.data_dir == str(DATA_DIR)
    assert dict(cfg.dataset.corpora) == {"movie": str(DATA_DIR / "mit_movie"), "restaurant": str(DATA_DIR / "mit_restaurant")}
    assert cfg.suite.noisy_nlu.path == str(DATA_DIR / "noisy_nlu")
    assert compose_config(["paths.data_dir=/copy/of/data"], tmp_path).dataset.path == "/copy/of/data/snips"
    assert shipped_config("dataset", "top")["path"] == str(DATA_DIR / "top")
    assert shipped_config("dataset", "jsonl")["train"] == "???"


def test_paths_the_user_gives_are_read_from_the_current_folder(tmp_path, monkeypatch):
    write_snips_sample_jsonl(tmp_path / "mine", n_train=30, n_eval=10)
    monkeypatch.chdir(tmp_path)
    corpus = load_corpus(compose_config(JSONL, tmp_path / "run").dataset)
    assert len(corpus.train) == 30
    assert corpus.files() == {Path("mine") / f"{split}.jsonl" for split in ("train", "valid", "test")}


def test_the_cli_reads_user_paths_from_where_it_runs_and_names_them_as_given(tmp_path):
    write_snips_sample_jsonl(tmp_path / "mine", n_train=30, n_eval=10)
    proc = run_cli([*JSONL, "drift=none", "hydra.run.dir=split"], cwd=tmp_path, module="robustnlu.seqdrift")
    assert proc.returncode == 0, proc.stderr[-3000:]
    missing = run_cli([*JSONL, "dataset.test=mine/tset.jsonl", "drift=none", "hydra.run.dir=split2"], cwd=tmp_path,
                      module="robustnlu.seqdrift")
    assert missing.returncode == 2 and missing.stderr == "error: mine/tset.jsonl: file not found\n"


def test_a_data_folder_that_is_not_there_is_one_error_line(tmp_path):
    proc = run_cli([f"paths.data_dir={tmp_path / 'nowhere'}"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: paths.data_dir: no such folder; it is where the datasets are read (default: the "
                           f"datasets shipped with robustnlu, {DATA_DIR}) (got {tmp_path / 'nowhere'})\n")
    assert not (tmp_path / "outputs").exists()


def legacy(root: str | None) -> dict:
    """A run config written before paths.data_dir: paths.root, dataset paths relative to it."""
    return {"dataset": {"name": "mit", "corpora": {"movie": "data/mit_movie", "restaurant": "/abs/restaurant"}},
            "paths": {"root": root, "cache_dir": "outputs/cache", "output_dir": "/runs/a"}, "seed": 0}


def test_a_run_config_from_before_data_dir_reads_its_datasets_where_it_did():
    assert upgrade_run_config(legacy(None)) == {
        "dataset": {"name": "mit", "corpora": {"movie": str(REPO / "data" / "mit_movie"), "restaurant": "/abs/restaurant"}},
        "paths": {"cache_dir": "outputs/cache", "output_dir": "/runs/a", "data_dir": str(DATA_DIR)}, "seed": 0}
    upgraded = upgrade_run_config(legacy("/elsewhere"))
    assert upgraded["dataset"]["corpora"]["movie"] == "/elsewhere/data/mit_movie"
    assert upgraded["paths"]["data_dir"] == "/elsewhere/data"
    assert upgrade_run_config(upgraded) == upgraded


def test_a_run_whose_data_folder_is_gone_reads_its_datasets_under_the_data_folder_now(tmp_path, caplog):
    config = {"dataset": {"name": "snips", "path": "/gone/data/snips"}, "paths": {"data_dir": "/gone/data"}}
    moved = relocate_data(config, tmp_path)
    assert moved == {"dataset": {"name": "snips", "path": f"{tmp_path}/snips"}, "paths": {"data_dir": str(tmp_path)}}
    assert "/gone/data, which no longer exists" in caplog.text
    here = {"dataset": {"name": "jsonl", "train": "/gone/data/t.jsonl"}, "paths": {"data_dir": str(DATA_DIR)}}
    assert relocate_data(here, tmp_path) == here  # its folder exists: read where the run read


def test_resuming_from_another_installation_or_an_older_config_is_the_same_run():
    current = {"dataset": {"name": "mit", "corpora": {"movie": "/venv/data/mit_movie", "restaurant": "/abs/restaurant"}},
               "paths": {"data_dir": "/venv/data", "cache_dir": "outputs/cache", "output_dir": "/runs/a"}, "seed": 0}
    assert changed_settings(legacy("/old"), current) == {}
    other = {**current, "dataset": {"name": "mit", "corpora": {"movie": "/venv/data/mit_movie2", "restaurant": "/abs/restaurant"}}}
    assert changed_settings(current, other) == {"dataset.corpora.movie": ("<data dir>/mit_movie", "<data dir>/mit_movie2")}


#: an AdamW option as runs wrote it before the options named their factory and before ``fused``
OLD_ADAMW = {"name": "adamw", "lr": 1e-4, "weight_decay": 0.02, "warmup_steps": 0, "betas": [0.9, 0.999], "eps": 1e-8}


def test_an_optimizer_from_before_its_factory_and_fused_is_the_factory_its_name_called_with_the_loop():
    """Such a run called its option's function by ``name`` (AdamW: the per-parameter loop, ``fused``
    false); the factories are those conf/optimizer/ names."""
    upgraded = upgrade_run_config({"optimizer": OLD_ADAMW, "seed": 0})
    assert upgraded == {"optimizer": {"_target_": "robustnlu.optim.adamw.adamw", "_partial_": True, **OLD_ADAMW,
                                      "fused": False}, "seed": 0}
    assert upgrade_run_config(upgraded) == upgraded
    conatural = {"name": "conatural", "lr": 0.01, "damping": 10.0}
    assert upgrade_run_config({"optimizer": conatural})["optimizer"] == {
        "_target_": "robustnlu.optim.conatural.conatural_sgd", "_partial_": True, **conatural}  # no fused: not AdamW
    current = {"optimizer": {**upgraded["optimizer"], "fused": "auto"}}
    assert changed_settings({"optimizer": OLD_ADAMW}, current) == {"optimizer.fused": (False, "auto")}
    assert changed_settings({"optimizer": OLD_ADAMW}, {"optimizer": {**current["optimizer"], "fused": False}}) == {}


def test_an_empty_top_level_adversary_from_before_method_groups_is_no_setting():
    """``adversary: {}`` (``adversary=none``, before each method chose its group source at
    ``method.groups``) is what a current config without the node does; a group source there is kept."""
    assert upgrade_run_config({"adversary": {}, "seed": 0}) == {"seed": 0}
    assert upgrade_run_config({"adversary": None, "seed": 0}) == {"seed": 0}
    source = {"adversary": {"_target_": "robustnlu.adversary.groups.SeqDriftClusters"}, "seed": 0}
    assert upgrade_run_config(source) == source
    assert changed_settings(source, {"seed": 0}) == {
        "adversary._target_": ("robustnlu.adversary.groups.SeqDriftClusters", "<absent>")}


def test_the_committed_erm_records_of_before_and_after_those_settings_differ_in_the_optimizers_kernel_alone():
    """docs/reproduction/records: an ERM seed-0 record written before ``optimizer._target_`` and
    ``fused`` (and with ``adversary: {}``) and the seed-1 record of its scenario written after: they
    differ in the seed, the spelling of the scenario's name (both pooled over by a report) and AdamW's
    kernel (the loop, then the fused one), as their results.json say (``optimizer_fused`` recorded
    only from then on; the loop's fit took about four times as long)."""
    records = REPO / "docs" / "reproduction" / "records"
    old, new = (json.loads((records / f"snips-slot_context-full-iid-erm-seed{s}" / "results.json").read_text())
                for s in (0, 1))
    assert {"_target_", "fused"}.isdisjoint(old["config"]["optimizer"]) and old["config"]["adversary"] == {}
    assert "optimizer_fused" not in old and new["optimizer_fused"] is True
    assert changed_settings(old["config"], new["config"]) == {
        "optimizer.fused": (False, "auto"), "scenario": ("snips-slot_context-False-iid", "snips-slot_context-full-iid"),
        "seed": (0, 1)}


def test_a_run_config_from_before_compile_and_length_buckets_is_the_eager_run_without_buckets():
    """Such a run trained eager on dynamically padded batches: the same run as one with the shipped
    ``trainer.compile`` (disabled) and ``data.pad_to_multiple_of: null``, not as a compiled one."""
    old = {"trainer": {"max_epochs": 3}, "data": {"batch_size": 32}, "seed": 0}
    current = {"trainer": {"max_epochs": 3, "compile": {"enabled": False, "mode": "default", "backend": "inductor"}},
               "data": {"batch_size": 32, "pad_to_multiple_of": None}, "seed": 0}
    assert changed_settings(old, current) == {}
    compiled = {**current, "trainer": {"max_epochs": 3, "compile": {**current["trainer"]["compile"], "enabled": True}}}
    assert changed_settings(old, compiled) == {"trainer.compile.enabled": (False, True)}
    assert upgrade_run_config(current) == current
