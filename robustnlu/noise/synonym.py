"""Synonym noise: WordNet candidates ranked by fluency (paper 002, section 3 "Synonyms",
Table 1 ``reserve a flight from San Jose to NYC``; rate grid in Appendix A.2).

Paper: candidate synonyms from WordNet, then the candidate giving the lowest DistilGPT2
perplexity is put into the utterance. Ours (differences from the paper):

* **Candidates**: for each WordNet POS (noun, verb, adjective, adverb) under which the token has
  a lemma (`wn.morphy`), the first ``max_senses`` senses of that lemma; every other lemma name of
  those synsets is a candidate (sense order, then WordNet's lemma order). Names with capitals
  (proper nouns, acronyms) or characters other than letters, ``-`` and ``'`` are dropped. A
  multi-word name (``air_travel``) becomes several tokens: a 1→n replacement (``B-X`` →
  ``B-X I-X`` under ``target_tokens: all | slots``). A name that contains the token or its lemma
  (``record_book`` for ``book``, ``dramatic_play`` for ``play``) is no synonym change and is
  dropped: the n-gram LM would otherwise favour it for keeping the original word.
* **Inflection**: when the token is inflected (``songs``, ``booking``, ``cheaper``) the
  candidate is re-inflected with lemminflect to the same Penn tag (``vocals``, ``reserving``,
  ``more inexpensive``); the head of a multi-word name is its first word for verbs (``looking
  up``), for nouns the word before a preposition (``flights of stairs``) or else the last
  (``motion pictures``); an adjective / adverb lemminflect cannot compare takes ``more`` /
  ``most``. A POS whose inflection of the token cannot be identified gives no candidates.
* **Function words** (`FUNCTION_WORDS`: pronouns, determiners, prepositions, conjunctions,
  auxiliaries, modals, number words, ``please``...) and tokens that are not alphabetic or are one
  letter long are never replaced: WordNet has entries such as ``a`` (the letter), ``in`` (inch),
  ``i`` (iodine), ``it`` (information technology).
* **Ranking**: DistilGPT2 is not available offline; candidates are ranked by `NGramFluency`
  (interpolated Kneser-Ney trigrams fitted on the training split by `fit`) on the whole
  utterance with the candidate substituted (earlier replacements in the same utterance already
  in place). ``top_k: 1`` (default) keeps the most fluent candidate as the paper does (ties: the
  first in candidate order); ``top_k > 1`` draws uniformly among the ``top_k`` most fluent
  with the utterance's RNG, for more variety.
* **No POS tagger** (none ships offline): the candidates of every POS the token can have compete,
  and only the n-gram LM picks between them, so a verb can get a noun's synonym when its first
  verb senses have no other lemma names (SNIPS ``play`` → ``drama``, ``rate`` → ``place``).
* **Rate**: each token allowed by ``target_tokens`` is selected with probability ``rate``
  (`NoiseTransform.targets`); a selected token with no candidate stays unchanged, so the share
  of changed tokens is below ``rate``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, RobustNLUError
from robustnlu.extras import require
from robustnlu.noise.fluency import FluencyRanked
from robustnlu.noise.wordnet import load_wordnet

# the noise extra, for noise=morphology too (robustnlu/noise/morphology.py imports this module)
NOISE_EXTRA_FEATURE = "noise=synonym / noise=morphology"
lemminflect = require("lemminflect", "noise", NOISE_EXTRA_FEATURE)
require("nltk", "noise", NOISE_EXTRA_FEATURE)  # the WordNet reader (robustnlu/noise/wordnet.py)

FUNCTION_WORDS = frozenset(
    # pronouns
    "i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his himself "
    "she her hers herself it its itself they them their theirs themselves "
    # determiners, quantifiers, wh-words
    "a an the this that these those some any each every no all both either neither another other such "
    "what which whose whatever whichever who whom where when why how "
    # prepositions and particles
    "about above across after against along among around as at before behind below beneath beside "
    "between beyond by down during except for from in inside into like near of off on onto out outside "
    "over past per since than through throughout till to toward towards under until up upon via with "
    "within without "
    # conjunctions
    "and but or nor so yet if because although though while whether unless "
    # auxiliaries and modals (be / have / do forms)
    "am is are was were be been being have has had having do does did doing done "
    "will would shall should can could may might must ought "
    # negation, clitics, deictics, politeness, interjections
    "not n't 's 'd 'll 're 've 'm there here then please yes yeah ok okay hi hello hey thanks thank "
    # number words (WordNet: one -> ace / unity, two -> deuce ...)
    "zero one two three four five six seven eight nine ten eleven twelve".split()
)
"""Closed-class words never replaced by the synonym transform."""

_NAME = re.compile(r"[a-z][a-z'-]*(?:_[a-z][a-z'-]*)*")
_WN_POS = ("n", "v", "a", "r")
_TAGS = {  # Penn tags an inflected form of a lemma may have, tried in this order
    "n": ("NNS",),
    "v": ("VBG", "VBZ", "VBD", "VBN"),
    "a": ("JJR", "JJS"),
    "r": ("RBR", "RBS"),
}
_SUFFIX_TAGS = (("ing", "VBG"), ("ed", "VBD"), ("s", "VBZ"))
_PREPOSITIONS = frozenset("of in on for to at with by from".split())


def eligible_word(word: str) -> bool:
    """Whether a (lower-cased) token may be replaced: alphabetic, two letters or more, not a
    function word."""
    return len(word) > 1 and word.isalpha() and word not in FUNCTION_WORDS


def inflection_tag(word: str, lemma: str, pos: str) -> str | None:
    """The Penn tag of ``word`` as an inflection of ``lemma`` (WordNet POS ``pos``); None when
    ``word`` is the base form; ``"?"`` when it cannot be identified."""
    if word == lemma:
        return None
    for tag in _TAGS[pos]:
        if word in lemminflect.getInflection(lemma, tag=tag):
            return tag
    if pos == "n":
        return "NNS"
    if pos == "v":
        return next((tag for suffix, tag in _SUFFIX_TAGS if word.endswith(suffix)), "?")
    if pos in ("a", "r"):
        return _TAGS[pos][0] if word.endswith("er") else _TAGS[pos][1] if word.endswith("est") else "?"
    return "?"


def inflect(words: Sequence[str], tag: str | None, pos: str) -> list[str] | None:
    """``words`` (a lemma, possibly multi-word) inflected to ``tag`` on its head word (verbs:
    the first word; nouns: the word before the first preposition, ``flights of stairs``, else the
    last); None when not possible."""
    if tag is None:
        return list(words)
    if pos in ("a", "r"):
        if len(words) == 1:
            forms = lemminflect.getInflection(words[0], tag=tag, inflect_oov=False)
            if forms:
                return [forms[0]]
        return ["more" if tag in ("JJR", "RBR") else "most", *words]
    head = 0 if pos == "v" else next((j - 1 for j in range(1, len(words)) if words[j] in _PREPOSITIONS), len(words) - 1)
    forms = lemminflect.getInflection(words[head], tag=tag)
    if not forms:
        return None
    return [*words[:head], forms[0], *words[head + 1 :]]


class Synonym(FluencyRanked):
    """Replace selected tokens by a fluent WordNet synonym (see the module docstring).

    ``max_senses``: WordNet senses per (lemma, POS) whose lemma names are candidates;
    ``top_k``: 1 = the most fluent candidate, k > 1 = a random one of the k most fluent;
    ``data_dir``: folder holding ``corpora/wordnet.zip`` (default: the repository's
    ``data/nltk_data``). `fit` loads WordNet and fits the fluency LM.
    """

    name = "synonym"

    def __init__(self, rate: float = 0.1, max_senses: int = 3, target_tokens: str = "carrier", seed: int = 0,
                 top_k: int = 1, data_dir: str | None = None):
        super().__init__(rate, target_tokens, seed, top_k)
        if isinstance(max_senses, bool) or not isinstance(max_senses, int) or max_senses < 1:
            raise ConfigError(f"noise.max_senses must be a positive integer, got {max_senses!r}")
        self.max_senses = max_senses
        self.data_dir = None if data_dir is None else str(data_dir)
        self._wn = None

    def fit(self, train: Sequence[Utterance]) -> Synonym:
        """Load WordNet (cached per process) and fit the fluency LM on ``train``."""
        self._wn = load_wordnet(None if self.data_dir is None else Path(self.data_dir))
        super().fit(train)
        return self

    def _candidates(self, w: str) -> tuple[tuple[str, ...], ...]:
        if not eligible_word(w):
            return ()
        wn = self._wn
        if wn is None:
            raise RobustNLUError(f"noise {self.name}: call fit(train) before applying the transform")
        out: dict[tuple[str, ...], None] = {}
        for pos in _WN_POS:
            lemma = wn.morphy(w, pos)
            if lemma is None:
                continue
            tag = inflection_tag(w, lemma, pos)
            if tag == "?":
                continue
            senses = [s for s in wn.synsets(lemma, pos) if lemma in (n.lower() for n in s.lemma_names())]
            for synset in senses[: self.max_senses]:
                for name in synset.lemma_names():
                    if name.lower() == lemma or not _NAME.fullmatch(name):
                        continue
                    words = inflect(name.split("_"), tag, pos)
                    if words and w not in words and lemma not in words:
                        out.setdefault(tuple(words), None)
        return tuple(out)
