"""The tie rules of SeqDrift's k-means (robustnlu/seqdrift/kmeans.py) on configurations small
enough to follow by hand: among tied k-means++ candidates the lowest row index wins, whatever
order they were drawn in; a later initialisation replaces the best one only if its inertia is
lower by more than the tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from robustnlu.seqdrift.kmeans import RTOL, kmeans_plusplus, lloyd, stable_kmeans

SEEDS = range(100)


def test_kmeans_plusplus_takes_the_lowest_row_among_near_tied_candidates():
    """Three points, k = 2 (2 candidates per centre). With the first centre at row 0, a candidate
    is row 1 when its uniform draw u is <= 0.5 (its squared distance 1 of the total 2 + 2e-13),
    else row 2. Row 2 as the second centre leaves a potential of 1 (row 1 to it: 1), row 1 one of
    (1 + 1e-13)^2 (row 2 to row 0): tied within 1e-9, so row 1 must win whenever it was drawn,
    first or second, although row 2's potential is the smaller."""
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0 + 1e-13]])
    x_sq = np.einsum("ij,ij->i", X, X)
    first_drawn_is_row_2, both_drawn = 0, 0
    for seed in SEEDS:
        draws = np.random.RandomState(seed)  # the draws kmeans_plusplus makes: first centre, then 2 candidates
        first, u = draws.choice(3), draws.uniform(size=2)
        if first != 0:
            continue
        rows = [1 if v <= 0.5 else 2 for v in u]
        assert kmeans_plusplus(X, x_sq, 2, np.random.RandomState(seed)).tolist() == [0, min(rows)], seed
        first_drawn_is_row_2 += rows == [2, 1]
        both_drawn += set(rows) == {1, 2}
    assert (first_drawn_is_row_2, both_drawn) == (5, 7)  # seeds on which another rule takes another centre


SQUARE = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


@pytest.mark.parametrize("lift", [0.0, 1e-11], ids=["exact ties", "near ties"])
def test_a_later_initialisation_replaces_the_best_only_when_better_beyond_the_tolerance(lift):
    """Four corners of a unit square, k = 2: both pairings of adjacent corners have inertia
    4 x 0.25 = 1 (one of them 1 + 1e-11 when a corner is lifted by 1e-11: equal within 1e-9),
    every other partition more (a corner alone: 4/3). So whenever the first of the 10
    initialisations finds a pairing, the result is that initialisation's labels, whatever the
    later ones find."""
    X = SQUARE + np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, lift]])
    kept = 0
    for seed in SEEDS:
        first = stable_kmeans(X, 2, np.random.RandomState(seed), n_init=1)
        inertia = sum(((X[first == c] - X[first == c].mean(0)) ** 2).sum() for c in (0, 1))
        if abs(inertia - 1.0) > 1e-9:
            continue
        assert stable_kmeans(X, 2, np.random.RandomState(seed), n_init=10).tolist() == first.tolist(), seed
        kept += later_run_ties_with_other_labels(X, seed, first)
    assert kept >= 5  # seeds where replacing on a tie would change the result


def later_run_ties_with_other_labels(X: np.ndarray, seed: int, first: np.ndarray) -> bool:
    """Whether one of the 9 later initialisations of ``seed`` ends in other labels with an
    inertia within `RTOL` of the first's (so that it would win if ties replaced the best)."""
    rng = np.random.RandomState(seed)
    Xc = X - X.mean(axis=0)
    x_sq = np.einsum("ij,ij->i", Xc, Xc)
    runs = [lloyd(Xc, x_sq, Xc[kmeans_plusplus(Xc, x_sq, 2, rng)]) for _ in range(10)]
    best = runs[0][1]
    return any(abs(inertia - best) <= RTOL * best and not np.array_equal(labels, first) for labels, inertia in runs[1:])
