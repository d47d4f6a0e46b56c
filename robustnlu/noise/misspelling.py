"""Synthetic misspellings (Krone et al. 2021, paper 002, section 3 "Misspellings", App. A.7 and
Table 5, after Hasan et al. 2015).

Each target token is misspelled with probability ``rate`` (the paper's ``p``; chosen 0.20 of the
grid {0.10, ..., 0.30}, App. A.2) by exactly one character edit whose type is drawn with
``edit_probs`` (Table 5: insertion 0.33, deletion 0.18, substitution 0.43, transposition 0.06).
Substitution and insertion use QWERTY neighbours (App. A.7: ``d`` → ``f``, ``s``, ``e``, ``c``).

Decisions the paper leaves open (ours, digest A.3):

- **Keyboard** (`QWERTY_NEIGHBOURS`): US layout, lower-case letters and the digit row ``1``-``0``
  (no punctuation keys). Two keys are neighbours when they sit side by side in a row, or in
  adjacent rows and overlap horizontally with the standard stagger (row offsets, in key widths:
  digits 0, ``q`` row 0.5, ``a`` row 0.75, ``z`` row 1.25). So each key has the paper's four
  orthogonal neighbours plus the two "diagonal" keys it touches: ``d`` → ``s f e r x c``;
  ``o`` → ``i p 9 0 k l`` (the paper's ``Bo0k``).
- **Case**: the new character has the anchor's case (``D`` → ``F``); digits stay digits. A
  transposition moves characters with their case.
- **Positions** are uniform over the valid ones: substitution and insertion over the characters
  that are on the keyboard (ASCII letters and digits); insertion puts a neighbour of the chosen
  character right after it; deletion over all characters; transposition over adjacent pairs of
  *different* characters (swapping ``ll`` in ``hello`` would change nothing).
- **Length**: deletion and transposition need ``len(token) >= min_token_len`` (at least 2, so no
  token becomes empty); substitution and insertion apply to any token with a keyboard character.
- **Impossible edits**: when the drawn type is impossible for a token (transposition of ``a`` or
  of ``ll``, substitution of ``é``), the type is drawn again among the types possible for that
  token, with the same relative weights (rejection sampling). Tokens where all four edits are
  possible (any ordinary word of >= 2 letters with two different adjacent letters) therefore
  get exactly the Table 5 frequencies, and every selected token that admits an edit is changed,
  so the token-level change rate stays ``rate``. Tokens with no letter or digit (``,`` ``?``
  ``-``) are never changed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError
from robustnlu.noise.base import NoiseTransform, replace_each

EDIT_TYPES = ("insertion", "deletion", "substitution", "transposition")
TABLE5_EDIT_PROBS = {"insertion": 0.33, "deletion": 0.18, "substitution": 0.43, "transposition": 0.06}
"""Paper 002, Table 5."""

_ROWS = (("1234567890", 0.0), ("qwertyuiop", 0.5), ("asdfghjkl", 0.75), ("zxcvbnm", 1.25))


def _qwerty_neighbours() -> dict[str, str]:
    """Key → its neighbours (a string), from the key centres of a US keyboard (see module doc)."""
    pos = {key: (r, off + i) for r, (keys, off) in enumerate(_ROWS) for i, key in enumerate(keys)}
    out = {}
    for key, (r, x) in pos.items():
        out[key] = "".join(other for other, (r2, x2) in pos.items() if other != key
                           and ((r2 == r and abs(x2 - x) == 1) or (abs(r2 - r) == 1 and abs(x2 - x) < 1)))
    return out


QWERTY_NEIGHBOURS: dict[str, str] = _qwerty_neighbours()
"""Lower-case letter or digit → the keys touching it on a US QWERTY keyboard."""


def neighbour(char: str, rng: random.Random) -> str:
    """A uniformly drawn QWERTY neighbour of ``char`` in ``char``'s case."""
    new = rng.choice(QWERTY_NEIGHBOURS[char.lower()])
    return new.upper() if char.isupper() else new


def _on_keyboard(char: str) -> bool:
    return char.isascii() and char.lower() in QWERTY_NEIGHBOURS


class Misspelling(NoiseTransform):
    """Misspell each target token with probability ``rate`` by one edit (1→1, tags kept)."""

    name = "misspelling"

    def __init__(self, rate: float = 0.2, edit_probs: Mapping[str, float] | None = None, min_token_len: int = 2,
                 target_tokens: str = "all", seed: int = 0):
        super().__init__(rate=rate, target_tokens=target_tokens, seed=seed)
        probs = dict(TABLE5_EDIT_PROBS if edit_probs is None else edit_probs)
        unknown = set(probs) - set(EDIT_TYPES)
        if unknown:
            raise ConfigError(f"noise.edit_probs: unknown edit types {sorted(unknown)}; known: {EDIT_TYPES}")
        if any(isinstance(p, bool) or not isinstance(p, int | float) or p < 0 for p in probs.values()) \
                or sum(probs.values()) <= 0:
            raise ConfigError(f"noise.edit_probs must be non-negative numbers with a positive sum, got {probs}")
        if isinstance(min_token_len, bool) or not isinstance(min_token_len, int) or min_token_len < 2:
            raise ConfigError(f"noise.min_token_len must be an integer >= 2 (a deletion must not empty a token), "
                              f"got {min_token_len!r}")
        self.edit_probs = {t: float(probs.get(t, 0.0)) for t in EDIT_TYPES}
        self.min_token_len = min_token_len

    def positions(self, token: str, edit: str) -> list[int]:
        """The valid positions of ``edit`` in ``token`` (for a transposition: the first index of
        the swapped pair); empty when the edit is impossible."""
        if not any(c.isalnum() for c in token):
            return []
        if edit in ("substitution", "insertion"):
            return [i for i, c in enumerate(token) if _on_keyboard(c)]
        if len(token) < self.min_token_len:
            return []
        if edit == "deletion":
            return list(range(len(token)))
        return [i for i in range(len(token) - 1) if token[i] != token[i + 1]]

    def misspell(self, token: str, rng: random.Random) -> tuple[str, str]:
        """``token`` with one edit and the edit type; ``(token, "none")`` when no edit with a
        positive probability is possible. The type is drawn with ``edit_probs`` among the possible
        types (module doc, "Impossible edits")."""
        possible = {t: self.positions(token, t) for t in EDIT_TYPES if self.edit_probs[t] > 0}
        possible = {t: p for t, p in possible.items() if p}
        if not possible:
            return token, "none"
        types = list(possible)
        edit = types[0] if len(types) == 1 else rng.choices(types, weights=[self.edit_probs[t] for t in types])[0]
        i = rng.choice(possible[edit])
        if edit == "substitution":
            return token[:i] + neighbour(token[i], rng) + token[i + 1:], edit
        if edit == "insertion":
            return token[:i + 1] + neighbour(token[i], rng) + token[i + 1:], edit
        if edit == "deletion":
            return token[:i] + token[i + 1:], edit
        return token[:i] + token[i + 1] + token[i] + token[i + 2:], edit

    def apply(self, u: Utterance, rng: random.Random) -> Utterance:
        replacements = {}
        for i in self.targets(u, rng):
            new, _ = self.misspell(u.tokens[i], rng)
            if new != u.tokens[i]:
                replacements[i] = [new]
        return replace_each(u, replacements) if replacements else u

    def config(self) -> dict:
        return {**super().config(), "edit_probs": dict(self.edit_probs)}
