"""SeqDrift filtering and splitting (core paper, sections 3.3-3.4, Table 7, Appendix A).

Everything here is a pure function of (utterances, cluster ids, `SplitConfig`): no clustering,
no files. `robustnlu.seqdrift.pipeline` chains filter -> features -> clusters -> split.

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
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from robustnlu.data.utterance import SPLITS, Corpus, Utterance
from robustnlu.errors import ConfigError, RobustNLUError

DRIFT_KINDS = ("none", "slot_value", "slot_context")
VALIDATION_KINDS = ("iid", "ood")
RARE_SLOT_POLICIES = ("relabel_o", "drop_utterance")
AFFINITIES = ("scalable", "dense")
CLUSTER_SOURCES = ("auto", "shipped", "compute")  # drift.clusters: see robustnlu.seqdrift.shipped
SPLIT_NAMES = (*SPLITS, "removed")
FORMAT = "robustnlu-seqdrift-split/1"

# rng phases: default_rng([seed, phase])
_TEST_CLUSTERS, _OOD_CLUSTERS, _TEST_FILL, _OOD_FILL, _IID = 1, 2, 3, 4, 5


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class SplitConfig:
    """The drift (``cfg.drift``) and validation (``cfg.validation``) options of one split."""

    kind: str = "slot_context"
    partial: bool = False
    partial_fraction: float = 0.9
    n_clusters: int = 100
    ngram_min: int = 2
    ngram_max: int = 6
    top_ngrams: int = 10_000
    min_intent_freq: int = 150
    min_slot_freq: int = 50
    min_projected_size: float = 10.0
    rare_slots: str = "relabel_o"
    require_slots: bool = True
    lookahead: bool = True
    test_fraction: float = 0.1
    valid_fraction: float = 0.1
    affinity: str = "scalable"
    seed: int = 0
    clusters: str = "auto"  # how the clustering is obtained, not what the split is: not in to_dict
    validation: str = "iid"  # cfg.validation.kind
    hold_out_both: bool = False  # cfg.validation.hold_out_both

    _VALIDATION_KEYS = {"kind": "validation", "hold_out_both": "hold_out_both"}

    @classmethod
    def from_configs(cls, drift_cfg: Mapping[str, Any] | None, validation_cfg: Mapping[str, Any] | None = None) -> SplitConfig:
        """Build and check a config from ``cfg.drift`` and ``cfg.validation`` (dicts or
        DictConfigs). Unknown keys and bad values raise `ConfigError` naming the key."""
        drift = _plain(drift_cfg)
        validation = _plain(validation_cfg)
        names = {f.name for f in fields(cls)} - set(cls._VALIDATION_KEYS.values())
        if drift.get("kind") == "none":  # the dataset's own splits: other drift keys unused
            drift = {"kind": "none"}
        unknown = sorted(set(drift) - names)
        if unknown:
            raise ConfigError(f"drift.{unknown[0]}: unknown key; expected one of {sorted(names)}")
        unknown = sorted(set(validation) - set(cls._VALIDATION_KEYS))
        if unknown:
            raise ConfigError(f"validation.{unknown[0]}: unknown key; expected one of {sorted(cls._VALIDATION_KEYS)}")
        values = dict(drift)
        values.update({cls._VALIDATION_KEYS[k]: v for k, v in validation.items()})
        defaults = cls()
        typed = {}
        for f in fields(cls):
            if f.name not in values:
                continue
            prefix = "validation." if f.name in cls._VALIDATION_KEYS.values() else "drift."
            key = prefix + ("kind" if f.name == "validation" else f.name)
            typed[f.name] = _typed(key, values[f.name], type(getattr(defaults, f.name)))
        cfg = replace(defaults, **typed)
        cfg.check()
        return cfg

    def check(self) -> None:
        def bad(key: str, problem: str) -> ConfigError:
            return ConfigError(f"{key}: {problem}")

        if self.kind not in DRIFT_KINDS:
            raise bad("drift.kind", f"{self.kind!r} is not one of {list(DRIFT_KINDS)}")
        if self.validation not in VALIDATION_KINDS:
            raise bad("validation.kind", f"{self.validation!r} is not one of {list(VALIDATION_KINDS)}")
        if self.kind == "none":
            return
        if self.rare_slots not in RARE_SLOT_POLICIES:
            raise bad("drift.rare_slots", f"{self.rare_slots!r} is not one of {list(RARE_SLOT_POLICIES)}")
        if self.affinity not in AFFINITIES:
            raise bad("drift.affinity", f"{self.affinity!r} is not one of {list(AFFINITIES)}")
        if self.clusters not in CLUSTER_SOURCES:
            raise bad("drift.clusters", f"{self.clusters!r} is not one of {list(CLUSTER_SOURCES)}")
        if not 0 < self.partial_fraction <= 1:
            raise bad("drift.partial_fraction", f"{self.partial_fraction} is not in (0, 1]")
        for key in ("test_fraction", "valid_fraction"):
            if not 0 < getattr(self, key) < 1:
                raise bad(f"drift.{key}", f"{getattr(self, key)} is not in (0, 1)")
        n_held_out = 2 if self.hold_out_both else 1
        if self.test_fraction + n_held_out * self.valid_fraction >= 1:
            raise bad("drift.test_fraction", "test + validation fractions leave no training data")
        if self.n_clusters < 2:
            raise bad("drift.n_clusters", f"{self.n_clusters} (need at least 2 clusters)")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise bad("drift.ngram_min", f"need 1 <= ngram_min ({self.ngram_min}) <= ngram_max ({self.ngram_max})")
        if self.top_ngrams < 1:
            raise bad("drift.top_ngrams", f"{self.top_ngrams} (need at least 1)")
        for key in ("min_intent_freq", "min_slot_freq", "min_projected_size"):
            if getattr(self, key) < 0:
                raise bad(f"drift.{key}", f"{getattr(self, key)} is negative")
        if self.seed < 0:
            raise bad("drift.seed", f"{self.seed} is negative")

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


def _plain(cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"expected a mapping of options, got {type(cfg).__name__}")
    return dict(cfg)


def _typed(key: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: {value!r} is not true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: {value!r} is not an integer")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise ConfigError(f"{key}: {value!r} is not a number")
    if not isinstance(value, str):
        raise ConfigError(f"{key}: {value!r} is not a string")
    return value


# --------------------------------------------------------------------------- filtering


def slot_types(tags: Iterable[str]) -> set[str]:
    """The slot types of an utterance's BIO tags (one per span start)."""
    return {t[2:] for t in tags if t.startswith("B-")}


def relabel(u: Utterance, rare: set[str] | frozenset[str]) -> Utterance:
    """``u`` with every ``B-``/``I-`` tag of a type in ``rare`` replaced by ``O``."""
    if not rare:
        return u
    tags = tuple("O" if t != "O" and t[2:] in rare else t for t in u.tags)
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
        spans = Counter(t[2:] for u in kept for t in u.tags if t.startswith("B-"))
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
    return [u.intent, *(f"{u.intent}-{s}" for s in sorted(slot_types(u.tags)))]


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
        doc = json.loads(text)
        if doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} file (format {doc.get('format')!r})")
        assignments = {r["uid"]: Assignment(r["split"], int(r["cluster"]), bool(r["in_drift"])) for r in doc["rows"]}
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
    intent_of: dict[str, str | None] = {}
    for u in utts:
        for k, label in enumerate(utterance_labels(u)):
            intent_of[label] = u.intent if k else None
    names = sorted(intent_of)
    index = {l: i for i, l in enumerate(names)}
    parents = np.array([-1 if intent_of[l] is None else index[intent_of[l]] for l in names], dtype=np.int64)
    ex_labels = [[index[l] for l in utterance_labels(u)] for u in utts]
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


__all__ = [
    "Assignment",
    "DriftSplit",
    "Filtered",
    "SplitConfig",
    "filter_utterances",
    "identity_split",
    "relabel",
    "split_by_clusters",
    "utterance_labels",
]
