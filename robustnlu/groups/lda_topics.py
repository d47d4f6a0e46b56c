"""LDA topics as groups (Topic-CVaR, core paper 4.2; Oren et al. 2019; thesis digest 3.3): a
latent Dirichlet allocation over the words of the training utterances, fitted once per run."""

from __future__ import annotations

import torch
from sklearn.decomposition import LatentDirichletAllocation
from sklearn.feature_extraction.text import CountVectorizer
from torch import Tensor

from robustnlu.config_spec import AT_LEAST_1, PROBABILITY, SEED, choice, integer, number
from robustnlu.groups.base import GroupSource, one_hot_memberships
from robustnlu.hparams import HParam


class LDATopics(GroupSource):
    """scikit-learn's variational LDA over bag-of-words counts of the training utterances'
    tokens (lower-cased, split as the dataset splits them; punctuation tokens are words too).

    Defaults follow the thesis digest 3.3 (the P-DRO reference code's gensim LDA), with online
    variational Bayes as gensim runs it: ~4 s of one CPU core for SNIPS' 13k training
    utterances. The passes are `partial_fit` calls: ``fit`` would add a full perplexity
    evaluation (~2 s on SNIPS) that nothing uses.
    """

    HPARAMS = {
        "n_topics": HParam(integer(AT_LEAST_1), 10, "number of topics T (digest 3.3)"),
        # the priors: scikit-learn's LatentDirichletAllocation takes (0, 1] (checked when it fits)
        "doc_topic_prior": HParam(number("(0, 1]"), 0.1, "Dirichlet prior α on the topic proportions (digest 3.3)"),
        "topic_word_prior": HParam(number("(0, 1]"), 1.0, "Dirichlet prior β on the topics' word distributions "
                                   "(digest 3.3)"),
        "max_vocabulary": HParam(integer(AT_LEAST_1), 10_000, "the most frequent words kept (digest 3.3 [C])"),
        # digest pitfall 13: a stop-word can be the very feature that defines a group
        "stop_words": HParam(choice("english", null=True), None, "null: stop-words are kept | english: removed"),
        "assignment": HParam(choice("hard", "soft"), "hard", "hard: one-hot argmax topic (the reference code) | "
                             "soft: the topic proportions"),
        "passes": HParam(integer(AT_LEAST_1), 10, "online passes over the corpus (gensim passes=10)"),
        "doc_iterations": HParam(integer(AT_LEAST_1), 2, "variational iterations per utterance per update (gensim "
                                 "iterations=2)"),
        "chunk_size": HParam(integer(AT_LEAST_1), 2048, "utterances per online update (gensim chunksize 2000)"),
        "learning_offset": HParam(number("[1, inf)"), 1.0, "offset of the online learning rate (offset + t)^-decay "
                                  "(gensim's 1.0; scikit-learn's own: 10)"),
        "learning_decay": HParam(number(PROBABILITY), 0.5, "its decay (gensim's 0.5; scikit-learn's own: 0.7)"),
        "seed": HParam(integer(SEED), 0, "the LDA's random initialisation"),
    }

    def __init__(self, **hparams):
        super().__init__(**hparams)
        hp = self.hparams
        self.assignment = hp["assignment"]
        self.passes = hp["passes"]
        self.vectorizer = CountVectorizer(tokenizer=str.split, token_pattern=None, lowercase=True,
                                          stop_words=hp["stop_words"], max_features=hp["max_vocabulary"])
        self.lda = LatentDirichletAllocation(
            n_components=hp["n_topics"],
            doc_topic_prior=hp["doc_topic_prior"],
            topic_word_prior=hp["topic_word_prior"],
            learning_method="online",
            max_doc_update_iter=hp["doc_iterations"],
            batch_size=hp["chunk_size"],
            learning_offset=hp["learning_offset"],
            learning_decay=hp["learning_decay"],
            random_state=hp["seed"],
        )

    def topic_proportions(self, texts: list[str]) -> Tensor:
        """Fit the vocabulary and LDA on ``texts``; ``[n, T]`` topic proportions."""
        counts = self.vectorizer.fit_transform(texts)
        self.lda.set_params(total_samples=counts.shape[0])
        for _ in range(self.passes):
            self.lda.partial_fit(counts)
        theta = torch.as_tensor(self.lda.transform(counts), dtype=torch.float64)
        return (theta / theta.sum(1, keepdim=True)).float()

    def memberships(self, datamodule) -> Tensor:
        texts = [" ".join(u.tokens) for u in datamodule.datasets["train"].utterances]
        theta = self.topic_proportions(texts)
        if self.assignment == "soft":
            return theta
        return one_hot_memberships(theta.argmax(1), theta.size(1))
