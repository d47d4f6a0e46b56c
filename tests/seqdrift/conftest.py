"""Hand-made utterances, corpora and split configs for the SeqDrift tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from robustnlu.data.utterance import Corpus, Utterance
from robustnlu.seqdrift import pipeline
from robustnlu.seqdrift.config import SplitConfig


def utterance(uid: str, intent: str, slots: Sequence[str] = ("x",)) -> Utterance:
    """``w0 <slot value> w1 <slot value> ...``: one single-token span per entry of ``slots``."""
    tokens, tags = [], []
    for k, slot in enumerate(slots):
        tokens += [f"w{k}", f"{slot}{k}"]
        tags += ["O", f"B-{slot}"]
    tokens.append("end")
    tags.append("O")
    return Utterance(uid, tuple(tokens), tuple(tags), intent)


def hand_config(**overrides) -> SplitConfig:
    """No filtering; test/valid 10 %; labels with a projected count >= 10 constrained."""
    values = dict(kind="slot_context", min_intent_freq=0, min_slot_freq=0, require_slots=False, min_projected_size=10)
    values.update(overrides)
    cfg = SplitConfig(**values)
    cfg.check()
    return cfg


@pytest.fixture
def make_utterance() -> Callable[..., Utterance]:
    return utterance


@pytest.fixture
def config() -> Callable[..., SplitConfig]:
    return hand_config


@pytest.fixture
def clustered() -> Callable[[Sequence[tuple[int, str, Sequence[str]]]], tuple[list[Utterance], list[int]]]:
    """``clustered([(count, intent, slots, cluster), ...])`` -> (utterances, cluster ids), uids
    ``u0000``, ``u0001``, ... in order."""

    def build(groups):
        utts, ids = [], []
        for count, intent, slots, cluster in groups:
            for _ in range(count):
                utts.append(utterance(f"u{len(utts):04d}", intent, slots))
                ids.append(cluster)
        return utts, ids

    return build


@pytest.fixture
def as_corpus() -> Callable[[Sequence[Utterance]], Corpus]:
    """The utterances as a corpus (every 5th in valid, every 7th of the rest in test)."""

    def build(utts, name="hand"):
        valid = [u for i, u in enumerate(utts) if i % 5 == 4]
        rest = [u for i, u in enumerate(utts) if i % 5 != 4]
        return Corpus(name, [u for i, u in enumerate(rest) if i % 7 != 6], valid, [u for i, u in enumerate(rest) if i % 7 == 6])

    return build


#: ten clusters of 10 utterances and 300 isolated ones, all of one intent and slot
TEN_CLUSTERS = [(10, "A", ["x"], c) for c in range(10)] + [(300, "A", ["x"], -1)]


@pytest.fixture
def hand_drift() -> dict:
    """The drift options of `hand_corpus`: no filtering, its 10 clusters."""
    return {"kind": "slot_context", "n_clusters": 10, "min_intent_freq": 0, "min_slot_freq": 0, "require_slots": False}


@pytest.fixture
def hand_corpus(clustered, as_corpus):
    """`TEN_CLUSTERS` as a corpus, and uid -> its hand-made cluster."""
    utts, ids = clustered(TEN_CLUSTERS)
    return as_corpus(utts), dict(zip((u.uid for u in utts), ids))


@pytest.fixture
def spy_clusters(monkeypatch, hand_corpus) -> list[int]:
    """Replace the clustering with the hand-made ids of `hand_corpus`; the list of the sizes it
    was called with (one entry per clustering computed)."""
    _, cluster_of = hand_corpus
    calls = []

    def fake(utterances, cfg):
        calls.append(len(utterances))
        return [cluster_of[u.uid] for u in utterances]

    monkeypatch.setattr(pipeline, "cluster_utterances", fake)
    return calls
