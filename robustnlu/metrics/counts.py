"""The integer counts of one utterance from which every corpus metric is derived
(`utterance_counts`), slot errors matched the SEMER way (`semer_slot_errors`, core paper
Appendix D). Plain Python: `robustnlu.metrics.slu.SLUMetrics` counts each utterance of a run with
them, and the significance tests of the reports count stored predictions without loading torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from robustnlu.data.bio import Span, slot_spans


class SlotErrors(NamedTuple):
    """One utterance's slot errors under SEMER (App. D)."""

    substitutions: int
    deletions: int
    insertions: int

    @property
    def total(self) -> int:
        return self.substitutions + self.deletions + self.insertions


def semer_slot_errors(gold_spans: set[Span], pred_spans: set[Span]) -> SlotErrors:
    """Match predicted to gold spans the Alexa SemER way (a substitution has the right slot name
    but a wrong value).

    Spans equal in type, start and end are correct. Among the remaining spans, a gold and a
    predicted span of the same slot type form a substitution (wrong value or boundaries),
    pairing them left to right per type (any pairing gives the same counts: per type, the
    smaller of the two remainders); unpaired gold spans are deletions, unpaired predicted
    spans insertions.
    """
    unmatched_gold = Counter(slot_type for slot_type, _, _ in gold_spans - pred_spans)
    unmatched_pred = Counter(slot_type for slot_type, _, _ in pred_spans - gold_spans)
    substitutions = sum((unmatched_gold & unmatched_pred).values())
    return SlotErrors(
        substitutions=substitutions,
        deletions=unmatched_gold.total() - substitutions,
        insertions=unmatched_pred.total() - substitutions,
    )


class UtteranceCounts(NamedTuple):
    """The integer counts of one utterance from which every corpus metric is derived."""

    intent_correct: int
    gold_spans: int
    pred_spans: int
    correct_spans: int
    #: SEMER numerator: slot substitutions + deletions + insertions + intent error.
    semer_errors: int
    #: Intent correct and predicted spans == gold spans.
    frame_correct: int


def utterance_counts(
    pred_intent: str, gold_intent: str, pred_tags: Sequence[str], gold_tags: Sequence[str]
) -> UtteranceCounts:
    """Count one utterance's intent and slot outcomes (spans by conlleval chunking)."""
    if len(pred_tags) != len(gold_tags):
        raise ValueError(f"{len(pred_tags)} predicted tags but {len(gold_tags)} gold tags")
    gold_spans = set(slot_spans(gold_tags))
    pred_spans = set(slot_spans(pred_tags))
    intent_correct = int(pred_intent == gold_intent)
    return UtteranceCounts(
        intent_correct=intent_correct,
        gold_spans=len(gold_spans),
        pred_spans=len(pred_spans),
        correct_spans=len(gold_spans & pred_spans),
        semer_errors=semer_slot_errors(gold_spans, pred_spans).total + 1 - intent_correct,
        frame_correct=int(intent_correct and pred_spans == gold_spans),
    )
