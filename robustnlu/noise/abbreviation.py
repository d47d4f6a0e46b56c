"""Abbreviation noise (Krone et al. 2021, paper 002, Table 1 and section 3 "Abbreviations").

The paper's training augmentation combines three rules: a knowledge base of common text
abbreviations (Webopedia's list, Beal 2021), dropping vowels (``people`` → ``ppl``) and
numeral/word homophones (``to`` ↔ ``2``). Its chosen rate is 0.15 (grid {0.10, ..., 0.25},
App. A.2); its human test sets change the carrier phrase only, hence ``target_tokens="carrier"``.

Ours (the paper gives no details, digest A.2 / C.1):

- **Knowledge base**: Webopedia's list cannot be copied; `DEFAULT_KB` is our own list of ~250
  chat, general and domain (flight, music, restaurant, weather, reminder) abbreviations,
  ``phrase<TAB>abbreviation``; a phrase of n words becomes one token (n→1).
- **Homophones** (`HOMOPHONES`): word → numeral only (``to`` → ``2``, ``for`` → ``4``,
  ``ate`` → ``8``, ``one`` → ``1``). The reverse (``2`` → ``to``) is not an abbreviation and would
  turn quantities into words with another meaning (``2 tickets`` → ``to tickets``).
- **Vowel drop** (`drop_vowels`): tokens of >= 4 ASCII letters lose every ``a e i o u`` after
  the first character; used only when the result differs and has >= 2 characters.
- **Selection and order**: each target token is selected with probability ``rate`` (one draw
  per target token, `NoiseTransform.targets`). Scanning left to right, a selected token gets the
  first rule that applies: (1) the longest knowledge-base phrase starting at it whose tokens are
  all target tokens and all ``O`` or inside one slot span; (2) the homophone; (3) the vowel drop.
  Tokens covered by a replaced phrase are consumed (their own selection is ignored). The most
  conventional form comes first; vowel dropping, which applies to almost any long word, is the
  fallback.
- **Case**: knowledge-base and homophone abbreviations are upper-cased when every replaced
  token is upper-case (``ASAP``), start with a capital when the first replaced token does
  (``Tmrw``, ``Asap``) and are lower-case otherwise; a vowel drop keeps the remaining
  characters' case (``PEOPLE`` → ``PPL``).
"""

from __future__ import annotations

import random
from pathlib import Path

from robustnlu.data.bio import tag_type
from robustnlu.data.readers.common import read_lines
from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, DataError
from robustnlu.io import data_file
from robustnlu.noise.base import NoiseTransform, is_target, replace_tokens

DEFAULT_KB = Path(__file__).parent / "resources" / "abbreviations.tsv"
"""The shipped knowledge base (written for robustnlu), named uncompressed: `load_abbreviations`
also finds ``abbreviations.tsv.xz`` or ``.gz``."""

HOMOPHONES = {
    "to": "2", "too": "2", "two": "2",
    "for": "4", "four": "4", "fore": "4",
    "ate": "8", "eight": "8",
    "won": "1", "one": "1",
}
"""Word → numeral sharing its sound (paper 002, section 3 gives ``2`` ↔ ``to``; the rest are ours)."""

VOWELS = frozenset("aeiouAEIOU")


def load_abbreviations(path: str | Path) -> dict[tuple[str, ...], str]:
    """The knowledge base in ``path`` (or its compressed copy, `robustnlu.io.data_file`, read as
    every data file is: `read_lines`): lower-cased phrase tokens → abbreviation. Skips blank lines
    and lines starting with ``#``. ConfigError naming ``noise.kb_file`` when the file is missing,
    unreadable, corrupt, not UTF-8 or empty; DataError on a line without exactly two
    tab-separated fields, an empty field, an abbreviation with whitespace or a repeated phrase."""
    kb: dict[tuple[str, ...], str] = {}
    path = data_file(path)
    try:
        lines = read_lines(path)
    except DataError as err:
        raise ConfigError(f"noise.kb_file: {err}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(path, n, f"expected 'phrase<TAB>abbreviation', got {len(fields)} field(s)")
        phrase, abbreviation = tuple(fields[0].lower().split()), fields[1].strip().lower()
        if not phrase or not abbreviation or len(abbreviation.split()) != 1:
            raise DataError(path, n, "empty phrase, or an abbreviation that is not one token")
        if phrase in kb:
            raise DataError(path, n, f"phrase {' '.join(phrase)!r} appears twice")
        kb[phrase] = abbreviation
    return kb


def drop_vowels(token: str) -> str | None:
    """``token`` without the vowels after its first character (``people`` → ``ppl``), or None
    when the rule does not apply (fewer than 4 characters, a non-letter, no change, or fewer
    than 2 characters left)."""
    if len(token) < 4 or not (token.isascii() and token.isalpha()):
        return None
    new = token[0] + "".join(c for c in token[1:] if c not in VOWELS)
    return new if new != token and len(new) >= 2 else None


def match_case(abbreviation: str, original: list[str]) -> str:
    """``abbreviation`` in the case style of the replaced tokens (module doc, "Case")."""
    letters = "".join(c for t in original for c in t if c.isalpha())
    if letters and letters.isupper():
        return abbreviation.upper()
    if original[0][:1].isupper():
        return abbreviation[:1].upper() + abbreviation[1:]
    return abbreviation


class Abbreviation(NoiseTransform):
    """Abbreviate selected target tokens (1→1, or n→1 for knowledge-base phrases)."""

    name = "abbreviation"

    def __init__(self, rate: float = 0.15, kb_file: str | Path | None = None, vowel_drop: bool = True,
                 homophones: bool = True, target_tokens: str = "carrier", seed: int = 0):
        super().__init__(rate=rate, target_tokens=target_tokens, seed=seed)
        self.kb_file = None if kb_file is None else str(kb_file)
        self.kb = load_abbreviations(DEFAULT_KB if kb_file is None else kb_file)
        self.max_phrase_len = max((len(p) for p in self.kb), default=0)
        self.vowel_drop = bool(vowel_drop)
        self.homophones = bool(homophones)

    def _phrase_ok(self, tags: tuple[str, ...]) -> bool:
        """All target tokens, and all ``O`` or inside one span (base.py rule 3)."""
        return (all(is_target(t, self.target_tokens) for t in tags)
                and len({tag_type(t) for t in tags}) == 1
                and not any(t.startswith("B-") for t in tags[1:]))

    def abbreviate_at(self, u: Utterance, i: int) -> tuple[int, str] | None:
        """``(end, abbreviation)`` for the first rule that applies at token ``i`` (the
        abbreviation replaces ``tokens[i:end]``), or None."""
        lowered = [t.lower() for t in u.tokens[i:i + self.max_phrase_len]]
        for n in range(len(lowered), 0, -1):
            abbreviation = self.kb.get(tuple(lowered[:n]))
            if abbreviation is not None and self._phrase_ok(u.tags[i:i + n]):
                return i + n, match_case(abbreviation, list(u.tokens[i:i + n]))
        token = u.tokens[i]
        if self.homophones and token.lower() in HOMOPHONES:
            return i + 1, HOMOPHONES[token.lower()]
        if self.vowel_drop and (new := drop_vowels(token)) is not None:
            return i + 1, new
        return None

    def apply(self, u: Utterance, rng: random.Random) -> Utterance:
        selected = set(self.targets(u, rng))
        changes: list[tuple[int, int, str]] = []
        i = 0
        while i < len(u.tokens):
            found = self.abbreviate_at(u, i) if i in selected else None
            if found is None:
                i += 1
                continue
            end, abbreviation = found
            if abbreviation != " ".join(u.tokens[i:end]):
                changes.append((i, end, abbreviation))
            i = end
        for start, end, abbreviation in reversed(changes):
            u = replace_tokens(u, start, end, [abbreviation])
        return u

    def config(self) -> dict:
        return {"name": self.name, "rate": self.rate, "target_tokens": self.target_tokens, "seed": self.seed,
                "kb_file": self.kb_file or "shipped", "kb_entries": len(self.kb),
                "vowel_drop": self.vowel_drop, "homophones": self.homophones}
