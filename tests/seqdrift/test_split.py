"""SeqDrift splitting on hand-made corpora with hand-made cluster ids (no clustering)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, RobustNLUError
from robustnlu.seqdrift.config import SplitConfig
from robustnlu.seqdrift.filtering import filter_utterances, utterance_labels
from robustnlu.seqdrift.split import DriftSplit, identity_split, split_by_clusters


def members(ids):
    out = defaultdict(set)
    for i, c in enumerate(ids):
        out[c].add(f"u{i:04d}")
    return out


def in_split(split: DriftSplit, name: str) -> set[str]:
    return set(split.uids(name))


# 400 utterances: intents A and B (200 each) -> test target 40, caps A 20, B 20.
# A-x: 150 utterances (cap 15); A-z: 50 (projected 5 < 10: unconstrained).
#   c0 = 25 A-x (breaks the A cap), c1 = 16 A-x (fits A, breaks the A-x cap),
#   c2 = 12 A-z (A-z over its projection, but unconstrained), c3 = 8 A-x: c2 + c3 = 20 A.
#   c4, c5 = 10 B each; c6 = the other 180 B (too big). Isolated: 101 A-x, 38 A-z.
# Whatever the cluster order, test = c2 + c3 + c4 + c5 exactly (40 = the target, no fill).
CAPPED = [
    (25, "A", ["x"], 0), (16, "A", ["x"], 1), (12, "A", ["z"], 2), (8, "A", ["x"], 3),
    (10, "B", ["y"], 4), (10, "B", ["y"], 5), (180, "B", ["y"], 6),
    (101, "A", ["x"], -1), (38, "A", ["z"], -1),
]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_projected_label_counts_decide_which_whole_clusters_go_to_test(clustered, config, seed):
    utts, ids = clustered(CAPPED)
    split = split_by_clusters(utts, ids, config(seed=seed, lookahead=False))  # the paper's rule alone
    groups = members(ids)
    test = in_split(split, "test")
    assert test == groups[2] | groups[3] | groups[4] | groups[5]
    assert split.info["test_clusters"] == [2, 3, 4, 5] and split.info["fill"]["test"] == 0
    assert all(split.assignments[uid].in_drift for uid in test)
    labels = Counter(label for u in utts if u.uid in test for label in utterance_labels(u))
    assert labels["A"] == 20 and labels["B"] == 20  # at, not over, the projected counts
    assert labels["A-x"] == 8 <= 15  # c1 (16 A-x) was refused
    assert labels["A-z"] == 12  # > 0.1 * 50, allowed: projected 5 < min_projected_size
    assert split.info["unmet_projected"]["test"] == {"A-x": 7}  # A, B, B-y met; A-z unconstrained


# 200 x intent A (cap 20): A-x 150 (cap 15), A-z 50 (unconstrained). c0, c2 = 10 A-z each, c1 =
# 10 A-x. Without lookahead any two clusters fit (20 = the A cap); with it, a 10 A-z cluster would
# leave A 10 of room for the 15 A-x still missing, so only c1 can go, and the fill supplies the
# 5 more A-x first (the first fill pass keeps the projected counts reachable).
LOOKAHEAD = [(10, "A", ["z"], 0), (10, "A", ["x"], 1), (10, "A", ["z"], 2), (140, "A", ["x"], -1), (30, "A", ["z"], -1)]


@pytest.mark.parametrize("seed", range(5))
def test_lookahead_refuses_clusters_that_make_projected_counts_unreachable(clustered, config, seed):
    utts, ids = clustered(LOOKAHEAD)
    split = split_by_clusters(utts, ids, config(seed=seed))
    assert split.info["test_clusters"] == [1]
    test = [u for u in utts if u.uid in in_split(split, "test")]
    labels = Counter(label for u in test for label in utterance_labels(u))
    assert (len(test), labels["A"], labels["A-x"], labels["A-z"]) == (20, 20, 15, 5)
    assert split.info["unmet_projected"]["test"] == {}
    plain = split_by_clusters(utts, ids, config(seed=seed, lookahead=False))
    assert len(plain.info["test_clusters"]) == 2 and plain.info["fill"]["test"] == 0


def test_full_drift_moves_every_example_of_a_chosen_cluster_and_fills_the_rest(clustered, config):
    # A only, 400 utterances (cap 40); clusters of 13 and 7 and 30: not all combinations fit
    utts, ids = clustered([(13, "A", ["x"], 0), (7, "A", ["x"], 1), (30, "A", ["x"], 2), (350, "A", ["x"], -1)])
    for seed in range(6):
        split = split_by_clusters(utts, ids, config(seed=seed))
        groups = members(ids)
        test = in_split(split, "test")
        assert len(test) == 40
        chosen = split.info["test_clusters"]
        assert chosen and sum(len(groups[c]) for c in chosen) <= 40
        for c in (0, 1, 2):
            assert (groups[c] <= test) == (c in chosen)
            assert all(split.assignments[uid].in_drift == (c in chosen) for uid in groups[c])
        fill = {uid for uid in test if not split.assignments[uid].in_drift}
        assert fill <= groups[-1] and len(fill) == split.info["fill"]["test"] == 40 - sum(len(groups[c]) for c in chosen)
        assert not any(split.assignments[uid].in_drift for uid in in_split(split, "train") | in_split(split, "valid"))


def test_partial_drift_sends_90_percent_of_a_20_example_cluster_and_keeps_2_in_train(clustered, config):
    utts, ids = clustered([(20, "A", ["x"], 0), (380, "A", ["x"], -1)])
    split = split_by_clusters(utts, ids, config(partial=True, seed=5))
    cluster = members(ids)[0]
    where = Counter(split.assignments[uid].split for uid in cluster)
    assert where == {"test": 18, "train": 2}
    assert all(split.assignments[uid].in_drift for uid in cluster)  # the 2 in train too
    test = in_split(split, "test")
    assert len(test) == 40
    fill = test - cluster
    assert len(fill) == 22 and not any(split.assignments[uid].in_drift for uid in fill)
    assert not any(split.assignments[uid].in_drift for uid in in_split(split, "valid"))
    # a different seed picks a different 18
    other = split_by_clusters(utts, ids, config(partial=True, seed=6))
    assert set(other.uids("test")) & cluster != test & cluster


def test_partial_drift_rounds_down_so_every_cluster_leaks_one(clustered, config):
    # clusters of 2, 5 and 1 examples: 1 + 4 go to test, 1 + 1 stay; the singleton cannot drift
    utts, ids = clustered([(2, "A", ["x"], 0), (5, "A", ["x"], 1), (1, "A", ["x"], 2), (392, "A", ["x"], -1)])
    split = split_by_clusters(utts, ids, config(partial=True))
    groups = members(ids)
    assert split.info["test_clusters"] == [0, 1]
    assert [Counter(split.assignments[uid].split for uid in groups[c]) for c in (0, 1)] == [
        {"test": 1, "train": 1}, {"test": 4, "train": 1}]
    assert not any(split.assignments[uid].in_drift for uid in groups[2])


def test_cluster_minus_one_never_drifts(clustered, config):
    utts, ids = clustered([(10, "A", ["x"], 0), (390, "A", ["x"], -1)])
    for validation in ("iid", "ood"):
        split = split_by_clusters(utts, ids, config(validation=validation, partial=True))
        isolated = members(ids)[-1]
        assert not any(split.assignments[uid].in_drift for uid in isolated)
        assert all(split.assignments[uid].cluster == -1 for uid in isolated)
        assert split.info["valid_clusters"] == []  # the only real cluster went to test
    with pytest.raises(RobustNLUError, match="no cluster"):
        split_by_clusters(utts, [-1] * len(utts), config())


TEN_CLUSTERS = [(10, "A", ["x"], c) for c in range(10)] + [(300, "A", ["x"], -1)]


def test_ood_validation_is_made_of_whole_clusters_disjoint_from_test(clustered, config):
    utts, ids = clustered(TEN_CLUSTERS)
    groups = members(ids)
    ood = split_by_clusters(utts, ids, config(validation="ood", seed=3))
    test_c, valid_c = ood.info["test_clusters"], ood.info["valid_clusters"]
    assert len(test_c) == 4 and len(valid_c) == 4 and not set(test_c) & set(valid_c)  # 4 x 10 = 40
    assert in_split(ood, "valid") == set().union(*(groups[c] for c in valid_c))
    assert in_split(ood, "test") == set().union(*(groups[c] for c in test_c))
    assert all(ood.assignments[uid].in_drift for uid in in_split(ood, "valid"))
    # i.i.d. validation: same test, a random valid sample with no in-drift example
    iid = split_by_clusters(utts, ids, config(validation="iid", seed=3))
    assert in_split(iid, "test") == in_split(ood, "test")
    valid = in_split(iid, "valid")
    assert len(valid) == 40 and not any(iid.assignments[uid].in_drift for uid in valid)
    assert iid.info["valid_clusters"] == []
    assert not any(iid.assignments[uid].in_drift for uid in in_split(iid, "train"))


def test_ood_validation_partial_keeps_leftovers_in_train(clustered, config):
    utts, ids = clustered(TEN_CLUSTERS)
    split = split_by_clusters(utts, ids, config(validation="ood", partial=True, seed=3))
    groups = members(ids)
    for c in split.info["test_clusters"] + split.info["valid_clusters"]:
        where = Counter(split.assignments[uid].split for uid in groups[c])
        home = "test" if c in split.info["test_clusters"] else "valid"
        assert where == {home: 9, "train": 1}  # round(0.9 * 10) = 9
    train_drift = [uid for uid in split.uids("train") if split.assignments[uid].in_drift]
    assert len(train_drift) == len(split.info["test_clusters"]) + len(split.info["valid_clusters"])


def test_hold_out_both_gives_the_same_train_and_test_for_both_validation_kinds(clustered, config):
    utts, ids = clustered(TEN_CLUSTERS)
    iid = split_by_clusters(utts, ids, config(validation="iid", hold_out_both=True, seed=1))
    ood = split_by_clusters(utts, ids, config(validation="ood", hold_out_both=True, seed=1))
    assert iid.uids("train") == ood.uids("train") and iid.uids("test") == ood.uids("test")
    assert iid.uids("valid") == ood.uids("removed") and ood.uids("valid") == iid.uids("removed")
    assert len(iid.uids("train")) == 400 - 3 * 40


def test_iid_validation_sample_changes_with_the_seed(clustered, config):
    """With CAPPED (the paper's rule alone), test is the same four clusters for every seed, so the i.i.d. validation
    pool (everything else) is the same too: only the seeded draw can make valid differ."""
    utts, ids = clustered(CAPPED)
    first, second = (split_by_clusters(utts, ids, config(validation="iid", seed=s, lookahead=False)) for s in (0, 1))
    assert in_split(first, "test") == in_split(second, "test")
    assert in_split(first, "train") | in_split(first, "valid") == in_split(second, "train") | in_split(second, "valid")
    assert len(in_split(first, "valid")) == len(in_split(second, "valid")) == 40
    assert in_split(first, "valid") != in_split(second, "valid")


def test_same_seed_same_bytes_different_seed_different_split(clustered, config):
    utts, ids = clustered(TEN_CLUSTERS)
    a = split_by_clusters(utts, ids, config(seed=7)).to_json()
    b = split_by_clusters(list(utts), list(ids), config(seed=7)).to_json()
    c = split_by_clusters(utts, ids, config(seed=8)).to_json()
    assert a == b
    assert a != c
    doc = json.loads(a)
    assert len(doc["rows"]) == 400 and doc["rows"] == sorted(doc["rows"], key=lambda r: r["uid"])
    assert DriftSplit.from_json(a).to_json() == a


def test_apply_builds_the_new_corpus_and_groups(clustered, config, as_corpus, make_utterance):
    utts, ids = clustered(TEN_CLUSTERS)
    corpus = as_corpus([*utts, make_utterance("rare", "A", ["q"])])
    filtered = filter_utterances(corpus.all(), config(min_slot_freq=2, require_slots=True))
    assert filtered.relabelled_slots == ("q",) and filtered.removed == {"rare": "no_slots"}
    cluster_of = dict(zip((u.uid for u in utts), ids))
    kept_ids = [cluster_of[u.uid] for u in filtered.utterances]
    split = split_by_clusters(filtered, kept_ids, config(min_slot_freq=2, require_slots=True, validation="ood"))
    new = split.apply(corpus)
    assert [len(new.train), len(new.valid), len(new.test)] == [320, 40, 40]
    assert {u.uid for u in new.test} == set(split.uids("test"))
    assert split.assignments["rare"].split == "removed" and "rare" not in split.groups()
    assert split.groups()["u0000"] == 0 and len(split.groups()) == 400
    with pytest.raises(RobustNLUError, match="does not match"):
        split.apply(as_corpus(utts))


# --------------------------------------------------------------------------- filtering


def rare_corpus(make_utterance):
    """A: 5 utterances, B: 2. Slot spans: x 5 (one utterance has two), y 1 (u2), z 1 (u4,
    which has no other slot)."""
    return [
        make_utterance("u0", "A", ["x", "x"]),
        make_utterance("u1", "A", ["x"]),
        make_utterance("u2", "A", ["x", "y"]),
        make_utterance("u3", "A", ["x"]),
        make_utterance("u4", "A", ["z"]),
        make_utterance("u5", "B", ["x"]),
        make_utterance("u6", "B", ["x"]),
    ]


def test_filter_relabel_o_keeps_utterances_and_tags_rare_slots_o(make_utterance, config):
    # after dropping B: x has 5 spans (u0 counts 2), y 1, z 1 -> y and z are rare (< 2)
    out = filter_utterances(rare_corpus(make_utterance), config(min_intent_freq=3, min_slot_freq=2, rare_slots="relabel_o"))
    assert [u.uid for u in out.utterances] == ["u0", "u1", "u2", "u3", "u4"]
    assert out.removed == {"u5": "rare_intent", "u6": "rare_intent"}
    assert out.relabelled_slots == ("y", "z")
    assert out.utterances[2].tags == ("O", "B-x", "O", "O", "O") and out.utterances[4].tags == ("O", "O", "O")


def test_filter_relabel_o_with_require_slots_drops_utterances_left_without_slots(make_utterance, config):
    out = filter_utterances(rare_corpus(make_utterance), config(min_intent_freq=3, min_slot_freq=2, require_slots=True))
    assert [u.uid for u in out.utterances] == ["u0", "u1", "u2", "u3"]
    assert out.removed == {"u4": "no_slots", "u5": "rare_intent", "u6": "rare_intent"}


def test_filter_drop_utterance_removes_every_utterance_with_a_rare_slot(make_utterance, config):
    out = filter_utterances(rare_corpus(make_utterance), config(min_intent_freq=3, min_slot_freq=2, rare_slots="drop_utterance"))
    assert [u.uid for u in out.utterances] == ["u0", "u1", "u3"]
    assert out.removed == {"u2": "rare_slot", "u4": "rare_slot", "u5": "rare_intent", "u6": "rare_intent"}
    assert out.relabelled_slots == ()


def test_filter_repeats_until_stable(make_utterance, config):
    # the slot threshold drops u2, which takes intent C under min_intent_freq = 2
    utts = [make_utterance("u0", "C", ["x"]), make_utterance("u1", "A", ["x"]), make_utterance("u2", "C", ["y"]),
            make_utterance("u3", "A", ["x"])]
    out = filter_utterances(utts, config(min_intent_freq=2, min_slot_freq=2, rare_slots="drop_utterance"))
    assert [u.uid for u in out.utterances] == ["u1", "u3"]
    assert out.removed == {"u2": "rare_slot", "u0": "rare_intent"}


def test_filter_counts_only_spans_opened_by_b(config):
    """Slot types and span counts read tags strictly: an I- after O opens no span."""
    orphan = Utterance("u0", ("w", "v"), ("O", "I-x"), "A")
    two = Utterance("u1", ("v", "w"), ("B-x", "I-y"), "A")
    out = filter_utterances([orphan, two], config(require_slots=True, min_slot_freq=1))
    assert [u.uid for u in out.utterances] == ["u1"] and out.removed == {"u0": "no_slots"}
    assert utterance_labels(two) == ["A", "A-x"]


def test_labels_count_each_intent_slot_pair_once(make_utterance):
    assert utterance_labels(make_utterance("u", "A", ["x", "y", "x"])) == ["A", "A-x", "A-y"]


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("drift", "validation", "needle"),
    [
        ({"kind": "slot_typo"}, {}, "drift.kind"),
        ({"kind": "slot_value", "n_clusters": 1}, {}, "drift.n_clusters"),
        ({"kind": "slot_value", "n_clusters": "many"}, {}, "drift.n_clusters"),
        ({"kind": "slot_value", "partial": "yes"}, {}, "drift.partial"),
        ({"kind": "slot_value", "test_fraction": 0.6, "valid_fraction": 0.4}, {}, "drift.test_fraction"),
        ({"kind": "slot_value", "rare_slots": "ignore"}, {}, "drift.rare_slots"),
        ({"kind": "slot_value", "ngram_min": 3, "ngram_max": 2}, {}, "drift.ngram_min"),
        ({"kind": "slot_value", "colour": 1}, {}, "drift.colour"),
        ({"kind": "slot_value"}, {"kind": "both"}, "validation.kind"),
    ],
)
def test_bad_config_values_raise_config_error_naming_the_key(drift, validation, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        SplitConfig.from_configs(drift, validation)


def test_config_round_trips_and_none_ignores_the_other_keys():
    cfg = SplitConfig.from_configs({"kind": "slot_value", "partial": True, "min_projected_size": 10}, {"kind": "ood"})
    assert cfg.partial and cfg.validation == "ood" and cfg.min_projected_size == 10.0
    assert SplitConfig.from_dict(cfg.to_dict()) == cfg
    none = SplitConfig.from_configs({"kind": "none", "n_clusters": 100}, {"kind": "iid"})
    assert none.to_dict()["drift"] == {"kind": "none"}


def test_identity_split_keeps_the_dataset_splits(clustered, as_corpus):
    utts, _ = clustered(TEN_CLUSTERS)
    corpus = as_corpus(utts)
    split = identity_split(corpus, SplitConfig(kind="none"))
    new = split.apply(corpus)
    assert (new.train, new.valid, new.test) == (corpus.train, corpus.valid, corpus.test)
    assert set(split.groups().values()) == {-1}
