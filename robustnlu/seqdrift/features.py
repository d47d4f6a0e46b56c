"""SeqDrift n-gram feature vectors for clustering (core paper, section 3.2 and appendix A).

Two feature kinds, one per drift type:

- ``slot_value`` ("what users request", paper Table 1): only slot-value tokens count, and the
  n-grams are taken *within* each slot-value span (a span is a ``B-x`` tag followed by its
  ``I-x`` tags), so no n-gram crosses a span boundary. For "add song by too poetic to my
  piano-ballads playlist" (``O B-SONG O B-ARTIST I-ARTIST O O B-PLAYLIST O``) the values are
  "song", "too poetic" and "piano-ballads"; n = 1..6 gives (song), (too), (poetic),
  (too, poetic), (piano-ballads) and n = 2..6 gives only (too, poetic).
- ``slot_context`` ("how users express an intent or slot", paper Table 2): every slot span is
  replaced by one symbol ``B-<TYPE>`` (its ``I-`` tokens collapsed, the type's case kept as in
  the data) and the other tokens are kept; the features are the n-grams of that sequence that
  contain at least one slot symbol. The example becomes
  ``add B-SONG by B-ARTIST to my B-PLAYLIST playlist``; "add B-SONG by B-ARTIST" and
  "to my B-PLAYLIST" are features, "to my" is not.

The n-gram sizes are ``n_min..n_max``, both configurable. The paper is not consistent here:
section 3.2 lists the 1-gram "song" as a slot-value feature, while its Table 7 uses n = 2..6
for SNIPS. With ``n_min = 2`` an utterance whose slot values are all single tokens has no
slot-value feature at all (`NGramFeatures.empty_rows`).

Ambiguities resolved here:

- Spans follow the conlleval convention (`robustnlu.data.bio.slot_spans`): an ``I-x`` that does
  not continue a span of type ``x`` (invalid BIO, which the shipped readers reject anyway) starts
  a new span.
- A slot symbol is identified by position, not by string: a token that happens to read
  ``B-SONG`` is an ordinary token for the "contains a slot label" test.
- Frequency (for the top-n cut) is *document frequency*: the number of utterances that contain
  the n-gram, each utterance counted once. Ties are broken by the n-gram tuple (ascending), so
  the vocabulary does not depend on the utterance order.
- The vector is a weighted *indicator* (appendix A): the column of an n-gram an utterance
  contains is n², however often it occurs in the utterance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

import numpy as np
import scipy.sparse as sp

from robustnlu.data.bio import slot_spans
from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError

NGram = tuple[str, ...]
FeatureKind = Literal["slot_value", "slot_context"]


def _check_sizes(n_min: int, n_max: int) -> None:
    if not 1 <= n_min <= n_max:
        raise ConfigError(f"n-gram sizes: need 1 <= n_min <= n_max, got {n_min}..{n_max}")


def _ngrams(seq: Sequence[str], n_min: int, n_max: int) -> Iterator[tuple[int, NGram]]:
    """``(start, n-gram)`` for every n-gram of ``seq`` with n in ``n_min..n_max``."""
    for n in range(n_min, min(n_max, len(seq)) + 1):
        for i in range(len(seq) - n + 1):
            yield i, tuple(seq[i : i + n])


def slot_value_ngrams(u: Utterance, n_min: int, n_max: int) -> set[NGram]:
    """The slot-value n-grams of ``u``, taken within each span (paper Table 1)."""
    _check_sizes(n_min, n_max)
    return {
        gram
        for _, start, end in slot_spans(u.tags)
        for _, gram in _ngrams(u.tokens[start:end], n_min, n_max)
    }


def slot_context_ngrams(u: Utterance, n_min: int, n_max: int) -> set[NGram]:
    """The n-grams with at least one ``B-<TYPE>`` symbol of the span-collapsed ``u`` (Table 2)."""
    _check_sizes(n_min, n_max)
    seq: list[str] = []
    is_label: list[bool] = []
    last = 0
    for slot, start, end in slot_spans(u.tags):
        seq.extend(u.tokens[last:start])
        seq.append(f"B-{slot}")
        is_label.extend([False] * (start - last) + [True])
        last = end
    seq.extend(u.tokens[last:])
    is_label.extend([False] * (len(u.tokens) - last))
    # labels[i] = slot symbols in seq[:i]; seq[i:i+n] holds one iff labels[i+n] > labels[i]
    labels = list(accumulate(is_label, initial=0))
    return {gram for i, gram in _ngrams(seq, n_min, n_max) if labels[i + len(gram)] > labels[i]}


EXTRACTORS: dict[str, Callable[[Utterance, int, int], set[NGram]]] = {
    "slot_value": slot_value_ngrams,
    "slot_context": slot_context_ngrams,
}


@dataclass(frozen=True)
class NGramFeatures:
    """Weighted indicator vectors over the top-n n-grams (paper appendix A).

    ``matrix[i, k] = len(vocabulary[k]) ** 2`` if utterance ``i`` contains n-gram ``k``, else 0;
    rows are in input order, columns by descending document frequency (ties by n-gram).
    ``empty_rows[i]`` is True when utterance ``i`` has no n-gram in the vocabulary.
    """

    matrix: sp.csr_matrix
    vocabulary: list[NGram]
    kind: FeatureKind
    empty_rows: np.ndarray


def build_features(
    utterances: Sequence[Utterance],
    kind: FeatureKind,
    n_min: int,
    n_max: int,
    top_n: int,
) -> NGramFeatures:
    """Featurise ``utterances`` over the ``top_n`` n-grams of highest document frequency."""
    if kind not in EXTRACTORS:
        raise ConfigError(f"seqdrift feature kind: unknown {kind!r}; one of {sorted(EXTRACTORS)}")
    if top_n < 1:
        raise ConfigError(f"seqdrift top_n: must be >= 1, got {top_n}")
    extract = EXTRACTORS[kind]
    ids: dict[NGram, int] = {}  # every n-gram seen -> a provisional id
    row_ids: list[int] = []
    row_len = np.zeros(len(utterances), dtype=np.int64)
    for r, u in enumerate(utterances):
        grams = extract(u, n_min, n_max)
        row_ids.extend(ids.setdefault(g, len(ids)) for g in grams)
        row_len[r] = len(grams)
    grams_seen = list(ids)
    flat = np.fromiter(row_ids, dtype=np.int64, count=len(row_ids))
    doc_freq = np.bincount(flat, minlength=len(grams_seen))  # sets: one count per utterance
    # only n-grams at least as frequent as the top_n-th can make the cut: sort just those
    cut = -np.partition(-doc_freq, top_n - 1)[top_n - 1] if top_n < len(doc_freq) else 0
    candidates = np.flatnonzero(doc_freq >= cut).tolist()
    freq = doc_freq.tolist()
    order = sorted(candidates, key=lambda i: (-freq[i], grams_seen[i]))[:top_n]
    vocabulary = [grams_seen[i] for i in order]
    column = np.full(len(grams_seen), -1, dtype=np.int64)
    column[order] = np.arange(len(order))
    cols = column[flat]
    rows = np.repeat(np.arange(len(utterances)), row_len)
    keep = cols >= 0
    rows, cols = rows[keep], cols[keep]
    weight = np.array([len(g) ** 2 for g in vocabulary], dtype=np.float64)
    matrix = sp.csr_matrix(
        (weight[cols], (rows, cols)), shape=(len(utterances), len(vocabulary)), dtype=np.float64
    )
    matrix.sort_indices()
    empty_rows = np.diff(matrix.indptr) == 0
    return NGramFeatures(matrix, vocabulary, kind, empty_rows)
