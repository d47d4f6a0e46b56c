"""The SeqDrift split's config nodes (``drift=``, ``validation=``; core paper section 3,
Table 7) and the rule across them: every key and its spec are declared once, by
`robustnlu.seqdrift.config.SplitConfig`'s fields, whose nodes `SplitConfig.from_configs` checks
with too. Imported when the schema is built: the seqdrift package loads its pipeline."""

from __future__ import annotations

from robustnlu.config_spec import Node, Rule, Variants


def drift() -> Variants:
    """conf/drift/ (core paper section 3, Table 7)."""
    from robustnlu.seqdrift.config import DRIFT

    return DRIFT


def validation() -> Node:
    """conf/validation/ (section 3.4)."""
    from robustnlu.seqdrift.config import VALIDATION

    return VALIDATION


def split_rule() -> Rule:
    """test + validation (twice with ``validation.hold_out_both``) < 1 (section 3.3), across the
    ``drift`` and ``validation`` groups."""
    from robustnlu.seqdrift.config import FRACTIONS

    return FRACTIONS
