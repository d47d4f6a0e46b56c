"""One scenario value (robustnlu/scenario.py): its name, its record in results.json, and every
place that names runs by it (run directories, W&B group, HPO study name)."""

from __future__ import annotations

import json
import re

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from integration_helpers import CONF, FAST, jsonl_overrides, run_cli, write_snips_sample_jsonl
from robustnlu.scenario import Scenario, register_resolver


@pytest.mark.parametrize("drift", ["slot_value", "slot_context"])
@pytest.mark.parametrize("partial, amount", [(False, "full"), (True, "partial")])
@pytest.mark.parametrize("validation", ["iid", "ood"])
def test_the_eight_scenarios_of_a_dataset_have_the_papers_names(drift, partial, amount, validation):
    s = Scenario.of("snips", drift, partial, validation)
    assert s.name == f"snips-{drift}-{amount}-{validation}"
    assert s.label == f"{drift} {amount} {validation}"


def test_without_drift_partial_and_validation_do_not_apply():
    assert Scenario.of("atis", "none", None, "iid") == Scenario.of("atis", "none", True, "ood") == Scenario("atis")
    assert Scenario("atis").name == "atis"


def test_a_stored_scenario_and_one_from_an_older_results_file_agree():
    stored = Scenario.of("atis", "slot_context", True, "ood")
    older = {"dataset": "atis", "drift": {"kind": "slot_context", "partial": True, "validation": "ood"}}
    assert Scenario.of_results({**older, "scenario": stored.to_dict()}) == stored
    assert Scenario.of_results(older) == stored
    no_drift = {"dataset": "snips", "drift": {"kind": "none", "partial": False, "validation": "dataset"}}
    assert Scenario.of_results(no_drift) == Scenario("snips")


@pytest.mark.parametrize("overrides, name", [
    ([], "snips"),
    (["drift=slot_context"], "snips-slot_context-full-iid"),
    (["+experiment=atis_slot_value", "drift.partial=true", "validation=ood"], "atis-slot_value-partial-ood"),
])
def test_run_directories_wandb_groups_and_hpo_studies_use_the_scenario_name(overrides, name):
    register_resolver()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=[*overrides, "logger=wandb", "hparams_search=optuna", "method=topk"])
    assert cfg.scenario == name
    assert cfg.logger.wandb.group == name and cfg.logger.wandb.name == f"{name}-topk-seed0"
    assert cfg.hydra.sweeper.study_name == f"{name}-topk"
    # run directories: the resolved scenario and method (the time and job number are Hydra's, at run time)
    assert OmegaConf.to_container(cfg.hydra.run)["dir"].startswith("outputs/runs/${scenario}/${method.name}/")


def test_results_json_records_the_scenario(tmp_path):
    """A real run: results.json's scenario is the value the run directory is named by."""
    sample = write_snips_sample_jsonl(tmp_path / "data")
    proc = run_cli(["-m", *FAST, "trainer.max_epochs=1", *jsonl_overrides(sample), "drift=slot_context",
                    "drift.n_clusters=4", "drift.min_intent_freq=5", "drift.min_slot_freq=2",
                    "drift.min_projected_size=1", "validation=ood", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = (tmp_path / "sweep").glob("*/results.json")
    stored = json.loads(results.read_text())["scenario"]
    assert stored == {"dataset": "jsonl", "drift": "slot_context", "partial": False, "validation": "ood"}
    assert re.fullmatch(r"jsonl-slot_context-full-ood-erm-seed0-[0-9a-f]{8}", results.parent.name)
