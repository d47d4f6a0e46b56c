"""Hyper-parameters declared once, by the class that takes them: every training objective
(robustnlu/robust/), group source (groups/) and learned adversary (adversary/) lists its
hyper-parameters in a class attribute ``HPARAMS``, one line each (as DomainBed's
``hparams_registry`` keeps each default beside its search distribution)::

    HPARAMS = {"k": HParam(integer(AT_LEAST_1), 4, "the largest losses averaged", search=log_int(1, 16))}

its type and range in the config schema's language (`robustnlu.config_spec`), its default, a
one-line doc and, where a paper gives one, its search space (Hydra's sweep syntax, written with
`uniform`, `log_uniform`, `log_int`, `grid`). An object the config builds inside the class's
node (a method's group source ``groups``, its adversary ``adversary``) is a `Part`: any subclass
of its ``base``, which declares its own. A subclass inherits its bases' declarations and may
declare one of them again (Group-DRO's default ``sampling``).

Three readers, none of which restates a range or a default:

- the constructor: `hparam_values` checks the values it was given and fills in the defaults,
  in the schema's words (`ConfigError` ``<name>: <problem> (got <value>)``);
- the config schema: `DeclaredObject` is the node of ``method``, ``method.groups`` and
  ``method.adversary`` (robustnlu/config_schema/method.py): any importable subclass of the
  expected base as ``_target_`` (a user's own class too), its keys those the class declares;
- the HPO search: ``${declared_search_space:method}`` (conf/hparams_search/optuna.yaml) is the
  search space the method and its parts declare (`search_space`).

The YAML files (conf/method/, conf/groups/, conf/adversary/) give each value with its source in
the papers; tests/test_hparams.py checks that they agree with the declared defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from robustnlu.config_spec import Node, Spec, bad, flag, imported, present, text


@dataclass(frozen=True)
class HParam:
    """One hyper-parameter: what its values may be, its default, what it is, how it is searched."""

    spec: Spec
    default: Any
    doc: str
    search: str | None = None  # a sweep of Hydra's syntax (conf/hparams_search/, the Optuna sweeper)


@dataclass(frozen=True)
class Part:
    """An object the config builds inside the node: an instance (or a factory, ``_partial_``) of
    any subclass of ``base``, checked against its own declaration."""

    base: type
    doc: str


# ---------------------------------------------------------------------------- search spaces (Hydra sweeps)
def uniform(low: float, high: float) -> str:
    return f"interval({low}, {high})"


def log_uniform(low: float, high: float) -> str:
    return f"tag(log, interval({low}, {high}))"


def log_int(low: int, high: int) -> str:
    return f"tag(log, int(interval({low}, {high})))"


def grid(*values: Any) -> str:
    return f"choice({', '.join(str(v) for v in values)})"


# ---------------------------------------------------------------------------- reading a declaration
def declared(cls: type) -> dict[str, HParam | Part]:
    """What ``cls`` declares: the ``HPARAMS`` of its bases and its own, a later one replacing an
    earlier one of the same name (in the place of the first)."""
    entries: dict[str, HParam | Part] = {}
    for klass in reversed(cls.__mro__):
        entries.update(vars(klass).get("HPARAMS", {}))
    return entries


def hparam_values(cls: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """The hyper-parameters of a ``cls`` built with the keyword arguments ``given``: each one
    given or its default, checked against its spec (`ConfigError` naming it), numbers as floats.
    A name ``cls`` does not declare is a TypeError, as Python's own for an unknown keyword."""
    hparams = {name: h for name, h in declared(cls).items() if isinstance(h, HParam)}
    for name in given:
        if name not in hparams:
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
    values = {}
    for name, h in hparams.items():
        value = given.get(name, h.default)
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
        h.spec.check(name, value, {})
        values[name] = float(value) if getattr(h.spec, "kind", None) == "number" and value is not None else value
    return values


def search_space(node: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The search space the ``_target_`` class of the config ``node`` (at ``key``) declares: its
    own hyper-parameters' sweeps, then each part's space under the part's key (nested; parts
    without one are left out)."""
    target = imported(f"{key}._target_", node.get("_target_"))
    own, parts = {}, {}
    for name, h in declared(target).items():
        if isinstance(h, HParam) and h.search is not None:
            own[name] = h.search
        elif isinstance(h, Part) and isinstance(node.get(name), Mapping):
            if space := search_space(node[name], f"{key}.{name}"):
                parts[name] = space
    return {**own, **parts}


def register_resolver() -> None:
    """``${declared_search_space:<key>}``: `search_space` of the config's node at ``<key>``
    (conf/hparams_search/optuna.yaml)."""
    if not OmegaConf.has_resolver("declared_search_space"):
        OmegaConf.register_new_resolver("declared_search_space",
                                        lambda key, _root_: search_space(OmegaConf.select(_root_, key), key))


# ---------------------------------------------------------------------------- the schema's node
@dataclass(frozen=True)
class DeclaredObject(Spec):
    """The config node of an object Hydra builds from its ``_target_``: any importable subclass
    of ``base``; its keys are ``_target_``, what that class declares and the ``fixed`` keys
    every such node has (a method's ``name``; a part's optional ``_partial_``: a factory the
    owner calls). Every declared key must be set: the config, and so each run's config.yaml,
    holds every value a run used."""

    base: type
    fixed: Mapping[str, Spec] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()
    null: bool = False

    def node(self, cls: type) -> Node:
        """The keys of ``cls``'s node."""
        keys = {"_target_": text(), **self.fixed,
                **{name: DeclaredObject(h.base, {"_partial_": flag()}, frozenset({"_partial_"}))
                   if isinstance(h, Part) else h.spec for name, h in declared(cls).items()}}
        return Node(keys, optional=self.optional)

    def target(self, key: str, value: Mapping[str, Any]) -> type:
        """The class ``value["_target_"]`` names; `ConfigError` unless it imports and derives from ``base``."""
        target = value.get("_target_")
        cls = imported(f"{key}._target_", target)
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise bad(f"{key}._target_", f"must be a subclass of {self.base.__module__}.{self.base.__qualname__}",
                      target)
        return cls

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if present(self, key, value, dict, "a mapping"):
            self.node(self.target(key, value)).check(key, value, root)


__all__ = ["DeclaredObject", "HParam", "Part", "declared", "grid", "hparam_values", "log_int", "log_uniform",
           "register_resolver", "search_space", "uniform"]
