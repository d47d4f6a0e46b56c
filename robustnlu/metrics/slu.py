"""The SLU metrics of the core paper (section 5.1 and Appendix D) as one torchmetrics `Metric`.

`SLUMetrics.update` turns each utterance into a row of integer counts
(`robustnlu.metrics.counts.utterance_counts` plus its gold-intent index and group id) and
appends the rows to a ``"cat"`` state, so that under DDP the rows of all processes are gathered
before `SLUMetrics.compute` derives every metric from them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from robustnlu.metrics.counts import UtteranceCounts, utterance_counts
from robustnlu.metrics.registry import COUNTED, METRICS, PER_GROUP

#: Columns of a count row: `UtteranceCounts`, then the gold-intent index and the group id.
COLUMNS = (*UtteranceCounts._fields, "gold_intent", "group")
NO_GROUP = -1
#: the result key naming the group of lowest combined: an id, not a value to average or plot
WORST_GROUP_ID = "worst_group/combined_id"


def _scores(rows: Tensor) -> dict[str, float]:
    """Every counted metric (`robustnlu.metrics.registry.COUNTED`) of a non-empty block of count
    rows, and ``n``."""
    sums = dict(zip(COLUMNS, rows.sum(dim=0).tolist()))
    n = rows.shape[0]
    return {**{key: float(METRICS[key].formula(sums, n)) for key in COUNTED}, "n": float(n)}


class SLUMetrics(Metric):
    """Intent accuracy, slot F1, COMBINED-IC-SF (core paper section 5.1), MA INT. COMBINED and
    SEMER (App. D), frame accuracy and per-group / worst-group values.

    ``intents`` must name every intent that can occur as gold (train ∪ valid ∪ test) so that
    the gold-intent index means the same on every process; a predicted intent may be anything
    (one never seen as gold simply scores as an error).

    `compute` returns a flat ``dict[str, float]``; every value but ``semer`` (which exceeds 1
    when insertions abound), ``n`` and ``worst_group/combined_id`` lies in [0, 1]:

    - ``intent_acc``; ``slot_precision``, ``slot_recall``, ``slot_f1``: micro over spans
      (type and exact boundaries), equal to seqeval's default-mode scores;
    - ``combined``: (intent_acc + slot_f1) / 2;
    - ``semer``: Σ (slot substitutions + deletions + insertions + intent error) /
      Σ (gold spans + 1), sums over utterances (`robustnlu.metrics.counts.semer_slot_errors`
      gives the matching rule);
    - ``frame_acc``: intent correct and predicted spans == gold spans;
    - ``ma_intent_combined``: the unweighted mean over the gold intents present of each
      intent's (intent_acc + slot_f1) / 2 on its own utterances;
    - ``n``: the number of utterances;
    - if some utterance has a group id ≥ 0 (``groups`` in `update`; -1 = no group):
      ``group/<id>/<m>`` for m in intent_acc, slot_f1, combined, semer, frame_acc, n;
      ``worst_group/<m>`` (the minimum, the maximum for semer) for the same m except n; and
      ``worst_group/combined_id``, the group of lowest combined (the smallest id on a tie).

    Zero-span convention, as seqeval's default ``zero_division="warn"``: precision with no
    predicted span, recall with no gold span and F1 with precision + recall = 0 are 0.0. So a
    set with neither gold nor predicted spans has slot_f1 = 0.0 (and combined = intent_acc / 2);
    that warns (as seqeval does) only for the whole evaluated set, not for groups or intents.
    `compute` without any utterance raises RuntimeError.
    """

    is_differentiable = False
    full_state_update = False

    rows: list[Tensor] | Tensor

    def __init__(self, intents: Sequence[str], **kwargs):
        super().__init__(**kwargs)
        self.intents = tuple(dict.fromkeys(intents))
        self._intent_index = {intent: i for i, intent in enumerate(self.intents)}
        # One int64 row of `COLUMNS` per utterance; DDP concatenates every process's rows.
        self.add_state("rows", default=[], dist_reduce_fx="cat")

    def update(
        self,
        pred_intents: Sequence[str],
        gold_intents: Sequence[str],
        pred_tags: Sequence[Sequence[str]],
        gold_tags: Sequence[Sequence[str]],
        groups: Sequence[int] | None = None,
    ) -> None:
        n = len(gold_intents)
        if groups is None:
            groups = [NO_GROUP] * n
        lengths = {len(pred_intents), len(pred_tags), len(gold_tags), len(groups)}
        if lengths != {n}:
            raise ValueError(
                f"update got {len(pred_intents)} predicted intents, {n} gold intents, "
                f"{len(pred_tags)} predicted and {len(gold_tags)} gold tag sequences, "
                f"{len(groups)} groups; all must be equal"
            )
        rows = []
        for pred_intent, gold_intent, pred, gold, group in zip(
            pred_intents, gold_intents, pred_tags, gold_tags, groups
        ):
            if gold_intent not in self._intent_index:
                raise ValueError(
                    f"gold intent {gold_intent!r} is not among the {len(self.intents)} intents "
                    "SLUMetrics was built with (pass every intent of train, valid and test)"
                )
            if int(group) < NO_GROUP:
                raise ValueError(f"group id {group} is invalid: use ids >= 0, or -1 for none")
            counts = utterance_counts(pred_intent, gold_intent, pred, gold)
            rows.append([*counts, self._intent_index[gold_intent], int(group)])
        self.rows.append(
            torch.tensor(rows, dtype=torch.long, device=self.device).reshape(n, len(COLUMNS))
        )

    def compute(self) -> dict[str, float]:
        # A list before a DDP sync, one tensor after it.
        rows = dim_zero_cat(self.rows).long() if len(self.rows) else None
        if rows is None or len(rows) == 0:
            raise RuntimeError("SLUMetrics.compute() called before any utterance was updated")
        column = {name: rows[:, i] for i, name in enumerate(COLUMNS)}
        result = _scores(rows)
        if column["gold_spans"].sum() == 0 and column["pred_spans"].sum() == 0:
            warnings.warn(
                "slot F1 is ill-defined (no gold and no predicted slot span) and set to 0.0, "
                "as seqeval does",
                stacklevel=2,
            )
        gold_intent = column["gold_intent"]
        per_intent = [_scores(rows[gold_intent == i]) for i in gold_intent.unique()]
        result["ma_intent_combined"] = sum(s["combined"] for s in per_intent) / len(per_intent)
        result.update(_group_scores(rows, column["group"]))
        return result


def _group_scores(rows: Tensor, group: Tensor) -> dict[str, float]:
    """``group/<id>/<metric>`` and ``worst_group/<metric>`` over the groups ≥ 0 in ``group``."""
    ids = [g for g in group.unique().tolist() if g != NO_GROUP]
    if not ids:
        return {}
    by_group = {g: _scores(rows[group == g]) for g in ids}
    result: dict[str, float] = {}
    for g, scores in by_group.items():
        for name in (*PER_GROUP, "n"):
            result[f"group/{g}/{name}"] = scores[name]
    for name in PER_GROUP:
        result[f"worst_group/{name}"] = METRICS[name].worst([scores[name] for scores in by_group.values()])
    # `ids` is sorted, and min() keeps the first of equal values: the smallest id on a tie.
    result[WORST_GROUP_ID] = float(min(ids, key=lambda g: by_group[g]["combined"]))
    return result
