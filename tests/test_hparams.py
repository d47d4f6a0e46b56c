"""Hyper-parameters declared once (`robustnlu.hparams`): each declaration is consistent (its
default and its search space lie in its range), the shipped YAML files give the declared
defaults, and the constructor, the config schema and the HPO search read the same declaration:
the constructor refuses a value with the schema's words, a redeclared default wins, values are
stored as their declared type."""

from __future__ import annotations

import math

import pytest
import yaml
from hydra.utils import get_class
from hydra_plugins.robustnlu_plugins.optuna_sweeper import search_space
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution

from integration_helpers import CONF
from robustnlu.config_spec import Scalar, show
from robustnlu.errors import ConfigError
from robustnlu.groups.autoencoder import OnlineAutoencoder
from robustnlu.groups.lda_topics import LDATopics
from robustnlu.hparams import HParam, Part, declared, hparam_values
from robustnlu.robust.group_dro import GroupDRO
from robustnlu.robust.grouped import GroupedObjective
from robustnlu.robust.rpdro import RPDRO
from robustnlu.robust.topic_cvar import TopicCVaR
from robustnlu.robust.topk import TopK
from tests.robust.helpers import task_losses

#: the YAML files that name a class with ``_target_`` and give its values (a variant such as
#: conf/method/topk_ae_prob.yaml names none: it changes another file's value)
GROUPS = ("method", "groups", "adversary")
NAMING = sorted(p for g in GROUPS for p in (CONF / g).glob("*.yaml") if "_target_" in yaml.safe_load(p.read_text()))
CLASSES = sorted({get_class(yaml.safe_load(p.read_text())["_target_"]) for p in NAMING}, key=lambda c: c.__name__)
HPARAMS = [(cls, name, h) for cls in CLASSES for name, h in declared(cls).items() if isinstance(h, HParam)]


def hparam_id(case) -> str:
    return f"{case[0].__name__}.{case[1]}"


def test_the_shipped_classes_declare_hyper_parameters():
    names = {c.__name__ for c in CLASSES}
    assert names == {"ERM", "TopK", "TopKGroup", "TopKAE", "GroupDRO", "TopicCVaR", "NonParamKL", "RPDRO", "PDRO",
                     "SeqDriftClusters", "LDATopics", "OnlineAutoencoder", "GenerativeLM", "RatioAdversary"}
    assert len(HPARAMS) >= 50


@pytest.mark.parametrize("case", HPARAMS, ids=hparam_id)
def test_a_declaration_is_consistent(case):
    """Its default is a value its spec allows, its doc is one line, and every point of its search
    space (as the Optuna sweeper reads it) lies in its range."""
    cls, name, h = case
    h.spec.check(name, h.default, {})
    assert h.doc and "\n" not in h.doc
    if h.search is None:
        return
    (distribution,) = search_space([f"x={h.search}"])[0].values()
    points = distribution.choices if isinstance(distribution, CategoricalDistribution) else (
        distribution.low, distribution.high)
    for point in points:
        h.spec.check(name, point, {})
    # the default is a point of the search
    if isinstance(distribution, CategoricalDistribution):
        assert h.default in distribution.choices
    else:
        assert distribution.low <= h.default <= distribution.high


@pytest.mark.parametrize("path", NAMING, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_yaml_file_gives_every_declared_value_and_literal_ones_are_the_declared_defaults(path):
    """What the file writes is the default; an interpolation (R-PDRO's ``${optimizer.lr}``, the
    run's ``${seed}``) takes another part of the config's value."""
    raw = yaml.safe_load(path.read_text())
    entries = declared(get_class(raw["_target_"]))
    parts = {name for name, h in entries.items() if isinstance(h, Part)}
    given = {k for k in raw if not k.startswith("_") and k not in ("name", "defaults")}
    assert given == set(entries) - parts  # a part comes from the defaults list (/groups@groups: ...)
    for name in given:
        value, default = raw[name], entries[name].default
        if not (isinstance(value, str) and value.startswith("${")):
            assert value == (list(default) if isinstance(default, tuple) else default), name


RANGED = [(cls, name, h) for cls, name, h in HPARAMS if isinstance(h.spec, Scalar) and h.spec.interval is not None]


def below(spec: Scalar) -> int | float:
    """The largest value of the spec's type below its (finite) lower end."""
    low, closed = spec.interval.low, spec.interval.closed_low
    assert math.isfinite(low)
    if spec.kind == "integer":
        return int(low) - 1 if closed else int(low)
    return math.nextafter(low, -math.inf) if closed else low


@pytest.mark.parametrize("case", RANGED, ids=hparam_id)
def test_the_constructor_refuses_a_value_outside_the_range_in_the_schemas_words(case):
    cls, name, h = case
    outside = below(h.spec)
    with pytest.raises(ConfigError) as err:
        hparam_values(cls, {name: outside})
    assert str(err.value) == f"{name}: {h.spec.interval.describe()} (got {show(outside)})"


def test_real_constructors_check_their_values():
    """The classes themselves, not only `hparam_values`: the line names the key as the schema
    does under ``method.`` (tests/test_config_schema.py: ``method.decay: must be in (0, 1] (got 0)``)."""
    with pytest.raises(ConfigError, match=r"^k: must be >= 1 \(got 0\)$"):
        TopK(k=0)
    with pytest.raises(ConfigError, match=r"^decay: must be in \(0, 1\] \(got 0\)$"):
        GroupDRO(groups=LDATopics(), decay=0)
    with pytest.raises(ConfigError, match=r"^assignment: must be one of hard, soft \(got argmax\)$"):
        LDATopics(assignment="argmax")
    with pytest.raises(ConfigError, match=r"^beta_weights: must be one of diversity, reconstruction \(got both\)$"):
        OnlineAutoencoder(4, beta_weights="both")
    with pytest.raises(TypeError, match=r"^TopK\(\) got an unexpected keyword argument 'kk'$"):
        TopK(kk=3)


def test_a_subclass_inherits_its_bases_declarations_and_may_declare_one_again():
    assert list(declared(GroupedObjective)) == ["groups", "sampling"]
    assert list(declared(GroupDRO)) == ["groups", "sampling", "step_size", "decay", "shared_weights"]
    assert declared(GroupDRO)["sampling"].default == "group_balanced"  # Sagawa et al.'s batches
    assert declared(TopicCVaR)["sampling"].default == "shuffle"
    assert GroupDRO(groups=LDATopics()).sampling == "group_balanced"
    assert TopicCVaR(groups=LDATopics()).sampling == "shuffle"


def test_values_are_stored_as_their_declared_type():
    """A number written as an integer is a float (``method.alpha=1``), a list from the config a list."""
    objective = TopicCVaR(groups=LDATopics(learning_offset=2), alpha=1)
    assert objective.hparams["alpha"] == 1.0 and isinstance(objective.hparams["alpha"], float)
    assert isinstance(objective.group_source.hparams["learning_offset"], float)
    betas = OmegaConf.create({"betas": [0.5, 0.9]}).betas
    assert hparam_values(RPDRO, {"betas": betas})["betas"] == [0.5, 0.9]


def test_the_declared_defaults_build_a_working_objective():
    """Nothing but the declaration: TopK's default k is 4 (the mean of the 4 largest losses)."""
    objective = TopK()
    assert objective.hparams == {"k": 4}
    loss = objective(task_losses([1.0, 2.0, 3.0, 4.0, 5.0], [0.0] * 5))
    assert loss.item() == pytest.approx((2 + 3 + 4 + 5) / 4)
    with pytest.raises(TypeError, match="groups"):  # a part has no default: the caller gives it
        GroupDRO()
