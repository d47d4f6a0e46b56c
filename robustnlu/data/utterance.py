"""The plain types every component exchanges: `Utterance`, `Corpus` and `LabelVocab`.

Nothing downstream of a reader re-reads raw files: readers turn each format into
`Utterance` objects, and everything else (SeqDrift, the data module, noise) works on those.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class Utterance:
    """One single-turn utterance with its intent and one BIO slot tag per token.

    ``uid`` is stable across runs and machines: it is derived from the dataset, the original
    file's split and the row's position in that file, never from a random draw.
    """

    uid: str
    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    intent: str
    domain: str | None = None
    #: ``file:line`` it was read from (set by `load_corpus`, for messages; not part of equality)
    source: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.tags):
            raise ValueError(f"{self.uid}: {len(self.tokens)} tokens but {len(self.tags)} tags")


@dataclass(frozen=True)
class LabelVocab:
    """Intent and slot-tag vocabularies, built from the training split only.

    Labels that appear only in valid/test are not in the vocabulary: the model cannot predict
    them, the loss ignores them (index -100) and the metrics, which compare label strings,
    score them as errors.
    """

    intents: tuple[str, ...]
    tags: tuple[str, ...]
    _intent_index: dict[str, int] = field(init=False, repr=False, compare=False)
    _tag_index: dict[str, int] = field(init=False, repr=False, compare=False)

    IGNORE = -100

    def __post_init__(self) -> None:
        object.__setattr__(self, "_intent_index", {x: i for i, x in enumerate(self.intents)})
        object.__setattr__(self, "_tag_index", {x: i for i, x in enumerate(self.tags)})

    @classmethod
    def from_utterances(cls, utterances: Iterable[Utterance]) -> LabelVocab:
        intents: set[str] = set()
        tags: set[str] = {"O"}
        for u in utterances:
            intents.add(u.intent)
            tags.update(u.tags)
        # "O" first, then B-/I- tags sorted: a deterministic order independent of file order.
        return cls(tuple(sorted(intents)), ("O", *sorted(tags - {"O"})))

    def intent_id(self, intent: str) -> int:
        return self._intent_index.get(intent, self.IGNORE)

    def tag_ids(self, tags: Sequence[str]) -> list[int]:
        return [self._tag_index.get(t, self.IGNORE) for t in tags]

    def to_dict(self) -> dict[str, list[str]]:
        return {"intents": list(self.intents), "tags": list(self.tags)}

    @classmethod
    def from_dict(cls, d: dict) -> LabelVocab:
        return cls(tuple(d["intents"]), tuple(d["tags"]))


@dataclass
class Corpus:
    """A dataset's three splits. ``name`` is the dataset config's name (e.g. ``snips``)."""

    name: str
    train: list[Utterance]
    valid: list[Utterance]
    test: list[Utterance]

    def split(self, name: str) -> list[Utterance]:
        if name not in SPLITS:
            raise KeyError(f"unknown split {name!r}; expected one of {SPLITS}")
        return getattr(self, name)

    def all(self) -> list[Utterance]:
        return [*self.train, *self.valid, *self.test]

    def vocab(self) -> LabelVocab:
        return LabelVocab.from_utterances(self.train)

    def files(self) -> set[Path]:
        """The files its utterances were read from (their ``source``, ``file:line``)."""
        return {Path(u.source.rsplit(":", 1)[0]) for u in self.all() if u.source}

    def intents(self) -> list[str]:
        """Every intent of every split (for metrics that must know unseen intents too)."""
        return sorted({u.intent for u in self.all()})
