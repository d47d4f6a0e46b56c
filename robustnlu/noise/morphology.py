"""Morphological-variant noise: other inflections of a token's lemma, ranked by fluency (paper
002, section 3 "Morphological Variants", Table 1 ``start booking a flight ...``; rate grid in
Appendix A.2; digest A.8 item 5).

Paper: candidates from an internal, human-curated database of 120,000 morphological-variant
pairs (not public), then the candidate with the lowest DistilGPT2 perplexity. Ours (an
"approximate replication", digest A.8 item 5):

* **Candidates**: lemminflect. For every lemma lemminflect gives the token (`getAllLemmas`, one
  per universal POS among NOUN, VERB, AUX, ADJ, ADV), every inflection of that lemma
  (`getAllInflections`, the base form included), except the token itself: ``book`` → ``books``,
  ``booked``, ``booking``; ``flights`` → ``flight``; ``cheap`` → ``cheaper``, ``cheapest``.
  Words lemminflect does not know give none. Periphrastic variants such as the paper's
  ``book`` → ``start booking`` (1→2 tokens) are not produced: every change is 1→1.
* **Function words**: closed-class words (pronouns, determiners, prepositions, conjunctions,
  modals, number words, ``please``: the synonym transform's `FUNCTION_WORDS`) are never changed:
  lemminflect reads many of them as nouns (``me`` → ``mes``, ``does`` → ``doe``). The forms of
  **be / have / do are kept eligible** (`AUX_FORMS`, verb readings only): the paper's human
  morphological sets change auxiliaries (``is`` → ``are``), and agreement / tense slips of this
  kind are real morphological noise. Modals do not inflect and are skipped.
* **Ranking**: as for synonyms, an interpolated Kneser-Ney trigram LM fitted on the training
  split instead of DistilGPT2 (`robustnlu.noise.fluency.FluencyRanked`): ``top_k: 1`` keeps the
  most fluent variant.
* **Rate**: each token allowed by ``target_tokens`` is selected with probability ``rate``; a
  selected token without candidates stays unchanged.
"""

from __future__ import annotations

from robustnlu.noise.fluency import FluencyRanked
from robustnlu.noise.synonym import FUNCTION_WORDS, lemminflect  # lemminflect: the noise extra, checked there

AUX_FORMS = frozenset("am is are was were be been being have has had having do does did doing done".split())
"""Forms of be / have / do: eligible, with their verb / auxiliary readings only."""

SKIP_WORDS = FUNCTION_WORDS - AUX_FORMS
"""Words the morphology transform never changes."""

_UPOS = ("NOUN", "VERB", "AUX", "ADJ", "ADV")


class Morphology(FluencyRanked):
    """Replace selected tokens by a fluent other inflection of their lemma (see the module
    docstring). ``top_k``: 1 = the most fluent candidate, k > 1 = a random one of the k most
    fluent. `fit` fits the fluency LM on the training split."""

    name = "morphology"

    def __init__(self, rate: float = 0.1, target_tokens: str = "carrier", seed: int = 0, top_k: int = 1):
        super().__init__(rate, target_tokens, seed, top_k)

    def _candidates(self, w: str) -> tuple[tuple[str, ...], ...]:
        if len(w) < 2 or not w.isalpha() or w in SKIP_WORDS:
            return ()
        lemmas = lemminflect.getAllLemmas(w)
        upos_list = ("VERB", "AUX") if w in AUX_FORMS else _UPOS
        out: dict[tuple[str, ...], None] = {}
        for upos in upos_list:
            for lemma in lemmas.get(upos, ()):
                for forms in lemminflect.getAllInflections(lemma, upos=upos).values():
                    for form in forms:
                        if form != w and form.isalpha():
                            out.setdefault((form.lower(),), None)
        return tuple(out)
