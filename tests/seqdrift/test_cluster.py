"""SeqDrift spectral clustering: the scalable (implicit X Xᵀ) path against independent dense
computations, planted clusters, isolated rows, guard rails and the SNIPS acceptance check
(core paper, appendix A)."""

from __future__ import annotations

import random
import time
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import laplacian
from sklearn.cluster import k_means
from sklearn.manifold import spectral_embedding as sklearn_spectral_embedding
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import cosine_similarity

from robustnlu.data.readers import load_corpus
from robustnlu.paths import shipped_config
from robustnlu.data.utterance import Utterance
from robustnlu.errors import ConfigError
from robustnlu.seqdrift.cluster import spectral_clusters, spectral_embedding
from robustnlu.seqdrift.kmeans import stable_kmeans
from robustnlu.seqdrift.features import build_features

REPO = Path(__file__).resolve().parents[2]


@cache
def corpus(name: str) -> tuple[Utterance, ...]:
    return tuple(load_corpus(shipped_config("dataset", name)).all())


def slot_context(utterances: list[Utterance] | tuple[Utterance, ...]) -> sp.csr_matrix:
    return build_features(list(utterances), "slot_context", 2, 6, 10_000).matrix


def reference(X: sp.csr_matrix | np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Independent dense computation: explicit cosine affinity, rows with off-diagonal affinity,
    scipy's normalised Laplacian and a full ``np.linalg.eigh``.

    Returns (kept, the k+1 smallest eigenvalues of L, the k-column embedding eigvec / sqrt(d)).
    """
    A = cosine_similarity(X)
    np.fill_diagonal(A, 0.0)
    kept = A.sum(axis=1) > 0
    L, dd = laplacian(A[np.ix_(kept, kept)], normed=True, return_diag=True)
    values, vectors = np.linalg.eigh(L)
    return kept, values[: k + 1], vectors[:, :k] / dd[:, None]


def assert_same_subspace(E1: np.ndarray, E2: np.ndarray) -> None:
    """All principal angles between the column spaces are ~0 (robust to degenerate blocks)."""
    Q1, _ = np.linalg.qr(E1)
    Q2, _ = np.linalg.qr(E2)
    cosines = np.linalg.svd(Q1.T @ Q2, compute_uv=False)
    assert cosines.min() >= 1 - 1e-6, cosines.min()


def assert_matches_reference(X: sp.csr_matrix | np.ndarray, k: int) -> None:
    kept, values, embedding = reference(X, k)
    assert values[k] - values[k - 1] > 1e-8, "test data must have a unique k-subspace"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a non-unique subspace would warn
        emb = spectral_embedding(X, k, "scalable", seed=3)
    np.testing.assert_array_equal(emb.kept, kept)
    assert emb.embedding.shape == (kept.sum(), k)
    np.testing.assert_allclose(emb.eigenvalues, values[:k], rtol=0, atol=1e-6)
    assert_same_subspace(emb.embedding, embedding)
    # scikit-learn's sign convention: every column's largest-magnitude entry is positive
    top = np.abs(emb.embedding).argmax(axis=0)
    assert (emb.embedding[top, np.arange(k)] > 0).all()


def sparse_rows(n_rows: int, n_cols: int, density: float, rng: np.random.Generator
                ) -> sp.csr_matrix:
    """Random sparse non-negative rows, each with at least one entry (column ``row % n_cols``)."""
    X = sp.random(n_rows, n_cols, density=density, random_state=rng, format="csr")
    floor = sp.csr_matrix((rng.uniform(0.1, 1, n_rows), (np.arange(n_rows),
                                                          np.arange(n_rows) % n_cols)))
    return (X + floor).tocsr()


def random_features(seed: int) -> sp.csr_matrix:
    """300 x 52 sparse non-negative: rows 0-4 empty, rows 5-6 only with private columns (their
    own column 50 or 51), rows 7-299 random over the 50 shared columns."""
    rng = np.random.default_rng(seed)
    private = sp.csr_matrix(([1.0, 2.0], ([0, 1], [50, 51])), shape=(2, 52))
    shared = sp.hstack([sparse_rows(293, 50, 0.08, rng), sp.csr_matrix((293, 2))])
    return sp.vstack([sp.csr_matrix((5, 52)), private, shared]).tocsr()


def test_random_sparse_embedding_matches_dense_eigh() -> None:
    X = random_features(0)
    kept, _, _ = reference(X, 10)
    assert not kept[:7].any() and kept[7:].all()
    for k in (1, 10, 40):
        assert_matches_reference(X, k)


def test_dense_mode_matches_the_reference_too() -> None:
    X = random_features(1)
    kept, values, embedding = reference(X, 12)
    emb = spectral_embedding(X, 12, "dense", seed=0)
    np.testing.assert_array_equal(emb.kept, kept)
    np.testing.assert_allclose(emb.eigenvalues, values[:12], rtol=0, atol=1e-6)
    assert_same_subspace(emb.embedding, embedding)


def test_snips_sample_embedding_matches_dense_eigh() -> None:
    sample = random.Random(0).sample(corpus("snips"), 1_500)
    assert_matches_reference(slot_context(sample), 50)


def test_disconnected_components_and_isolated_rows() -> None:
    """Three components give eigenvalue 0 of L three times; only the subspace is defined."""
    rng = np.random.default_rng(4)
    blocks = [sparse_rows(40, 15, 0.3, rng) for _ in range(3)]
    X = sp.vstack([sp.block_diag(blocks), sp.csr_matrix((2, 45))]).tocsr()
    kept, values, embedding = reference(X, 8)
    assert kept.sum() == 120 and np.abs(values[:3]).max() < 1e-12
    emb = spectral_embedding(X, 8, "scalable", seed=0)
    np.testing.assert_allclose(emb.eigenvalues, values[:8], rtol=0, atol=1e-6)
    assert_same_subspace(emb.embedding, embedding)
    labels = spectral_clusters(X, 3, seed=0)
    assert labels[-2:].tolist() == [-1, -1]
    assert adjusted_rand_score(np.repeat([0, 1, 2], 40), labels[:120]) == 1.0
    # two clusters for three components: eigenvalue 2 and 3 coincide
    with pytest.warns(UserWarning, match="not unique"):
        spectral_embedding(X, 2, "scalable")


@pytest.mark.slow
def test_atis_embedding_matches_scikit_learn() -> None:
    """All 5,871 ATIS utterances, slot context n 2..6, top 10,000 (17 components)."""
    X = slot_context(corpus("atis"))
    k = 100
    emb = spectral_embedding(X, k, "scalable", seed=0)
    A = cosine_similarity(X[emb.kept])
    ref = sklearn_spectral_embedding(A, n_components=k + 1, random_state=0, drop_first=False)
    np.fill_diagonal(A, 0.0)
    assert (A.sum(axis=1) > 0).all() and (~emb.kept).sum() == 49
    # eigenvalues of L from scikit-learn's eigenvectors: 1 - u'A'u / u'Du for u = x / sqrt(d)
    mu = np.einsum("ij,ij->j", ref, A @ ref) / np.einsum("ij,i,ij->j", ref, A.sum(axis=1), ref)
    assert mu[k - 1] - mu[k] > 1e-8
    np.testing.assert_allclose(emb.eigenvalues, 1 - mu[:k], rtol=0, atol=1e-6)
    assert_same_subspace(emb.embedding, ref[:, :k])


def planted(seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """5 groups of 60 rows; each group draws 3-6 of its own 20 columns (weights 4..36), and
    every row also has 1-2 of 10 shared noise columns (weight 1)."""
    rng = np.random.default_rng(seed)
    rows, cols, vals, truth = [], [], [], []
    for r in range(300):
        g = r // 60
        truth.append(g)
        own = rng.choice(20, size=rng.integers(3, 7), replace=False) + 20 * g
        noise = rng.choice(10, size=rng.integers(1, 3), replace=False) + 100
        for c in own:
            rows.append(r), cols.append(c), vals.append(float(rng.integers(2, 7)) ** 2)
        for c in noise:
            rows.append(r), cols.append(c), vals.append(1.0)
    return sp.csr_matrix((vals, (rows, cols)), shape=(300, 110)), np.array(truth)


@pytest.mark.parametrize("affinity", ["scalable", "dense"])
def test_planted_clusters_are_recovered(affinity: str) -> None:
    X, truth = planted(0)
    labels = spectral_clusters(X, 5, seed=0, affinity=affinity)
    assert adjusted_rand_score(truth, labels) >= 0.95


def test_same_seed_same_labels_in_both_modes() -> None:
    """The random state is consumed as SpectralClustering does (ARPACK start vector, then
    k-means): the scalable path's labels are `stable_kmeans` of the dense embedding with that
    state, label for label, and the same partition as scikit-learn's SpectralClustering."""
    X, _ = planted(1)
    scalable = spectral_clusters(X, 8, seed=7)
    assert adjusted_rand_score(scalable, spectral_clusters(X, 8, 7, "dense")) == 1.0
    dense_embedding = spectral_embedding(X, 8, "dense", seed=7).embedding
    rng = np.random.RandomState(7)
    rng.uniform(-1, 1, dense_embedding.shape[0])
    np.testing.assert_array_equal(scalable, stable_kmeans(dense_embedding, 8, rng))
    assert adjusted_rand_score(scalable, spectral_clusters(X, 8, seed=8)) < 1  # the seed matters


def kmeans_as_sklearn(embedding: np.ndarray, k: int, seed: int) -> np.ndarray:
    """SpectralClustering's label step: RandomState(seed) after drawing ARPACK's start vector."""
    rng = np.random.RandomState(seed)
    rng.uniform(-1, 1, embedding.shape[0])
    return k_means(embedding, k, random_state=rng, n_init=10)[1]


def test_guard_rails() -> None:
    rng = np.random.default_rng(2)
    X = sp.vstack([sp.csr_matrix((1, 8)), sparse_rows(12, 8, 0.3, rng)]).tocsr()
    with pytest.raises(ValueError, match="only 12 of 13 rows"):
        spectral_clusters(X, 13, seed=0)
    with pytest.raises(ValueError, match="only 12 of 13 rows"):
        spectral_clusters(X, 13, seed=0, affinity="dense")
    with pytest.raises(ConfigError, match="affinity"):
        spectral_clusters(X, 3, seed=0, affinity="cosine")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="affinity"):
        spectral_embedding(X, 3, affinity="sparse")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        spectral_clusters(-X, 3, seed=0)
    assert spectral_embedding(X, 12).embedding.shape == (12, 12)  # K = connected rows is fine
    labels = spectral_clusters(X, 3, seed=0)
    assert labels[0] == -1 and set(labels[1:]) == {0, 1, 2}


@pytest.mark.slow
def test_snips_scalable_labels_agree_with_dense_as_well_as_dense_seeds_agree() -> None:
    """Acceptance: SNIPS slot context (14,484 utterances; n 2..6; top 10,000; K = 100).

    ARI(scalable seed a, dense seed a) must be at least ARI(dense seed a, dense seed b) - 0.05,
    where the two dense runs share the embedding and differ only in the k-means seed. The dense
    embedding is computed once (about 4 minutes and 6.4 GB)."""
    X = slot_context(corpus("snips"))
    k, a, b = 100, 0, 1
    start = time.perf_counter()
    scalable = spectral_clusters(X, k, seed=a)
    middle = time.perf_counter()
    dense = spectral_embedding(X, k, "dense", seed=a)
    end = time.perf_counter()
    kept = dense.kept
    dense_a = kmeans_as_sklearn(dense.embedding, k, a)  # = SpectralClustering(random_state=a)
    dense_b = kmeans_as_sklearn(dense.embedding, k, b)
    across = adjusted_rand_score(scalable[kept], dense_a)
    seeds = adjusted_rand_score(dense_a, dense_b)
    print(f"ARI scalable/dense {across:.4f}, dense seed {a}/{b} {seeds:.4f}; scalable "
          f"clustering {middle - start:.0f} s, dense embedding {end - middle:.0f} s")
    assert across >= seeds - 0.05
