"""The interface every noise transform implements, and the slot-label alignment rules they share.

A transform maps an `Utterance` to a noised `Utterance` whose tags stay aligned with its tokens
(Krone et al. 2021, paper 002, section 3; the alignment rules are ours, the paper states none
for synthetic data, see digest A.5):

1. **1→1** (casing, misspelling, one-word synonym / abbreviation / inflection): the token keeps
   its tag.
2. **1→n** (a multi-word synonym, ``book`` → ``start booking``): ``O`` → all ``O``;
   ``B-X`` → ``B-X I-X …``; ``I-X`` → all ``I-X``.
3. **n→1 / n→m** (``as soon as possible`` → ``asap``): only over tokens that are all ``O`` or
   all inside one span; the new tokens start with ``B-X`` if the span started there.
4. **n→0** (a dropped token): the tags are removed; when a span's first token goes, the span's
   next token becomes its ``B-X`` (even right after another ``X`` span), and `repair_bio` turns
   any other orphaned ``I-X`` into ``B-X``.

`replace_tokens` applies rules 1-4; `NoiseTransform.__call__` checks every output (same count of
tokens and tags, valid BIO) and raises `NoiseError` naming the transform and the uid otherwise.

Randomness is per utterance: `utterance_rng` seeds a `random.Random` from (seed, transform
name, uid), so a transform's output for an utterance does not depend on which other
utterances are noised or in what order, and a fixed seed gives identical output.
"""

from __future__ import annotations

import difflib
import hashlib
import random
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import ClassVar

from robustnlu.data.bio import bio_problem, slot_spans, tag_type
from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError, RobustNLUError

TARGET_TOKENS = ("carrier", "all", "slots")
"""Which tokens a token-level transform may change: ``carrier`` = tokens tagged ``O`` (the
paper's human test sets change only the carrier phrase), ``slots`` = tokens inside a slot value,
``all`` = every token."""


class NoiseError(RobustNLUError):
    """A transform produced misaligned tags (a bug in the transform, reported with the uid)."""


def utterance_rng(seed: int, name: str, uid: str) -> random.Random:
    """A generator seeded by (seed, transform name, uid) only (SHA-256, stable across Python
    versions and processes)."""
    digest = hashlib.sha256(f"{seed}\x1f{name}\x1f{uid}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def is_target(tag: str, target_tokens: str) -> bool:
    """Whether a token with ``tag`` may be changed under ``target_tokens``."""
    if target_tokens == "all":
        return True
    return (tag == "O") == (target_tokens == "carrier")


def repair_bio(tags: Sequence[str]) -> tuple[str, ...]:
    """Turn every ``I-X`` that does not follow ``B-X`` / ``I-X`` into ``B-X``. It sees the tags
    only, not what was deleted: an ``I-X`` right after another ``X`` span whose ``B-X`` went
    continues that span here, so `replace_tokens` starts such a span itself first (rule 4)."""
    out: list[str] = []
    for tag in tags:
        if tag.startswith("I-") and (not out or tag_type(out[-1]) != tag[2:]):
            tag = "B-" + tag[2:]
        out.append(tag)
    return tuple(out)


def replace_tokens(u: Utterance, start: int, end: int, new_tokens: Sequence[str]) -> Utterance:
    """``u`` with ``tokens[start:end]`` replaced by ``new_tokens``, tags by rules 1-4 above.

    Raises ValueError when the replaced tokens are neither all ``O`` nor inside one span, or
    when the result would have no tokens.
    """
    if not 0 <= start < end <= len(u.tokens):
        raise ValueError(f"{u.uid}: bad token range [{start}, {end}) of {len(u.tokens)} tokens")
    old = u.tags[start:end]
    types = {tag_type(t) for t in old}
    if len(types) != 1 or any(t.startswith("B-") for t in old[1:]):
        raise ValueError(f"{u.uid}: tokens {start}..{end - 1} cross a slot boundary ({' '.join(old)})")
    (typ,) = types
    if typ is None or not new_tokens:
        new_tags = ["O"] * len(new_tokens)
    else:
        new_tags = [old[0]] + [f"I-{typ}"] * (len(new_tokens) - 1)
    tokens = (*u.tokens[:start], *new_tokens, *u.tokens[end:])
    if not tokens:
        raise ValueError(f"{u.uid}: the replacement leaves no tokens")
    after = list(u.tags[end:])
    if not new_tags and old[0].startswith("B-") and after and after[0] == f"I-{typ}":
        # the span's start was dropped: its rest starts it (repair_bio alone would join it to a span
        # of the same type right before it, B-X I-X [B-X] I-X -> one span)
        after[0] = f"B-{typ}"
    tags = repair_bio((*u.tags[:start], *new_tags, *after))
    return replace(u, tokens=tokens, tags=tags)


def replace_each(u: Utterance, replacements: dict[int, Sequence[str]]) -> Utterance:
    """``u`` with token ``i`` replaced by ``replacements[i]`` (a token list; rules 1, 2, 4) for
    every ``i``, applied right to left so the positions stay valid."""
    for i in sorted(replacements, reverse=True):
        u = replace_tokens(u, i, i + 1, replacements[i])
    return u


class NoiseTransform(ABC):
    """One noise type. Subclasses set ``name`` and implement `apply`; corpus-driven transforms
    (paraphrase, the fluency-ranked synonym / morphology) also implement `fit`.

    ``rate`` is the probability that a unit (a token, or an utterance for utterance-level
    transforms) is changed; 0 is the identity. ``target_tokens`` is one of `TARGET_TOKENS`.
    """

    name: ClassVar[str]

    def __init__(self, rate: float, target_tokens: str = "all", seed: int = 0):
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ConfigError(f"noise.rate must be a number in [0, 1], got {rate!r}")
        if target_tokens not in TARGET_TOKENS:
            raise ConfigError(f"noise.target_tokens must be one of {TARGET_TOKENS}, got {target_tokens!r}")
        self.rate = float(rate)
        self.target_tokens = target_tokens
        self.seed = int(seed)

    def fit(self, train: Sequence[Utterance]) -> NoiseTransform:
        """Learn what the transform needs from the (clean) training split; default: nothing."""
        return self

    @abstractmethod
    def apply(self, u: Utterance, rng: random.Random) -> Utterance:
        """The noised utterance (``u`` itself when nothing changes)."""

    def targets(self, u: Utterance, rng: random.Random) -> list[int]:
        """Positions of the tokens to change: each token allowed by ``target_tokens`` with
        probability ``rate`` (one draw per allowed token, in order)."""
        return [i for i, tag in enumerate(u.tags) if is_target(tag, self.target_tokens) and rng.random() < self.rate]

    def __call__(self, u: Utterance) -> Utterance:
        if self.rate == 0:
            return u
        out = self.apply(u, utterance_rng(self.seed, self.name, u.uid))
        problem = bio_problem(out.tags) if len(out.tokens) == len(out.tags) else "token/tag count mismatch"
        if problem or not out.tokens or any(not t or t.split() != [t] for t in out.tokens):
            raise NoiseError(f"noise {self.name}: utterance {u.uid}: misaligned output ({problem or 'bad token'})")
        return out

    def config(self) -> dict:
        """The transform's parameters, for results.json."""
        return {"name": self.name, **{k: v for k, v in vars(self).items() if isinstance(v, int | float | str | bool)}}


@dataclass
class NoiseStats:
    """How much a transform changed a set of utterances (digest C.1: the paper's missing
    Table 2). A token counts as changed when difflib's alignment of the token lists replaces or
    deletes it; ``slot_tokens_changed`` counts the tokens of slot values (type, words) that the
    noised utterance no longer has, so a value that only moved (paraphrase) is unchanged."""

    utterances: int = 0
    utterances_changed: int = 0
    tokens: int = 0
    tokens_changed: int = 0
    slot_tokens_changed: int = 0

    def add(self, before: Utterance, after: Utterance) -> None:
        self.utterances += 1
        self.tokens += len(before.tokens)
        if before.tokens == after.tokens:
            return
        self.utterances_changed += 1
        matcher = difflib.SequenceMatcher(a=before.tokens, b=after.tokens, autojunk=False)
        self.tokens_changed += sum(i2 - i1 for op, i1, i2, _, _ in matcher.get_opcodes() if op in ("replace", "delete"))
        lost = slot_values(before) - slot_values(after)
        self.slot_tokens_changed += sum(len(value) * k for (_, value), k in lost.items())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["token_change_rate"] = self.tokens_changed / max(self.tokens, 1)
        d["utterance_change_rate"] = self.utterances_changed / max(self.utterances, 1)
        return d


def slot_values(u: Utterance) -> Counter[tuple[str, tuple[str, ...]]]:
    """The multiset of ``u``'s slot values as (type, words)."""
    return Counter((typ, u.tokens[s:e]) for typ, s, e in slot_spans(u.tags))


def noise_all(transform: NoiseTransform, utterances: Iterable[Utterance]) -> tuple[list[Utterance], NoiseStats]:
    """Apply ``transform`` to every utterance; the noised list (same order, same uids) and
    its `NoiseStats`."""
    stats = NoiseStats()
    out = []
    for u in utterances:
        noised = transform(u)
        stats.add(u, noised)
        out.append(noised)
    return out, stats
