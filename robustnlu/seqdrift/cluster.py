"""Spectral clustering of SeqDrift feature vectors on cosine affinity (core paper, appendix A).

The paper runs scikit-learn's ``SpectralClustering`` on the cosine-similarity affinity of the
n-gram vectors with K = 100 clusters (appendix A, Table 7). Two implementations with the same
semantics:

- ``affinity="dense"``, the paper's recipe: ``A = cosine_similarity(X)`` is materialised
  (n x n; 1.7 GB for SNIPS) and given to ``SpectralClustering(affinity="precomputed",
  assign_labels="kmeans", random_state=seed)``. For small data and for comparison; its
  scikit-learn k-means follows the machine's BLAS kernel (see below).
- ``affinity="scalable"`` (default) never forms A. With L2-normalised non-negative rows X,
  A = X Xᵀ. scikit-learn's normalised Laplacian (``scipy.sparse.csgraph.laplacian(normed=True)``)
  ignores A's diagonal, so the graph is A' = X Xᵀ − diag(‖xᵢ‖²) with degrees
  dᵢ = Σ_c x_ic (Σ_j x_jc − x_ic) (= X(Xᵀ1) − 1, computed without the cancellation), and
  L = I − D^-½ A' D^-½. scikit-learn takes the K eigenvectors of L's smallest eigenvalues
  (ARPACK, shift-invert); these are the K *largest* of M = D^-½ A' D^-½, found here with
  ``eigsh(which="LA")`` on a ``LinearOperator``: M v = D^-½ (X (Xᵀ D^-½ v) − ‖x‖² ⊙ D^-½ v).
  Then, as scikit-learn does: embedding = eigenvectors (ascending eigenvalue of L) / √d,
  deterministic sign flip (each column's largest-magnitude entry positive), and k-means with
  SpectralClustering's defaults (k-means++, n_init = 10) on the embedding rows — our
  `robustnlu.seqdrift.kmeans.stable_kmeans`, whose discrete choices are tie-aware so that the
  BLAS kernel of the machine does not decide them (scikit-learn's ``k_means`` gave clusterings
  at ARI 0.44 on SNIPS under two OpenBLAS kernels; README "One benchmark for everyone"). The
  random state is used as scikit-learn uses it: ``RandomState(seed)`` first draws the ARPACK
  start vector (n uniform draws on [−1, 1]), then seeds k-means. LOBPCG was measured and
  rejected: 107 s instead of 1.1 s on ATIS.

Isolated utterances. A row with no feature, or whose features no other row has, has degree 0:
``laplacian(normed=True)`` gives it an all-zero row and column (eigenvalue 0 of L, i.e. one
extra null-space vector each, which would swamp the K smallest), and scikit-learn's ARPACK path
then resets L's diagonal to 1 (``_set_diag``), so such a row ends up with an all-zero embedding
row and k-means lumps all of them (plus any connected row that happens to embed near the origin)
into one arbitrary cluster, while they also take part in the eigenproblem's size and start
vector. Here both modes drop them before the eigen-decomposition and clustering and label them
``-1`` ("no cluster"): downstream they can only be random test fill or training data.

Disconnected components. A graph with C connected components has eigenvalue 1 of M (0 of L)
with multiplicity C, and an eigenbasis of a repeated eigenvalue is defined only up to a
rotation; a single ARPACK start vector also finds repeated eigenvalues unreliably (on TOP,
slot context, plain ``eigsh`` found 16 of the 18 copies). The scalable path therefore computes
the components itself (rows linked through shared features), puts the known eigenvectors
√d restricted to each component first, and runs ``eigsh`` on M deflated by them (moved to
eigenvalue −2, below M's spectrum). k-means on the embedding rows depends only on distances,
which a rotation within an eigenspace does not change, so what must match scikit-learn is the
spanned subspace, not the columns. That subspace is unique only if eigenvalue K differs from
eigenvalue K + 1 of M; when they coincide a warning says so (labels then depend on the solver;
with more than K components the scalable path keeps the K largest ones).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import LinearOperator, eigsh
from sklearn.cluster import SpectralClustering
from sklearn.manifold import spectral_embedding as sklearn_spectral_embedding
from sklearn.metrics.pairwise import cosine_similarity
from sklearn.preprocessing import normalize

from robustnlu.errors import ConfigError
from robustnlu.seqdrift.config import AFFINITIES
from robustnlu.seqdrift.kmeans import stable_kmeans

Affinity = Literal["scalable", "dense"]
N_INIT = 10  # SpectralClustering's default number of k-means restarts
GAP_TOL = 1e-10  # eigenvalues K and K + 1 of M closer than this: the K-subspace is not unique


@dataclass(frozen=True)
class SpectralEmbedding:
    """The spectral embedding of the connected rows.

    ``eigenvalues``: of the normalised Laplacian L, ascending (scikit-learn's column order; the
    eigenvalues of M are ``1 - eigenvalues``). ``embedding``: ``kept.sum() x n_components``,
    row i is the i-th kept row of X. ``kept``: the rows that share a feature with another row.
    """

    eigenvalues: np.ndarray
    embedding: np.ndarray
    kept: np.ndarray


def connected_rows(X: sp.csr_matrix) -> np.ndarray:
    """Rows with a non-zero in a column that has at least one other non-zero row (degree > 0)."""
    row_of = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    shared = np.bincount(X.indices, minlength=X.shape[1])[X.indices] >= 2
    return np.bincount(row_of, weights=shared, minlength=X.shape[0]) > 0


def spectral_embedding(
    X: sp.spmatrix | np.ndarray, n_components: int, affinity: Affinity = "scalable", seed: int = 0
) -> SpectralEmbedding:
    """The spectral embedding scikit-learn's ``SpectralClustering`` clusters (appendix A).

    ``seed`` seeds the ARPACK start vector as ``SpectralClustering(random_state=seed)`` does.
    """
    Xn, kept = _prepare(X, n_components, affinity)
    rng = np.random.RandomState(seed)
    if affinity == "dense":
        return _dense_embedding(Xn[kept], n_components, rng, kept)
    return _scalable_embedding(Xn[kept], n_components, rng, kept)


def spectral_clusters(
    X: sp.spmatrix | np.ndarray, n_clusters: int, seed: int, affinity: Affinity = "scalable"
) -> np.ndarray:
    """Cluster id in ``0..n_clusters-1`` per row of X, ``-1`` for isolated rows (appendix A)."""
    Xn, kept = _prepare(X, n_clusters, affinity)
    labels = np.full(X.shape[0], -1, dtype=np.int64)
    if affinity == "dense":
        model = SpectralClustering(
            n_clusters=n_clusters,
            affinity="precomputed",
            random_state=seed,
            assign_labels="kmeans",
            n_init=N_INIT,
        )
        labels[kept] = model.fit_predict(cosine_similarity(Xn[kept]))
        return labels
    rng = np.random.RandomState(seed)  # ARPACK start vector first, then k-means: as sklearn
    emb = _scalable_embedding(Xn[kept], n_clusters, rng, kept)
    labels[kept] = stable_kmeans(emb.embedding, n_clusters, rng, n_init=N_INIT)
    return labels


def _prepare(
    X: sp.spmatrix | np.ndarray, k: int, affinity: str
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Validate; return the L2-normalised rows (as cosine_similarity does) and `connected_rows`."""
    if affinity not in AFFINITIES:
        raise ConfigError(f"seqdrift affinity: unknown {affinity!r}; one of {list(AFFINITIES)}")
    Xn = sp.csr_matrix(X, dtype=np.float64, copy=True)
    Xn.eliminate_zeros()
    if Xn.nnz and Xn.data.min() < 0:
        raise ValueError("spectral clustering on cosine affinity needs non-negative features")
    Xn = normalize(Xn)
    kept = connected_rows(Xn)
    if not 1 <= k <= kept.sum():
        raise ValueError(
            f"{k} clusters/components requested but only {kept.sum()} of {X.shape[0]} rows share "
            "a feature with another row (the rest are isolated and get no cluster)"
        )
    return Xn, kept


def _dense_embedding(
    Xk: sp.csr_matrix, k: int, rng: np.random.RandomState, kept: np.ndarray
) -> SpectralEmbedding:
    """scikit-learn's embedding of the materialised affinity; eigenvalues by Rayleigh quotient."""
    A = cosine_similarity(Xk)
    emb = sklearn_spectral_embedding(A, n_components=k, random_state=rng, drop_first=False)
    np.fill_diagonal(A, 0.0)
    degree = A.sum(axis=1)
    # column u = x / sqrt(d) for an eigenvector x of M: x'Mx / x'x = u'A'u / u'Du
    mu = np.einsum("ij,ij->j", emb, A @ emb) / np.einsum("ij,i,ij->j", emb, degree, emb)
    return SpectralEmbedding(1.0 - mu, emb, kept)


def _scalable_embedding(
    Xk: sp.csr_matrix, k: int, rng: np.random.RandomState, kept: np.ndarray
) -> SpectralEmbedding:
    """The K largest eigenpairs of M = D^-½ (X Xᵀ − diag ‖x‖²) D^-½ without forming X Xᵀ."""
    n = Xk.shape[0]
    v0 = rng.uniform(-1, 1, n)  # what sklearn's _init_arpack_v0 draws for its eigsh
    XkT = Xk.T.tocsr()
    row_of = np.repeat(np.arange(n), np.diff(Xk.indptr))
    col_sum = np.asarray(Xk.sum(axis=0)).ravel()
    self_sim = np.bincount(row_of, weights=Xk.data**2, minlength=n)
    degree = np.bincount(row_of, weights=Xk.data * (col_sum[Xk.indices] - Xk.data), minlength=n)
    scale = 1.0 / np.sqrt(degree)

    known = _component_vectors(Xk, XkT, np.sqrt(degree))  # eigenvalue 1 of M, one per component

    def matmat(v: np.ndarray) -> np.ndarray:
        v = v.reshape(n, -1)
        u = scale[:, None] * v
        Mv = scale[:, None] * (Xk @ (XkT @ u) - self_sim[:, None] * u)
        return Mv - 3.0 * (known @ (known.T @ v))  # known eigenvectors moved from 1 to -2

    wanted = min(k + 1, n)  # one more than needed, to check the gap after eigenvalue k
    mu = np.ones(min(known.shape[1], wanted))
    vectors = known[:, : len(mu)].toarray()
    if wanted > known.shape[1]:
        op = LinearOperator((n, n), matvec=matmat, matmat=matmat, dtype=np.float64)
        vals, vecs = eigsh(op, k=wanted - known.shape[1], which="LA", tol=0, v0=v0)
        order = np.argsort(-vals, kind="stable")
        mu = np.concatenate([mu, vals[order]])
        vectors = np.hstack([vectors, vecs[:, order]])
    if len(mu) > k and mu[k - 1] - mu[k] < GAP_TOL:
        warnings.warn(
            f"eigenvalues {k} and {k + 1} of the normalised affinity coincide ({mu[k]:.12f}): "
            f"the {k}-dimensional spectral embedding is not unique and depends on the solver "
            f"({known.shape[1]} connected components)",
            stacklevel=3,
        )
    embedding = vectors[:, :k] * scale[:, None]
    return SpectralEmbedding(1.0 - mu[:k], _sign_flip(embedding), kept)


def _component_vectors(
    Xk: sp.csr_matrix, XkT: sp.csr_matrix, sqrt_degree: np.ndarray
) -> sp.csr_matrix:
    """Unit vectors √d on each connected component (rows linked by a shared feature), sparse.

    Columns by descending component size, then by first row; each is an eigenvector of M with
    eigenvalue 1, and together they span that eigenspace (Perron-Frobenius per component).
    """
    n = Xk.shape[0]
    bipartite = sp.bmat([[None, Xk], [XkT, None]], format="csr")
    _, comp = connected_components(bipartite, directed=False)
    _, first, comp, size = np.unique(
        comp[:n], return_index=True, return_inverse=True, return_counts=True
    )
    rank = np.empty_like(size)
    rank[np.lexsort((first, -size))] = np.arange(len(size))
    norm = np.sqrt(np.bincount(comp, weights=sqrt_degree**2))
    values = sqrt_degree / norm[comp]
    return sp.csr_matrix((values, (np.arange(n), rank[comp])), shape=(n, len(size)))


def _sign_flip(embedding: np.ndarray) -> np.ndarray:
    """scikit-learn's ``_deterministic_vector_sign_flip`` on the columns."""
    top = np.argmax(np.abs(embedding), axis=0)
    return embedding * np.sign(embedding[top, np.arange(embedding.shape[1])])
