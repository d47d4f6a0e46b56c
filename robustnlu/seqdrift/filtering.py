"""SeqDrift filtering and the labels of an utterance (core paper, section 3.3, Table 7 (b), Appendix A).

Pure functions of (utterances, `SplitConfig`); `robustnlu.seqdrift.split` splits what is kept.

Filtering (`filter_utterances`; Table 7 (b), Appendix A)
    All splits of the corpus are joined first (section 3.1 (i)). Then, repeated until nothing
    changes (dropping utterances can push a count under its threshold):

    1. ``require_slots``: drop utterances without any slot. Neither feature representation
       (slot values, slot contexts) says anything about them, so they cannot be clustered.
    2. Drop utterances whose intent has fewer than ``min_intent_freq`` utterances.
    3. Slot types with fewer than ``min_slot_freq`` *occurrences* (spans, i.e. ``B-`` tags, over
       the kept utterances) are rare. The paper does not say what happens to them:
       ``rare_slots: relabel_o`` tags their spans ``O`` (the utterance stays),
       ``rare_slots: drop_utterance`` drops every utterance that has one.

    Default ``relabel_o`` + ``require_slots: true``, chosen from Table 4's split sizes:

    - SNIPS cannot tell the policies apart: none of its 39 slot types (and none of its 7
      intents) is rare, so both give all 14,484 utterances, with or without ``require_slots``
      (every SNIPS utterance has a slot). Table 4 agrees: train + i.i.d. valid + o.o.d. valid +
      test is exactly 14,484 in three of its four SNIPS rows (e.g. 10,231 + 1,426 + 1,404 +
      1,423). The "≈ 13,080" total leaves out the o.o.d. valid column; nothing was dropped.
    - TOP-NN (29,104 utterances here, as in Table 6) is decisive: all four Table 4 rows sum to
      22,950. ``relabel_o`` + ``require_slots`` gives 22,953; ``drop_utterance`` +
      ``require_slots`` 22,873; without ``require_slots`` 29,033 (relabel_o) or 28,947 (drop).

    Relabelled slot types are stored with the split; `DriftSplit.apply` relabels them again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from robustnlu.data.bio import slot_spans, tag_type
from robustnlu.data.utterance import Utterance
from robustnlu.seqdrift.config import SplitConfig


def slot_types(tags: Sequence[str]) -> set[str]:
    """The slot types of an utterance's spans, each opened by a ``B-`` tag (strict reading)."""
    return {typ for typ, _, _ in slot_spans(tags, "strict")}


def relabel(u: Utterance, rare: set[str] | frozenset[str]) -> Utterance:
    """``u`` with every ``B-``/``I-`` tag of a type in ``rare`` replaced by ``O``."""
    if not rare:
        return u
    tags = tuple("O" if tag_type(t) in rare else t for t in u.tags)
    return u if tags == u.tags else replace(u, tags=tags)


@dataclass(frozen=True)
class Filtered:
    """The filtered corpus: kept (possibly relabelled) utterances and why the others went."""

    utterances: tuple[Utterance, ...]
    removed: dict[str, str] = field(default_factory=dict)  # uid -> no_slots | rare_intent | rare_slot
    relabelled_slots: tuple[str, ...] = ()

    @classmethod
    def of(cls, utterances: Iterable[Utterance]) -> Filtered:
        """Utterances taken as they are (no filtering)."""
        return cls(tuple(utterances))


def filter_utterances(utterances: Sequence[Utterance], cfg: SplitConfig) -> Filtered:
    """Drop slot-less utterances, rare intents and rare slot types (see the module docstring)."""
    kept = list(utterances)
    removed: dict[str, str] = {}
    relabelled: set[str] = set()
    while True:
        before = (len(kept), len(relabelled))
        if cfg.require_slots:
            kept = _drop(kept, removed, "no_slots", lambda u: not slot_types(u.tags))
        intents = Counter(u.intent for u in kept)
        kept = _drop(kept, removed, "rare_intent", lambda u: intents[u.intent] < cfg.min_intent_freq)
        spans = Counter(typ for u in kept for typ, _, _ in slot_spans(u.tags, "strict"))
        rare = {s for s, n in spans.items() if n < cfg.min_slot_freq}
        if cfg.rare_slots == "drop_utterance":
            kept = _drop(kept, removed, "rare_slot", lambda u: bool(slot_types(u.tags) & rare))
        else:
            kept = [relabel(u, rare) for u in kept]
            relabelled |= rare
        if (len(kept), len(relabelled)) == before:
            break
    return Filtered(tuple(kept), removed, tuple(sorted(relabelled)))


def _drop(kept: list[Utterance], removed: dict[str, str], reason: str, test) -> list[Utterance]:
    out = []
    for u in kept:
        if test(u):
            removed[u.uid] = reason
        else:
            out.append(u)
    return out


# --------------------------------------------------------------------------- labels


def utterance_labels(u: Utterance) -> list[str]:
    """The intent plus one ``<intent>-<slot type>`` label per slot type (once per utterance)."""
    return list(_labels(u.intent, tuple(u.tags)))


@lru_cache(maxsize=1 << 16)
def _labels(intent: str, tags: tuple[str, ...]) -> tuple[str, ...]:
    """`utterance_labels` of an intent and tag sequence, remembered: the splitter and the
    statistics of every scenario ask for the same utterances' labels again and again (SNIPS's
    four canonical scenarios: 324,500 times for 14,484 utterances), and reading the spans of the
    tags is what costs. A function of its arguments alone, so remembering changes no result; the
    size holds the largest shipped corpus."""
    return (intent, *(f"{intent}-{s}" for s in sorted(slot_types(tags))))


__all__ = ["Filtered", "filter_utterances", "relabel", "slot_types", "utterance_labels"]
