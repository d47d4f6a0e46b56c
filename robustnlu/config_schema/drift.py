"""The SeqDrift split's config nodes (``drift=``, ``validation=``; core paper section 3,
Table 7; robustnlu/seqdrift/) and the rule across them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robustnlu.config_schema.spec import AT_LEAST_1, NON_NEGATIVE, SEED, Node, Rule, Variants, choice, flag, integer, number, text


def drift() -> Variants:
    """conf/drift/ (core paper section 3, Table 7; robustnlu/seqdrift/)."""
    from robustnlu.seqdrift.split import AFFINITIES, CLUSTER_SOURCES, RARE_SLOT_POLICIES

    seqdrift = Node({
        "kind": text(), "partial": flag(), "partial_fraction": number("(0, 1]"),
        "n_clusters": integer("[2, inf)"), "ngram_min": integer(AT_LEAST_1), "ngram_max": integer(AT_LEAST_1),
        "top_ngrams": integer(AT_LEAST_1), "min_intent_freq": integer(NON_NEGATIVE),
        "min_slot_freq": integer(NON_NEGATIVE), "min_projected_size": number(NON_NEGATIVE),
        "rare_slots": choice(*RARE_SLOT_POLICIES), "require_slots": flag(), "lookahead": flag(),
        "test_fraction": number("(0, 1)"), "valid_fraction": number("(0, 1)"),
        "affinity": choice(*AFFINITIES), "seed": integer(SEED),
        "clusters": choice(*CLUSTER_SOURCES),
    }, optional=frozenset({"clusters"}), rules=(
        Rule("ngram_min", lambda d, _: d["ngram_min"] <= d["ngram_max"], "must be <= drift.ngram_max"),
    ))
    return Variants("kind", {"none": Node({"kind": text()}), "slot_value": seqdrift, "slot_context": seqdrift})


def validation() -> Node:
    from robustnlu.seqdrift.split import VALIDATION_KINDS

    return Node({"kind": choice(*VALIDATION_KINDS), "hold_out_both": flag()})


def fractions_leave_training_data(cfg: Mapping[str, Any], _: Any) -> bool:
    """test + validation (twice with ``validation.hold_out_both``) < 1 (section 3.3)."""
    d = cfg["drift"]
    if d.get("kind") == "none":
        return True
    held_out = 2 if cfg["validation"]["hold_out_both"] else 1
    return d["test_fraction"] + held_out * d["valid_fraction"] < 1


SPLIT_RULE = Rule("drift.test_fraction", fractions_leave_training_data,
                  "test + validation fractions (validation twice with validation.hold_out_both) must be < 1")
