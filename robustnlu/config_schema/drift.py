"""The SeqDrift split's config nodes (``drift=``, ``validation=``; core paper section 3,
Table 7) and the rule across them: every key, its type and allowed values are declared once, in
`robustnlu.seqdrift.config` (SplitConfig's fields), and read here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from robustnlu.config_spec import Node, Rule, Spec, Variants, bad, text


@dataclass(frozen=True)
class Declared(Spec):
    """A value declared, with its default and allowed values, where it is used: ``problem``
    says what is wrong with a value, or None (the SeqDrift settings,
    `robustnlu.seqdrift.config.problem`)."""

    problem: Callable[[Any], str | None]
    null: bool = False

    def check(self, key: str, value: Any, root: Mapping[str, Any]) -> None:
        if (problem := self.problem(value)) is not None:
            raise bad(key, problem, value)


def declared(group: str) -> Node:
    """``drift`` / ``validation``: the keys `robustnlu.seqdrift.config.SplitConfig` declares."""
    from robustnlu.seqdrift.config import NGRAM_SIZES, SETTINGS, problem

    settings = SETTINGS[group]
    rules = (Rule(NGRAM_SIZES.key.removeprefix("drift."), lambda d, _: NGRAM_SIZES.holds(d), NGRAM_SIZES.problem),
             ) if group == "drift" else ()
    return Node({key: Declared(partial(problem, f)) for key, f in settings.items()},
                optional=frozenset(key for key, f in settings.items() if not f.metadata["required"]), rules=rules)


def drift() -> Variants:
    """conf/drift/ (core paper section 3, Table 7; robustnlu/seqdrift/config.py declares every key)."""
    seqdrift = declared("drift")
    return Variants("kind", {"none": Node({"kind": text()}), "slot_value": seqdrift, "slot_context": seqdrift})


def validation() -> Node:
    return declared("validation")


def split_rule() -> Rule:
    """test + validation (twice with ``validation.hold_out_both``) < 1 (section 3.3), across the
    ``drift`` and ``validation`` groups."""
    from robustnlu.seqdrift.config import FRACTIONS, field_values

    def holds(cfg: Mapping[str, Any], _: Any) -> bool:
        return cfg["drift"].get("kind") == "none" or FRACTIONS.holds(field_values(cfg["drift"], cfg["validation"]))

    return Rule(FRACTIONS.key, holds, FRACTIONS.problem)
