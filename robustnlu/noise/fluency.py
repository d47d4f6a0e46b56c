"""An offline n-gram fluency scorer, ranking the candidates of the synonym and morphology
transforms.

Paper 002 (section 3, "Synonyms" and "Morphological Variants") keeps the candidate with the
lowest perplexity under DistilGPT2. No neural LM can be downloaded here (FIELD-NOTES "Offline
lexical resources"), so we rank by an **interpolated Kneser-Ney** n-gram model (Chen & Goodman
1998, "An empirical study of smoothing techniques for language modeling", section 2.7) fitted
on the training split. This is ours and differs from the paper: the model knows only the
training split's words, so it prefers candidates that occur in in-domain contexts and gives
every unseen word the same (small) unigram probability.

The model, for order ``n`` (default 3) and one fixed absolute discount ``D`` (default 0.75):

* Each sentence is lower-cased and padded with ``n-1`` ``<s>`` and one ``</s>``.
* Highest order: ``P_n(w|h) = (max(c(h w) - D, 0) + D * N1+(h .) * P_{n-1}(w|h')) / c(h .)``
  with ``h'`` = ``h`` without its first word; raw counts ``c``.
* Lower orders ``1 < k < n``: the same formula over continuation counts
  ``N1+(. h w)`` (the number of distinct words seen before ``h w``) instead of ``c``.
* Unigrams: continuation counts ``N1+(. w)`` interpolated with the uniform distribution over the
  vocabulary (every training word, ``</s>`` and one ``<unk>`` for all unseen words).
* A context never seen at its order backs off to the next lower order unchanged.

`score` is the mean natural-log probability per predicted token (the words and ``</s>``),
i.e. minus the log perplexity: higher is more fluent, and utterances of different lengths
(a 1→n synonym) are comparable.

`FluencyRanked` is the shared base of the synonym and morphology transforms.
"""

from __future__ import annotations

import math
import random
from abc import abstractmethod
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import ClassVar

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, RobustNLUError
from robustnlu.noise.base import NoiseTransform, replace_each

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"


class NGramFluency:
    """Interpolated Kneser-Ney n-gram LM over lower-cased tokens (see the module docstring)."""

    def __init__(self, order: int = 3, discount: float = 0.75):
        if isinstance(order, bool) or not isinstance(order, int) or order < 1:
            raise ConfigError(f"fluency.order must be a positive integer, got {order!r}")
        if isinstance(discount, bool) or not isinstance(discount, int | float) or not 0 < discount < 1:
            raise ConfigError(f"fluency.discount must be a number in (0, 1), got {discount!r}")
        self.order = order
        self.discount = float(discount)
        # Per order k (1..n): _counts[k][(h..., w)] (raw counts at k = n, continuation counts
        # below) and _contexts[k][h] = (1 / total count of h, D * distinct followers / total).
        self._counts: list[dict[tuple[str, ...], int]] = []
        self._contexts: list[dict[tuple[str, ...], tuple[float, float]]] = []
        self._vocab: frozenset[str] = frozenset()
        self._uniform = 0.0

    @property
    def fitted(self) -> bool:
        return bool(self._counts)

    @property
    def vocab_size(self) -> int:
        """Words the model predicts: the training words, ``</s>`` and ``<unk>``."""
        return len(self._vocab) + 1

    def fit(self, sentences: Iterable[Sequence[str] | Utterance]) -> NGramFluency:
        """Count n-grams of ``sentences`` (token lists, or `Utterance` objects whose tokens are
        used). Refitting replaces the previous model."""
        n, pad = self.order, (BOS,) * (self.order - 1)
        top: dict[tuple[str, ...], int] = defaultdict(int)
        vocab = {EOS}
        for s in sentences:
            words = [t.lower() for t in (s.tokens if isinstance(s, Utterance) else s)]
            vocab.update(words)
            seq = (*pad, *words, EOS)
            for i in range(n - 1, len(seq)):
                top[seq[i - n + 1 : i + 1]] += 1
        if not top:
            raise RobustNLUError("fluency: cannot fit an n-gram model on an empty corpus")
        counts: list[dict[tuple[str, ...], int]] = [dict(top)]
        for _ in range(n - 1):  # continuation counts N1+(. h w), from order k+1 down to 1
            lower: dict[tuple[str, ...], int] = defaultdict(int)
            for gram in counts[0]:
                lower[gram[1:]] += 1
            counts.insert(0, dict(lower))
        d = self.discount
        contexts = []
        for table in counts:
            total: dict[tuple[str, ...], int] = defaultdict(int)
            types: dict[tuple[str, ...], int] = defaultdict(int)
            for gram, c in table.items():
                total[gram[:-1]] += c
                types[gram[:-1]] += 1
            contexts.append({h: (1.0 / t, d * types[h] / t) for h, t in total.items()})
        self._counts, self._contexts = counts, contexts
        self._vocab = frozenset(vocab)
        self._uniform = 1.0 / self.vocab_size
        return self

    def prob(self, word: str, context: Sequence[str] = ()) -> float:
        """P(word | the last ``order - 1`` words of ``context``), lower-cased; unseen words
        are ``<unk>``; pad the context with ``<s>`` for the start of a sentence."""
        if not self.fitted:
            raise RobustNLUError("fluency: the n-gram model is not fitted (call fit first)")
        w = word.lower()
        w = w if w in self._vocab else UNK
        m = self.order - 1
        hist = tuple(t if t == BOS or t in self._vocab else UNK for t in (x.lower() for x in context))
        hist = hist[-m:] if m else ()
        return self._prob(w, (BOS,) * (m - len(hist)) + hist)

    def _prob(self, w: str, hist: tuple[str, ...]) -> float:
        # Bottom-up: p = uniform, then each order k interpolates with the order below.
        p = self._uniform
        d = self.discount
        for k in range(self.order):
            h = hist[len(hist) - k :] if k else ()
            info = self._contexts[k].get(h)
            if info is not None:
                c = self._counts[k].get((*h, w), 0)
                p = (c - d if c > d else 0.0) * info[0] + info[1] * p
        return p

    def logprobs(self, tokens: Sequence[str]) -> list[float]:
        """Natural-log probability of each token of ``tokens`` and of the final ``</s>``."""
        if not self.fitted:
            raise RobustNLUError("fluency: the n-gram model is not fitted (call fit first)")
        vocab = self._vocab
        seq = [BOS] * (self.order - 1) + [t if t in vocab else UNK for t in (x.lower() for x in tokens)] + [EOS]
        m = self.order - 1
        return [math.log(self._prob(seq[i], tuple(seq[i - m : i]))) for i in range(m, len(seq))]

    def score(self, tokens: Sequence[str]) -> float:
        """Mean log-probability per predicted token (tokens + ``</s>``): higher = more fluent."""
        lp = self.logprobs(tokens)
        return sum(lp) / len(lp)

    def rank(self, candidates: Sequence[Sequence[str]]) -> list[int]:
        """Indices of ``candidates`` from most to least fluent (stable: ties keep their order)."""
        scores = [self.score(c) for c in candidates]
        return sorted(range(len(candidates)), key=lambda i: -scores[i])

    def best(self, candidates: Sequence[Sequence[str]]) -> int:
        """Index of the most fluent candidate token list (ties: the first). Raises ValueError
        for no candidates."""
        if not candidates:
            raise ValueError("fluency.best: no candidates")
        best_i, best_s = 0, -math.inf
        for i, c in enumerate(candidates):
            s = self.score(c)
            if s > best_s:
                best_i, best_s = i, s
        return best_i


def apply_case(model: str, tokens: Sequence[str]) -> list[str]:
    """``tokens`` (lower case) in the casing pattern of ``model``: ALL CAPS, Capitalised or as is."""
    if len(model) > 1 and model.isupper():
        return [t.upper() for t in tokens]
    if model[:1].isupper():
        return [tokens[0][:1].upper() + tokens[0][1:], *tokens[1:]]
    return list(tokens)


class FluencyRanked(NoiseTransform):
    """A token-level transform that replaces each selected token (`NoiseTransform.targets`) by
    one of its `candidates`, ranked by an `NGramFluency` LM fitted on the training split (paper
    002 section 3: synonyms and morphological variants keep the lowest-perplexity candidate).

    Each candidate is scored on the whole utterance with it substituted, left to right, earlier
    replacements in place. ``top_k == 1``: the most fluent (ties: the first candidate);
    ``top_k > 1``: one of the ``top_k`` most fluent, drawn uniformly with the utterance's RNG.
    A selected token without candidates stays unchanged. Casing follows the original token.
    """

    lm_order: ClassVar[int] = 3

    def __init__(self, rate: float, target_tokens: str = "carrier", seed: int = 0, top_k: int = 1):
        super().__init__(rate, target_tokens, seed)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"noise.top_k must be a positive integer, got {top_k!r}")
        self.top_k = top_k
        self._lm: NGramFluency | None = None
        self._cache: dict[str, tuple[tuple[str, ...], ...]] = {}

    def fit(self, train: Sequence[Utterance]) -> FluencyRanked:
        """Fit the fluency LM on ``train`` (and clear the candidate cache)."""
        self._lm = NGramFluency(order=self.lm_order).fit(train)
        self._cache = {}
        return self

    @property
    def lm(self) -> NGramFluency:
        if self._lm is None:
            raise RobustNLUError(f"noise {self.name}: call fit(train) before applying the transform")
        return self._lm

    def candidates(self, word: str) -> tuple[tuple[str, ...], ...]:
        """Replacements of ``word`` (lower-case token tuples, in a fixed order, without ``word``
        itself), cached per lower-cased word."""
        w = word.lower()
        if w not in self._cache:
            self._cache[w] = self._candidates(w)
        return self._cache[w]

    @abstractmethod
    def _candidates(self, word: str) -> tuple[tuple[str, ...], ...]:
        """Uncached `candidates` of a lower-cased word."""

    def apply(self, u: Utterance, rng: random.Random) -> Utterance:
        positions = self.targets(u, rng)
        if not positions:
            return u
        lm = self.lm
        work: list[list[str]] = [[t.lower()] for t in u.tokens]
        replacements: dict[int, list[str]] = {}
        for i in positions:
            cands = self.candidates(u.tokens[i])
            if not cands:
                continue
            sentences = []
            for c in cands:
                work[i] = list(c)
                sentences.append([t for piece in work for t in piece])
            if self.top_k == 1:
                choice = cands[lm.best(sentences)]
            else:
                choice = cands[rng.choice(lm.rank(sentences)[: self.top_k])]
            work[i] = list(choice)
            replacements[i] = apply_case(u.tokens[i], choice)
        return replace_each(u, replacements) if replacements else u
