"""LDA topics as groups (Topic-CVaR, core paper 4.2; Oren et al. 2019; thesis digest 3.3): a
latent Dirichlet allocation over the words of the training utterances, fitted once per run."""

from __future__ import annotations

import torch
from sklearn.decomposition import LatentDirichletAllocation
from sklearn.feature_extraction.text import CountVectorizer
from torch import Tensor

from robustnlu.groups.base import GroupSource, one_hot_memberships


class LDATopics(GroupSource):
    """scikit-learn's variational LDA over bag-of-words counts of the training utterances'
    tokens (lower-cased, split as the dataset splits them; punctuation tokens are words too).

    Defaults follow the thesis digest 3.3 (the P-DRO reference code's gensim LDA): 10 topics,
    α = 0.1, β = 1.0, vocabulary ≤ 10,000, online variational Bayes as gensim runs it (chunks
    of ~2,000 utterances, learning rate (1 + t)^-0.5), 10 passes, 2 inference iterations per
    document: ~4 s of one CPU core for SNIPS' 13k training utterances. The passes are
    `partial_fit` calls: ``fit`` would add a full perplexity evaluation (~2 s on SNIPS) that
    nothing uses. Stop-words are kept by default (digest pitfall 13: a stop-word can be the
    very feature that defines a group). ``assignment``: "hard" = one-hot argmax topic (as in
    the reference code), "soft" = the topic proportions.
    """

    def __init__(
        self,
        n_topics: int = 10,
        doc_topic_prior: float = 0.1,
        topic_word_prior: float = 1.0,
        max_vocabulary: int = 10_000,
        stop_words: str | None = None,
        assignment: str = "hard",
        passes: int = 10,
        doc_iterations: int = 2,
        chunk_size: int = 2048,
        learning_offset: float = 1.0,
        learning_decay: float = 0.5,
        seed: int = 0,
    ):
        if assignment not in ("hard", "soft"):
            raise ValueError(f"assignment={assignment!r}: expected 'hard' or 'soft'")
        self.assignment = assignment
        self.passes = passes
        self.vectorizer = CountVectorizer(
            tokenizer=str.split, token_pattern=None, lowercase=True, stop_words=stop_words, max_features=max_vocabulary
        )
        self.lda = LatentDirichletAllocation(
            n_components=n_topics,
            doc_topic_prior=doc_topic_prior,
            topic_word_prior=topic_word_prior,
            learning_method="online",
            max_doc_update_iter=doc_iterations,
            batch_size=chunk_size,
            learning_offset=learning_offset,
            learning_decay=learning_decay,
            random_state=seed,
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
