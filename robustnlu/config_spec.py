"""The spec language of the config schema (`robustnlu.config_schema`): what one value may be
(`integer`, `number`, `choice`, `flag`, `text` with ranges written as intervals ``"(0, 1]"``), a
mapping of keys (`Node`), a node chosen by one of its keys (`Variants`), objects Hydra
instantiates (`instance`, `by_target`), and the ranges the config groups share. A bad value is a
`ConfigError` with one line ``<key>: <problem> (got <value>)``.

Plumbing, below the code whose settings it describes: the classes a config instantiates declare
their hyper-parameters in this language (`robustnlu.hparams`), SeqDrift its settings
(`robustnlu.seqdrift.config`), and the schema reads those declarations. Imports nothing of
robustnlu but the errors."""

from __future__ import annotations

import difflib
import inspect
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from robustnlu.errors import ConfigError

class Missing:
    """A value the config leaves to the user (``???``)."""

    def __str__(self) -> str:
        return "???"


MISSING = Missing()


def show(value: Any) -> str:
    """A value as the user would write it on the command line."""
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{show(v)}" for k, v in value.items()) + "}"
    return str(value)


def bad(key: str, problem: str, value: Any) -> ConfigError:
    return ConfigError(f"{key}: {problem} (got {show(value)})")


class Spec:
    """What one value may be. ``check`` raises `ConfigError` naming ``key``; ``root`` is the
    whole config (plain containers), for rules that look at other keys."""

    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        raise NotImplementedError


def present(spec: Spec, key: str, value: Any, kind: type | tuple[type, ...], noun: str) -> bool:
    """False for a null that ``spec`` allows; `ConfigError` unless ``value`` is a ``kind``."""
    if value is None and spec.null:
        return False
    if not isinstance(value, kind):
        raise bad(key, f"must be {noun}", value)
    return True


@dataclass(frozen=True)
class Interval:
    """``"(0, 1]"``, ``"[1, inf)"``: the allowed range of a number."""

    low: float
    high: float
    closed_low: bool
    closed_high: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        m = re.fullmatch(r"([\[(])\s*(-?[\w.]+)\s*,\s*(-?[\w.]+)\s*([\])])", text)
        if not m:
            raise ValueError(f"not an interval: {text!r}")
        return cls(float(m[2]), float(m[3]), m[1] == "[", m[4] == "]")

    def __contains__(self, x: float) -> bool:
        above = x >= self.low if self.closed_low else x > self.low
        below = x <= self.high if self.closed_high else x < self.high
        return above and below

    def describe(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if x.is_integer() else str(x)

        if math.isinf(self.high):
            return f"must be {'>=' if self.closed_low else '>'} {num(self.low)}"
        if math.isinf(self.low):
            return f"must be {'<=' if self.closed_high else '<'} {num(self.high)}"
        return f"must be in {'[' if self.closed_low else '('}{num(self.low)}, {num(self.high)}{']' if self.closed_high else ')'}"


@dataclass(frozen=True)
class Scalar(Spec):
    """An int, a number (int or float, finite), a bool or a string, with its range or choices."""

    kind: str  # integer | number | flag | text
    interval: Interval | None = None
    choices: tuple[Any, ...] = ()
    null: bool = False
    pattern: str | None = None  # text: a regular expression the whole string must match

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if value is None:
            if not self.null:
                raise bad(key, "must be set", value)
            return
        if self.choices:
            if isinstance(value, bool) or value not in self.choices:
                raise bad(key, f"must be one of {', '.join(show(c) for c in self.choices)}", value)
            return
        is_bool = isinstance(value, bool)
        ok = {"integer": isinstance(value, int) and not is_bool,
              "number": isinstance(value, (int, float)) and not is_bool,
              "flag": is_bool,
              "text": isinstance(value, str) and value != ""}[self.kind]
        if not ok:
            noun = {"integer": "an integer", "number": "a number", "flag": "true or false", "text": "a non-empty string"}
            raise bad(key, f"must be {noun[self.kind]}", value)
        if self.kind == "number" and not math.isfinite(value):
            raise bad(key, "must be a finite number", value)
        if self.interval is not None and value not in self.interval:
            raise bad(key, self.interval.describe(), value)
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise bad(key, f"must match {self.pattern}", value)


def integer(interval: str | None = None, *, null: bool = False) -> Scalar:
    return Scalar("integer", Interval.parse(interval) if interval else None, null=null)


def number(interval: str | None = None, *, null: bool = False) -> Scalar:
    return Scalar("number", Interval.parse(interval) if interval else None, null=null)


def choice(*options: Any, null: bool = False) -> Scalar:
    return Scalar("choice", choices=tuple(options), null=null)


def flag() -> Scalar:
    return Scalar("flag")


def text(*, null: bool = False, pattern: str | None = None) -> Scalar:
    return Scalar("text", null=null, pattern=pattern)


@dataclass(frozen=True)
class FolderName(Spec):
    """A name that run folders are named with (a method's, a dataset's, the scenario): a
    non-empty string that is one path component, so that each run gets a folder of its own
    where the tools that find runs look (a ``/`` would nest it one level deeper)."""

    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        text().check(key, value, root)
        if "/" in value or value in (".", ".."):
            raise bad(key, "must be usable as a folder name (no /, not . or ..)", value)


@dataclass(frozen=True)
class Anything(Spec):
    """Not checked here (an interpolation of a node checked elsewhere, free-form options)."""

    null: bool = True

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        return


@dataclass(frozen=True)
class Importable(Spec):
    """A ``_target_``: a dotted path that imports."""

    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        imported(key, value)


@dataclass(frozen=True)
class Seq(Spec):
    """A list of ``item`` (exactly ``length`` long, at least ``min_length``); a tuple too (a
    declared default, `robustnlu.hparams`)."""

    item: Spec
    length: int | None = None
    min_length: int = 0
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not present(self, key, value, (list, tuple), "a list"):
            return
        if self.length is not None and len(value) != self.length:
            raise bad(key, f"must be a list of {self.length}", value)
        if len(value) < self.min_length:
            raise bad(key, f"must be a list of at least {self.min_length}", value)
        for i, item in enumerate(value):
            self.item.check(f"{key}[{i}]", item, root)


@dataclass(frozen=True)
class FalseOr(Spec):
    """``false`` (or null) for "none", else ``spec`` (e.g. a TOP file's header names)."""

    spec: Spec
    null: bool = True

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if value is not None and value is not False:
            self.spec.check(key, value, root)


@dataclass(frozen=True)
class Rule:
    """A condition across keys of a node (or of the whole config): ``test(node, root)`` must
    hold; otherwise ``key`` (relative to the node) is reported with ``problem``, or with
    ``problem(node, root)`` where the words depend on other values (the bound they set)."""

    key: str
    test: Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
    problem: str | Callable[[Mapping[str, Any], Mapping[str, Any]], str]


@dataclass(frozen=True)
class Node(Spec):
    """A mapping with these ``keys`` (all required but those in ``optional``). ``extra``: the
    other keys allowed unchecked (``"*"``: any), or a function that returns them when a key
    outside ``keys`` turns up (a constructor's arguments: its import may need an extra)."""

    keys: Mapping[str, Spec]
    optional: frozenset[str] = frozenset()
    extra: frozenset[str] | str | Callable[[], frozenset[str] | str] = frozenset()
    rules: tuple[Rule, ...] = ()
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not present(self, key, value, dict, "a mapping"):
            return
        prefix = f"{key}." if key else ""
        unknown = [name for name in value if name not in self.keys]
        extra = self.extra() if unknown and callable(self.extra) else self.extra
        for name in unknown:
            if extra != "*" and name not in extra:
                known = ", ".join(sorted(self.keys))
                close = difflib.get_close_matches(str(name), list(self.keys), n=3)
                closest = f"; the closest: {', '.join(close)}" if close else ""
                raise bad(f"{prefix}{name}", f"unknown key ({key or 'the config'} has {known}{closest})", value[name])
        for name, spec in self.keys.items():
            if value.get(name) is MISSING:
                raise bad(f"{prefix}{name}", "must be set", MISSING)
            if name in value:
                spec.check(f"{prefix}{name}", value[name], root)
            elif name not in self.optional:
                raise bad(f"{prefix}{name}", "must be set", None)
        for rule in self.rules:
            if not rule.test(value, root):
                problem = rule.problem(value, root) if callable(rule.problem) else rule.problem
                raise bad(f"{prefix}{rule.key}", problem, _select(value, rule.key))


@dataclass(frozen=True)
class Variants(Spec):
    """A node whose keys depend on the value of its key ``by`` (``optimizer.name``,
    ``encoder.kind``, an object's ``_target_``). ``importable``: a ``_target_`` not listed is
    allowed when it imports; its keys are then its own."""

    by: str
    options: Mapping[str, Node]
    importable: bool = False
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not present(self, key, value, dict, "a mapping"):
            return
        which = value.get(self.by)
        node = self.options.get(which) if isinstance(which, str) else None
        if node is not None:
            node.check(key, value, root)
        elif self.importable and isinstance(which, str) and which:
            imported(f"{key}.{self.by}", which)
        else:
            raise bad(f"{key}.{self.by}", f"must be one of {', '.join(self.options)}", which)


@dataclass(frozen=True)
class MapOf(Spec):
    """A mapping of free names to values of one spec (a null value switches an entry off)."""

    value: Spec
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if not present(self, key, value, dict, "a mapping"):
            return
        for name, item in value.items():
            if item is not None:
                self.value.check(f"{key}.{name}", item, root)


@dataclass(frozen=True)
class AnyOf(Spec):
    """One of several specs (``trainer.devices``: a count, ``auto`` or a list of ids)."""

    specs: tuple[Spec, ...]
    problem: str
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        for spec in self.specs:
            try:
                spec.check(key, value, root)
                return
            except ConfigError:
                continue
        raise bad(key, self.problem, value)


def _select(node: Mapping[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def imported(key: str, target: Any) -> Any:
    """The class or function the dotted path ``target`` names; `ConfigError` naming ``key``
    unless it is one that imports. Located as Hydra's ``instantiate`` locates a ``_target_``
    (``_locate``; ``hydra.utils.get_object`` would also log each failure as an ERROR line)."""
    from hydra._internal.utils import _locate

    if not isinstance(target, str) or not target:
        raise bad(key, "must be a dotted path to a class or function", target)
    try:
        return _locate(target)
    except Exception as err:  # ImportError, AttributeError, a failing module: not importable
        raise bad(key, f"cannot be imported ({str(err.__cause__ or err).splitlines()[0]})", target) from None


def arguments_of(target: str) -> frozenset[str] | str:
    """The keyword arguments ``target``'s constructor takes (``"*"`` when it takes ``**kwargs``)."""
    params = inspect.signature(imported("_target_", target)).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return "*"
    return frozenset(p.name for p in params) | {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}


def instance(target: str, keys: Mapping[str, Spec] | None = None, *, checked_only: bool = False,
             optional: frozenset[str] = frozenset(), rules: tuple[Rule, ...] = ()) -> Node:
    """The node of a Hydra-instantiated ``target`` with ``keys`` checked (plus ``_target_``,
    ``_partial_``); ``checked_only=False``: its constructor's other arguments are allowed too."""
    keys = {"_target_": choice(target), "_partial_": flag(), **(keys or {})}
    return Node(keys, optional=frozenset({"_partial_"}) | optional,
                extra=frozenset() if checked_only else lambda: arguments_of(target), rules=rules)


def by_target(nodes: tuple[Node, ...], null: bool = False) -> Variants:
    """The `Variants` of objects told apart by their ``_target_``; another importable target is
    allowed with its own keys (a user's noise, callback, logger, group source)."""
    return Variants("_target_", {n.keys["_target_"].choices[0]: n for n in nodes}, importable=True, null=null)


# ---------------------------------------------------------------------------- ranges the groups share
PROBABILITY = "[0, 1]"
DROPOUT = "[0, 1)"
POSITIVE = "(0, inf)"
NON_NEGATIVE = "[0, inf)"
AT_LEAST_1 = "[1, inf)"
SEED = "[0, 4294967295]"  # numpy's and Lightning's seed range
SAMPLING = choice("shuffle", "group_balanced")
