"""LDA topic memberships from a real data module: valid rows, hard = argmax of soft,
determinism, stop-words kept by default, and two disjoint vocabularies recovered as two topics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import normalized_mutual_info_score

from robustnlu.errors import ConfigError
from robustnlu.groups.lda_topics import LDATopics
from tests.robust.helpers import synthetic_datamodule

WEATHER = "rain sunny forecast cloudy snow wind storm humid temperature degrees".split()
MUSIC = "play song album artist playlist jazz track guitar singer radio".split()


def two_vocabulary_corpus(n: int = 400, seed: int = 0) -> tuple[list[str], list[int]]:
    """Utterances of 4-8 words, every other one drawn from weather words, the others from music words."""
    rng = np.random.default_rng(seed)
    labels = [i % 2 for i in range(n)]
    texts = [" ".join(rng.choice(MUSIC if y else WEATHER, size=rng.integers(4, 9))) for y in labels]
    return texts, labels


@pytest.fixture(scope="module")
def datamodule(tokenizer):
    texts, labels = two_vocabulary_corpus()
    return synthetic_datamodule(tokenizer, [-1] * len(texts), texts), labels


@pytest.mark.parametrize("seed", range(3))
def test_two_disjoint_vocabularies_give_two_topics(datamodule, seed):
    dm, labels = datamodule
    m = LDATopics(n_topics=2, seed=seed).memberships(dm)
    assert normalized_mutual_info_score(labels, m.argmax(1).numpy()) >= 0.9


def test_rows_sum_to_one_and_hard_is_the_argmax_of_soft(datamodule):
    dm, _ = datamodule
    soft = LDATopics(n_topics=4, assignment="soft", seed=3).memberships(dm)
    hard = LDATopics(n_topics=4, assignment="hard", seed=3).memberships(dm)
    assert soft.shape == hard.shape == (400, 4) and soft.dtype == hard.dtype == torch.float32
    assert torch.all(soft >= 0) and torch.allclose(soft.sum(1), torch.ones(400))
    assert torch.equal(hard, torch.nn.functional.one_hot(soft.argmax(1), 4).float())
    assert soft.max(1).values.lt(1).any()  # proportions, not one-hot


def test_deterministic_for_a_seed(datamodule):
    dm, _ = datamodule
    first = LDATopics(n_topics=3, assignment="soft", seed=5).memberships(dm)
    assert torch.equal(first, LDATopics(n_topics=3, assignment="soft", seed=5).memberships(dm))
    assert not torch.equal(first, LDATopics(n_topics=3, assignment="soft", seed=6).memberships(dm))


def test_stop_words_are_kept_unless_asked():
    texts = ["so what is the weather", "play the song so loud"]
    kept, removed = LDATopics(n_topics=2), LDATopics(n_topics=2, stop_words="english")
    kept.topic_proportions(texts)
    removed.topic_proportions(texts)
    assert {"so", "the", "what"} <= set(kept.vectorizer.vocabulary_)
    assert set(removed.vectorizer.vocabulary_) == {"weather", "play", "song", "loud"}


def test_rejects_an_unknown_assignment():
    with pytest.raises(ConfigError, match=r"^assignment: must be one of hard, soft \(got argmax\)$"):
        LDATopics(assignment="argmax")
