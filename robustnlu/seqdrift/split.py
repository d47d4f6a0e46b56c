"""SeqDrift splitting (core paper, sections 3.3-3.4, Table 7, Appendix A).

Everything here is a pure function of (filtered utterances, cluster ids, `SplitConfig`): no
clustering, no files. `robustnlu.seqdrift.filtering` filters the corpus first;
`robustnlu.seqdrift.pipeline` chains filter -> features -> clusters -> split.

Splitting (`split_by_clusters`; sections 3.3, 3.4)
    - Labels of an utterance: its intent plus one ``<intent>-<slot type>`` label per slot type
      it contains, each counted once per utterance (two ``artist`` spans count once).
    - Projected count of a label in a split = fraction x its count in the filtered corpus. A
      label is *constrained* when its projected count is at least ``min_projected_size``
      (Appendix A (c): "the minimum size of projected label counts that we attempt to
      match"); a constrained label's count in the split may not exceed its projected count
      (i.e. ``floor(projected)``). Smaller labels are not constrained.
    - Target sizes: ``round(test_fraction * n)`` and ``round(valid_fraction * n)`` (half up).
    - Test: the clusters (ids >= 0; -1 = isolated, never a drift cluster) are visited once each
      in a seeded random order. A cluster joins test if its examples fit under the projected
      count of every constrained label and under the target size; with ``partial`` only a
      seeded ``floor(partial_fraction * size)`` of them are tried and moved, the others stay
      in train as in-drift training examples. Rounding down means every partial drift
      cluster leaks at least one example into train (20 -> 18 + 2, 10 -> 9 + 1, 2 -> 1 + 1; a
      single-example cluster cannot drift partially); rounding half up would leave clusters
      of up to 4 examples whole and gave SNIPS only 0.5-1.1% in-drift training examples
      (Table 4: 2-3%), rounding down 1.1-1.9%. Then the test split is filled to
      its target size with random examples (in a seeded order, each once, each fitting the
      projected counts) from clusters that are no drift cluster; fill examples are not drift.
    - ``lookahead`` (default on; our reading of "if they do not disturb the projected label
      count"): a cluster must also leave every constrained intent at least as much room as
      the largest unmet projected count among its intent-slot labels (and the split room for
      the unmet intents); the fill first adds only examples that keep this, then any that
      fit. Without it, the first clusters of an intent can use up its whole budget with
      utterances lacking a frequent slot (on SNIPS, slot context: 31 of the 153 projected
      SearchCreativeWork-object_type in test), and the intent-slot correlation train/test
      is 0.88-0.92; with it 0.983-0.99, at the cost of drift (SNIPS slot context, test %
      drift without -> with: 100 clusters 49-54% -> 31-36%, 200 clusters 68-71% -> 51-54%).
    - O.o.d. validation: built exactly like test, from the clusters not used for test, against
      the validation projected counts. The drift clusters of the o.o.d. set are always chosen
      (also for ``validation: iid``) and test's fill never draws from them, so a seed gives the
      *same test split* for i.i.d. and o.o.d. validation (as in Table 4, one test per row).
    - I.i.d. validation: a random sample of the target size from the examples left in the
      pool (never an in-drift example: the partial-drift leftovers stay in train).
    - ``hold_out_both`` (validation config): carve out both validation sets, as the paper's
      Table 4 did (its rows sum to the whole corpus only with both); the one not used becomes
      ``removed``, so train is identical for i.i.d. and o.o.d. validation.
    - Train: everything else. ``in_drift``: the example's cluster is a drift cluster of test or
      of a carved o.o.d. validation set (wherever the example ended up). Every example keeps
      its cluster id (the groups of group-DRO methods).

Randomness: one `numpy.random.default_rng([seed, phase])` per phase (test clusters, o.o.d.
clusters, test fill, o.o.d. fill, i.i.d. sample), so changing one phase's options does not
reshuffle another.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robustnlu.data.utterance import SPLITS, Corpus, Utterance
from robustnlu.errors import ConfigError, RobustNLUError
from robustnlu.seqdrift.config import SplitConfig
from robustnlu.seqdrift.entries import check_fields, parse_json
from robustnlu.seqdrift.filtering import Filtered, relabel, utterance_labels

FORMAT = "robustnlu-seqdrift-split/1"
ASSIGNED = (*SPLITS, "removed")  # where an utterance can go
_HEAD_TYPES = {"config": dict, "format": str, "info": dict, "key": object, "relabelled_slots": list, "rows": list}
_ROW_TYPES = {"cluster": int, "in_drift": bool, "split": str, "uid": str}

# rng phases: default_rng([seed, phase])
_TEST_CLUSTERS, _OOD_CLUSTERS, _TEST_FILL, _OOD_FILL, _IID = 1, 2, 3, 4, 5


# --------------------------------------------------------------------------- label budgets


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5 + 1e-9))


class _Budget:
    """A split under construction: size and constrained-label counts against their caps.

    ``parents[p]`` is the intent label of the intent-slot label ``p`` (-1 for intents): with
    ``lookahead``, a change must leave every constrained intent room for the largest unmet
    projected count among its intent-slot labels, and the split room for the unmet intents.
    """

    def __init__(self, label_totals: np.ndarray, parents: np.ndarray, fraction: float, min_projected: float, target: int):
        projected = fraction * label_totals
        self.constrained = projected >= min_projected
        self.projected = projected
        self.cap = np.where(self.constrained, np.floor(projected + 1e-9), np.inf)
        self.counts = np.zeros(len(label_totals), dtype=np.int64)
        self.target = target
        self.size = 0
        self.intents = [i for i in np.flatnonzero((parents < 0) & self.constrained).tolist()]
        self.children: dict[int, list[int]] = {i: [] for i in self.intents}
        for p in np.flatnonzero((parents >= 0) & self.constrained).tolist():
            if parents[p] in self.children:
                self.children[int(parents[p])].append(p)

    def fits(self, label_counts: Mapping[int, int], n: int, lookahead: bool = False) -> bool:
        if self.size + n > self.target:
            return False
        if not all(self.counts[l] + c <= self.cap[l] for l, c in label_counts.items()):
            return False
        if not lookahead:
            return True

        def deficit(l: int) -> float:
            return self.cap[l] - self.counts[l] - label_counts.get(l, 0)

        if self.target - self.size - n < sum(deficit(i) for i in self.intents):
            return False
        for intent in label_counts:
            if intent in self.children and self.children[intent]:
                if deficit(intent) < max(deficit(p) for p in self.children[intent]):
                    return False
        return True

    def add(self, label_counts: Mapping[int, int], n: int) -> None:
        for l, c in label_counts.items():
            self.counts[l] += c
        self.size += n

    def unmet(self, names: Sequence[str]) -> dict[str, int]:
        """Constrained label -> how many examples it is short of its projected count."""
        missing = np.where(self.constrained, self.cap - self.counts, 0)
        return {names[i]: int(missing[i]) for i in np.flatnonzero(missing > 0)}


# --------------------------------------------------------------------------- the split


@dataclass(frozen=True)
class Assignment:
    split: str  # train | valid | test | removed
    cluster: int  # -1 = isolated (no cluster) or removed
    in_drift: bool


@dataclass
class DriftSplit:
    """uid -> (split, cluster, in_drift) for every utterance of the corpus, with the config.

    ``info`` holds what the splitter knows (targets, drift clusters, unmet projected counts,
    removal reasons) and is saved with the split; ``stats`` (see `robustnlu.seqdrift.stats`) is
    saved next to it as ``stats.json``.
    """

    assignments: dict[str, Assignment]
    config: dict[str, Any]
    relabelled_slots: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    key: str | None = None

    @property
    def split_config(self) -> SplitConfig:
        return SplitConfig.from_dict(self.config)

    def uids(self, split: str) -> list[str]:
        return sorted(uid for uid, a in self.assignments.items() if a.split == split)

    def groups(self) -> dict[str, int]:
        """uid -> cluster id (-1 = no cluster) of every kept utterance: the groups for
        group-DRO methods."""
        return {uid: a.cluster for uid, a in self.assignments.items() if a.split != "removed"}

    def apply(self, corpus: Corpus) -> Corpus:
        """The corpus re-split: train/valid/test in the corpus' own order, removed utterances
        left out and rare slot types relabelled ``O`` when the split relabelled them."""
        utterances = corpus.all()
        uids = {u.uid for u in utterances}
        if uids != self.assignments.keys():
            extra = sorted(uids - self.assignments.keys()) or sorted(self.assignments.keys() - uids)
            raise RobustNLUError(
                f"the drift split does not match corpus {corpus.name!r}: "
                f"{len(uids ^ self.assignments.keys())} uids differ (e.g. {extra[0]!r})"
            )
        rare = frozenset(self.relabelled_slots)
        out: dict[str, list[Utterance]] = {s: [] for s in SPLITS}
        for u in utterances:
            split = self.assignments[u.uid].split
            if split != "removed":
                out[split].append(relabel(u, rare))
        return Corpus(corpus.name, out["train"], out["valid"], out["test"])

    # ------------------------------------------------------------------ canonical JSON

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, one row per uid (sorted), so that the same split gives
        the same bytes."""
        head = {
            "config": self.config,
            "format": FORMAT,
            "info": self.info,
            "key": self.key,
            "relabelled_slots": list(self.relabelled_slots),
        }
        lines = ["{"]
        lines += [f"{json.dumps(k)}: {_canonical(v)}," for k, v in sorted(head.items())]
        rows = [
            _canonical({"uid": uid, "split": a.split, "cluster": a.cluster, "in_drift": a.in_drift})
            for uid, a in sorted(self.assignments.items())
        ]
        lines.append('"rows": [')
        lines.append(",\n".join(rows))
        lines.append("]}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_json(cls, text: str, stats: dict[str, Any] | None = None) -> DriftSplit:
        """The split `to_json` wrote. Anything else (not JSON, another format, a missing,
        renamed or extra field, a value of the wrong type, an unknown split name, a uid twice)
        raises ValueError naming the problem: a split file is used whole or not at all."""
        doc = parse_json(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file")
        check_fields(doc, _HEAD_TYPES, "the file")
        if not all(isinstance(s, str) for s in doc["relabelled_slots"]) or not isinstance(doc["key"], (str, type(None))):
            raise ValueError("relabelled_slots must be strings and key a string or null")
        assignments = {}
        for number, row in enumerate(doc["rows"], 1):
            check_fields(row, _ROW_TYPES, f"row {number}")
            if row["split"] not in ASSIGNED:
                raise ValueError(f"row {number}: split {row['split']!r} is not one of {', '.join(ASSIGNED)}")
            if row["cluster"] < -1:
                raise ValueError(f"row {number}: cluster {row['cluster']} is below -1 (isolated)")
            if row["uid"] in assignments:
                raise ValueError(f"row {number}: uid {row['uid']!r} appears twice")
            assignments[row["uid"]] = Assignment(row["split"], row["cluster"], row["in_drift"])
        return cls(assignments, doc["config"], tuple(doc["relabelled_slots"]), doc["info"], stats or {}, doc["key"])


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def identity_split(corpus: Corpus, cfg: SplitConfig) -> DriftSplit:
    """``drift: none``: the dataset's own splits, no clusters, nothing in drift."""
    assignments = {u.uid: Assignment(s, -1, False) for s in SPLITS for u in corpus.split(s)}
    return DriftSplit(assignments, cfg.to_dict(), info={"sizes": {s: len(corpus.split(s)) for s in SPLITS}})


def split_by_clusters(filtered: Filtered | Sequence[Utterance], cluster_ids: Sequence[int] | np.ndarray, cfg: SplitConfig) -> DriftSplit:
    """Build the SeqDrift train/valid/test split of ``filtered`` (see the module docstring).

    ``cluster_ids[i]`` is the cluster of ``filtered.utterances[i]`` (-1 = isolated).
    """
    if not isinstance(filtered, Filtered):
        filtered = Filtered.of(filtered)
    if cfg.kind == "none":
        raise ConfigError("drift.kind: 'none' has no clusters to split by (use identity_split)")
    utts = filtered.utterances
    n = len(utts)
    clusters = np.asarray(cluster_ids, dtype=np.int64).reshape(-1)
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster ids for {n} utterances")
    if n == 0:
        raise RobustNLUError("no utterance is left after filtering (check drift.min_intent_freq / min_slot_freq)")
    if len({u.uid for u in utts}) != n:
        raise ValueError("duplicate uids among the utterances")

    # label incidence: per example a {label index: 1} map (labels counted once per utterance)
    labelled = [utterance_labels(u) for u in utts]
    intent_of: dict[str, str | None] = {}
    for u, labels in zip(utts, labelled):
        for k, label in enumerate(labels):
            intent_of[label] = u.intent if k else None
    names = sorted(intent_of)
    index = {l: i for i, l in enumerate(names)}
    parents = np.array([-1 if intent_of[l] is None else index[intent_of[l]] for l in names], dtype=np.int64)
    ex_labels = [[index[l] for l in labels] for labels in labelled]
    totals = np.zeros(len(names), dtype=np.int64)
    for labels in ex_labels:
        totals[labels] += 1

    def label_counts(members: Iterable[int]) -> Counter:
        counts: Counter = Counter()
        for i in members:
            counts.update(ex_labels[i])
        return counts

    cluster_of = clusters.tolist()
    members: dict[int, list[int]] = {}
    for i, c in enumerate(cluster_of):
        if c >= 0:
            members.setdefault(c, []).append(i)
    cluster_order = sorted(members)

    test_target, valid_target = round_half_up(cfg.test_fraction * n), round_half_up(cfg.valid_fraction * n)

    def new_budget(fraction: float, target: int) -> _Budget:
        return _Budget(totals, parents, fraction, cfg.min_projected_size, target)

    def place_clusters(budget: _Budget, candidates: list[int], phase: int) -> tuple[list[int], set[int], set[int]]:
        """Visit ``candidates`` in a seeded order; return (clusters used, examples moved,
        examples of used clusters left behind (partial drift))."""
        rng = np.random.default_rng([cfg.seed, phase])
        used, moved, left = [], set(), set()
        for pos in rng.permutation(len(candidates)).tolist():
            c = candidates[pos]
            group = members[c]
            if cfg.partial:
                k = int(math.floor(cfg.partial_fraction * len(group) + 1e-9))
                chosen = sorted(rng.choice(group, size=k, replace=False).tolist()) if k < len(group) else group
            else:
                chosen = group
            counts = label_counts(chosen)
            if chosen and budget.fits(counts, len(chosen), cfg.lookahead):
                budget.add(counts, len(chosen))
                used.append(c)
                moved.update(chosen)
                left.update(set(group) - set(chosen))
        return used, moved, left

    def fill(budget: _Budget, pool: list[int], phase: int) -> list[int]:
        """Add examples of ``pool`` in a seeded order; with ``lookahead`` a first pass adds only
        those that keep the projected counts reachable, a second pass any that fit."""
        rng = np.random.default_rng([cfg.seed, phase])
        order = [pool[pos] for pos in rng.permutation(len(pool)).tolist()]
        added: list[int] = []
        for lookahead in (True, False) if cfg.lookahead else (False,):
            taken = set(added)
            for i in order:
                if budget.size >= budget.target:
                    break
                counts = Counter(ex_labels[i])
                if i not in taken and budget.fits(counts, 1, lookahead):
                    budget.add(counts, 1)
                    added.append(i)
        return added

    # 1. test drift clusters
    test_budget = new_budget(cfg.test_fraction, test_target)
    test_clusters, test_drift, test_left = place_clusters(test_budget, cluster_order, _TEST_CLUSTERS)
    if not test_clusters:
        raise RobustNLUError(
            f"no cluster of the {len(cluster_order)} fits the test split's projected label counts "
            "(raise drift.n_clusters or drift.min_projected_size)"
        )
    # 2. o.o.d. validation drift clusters, disjoint from test's (chosen for every validation kind,
    #    so that test's fill, hence test, does not depend on the validation kind)
    ood_budget = new_budget(cfg.valid_fraction, valid_target)
    used = set(test_clusters)
    ood_clusters, ood_drift, ood_left = place_clusters(ood_budget, [c for c in cluster_order if c not in used], _OOD_CLUSTERS)
    drift_clusters = used | set(ood_clusters)
    # 3. fill test from examples of no drift cluster
    free = [i for i in range(n) if cluster_of[i] not in drift_clusters]
    test_fill = fill(test_budget, free, _TEST_FILL)
    test = test_drift | set(test_fill)

    carve_ood = cfg.validation == "ood" or cfg.hold_out_both
    ood: set[int] = set()
    ood_fill: list[int] = []
    if carve_ood:
        ood_fill = fill(ood_budget, [i for i in free if i not in test], _OOD_FILL)
        ood = ood_drift | set(ood_fill)
        in_drift = test_drift | test_left | ood_drift | ood_left
    else:
        ood_clusters = []
        in_drift = test_drift | test_left
    carve_iid = cfg.validation == "iid" or cfg.hold_out_both
    iid: set[int] = set()
    if carve_iid:
        pool = [i for i in range(n) if i not in test and i not in ood and i not in in_drift]
        rng = np.random.default_rng([cfg.seed, _IID])
        k = min(valid_target, len(pool))
        iid = {pool[p] for p in rng.choice(len(pool), size=k, replace=False).tolist()}

    valid, other = (ood, iid) if cfg.validation == "ood" else (iid, ood)
    assignments: dict[str, Assignment] = {}
    for i, u in enumerate(utts):
        split = "test" if i in test else "valid" if i in valid else "removed" if i in other else "train"
        assignments[u.uid] = Assignment(split, cluster_of[i], i in in_drift)
    for uid in sorted(filtered.removed):
        assignments[uid] = Assignment("removed", -1, False)

    info = {
        "n_filtered": n,
        "removed": dict(sorted(Counter(filtered.removed.values()).items())),
        "targets": {"test": test_target, "valid": valid_target},
        "test_clusters": sorted(test_clusters),
        "valid_clusters": sorted(ood_clusters) if cfg.validation == "ood" else [],
        "held_out_ood_clusters": sorted(ood_clusters) if cfg.validation == "iid" else [],
        "fill": {"test": len(test_fill), "valid": len(ood_fill) if cfg.validation == "ood" else 0},
        "constrained_labels": int(test_budget.constrained.sum()),
        "unmet_projected": {
            "test": test_budget.unmet(names),
            "valid": ood_budget.unmet(names) if cfg.validation == "ood" else {},
        },
    }
    return DriftSplit(assignments, cfg.to_dict(), filtered.relabelled_slots, info)


__all__ = ["Assignment", "DriftSplit", "identity_split", "split_by_clusters"]
