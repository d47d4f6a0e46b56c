"""k-means that does not follow the BLAS kernel: SeqDrift's clustering step (core paper, appendix A).

The paper clusters the spectral embedding with scikit-learn's k-means (k-means++ seeding,
Lloyd iterations, the best of ``n_init`` runs by inertia). Every distance there comes from a
BLAS product, whose last bits depend on the kernel the machine picks (``OPENBLAS_CORETYPE``,
thread count, MKL or ARM builds). With K = 200 clusters the objective has many near-equal
optima, and k-means++ meets exact ties between candidate centres (potentials one ulp apart):
the kernel's rounding then decides which centre is taken, and a different centre leads to a
different local optimum. On SNIPS (slot context) two kernels gave clusterings at ARI 0.44 and
test splits sharing 41% of their utterances.

This implementation makes every discrete decision insensitive to such last-bit differences:

- ``tie_aware_argmin(values)``: values within a relative ``RTOL`` (1e-9) of the minimum count as tied, and
  the lowest index among them wins. Applied to k-means++'s choice among its local candidates
  (by potential; lowest row index), to each point's nearest centre (lowest centre index), to
  the relocation of an empty cluster (farthest point; lowest row index) and to the choice of
  the best of the ``n_init`` runs (a later run replaces the best only if its inertia is lower
  by more than ``RTOL``).
- Lloyd's iterations run until no label changes (``max_iter`` at most), not until the centre
  shift falls under a float tolerance; centres are means computed with sorted, BLAS-free sums.
- The randomness is numpy's ``RandomState(seed)`` (Mersenne Twister: the same on every
  machine), drawn as scikit-learn's k-means++ draws it: the first centre uniformly, then
  ``2 + int(log K)`` candidates per centre sampled proportionally to the squared distance.

What remains machine-dependent: a comparison whose two sides differ by almost exactly the
tolerance (probability of the order of the float noise over the tolerance, 1e-12 / 1e-9 per
near-tie), and the spectral embedding itself when eigenvalues nearly coincide (a rotation
inside the eigenspace: distances, and so this k-means, do not change beyond float noise).
README "One benchmark for everyone" gives the agreement measured across kernels.
"""

from __future__ import annotations

import numpy as np

RTOL = 1e-9  # relative tolerance under which two distances, potentials or inertias are tied
MAX_ITER = 300  # scikit-learn's default


def tie_aware_argmin(values: np.ndarray, scale: np.ndarray | float) -> np.ndarray:
    """Per row of ``values`` (n x m, or one row m): the lowest column index whose value is within
    ``RTOL * scale`` of the row's minimum (``scale``: per row, the magnitude of the terms)."""
    values = np.atleast_2d(values)
    threshold = values.min(axis=1) + RTOL * np.asarray(scale, dtype=np.float64).reshape(-1)
    return np.argmax(values <= threshold[:, None], axis=1)


def squared_distances(X: np.ndarray, x_sq: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``|x_i - c_j|²`` (n x m) and the magnitude of its terms per row (for `tied`)."""
    c_sq = np.einsum("ij,ij->i", C, C)
    d = x_sq[:, None] - 2.0 * (X @ C.T) + c_sq[None, :]
    np.maximum(d, 0.0, out=d)
    return d, x_sq + c_sq.max()


def kmeans_plusplus(X: np.ndarray, x_sq: np.ndarray, k: int, rng: np.random.RandomState) -> np.ndarray:
    """Greedy k-means++ seeding (Arthur and Vassilvitskii 2007, as in scikit-learn) with tie-aware
    choice among the local candidates; returns the row indices of the ``k`` initial centres."""
    n = X.shape[0]
    n_trials = 2 + int(np.log(k))
    chosen = [int(rng.choice(n))]
    closest, _ = squared_distances(X, x_sq, X[chosen])
    closest = closest[:, 0]
    for _ in range(1, k):
        potential = closest.sum()
        draws = rng.uniform(size=n_trials) * potential
        candidates = np.minimum(np.searchsorted(np.cumsum(closest), draws), n - 1)
        d, _ = squared_distances(X, x_sq, X[candidates])
        d = np.minimum(d, closest[:, None])
        potentials = d.sum(axis=0)
        # ties by potential go to the lowest row index, whatever the order they were drawn in
        tie = np.flatnonzero(potentials <= potentials.min() * (1 + RTOL))
        best = int(tie[np.argmin(candidates[tie])])
        chosen.append(int(candidates[best]))
        closest = d[:, best]
    return np.asarray(chosen)


def lloyd(X: np.ndarray, x_sq: np.ndarray, centres: np.ndarray, max_iter: int = MAX_ITER) -> tuple[np.ndarray, float]:
    """Lloyd's iterations from ``centres`` until no label changes; returns (labels, inertia)."""
    k = centres.shape[0]
    labels = None
    for _ in range(max_iter):
        d, scale = squared_distances(X, x_sq, centres)
        new = tie_aware_argmin(d, scale)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        centres = _means(X, labels, k, d)
    d, scale = squared_distances(X, x_sq, centres)
    labels = tie_aware_argmin(d, scale)
    return labels, float(np.sort(d[np.arange(len(labels)), labels]).sum())


def _means(X: np.ndarray, labels: np.ndarray, k: int, d: np.ndarray) -> np.ndarray:
    """Cluster means by sorted sums (no BLAS); an empty cluster takes the point farthest from its
    centre (lowest row index among ties), as scikit-learn relocates empty clusters."""
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=k)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sums = np.zeros((k, X.shape[1]))
    present = counts > 0
    sums[present] = np.add.reduceat(X[order], starts[present], axis=0)
    means = sums / np.maximum(counts, 1)[:, None]
    own = d[np.arange(len(labels)), labels]
    for c in np.flatnonzero(~present):
        row = int(np.argmax(own >= own.max() * (1 - RTOL)))  # the first of the farthest
        own[row] = -1.0  # each relocated centre takes another point
        means[c] = X[row]
    return means


def stable_kmeans(X: np.ndarray, k: int, rng: np.random.RandomState, n_init: int = 10, max_iter: int = MAX_ITER) -> np.ndarray:
    """Labels ``0..k-1`` of the rows of ``X``: the best of ``n_init`` k-means++ + Lloyd runs by
    inertia, every decision tie-aware (module docstring). ``rng`` is drawn from in sequence."""
    X = np.asarray(X, dtype=np.float64)
    X = X - X.mean(axis=0)  # as scikit-learn: distances from centred data lose fewer bits
    x_sq = np.einsum("ij,ij->i", X, X)
    best_labels, best_inertia = None, np.inf
    for _ in range(n_init):
        labels, inertia = lloyd(X, x_sq, X[kmeans_plusplus(X, x_sq, k, rng)], max_iter)
        if inertia < best_inertia * (1 - RTOL):
            best_labels, best_inertia = labels, inertia
    return best_labels


__all__ = ["RTOL", "kmeans_plusplus", "lloyd", "stable_kmeans", "tie_aware_argmin"]
