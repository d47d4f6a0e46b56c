"""The SeqDrift settings, each declared once: `SplitConfig` (core paper section 3, Table 7, Appendix A).

Every ``drift.*`` key and the two ``validation.*`` keys a split depends on is one field of
`SplitConfig`, declared with `setting`: its type (the annotation), default, allowed values and
meaning. Two readers check values against these declarations, with the same words:

- `SplitConfig.from_configs` (the Python API; `make_drift_split` and `canonical` build their
  config with it);
- the config schema's ``drift`` and ``validation`` nodes (`robustnlu.config_schema`), which check
  a Hydra app's config before a run writes anything (``python -m robustnlu``,
  ``python -m robustnlu.seqdrift``): one line ``error: drift.<key>: <problem> (got <value>)``.

The defaults are those of conf/drift/slot_context.yaml, which restates them with their sources
in the paper (tests/seqdrift/test_config.py checks that the YAML files agree with this module).
Imported by the config schema: this module imports nothing of robustnlu but the errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from robustnlu.errors import ConfigError

DRIFT_KINDS = ("none", "slot_value", "slot_context")
VALIDATION_KINDS = ("iid", "ood")
RARE_SLOT_POLICIES = ("relabel_o", "drop_utterance")
AFFINITIES = ("scalable", "dense")
CLUSTER_SOURCES = ("auto", "shipped", "compute")  # see robustnlu.seqdrift.shipped
SEED_MAX = 4_294_967_295  # numpy's and Lightning's seed range


@dataclass(frozen=True)
class Range:
    """Allowed numbers: ``test`` and how a user reads it (the config schema's wording)."""

    test: Callable[[float], bool]
    words: str


AT_LEAST_1 = Range(lambda v: v >= 1, "must be >= 1")
NON_NEGATIVE = Range(lambda v: v >= 0, "must be >= 0")
OPEN_FRACTION = Range(lambda v: 0 < v < 1, "must be in (0, 1)")


def setting(default: Any, doc: str, *, choices: tuple[str, ...] = (), allowed: Range | None = None,
            key: str | None = None, required: bool = True) -> Any:
    """A `SplitConfig` field: ``default``, a one-line ``doc``, the allowed ``choices`` (strings)
    or numeric range, its config ``key`` (default ``drift.<field name>``) and whether a Hydra
    config must set it (``required``)."""
    return field(default=default, metadata={"doc": doc, "choices": choices, "allowed": allowed, "key": key,
                                            "required": required})


@dataclass(frozen=True)
class SplitConfig:
    """The drift (``cfg.drift``) and validation (``cfg.validation``) options of one split."""

    kind: str = setting("slot_context", "slot_value | slot_context: which features are clustered (section 3.2); "
                        "none: the dataset's own splits", choices=DRIFT_KINDS)
    partial: bool = setting(False, "false: a drift cluster moves whole to test; true: partial_fraction of it (section 3.4)")
    partial_fraction: float = setting(0.9, "share of a partial drift cluster moved to test (Table 7: 90%)",
                                      allowed=Range(lambda v: 0 < v <= 1, "must be in (0, 1]"))
    n_clusters: int = setting(200, "spectral clusters (Table 7 says 100; conf/drift/slot_context.yaml says why 200)",
                              allowed=Range(lambda v: v >= 2, "must be >= 2"))
    ngram_min: int = setting(2, "smallest feature n-gram (Table 7, Appendix A (d))", allowed=AT_LEAST_1)
    ngram_max: int = setting(6, "largest feature n-gram (Table 7: 6 for SNIPS, 5 for TOP)", allowed=AT_LEAST_1)
    top_ngrams: int = setting(10_000, "most frequent n-grams kept as features (Table 7, Appendix A (e))",
                              allowed=AT_LEAST_1)
    min_intent_freq: int = setting(150, "rarer intents are dropped (Table 7, Appendix A (b))", allowed=NON_NEGATIVE)
    min_slot_freq: int = setting(50, "slot types with fewer spans are rare (Table 7, Appendix A (b))",
                                 allowed=NON_NEGATIVE)
    min_projected_size: float = setting(10.0, "labels projected below this are unconstrained (Table 7, Appendix A (c))",
                                        allowed=NON_NEGATIVE)
    rare_slots: str = setting("relabel_o", "what a rare slot type does (not in the paper; see seqdrift.filtering)",
                              choices=RARE_SLOT_POLICIES)
    require_slots: bool = setting(True, "drop utterances without any slot (not in the paper; Table 4's TOP sizes)")
    lookahead: bool = setting(True, "also keep room for unmet projected counts (our reading of section 3.3)")
    test_fraction: float = setting(0.1, "share of the filtered corpus in test (section 3.3)", allowed=OPEN_FRACTION)
    valid_fraction: float = setting(0.1, "share in validation (Table 4: ~10%)", allowed=OPEN_FRACTION)
    affinity: str = setting("scalable", "spectral clustering's cosine affinity (Appendix A)", choices=AFFINITIES)
    seed: int = setting(0, "the split's seed, independent of the training seed",
                        allowed=Range(lambda v: 0 <= v <= SEED_MAX, f"must be in [0, {SEED_MAX}]"))
    # how the clustering is obtained, not what the split is: not in to_dict
    clusters: str = setting("auto", "auto | shipped | compute: where the clustering comes from (seqdrift.shipped)",
                            choices=CLUSTER_SOURCES, required=False)
    validation: str = setting("iid", "i.i.d. or o.o.d. validation (section 3.4)", choices=VALIDATION_KINDS,
                              key="validation.kind")
    hold_out_both: bool = setting(False, "carve out both validation sets, as Table 4 did",
                                  key="validation.hold_out_both")

    @classmethod
    def from_configs(cls, drift_cfg: Mapping[str, Any] | None, validation_cfg: Mapping[str, Any] | None = None) -> SplitConfig:
        """Build and check a config from ``cfg.drift`` and ``cfg.validation`` (dicts or
        DictConfigs). Unknown keys and bad values raise `ConfigError` naming the key."""
        drift = _plain(drift_cfg)
        if drift.get("kind") == "none":  # the dataset's own splits: other drift keys unused
            drift = {"kind": "none"}
        values = {}
        for group, given in (("drift", drift), ("validation", _plain(validation_cfg))):
            known = SETTINGS[group]
            for name, value in given.items():
                if name not in known:
                    raise ConfigError(f"{group}.{name}: unknown key; expected one of {sorted(known)}")
                values[known[name].name] = value
        cfg = cls(**values)
        cfg.check()
        return replace(cfg, **{f.name: float(getattr(cfg, f.name)) for f in fields(cfg) if f.type == "float"})

    def check(self) -> None:
        """Raise `ConfigError` ``<key>: <problem> (got <value>)`` for the first value the
        declarations or `RULES` do not allow (with ``kind: none`` only ``kind`` and the
        validation keys count)."""
        values = asdict(self)
        checked = [f for f in fields(self) if self.kind != "none" or f.name == "kind" or f.metadata["key"]]
        for f in checked:
            if (wrong := problem(f, values[f.name])) is not None:
                raise ConfigError(f"{config_key(f)}: {wrong} (got {shown(values[f.name])})")
        if self.kind == "none":
            return
        for rule in RULES:
            if not rule.holds(values):
                raise ConfigError(f"{rule.key}: {rule.problem} (got {shown(values[rule.key.split('.')[1]])})")

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The canonical nested form ``{"drift": {...}, "validation": {...}}`` (cache key, files)."""
        values = asdict(self)
        del values["clusters"]  # the split depends on the clustering itself (its record, in the key)
        validation = {"kind": values.pop("validation"), "hold_out_both": values.pop("hold_out_both")}
        drift = {"kind": "none"} if self.kind == "none" else values
        return {"drift": drift, "validation": validation}

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


#: config group -> key in the group -> its `SplitConfig` field
SETTINGS: dict[str, dict[str, Field]] = {"drift": {}, "validation": {}}
for _f in fields(SplitConfig):
    _group, _key = config_key(_f).split(".")
    SETTINGS[_group][_key] = _f


def problem(f: Field, value: Any) -> str | None:
    """What is wrong with ``value`` for the setting ``f`` (type, choices, range), or None."""
    choices, allowed = f.metadata["choices"], f.metadata["allowed"]
    if choices:
        return None if isinstance(value, str) and value in choices else f"must be one of {', '.join(choices)}"
    is_bool = isinstance(value, bool)
    if f.type == "bool":
        return None if is_bool else "must be true or false"
    if f.type == "int" and not (isinstance(value, int) and not is_bool):
        return "must be an integer"
    if f.type == "float":
        if not isinstance(value, (int, float)) or is_bool:
            return "must be a number"
        if not math.isfinite(value):
            return "must be a finite number"
    if allowed is not None and not allowed.test(value):
        return allowed.words
    return None


@dataclass(frozen=True)
class Rule:
    """A condition across settings: ``holds(values)`` over `SplitConfig` field values; else
    ``key`` is reported with ``problem``."""

    key: str
    holds: Callable[[Mapping[str, Any]], bool]
    problem: str


NGRAM_SIZES = Rule("drift.ngram_min", lambda v: v["ngram_min"] <= v["ngram_max"], "must be <= drift.ngram_max")
FRACTIONS = Rule(  # section 3.3: test + validation (twice with validation.hold_out_both) < 1
    "drift.test_fraction",
    lambda v: v["test_fraction"] + (2 if v["hold_out_both"] else 1) * v["valid_fraction"] < 1,
    "test + validation fractions (validation twice with validation.hold_out_both) must be < 1")
RULES = (NGRAM_SIZES, FRACTIONS)


def field_values(drift: Mapping[str, Any], validation: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg.drift`` and ``cfg.validation`` values by `SplitConfig` field name (for `RULES`)."""
    return {**drift, **{SETTINGS["validation"][k].name: v for k, v in validation.items()}}


def shown(value: Any) -> str:
    """A value as the user writes it (``true``, not ``True``)."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _plain(cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"expected a mapping of options, got {type(cfg).__name__}")
    return dict(cfg)


__all__ = ["RULES", "SETTINGS", "SplitConfig", "field_values", "problem", "setting"]
