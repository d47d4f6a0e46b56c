"""The SeqDrift settings, each declared once: `SplitConfig` (core paper section 3, Table 7, Appendix A).

Every ``drift.*`` key and the two ``validation.*`` keys a split depends on is one field of
`SplitConfig`, declared with `setting` as a hyper-parameter is with `robustnlu.hparams.HParam`:
what its values may be in the config schema's language (`robustnlu.config_spec`: `integer`,
`number`, `choice`, `flag` with ranges written as intervals), its default and a one-line doc.
The fields make the config nodes ``drift`` (`DRIFT`: with ``kind: none`` only the kind) and
``validation`` (`VALIDATION`); `FRACTIONS` is the rule across them. Two readers check values
with these nodes and rules, so in the same words (config_spec's):

- `SplitConfig.from_configs` (the Python API; `make_drift_split` and `canonical` build their
  config with it) and `SplitConfig.check`;
- the config schema (`robustnlu.config_schema`), which checks a Hydra app's config before a
  run writes anything (``python -m robustnlu``, ``python -m robustnlu.seqdrift``): one line
  ``error: drift.<key>: <problem> (got <value>)``.

The defaults are those of conf/drift/slot_context.yaml, which restates them with their sources
in the paper (tests/seqdrift/test_split_config.py checks that the YAML files agree with this
module). Imported by the config schema: this module imports nothing of robustnlu but the spec
language.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from robustnlu.config_spec import (
    AT_LEAST_1, NON_NEGATIVE, SEED, Node, Rule, Spec, Variants, bad, choice, flag, integer, number)

DRIFT_KINDS = ("none", "slot_value", "slot_context")
VALIDATION_KINDS = ("iid", "ood")
RARE_SLOT_POLICIES = ("relabel_o", "drop_utterance")
AFFINITIES = ("scalable", "dense")
CLUSTER_SOURCES = ("auto", "shipped", "compute")  # see robustnlu.seqdrift.shipped


def setting(spec: Spec, default: Any, doc: str, *, key: str | None = None, required: bool = True) -> Any:
    """A `SplitConfig` field: what its values may be (``spec``), its ``default``, a one-line
    ``doc``, its config ``key`` (default ``drift.<field name>``) and whether a Hydra config must
    set it (``required``)."""
    return field(default=default, metadata={"spec": spec, "doc": doc, "key": key, "required": required})


@dataclass(frozen=True)
class SplitConfig:
    """The drift (``cfg.drift``) and validation (``cfg.validation``) options of one split."""

    kind: str = setting(choice(*DRIFT_KINDS), "slot_context", "slot_value | slot_context: which features are "
                        "clustered (section 3.2); none: the dataset's own splits")
    partial: bool = setting(flag(), False, "false: a drift cluster moves whole to test; true: partial_fraction of it "
                            "(section 3.4)")
    partial_fraction: float = setting(number("(0, 1]"), 0.9, "share of a partial drift cluster moved to test "
                                      "(Table 7: 90%)")
    n_clusters: int = setting(integer("[2, inf)"), 200, "spectral clusters (Table 7 says 100; "
                              "conf/drift/slot_context.yaml says why 200)")
    ngram_min: int = setting(integer(AT_LEAST_1), 2, "smallest feature n-gram (Table 7, Appendix A (d))")
    ngram_max: int = setting(integer(AT_LEAST_1), 6, "largest feature n-gram (Table 7: 6 for SNIPS, 5 for TOP)")
    top_ngrams: int = setting(integer(AT_LEAST_1), 10_000, "most frequent n-grams kept as features "
                              "(Table 7, Appendix A (e))")
    min_intent_freq: int = setting(integer(NON_NEGATIVE), 150, "rarer intents are dropped (Table 7, Appendix A (b))")
    min_slot_freq: int = setting(integer(NON_NEGATIVE), 50, "slot types with fewer spans are rare "
                                 "(Table 7, Appendix A (b))")
    min_projected_size: float = setting(number(NON_NEGATIVE), 10.0, "labels projected below this are unconstrained "
                                        "(Table 7, Appendix A (c))")
    rare_slots: str = setting(choice(*RARE_SLOT_POLICIES), "relabel_o", "what a rare slot type does "
                              "(not in the paper; see seqdrift.filtering)")
    require_slots: bool = setting(flag(), True, "drop utterances without any slot "
                                  "(not in the paper; Table 4's TOP sizes)")
    lookahead: bool = setting(flag(), True, "also keep room for unmet projected counts (our reading of section 3.3)")
    test_fraction: float = setting(number("(0, 1)"), 0.1, "share of the filtered corpus in test (section 3.3)")
    valid_fraction: float = setting(number("(0, 1)"), 0.1, "share in validation (Table 4: ~10%)")
    affinity: str = setting(choice(*AFFINITIES), "scalable", "spectral clustering's cosine affinity (Appendix A)")
    seed: int = setting(integer(SEED), 0, "the split's seed, independent of the training seed")
    # how the clustering is obtained, not what the split is: not in to_dict
    clusters: str = setting(choice(*CLUSTER_SOURCES), "auto", "auto | shipped | compute: where the clustering "
                            "comes from (seqdrift.shipped)", required=False)
    validation: str = setting(choice(*VALIDATION_KINDS), "iid", "i.i.d. or o.o.d. validation (section 3.4)",
                              key="validation.kind")
    hold_out_both: bool = setting(flag(), False, "carve out both validation sets, as Table 4 did",
                                  key="validation.hold_out_both")

    @classmethod
    def from_configs(cls, drift_cfg: Mapping[str, Any] | None, validation_cfg: Mapping[str, Any] | None = None) -> SplitConfig:
        """Build and check a config from ``cfg.drift`` and ``cfg.validation`` (dicts or
        DictConfigs; a key left out is its default). Unknown keys and bad values raise
        `ConfigError` naming the key, as the config schema does (`SPLIT`)."""
        defaults = cls().as_config()
        drift = {**defaults["drift"], **_plain("drift", drift_cfg)}
        if drift["kind"] == "none":  # the dataset's own splits: other drift keys unused
            drift = {"kind": "none"}
        values = {"drift": drift, "validation": {**defaults["validation"], **_plain("validation", validation_cfg)}}
        SPLIT.check("", values, values)
        cfg = cls(**{SETTINGS[group][key].name: value for group, node in values.items() for key, value in node.items()})
        return replace(cfg, **{f.name: float(getattr(cfg, f.name)) for f in fields(cfg) if spec_of(f).kind == "number"})

    def check(self) -> None:
        """Raise `ConfigError` ``<key>: <problem> (got <value>)`` for the first value that the
        declared specs or the rules (`NGRAM_SIZES`, `FRACTIONS`) do not allow (with
        ``kind: none`` only ``kind`` and the validation keys count)."""
        values = self.as_config()
        SPLIT.check("", values, values)

    def as_config(self) -> dict[str, dict[str, Any]]:
        """The values as a config gives them, ``{"drift": {...}, "validation": {...}}`` by config
        key (with ``kind: none``, ``{"kind": "none"}`` for drift)."""
        values = {group: {key: getattr(self, f.name) for key, f in settings.items()}
                  for group, settings in SETTINGS.items()}
        if self.kind == "none":  # the dataset's own splits: other drift keys unused
            values["drift"] = {"kind": "none"}
        return values

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The canonical nested form (cache key, files): `as_config` without ``drift.clusters``
        (the split depends on the clustering itself: its record, in the key)."""
        values = self.as_config()
        values["drift"].pop("clusters", None)
        return values

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SplitConfig:
        return cls.from_configs(d["drift"], d["validation"])

    def describe(self) -> str:
        if self.kind == "none":
            return "no drift (the dataset's own splits)"
        drift = f"{self.kind} drift ({'partial ' + format(self.partial_fraction, 'g') if self.partial else 'full'})"
        both = ", both held out" if self.hold_out_both else ""
        return f"{drift}, {self.validation} validation{both}, seed {self.seed}"


def config_key(f: Field) -> str:
    """``drift.<name>``, or the declared key (``validation.kind``)."""
    return f.metadata["key"] or f"drift.{f.name}"


def spec_of(f: Field) -> Spec:
    """What the values of the setting ``f`` may be."""
    return f.metadata["spec"]


#: config group -> key in the group -> its `SplitConfig` field
SETTINGS: dict[str, dict[str, Field]] = {"drift": {}, "validation": {}}
for _f in fields(SplitConfig):
    _group, _key = config_key(_f).split(".")
    SETTINGS[_group][_key] = _f


def _node(group: str, rules: tuple[Rule, ...] = ()) -> Node:
    """The config node of ``group``'s settings: every key required but those declared otherwise."""
    settings = SETTINGS[group]
    return Node({key: spec_of(f) for key, f in settings.items()},
                optional=frozenset(key for key, f in settings.items() if not f.metadata["required"]), rules=rules)


def _fractions_fit(cfg: Mapping[str, Any], _root: Any) -> bool:
    """Section 3.3: test + validation (twice with ``validation.hold_out_both``) < 1."""
    drift = cfg["drift"]
    if drift["kind"] == "none":  # no split of its own
        return True
    return drift["test_fraction"] + (2 if cfg["validation"]["hold_out_both"] else 1) * drift["valid_fraction"] < 1


NGRAM_SIZES = Rule("ngram_min", lambda drift, _: drift["ngram_min"] <= drift["ngram_max"], "must be <= drift.ngram_max")
#: across the two groups, at the root of a config
FRACTIONS = Rule("drift.test_fraction", _fractions_fit,
                 "test + validation fractions (validation twice with validation.hold_out_both) must be < 1")

#: ``drift`` (conf/drift/): every setting, but only the kind with ``kind: none``
DRIFT = Variants("kind", {kind: Node({"kind": spec_of(SETTINGS["drift"]["kind"])}) if kind == "none"
                          else _node("drift", rules=(NGRAM_SIZES,)) for kind in DRIFT_KINDS})
#: ``validation`` (conf/validation/)
VALIDATION = _node("validation")
#: both groups and the rule across them: what `SplitConfig` checks; the config schema puts
#: `DRIFT`, `VALIDATION` and `FRACTIONS` into each app's config
SPLIT = Node({"drift": DRIFT, "validation": VALIDATION}, rules=(FRACTIONS,))


def _plain(group: str, cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(cfg, Mapping):
        raise bad(group, "must be a mapping", cfg)
    return dict(cfg)


__all__ = ["DRIFT", "FRACTIONS", "SETTINGS", "SPLIT", "VALIDATION", "SplitConfig", "setting"]
