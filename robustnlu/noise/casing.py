"""Casing noise (Krone et al. 2021, paper 002, Table 1 and section 3 "Casing").

Training augmentation in the paper injects all-caps into 50% of the training tokens
(``Casing(rate=0.5, unit="token", style="upper")``, the chosen rate of the grid {50%, 100%},
App. A.2); its casing test set upper-cases every test utterance
(``Casing(rate=1.0, unit="utterance", style="upper", target_tokens="all")``). ``lower`` and
``title`` are ours.

Casing noise only matters for a cased tokenizer: the paper's cased BERT splits ``WOULD`` into
character pieces (section 6.2), an uncased one (the repo's embedded all-MiniLM-L6-v2) lower-cases
its input, so the noise is a no-op there. `tokenizer_ignores_case` detects that case, so a caller
can warn.
"""

from __future__ import annotations

import random
from typing import Any

from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError
from robustnlu.noise.base import NoiseTransform, is_target, replace_each

UNITS = ("token", "utterance")
STYLES = ("upper", "lower", "title")


def restyle(token: str, style: str) -> str:
    """``token`` in ``style``: ``upper`` / ``lower`` are `str.upper` / `str.lower`; ``title`` is
    the first character upper-cased and the rest lower-cased (`str.capitalize`: ``st.`` → ``St.``,
    ``o'clock`` → ``O'clock``)."""
    if style == "upper":
        return token.upper()
    if style == "lower":
        return token.lower()
    return token.capitalize()


class Casing(NoiseTransform):
    """Re-case tokens (1→1, tags kept).

    ``unit="token"``: each target token independently with probability ``rate``;
    ``unit="utterance"``: with probability ``rate`` (one draw per utterance) every target token of
    the utterance. ``target_tokens`` as in `robustnlu.noise.base.TARGET_TOKENS`.
    """

    name = "casing"

    def __init__(self, rate: float = 0.5, unit: str = "token", style: str = "upper",
                 target_tokens: str = "all", seed: int = 0):
        super().__init__(rate=rate, target_tokens=target_tokens, seed=seed)
        if unit not in UNITS:
            raise ConfigError(f"noise.unit must be one of {UNITS}, got {unit!r}")
        if style not in STYLES:
            raise ConfigError(f"noise.style must be one of {STYLES}, got {style!r}")
        self.unit = unit
        self.style = style

    def apply(self, u: Utterance, rng: random.Random) -> Utterance:
        if self.unit == "token":
            positions = self.targets(u, rng)
        elif rng.random() < self.rate:
            positions = [i for i, tag in enumerate(u.tags) if is_target(tag, self.target_tokens)]
        else:
            positions = []
        replacements = {}
        for i in positions:
            new = restyle(u.tokens[i], self.style)
            if new != u.tokens[i]:
                replacements[i] = [new]
        return replace_each(u, replacements) if replacements else u


PROBE_TEXTS = (
    "book a flight from san jose to new york",
    "play some music by the beatles",
    "would you remind me about the meeting tomorrow",
    "what is the weather like in paris",
)
"""Texts `tokenizer_ignores_case` encodes lower- and upper-cased."""


def tokenizer_ignores_case(tokenizer: Any) -> bool:
    """True when the Hugging Face ``tokenizer`` maps every probe text upper-cased to the same
    ids as lower-cased (an uncased tokenizer), i.e. casing noise cannot change the model's input.
    Several sentences are probed so one word that happens to survive upper-casing does not decide."""
    for text in PROBE_TEXTS:
        lower = tokenizer(text, add_special_tokens=False)["input_ids"]
        upper = tokenizer(text.upper(), add_special_tokens=False)["input_ids"]
        if list(lower) != list(upper):
            return False
    return True
