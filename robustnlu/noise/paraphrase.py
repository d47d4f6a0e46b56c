"""Paraphrase noise: utterance-level carrier-phrase swaps between training templates (paper 002,
section 3 "Paraphrases", Table 1 ``can you book me a flight from San Jose to NYC``; rate grid
in Appendix A.2; digest A.2, A.5 item 4).

Paper: back-translation English → Chinese → English of the whole utterance (injected at the
utterance level), slot spans re-projected by case-insensitive exact match of the original slot
values. No MT system is reachable here, so ours is a **corpus-driven paraphraser** and differs:

* `fit` turns every training utterance into a *template*: its tokens with each slot span
  replaced by a placeholder of the span's type (``book a table at <restaurant_name> for
  <party_size_number>``), and groups the templates by *signature* = (intent, slot types): the
  sequence of types in order (default), or their multiset (``signature: multiset``). Templates
  are kept once (compared case-insensitively), in order of first appearance in the corpus.
* An utterance is paraphrased with probability ``rate`` (utterance-level, as in the paper):
  a template of its signature whose carrier tokens differ from its own is drawn uniformly with
  the utterance's RNG and filled with the utterance's own slot values, in order within each
  type. Tags come by construction (``B-X I-X ...`` over each value), so the paper's projection
  step and its unmatched-slot question (digest A.2) do not arise: slot values and tags are kept
  exactly, only the carrier phrase changes. With the ``multiset`` signature the spans of
  different types may change order.
* The paraphrases are other users' phrasings of the same intent with the same slots, not
  machine-translation output: they are as fluent as the corpus, cover only carrier phrases
  seen in training, and never paraphrase inside a slot value. When the utterance's signature
  has no other template (e.g. a unique slot combination), it is returned unchanged.

Deterministic given the seed and the fitted corpus (same corpus order → same templates).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, RobustNLUError
from robustnlu.data.bio import slot_spans
from robustnlu.noise.base import NoiseTransform

SIGNATURES = ("sequence", "multiset")

Template = tuple[tuple[str, str], ...]
"""A template: ``("w", token)`` for a carrier token, ``("s", type)`` for a slot placeholder."""


def split_template(u: Utterance) -> tuple[Template, list[tuple[str, tuple[str, ...]]]]:
    """``u``'s template and its slot values ``(type, tokens)``, left to right."""
    spans = slot_spans(u.tags)
    template: list[tuple[str, str]] = []
    values: list[tuple[str, tuple[str, ...]]] = []
    i = 0
    for typ, start, end in spans:
        template += [("w", t) for t in u.tokens[i:start]]
        template.append(("s", typ))
        values.append((typ, u.tokens[start:end]))
        i = end
    template += [("w", t) for t in u.tokens[i:]]
    return tuple(template), values


def _key(template: Template) -> Template:
    return tuple((kind, x.lower() if kind == "w" else x) for kind, x in template)


class Paraphrase(NoiseTransform):
    """Swap an utterance's carrier phrase for that of another training template with the same
    intent and slot types (see the module docstring). ``rate``: probability per utterance;
    ``signature``: ``sequence`` (slot types in order) or ``multiset``. Carrier-only by
    construction (``target_tokens`` is always ``carrier``). `fit` collects the templates."""

    name = "paraphrase"

    def __init__(self, rate: float = 0.15, seed: int = 0, signature: str = "sequence"):
        super().__init__(rate, "carrier", seed)
        if signature not in SIGNATURES:
            raise ConfigError(f"noise.signature must be one of {SIGNATURES}, got {signature!r}")
        self.signature = signature
        self._templates: dict[tuple, list[tuple[Template, Template]]] | None = None  # (key, template)

    def _signature(self, intent: str, values: Sequence[tuple[str, tuple[str, ...]]]) -> tuple:
        types = [typ for typ, _ in values]
        return (intent, tuple(sorted(types)) if self.signature == "multiset" else tuple(types))

    def fit(self, train: Sequence[Utterance]) -> Paraphrase:
        """Collect the distinct templates of ``train`` per signature, in corpus order."""
        groups: dict[tuple, list[tuple[Template, Template]]] = {}
        seen: set[tuple] = set()
        for u in train:
            template, values = split_template(u)
            sig, key = self._signature(u.intent, values), _key(template)
            if (sig, key) not in seen:
                seen.add((sig, key))
                groups.setdefault(sig, []).append((key, template))
        self._templates = groups
        return self

    def templates(self, u: Utterance) -> list[Template]:
        """The fitted templates ``u`` may be rewritten into (its signature, other carrier)."""
        if self._templates is None:
            raise RobustNLUError(f"noise {self.name}: call fit(train) before applying the transform")
        template, values = split_template(u)
        own = _key(template)
        return [t for key, t in self._templates.get(self._signature(u.intent, values), ()) if key != own]

    def apply(self, u: Utterance, rng: random.Random) -> Utterance:
        if rng.random() >= self.rate:
            return u
        options = self.templates(u)
        if not options:
            return u
        return fill(rng.choice(options), u)


def fill(template: Template, u: Utterance) -> Utterance:
    """``template`` filled with ``u``'s slot values (per type, in order); tags ``B-X I-X ...``
    over each value, ``O`` elsewhere. Raises ValueError when a placeholder has no value."""
    _, values = split_template(u)
    queues: dict[str, list[tuple[str, ...]]] = {}
    for typ, value in values:
        queues.setdefault(typ, []).append(value)
    tokens: list[str] = []
    tags: list[str] = []
    for kind, x in template:
        if kind == "w":
            tokens.append(x)
            tags.append("O")
            continue
        if not queues.get(x):
            raise ValueError(f"{u.uid}: template slot {x!r} has no value to fill")
        value = queues[x].pop(0)
        tokens += value
        tags += [f"B-{x}"] + [f"I-{x}"] * (len(value) - 1)
    if any(queues.values()):
        raise ValueError(f"{u.uid}: slot values left over after filling the template")
    return replace(u, tokens=tuple(tokens), tags=tuple(tags))
