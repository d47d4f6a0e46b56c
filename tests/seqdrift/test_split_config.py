"""The SeqDrift settings are declared once (`robustnlu.seqdrift.config.SplitConfig`): the YAML
files restate the same defaults, and the Python API and the config schema check values against
the same declarations, with the same words."""

from __future__ import annotations

from dataclasses import fields

import pytest
import yaml

from integration_helpers import CONF
from robustnlu.cli import compose_run_config
from robustnlu.config_schema import schema
from robustnlu.config_spec import show
from robustnlu.errors import ConfigError
from robustnlu.seqdrift.config import SETTINGS, SplitConfig


def yaml_values(path) -> dict:
    return {k: v for k, v in yaml.safe_load(path.read_text()).items() if k != "defaults"}


DEFAULTS = SplitConfig()
#: what each preset sets on purpose, against the declared defaults (its YAML says why)
DIFFERENT = {"none": {"kind": "none"}, "slot_context": {}, "slot_value": {"kind": "slot_value", "ngram_min": 1}}


@pytest.mark.parametrize("preset", sorted(DIFFERENT))
def test_every_drift_yaml_value_is_the_declared_default_or_a_documented_preset_value(preset):
    values = yaml_values(CONF / "drift" / f"{preset}.yaml")
    restated = {k: v for k, v in values.items() if k not in DIFFERENT[preset]}
    assert restated == {k: getattr(DEFAULTS, SETTINGS["drift"][k].name) for k in restated}
    assert {k: values[k] for k in DIFFERENT[preset]} == DIFFERENT[preset]


def test_slot_context_yaml_restates_every_drift_setting():
    assert set(yaml_values(CONF / "drift" / "slot_context.yaml")) == set(SETTINGS["drift"])


def test_validation_yaml_values_are_the_declared_defaults_but_the_kind():
    assert yaml_values(CONF / "validation" / "iid.yaml") == {"kind": DEFAULTS.validation, "hold_out_both": DEFAULTS.hold_out_both}
    assert yaml_values(CONF / "validation" / "ood.yaml") == {"kind": "ood", "hold_out_both": DEFAULTS.hold_out_both}


def test_every_setting_has_a_doc_and_the_config_schema_checks_exactly_these_keys():
    assert all(f.metadata["doc"] for f in fields(SplitConfig))
    assert set(schema("seqdrift").keys["drift"].options["slot_value"].keys) == set(SETTINGS["drift"])
    assert set(schema("seqdrift").keys["validation"].keys) == set(SETTINGS["validation"])


#: (drift values, validation values, the one line both checks give)
BAD = [
    ({"n_clusters": 1}, {}, "drift.n_clusters: must be >= 2 (got 1)"),
    ({"n_clusters": "many"}, {}, "drift.n_clusters: must be an integer (got many)"),
    ({"partial": "yes"}, {}, "drift.partial: must be true or false (got yes)"),
    ({"partial_fraction": 0}, {}, "drift.partial_fraction: must be in (0, 1] (got 0)"),
    ({"min_projected_size": float("inf")}, {}, "drift.min_projected_size: must be a finite number (got inf)"),
    ({"rare_slots": "ignore"}, {}, "drift.rare_slots: must be one of relabel_o, drop_utterance (got ignore)"),
    ({"seed": -1}, {}, "drift.seed: must be in [0, 4294967295] (got -1)"),
    ({"ngram_min": 3, "ngram_max": 2}, {}, "drift.ngram_min: must be <= drift.ngram_max (got 3)"),
    ({"test_fraction": 0.5, "valid_fraction": 0.25}, {"hold_out_both": True},
     "drift.test_fraction: test + validation fractions (validation twice with validation.hold_out_both) must be < 1 "
     "(got 0.5)"),
    ({}, {"kind": "both"}, "validation.kind: must be one of iid, ood (got both)"),
]


@pytest.mark.parametrize(("drift", "validation", "message"), BAD)
def test_the_python_api_and_the_config_schema_give_the_same_line(drift, validation, message):
    overrides = [f"drift.{k}={show(v)}" for k, v in drift.items()] + [f"validation.{k}={show(v)}" for k, v in validation.items()]
    with pytest.raises(ConfigError) as checked:  # what python -m robustnlu checks before a run
        compose_run_config(["drift=slot_context", "validation=iid", *overrides])
    with pytest.raises(ConfigError) as api:
        SplitConfig.from_configs({**yaml_values(CONF / "drift" / "slot_context.yaml"), **drift},
                                 {**yaml_values(CONF / "validation" / "iid.yaml"), **validation})
    assert str(api.value) == str(checked.value) == message


def test_float_settings_are_stored_as_floats_so_the_cache_key_does_not_depend_on_how_they_were_written():
    assert SplitConfig.from_configs({"kind": "slot_value", "min_projected_size": 10}).to_dict() == \
        SplitConfig.from_configs({"kind": "slot_value", "min_projected_size": 10.0}).to_dict()
    assert isinstance(SplitConfig.from_configs({"kind": "slot_value", "min_projected_size": 10}).min_projected_size, float)
