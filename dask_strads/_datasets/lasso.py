"""Seeded synthetic sparse-regression problems (tests, demos and ``bench/lasso.py``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["make_correlated_regression", "make_sparse_regression", "make_text_regression",
           "alpha_max"]


def _target(X, coef: np.ndarray, snr: float, rng: np.random.Generator) -> np.ndarray:
    signal = np.asarray(X @ coef).ravel()
    scale = np.linalg.norm(signal) / np.sqrt(signal.shape[0]) / snr if snr > 0 else 0.0
    return signal + scale * rng.standard_normal(signal.shape[0])


def _true_coef(n_features: int, n_informative: int, rng: np.random.Generator) -> np.ndarray:
    if not 0 <= n_informative <= n_features:
        raise ValueError(
            f"n_informative={n_informative!r} must be between 0 and n_features={n_features}"
        )
    coef = np.zeros(n_features)
    support = rng.choice(n_features, size=n_informative, replace=False)
    coef[support] = rng.standard_normal(n_informative) + np.sign(rng.standard_normal(n_informative))
    return coef


def make_correlated_regression(
    n_samples: int = 200,
    n_features: int = 500,
    *,
    n_informative: int = 10,
    correlation: float = 0.7,
    snr: float = 3.0,
    random_state: int | None = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense design whose columns follow an AR(1) process: ``corr(x_j, x_k) = rho^|j-k|``.

    Parameters
    ----------
    n_samples, n_features : int
        Shape of ``X``.
    n_informative : int
        Number of non-zero true coefficients (random positions, values ~ ±1 + N(0, 1)).
    correlation : float
        The AR(1) coefficient ``rho`` in [0, 1).
    snr : float
        Signal-to-noise ratio ``||X b|| / ||noise||`` (0: no noise).
    random_state : int or None
        Seed.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), Fortran-ordered float64
    y : ndarray of shape (n_samples,)
    coef : ndarray of shape (n_features,)
        The true coefficients.

    Examples
    --------
    >>> X, y, coef = make_correlated_regression(50, 80, n_informative=5)
    >>> X.shape, int((coef != 0).sum())
    ((50, 80), 5)
    """
    if not 0.0 <= correlation < 1.0:
        raise ValueError(f"correlation={correlation!r} must be in [0, 1)")
    rng = np.random.default_rng(random_state)
    # generated as (p, n) C-ordered = (n, p) Fortran-ordered, filled column by column
    Z = rng.standard_normal((n_features, n_samples))
    s = np.sqrt(1.0 - correlation**2)
    for j in range(1, n_features):
        Z[j] *= s
        Z[j] += correlation * Z[j - 1]
    X = Z.T
    coef = _true_coef(n_features, n_informative, rng)
    return X, _target(X, coef, snr, rng), coef


def make_sparse_regression(
    n_samples: int = 1000,
    n_features: int = 5000,
    *,
    density: float = 0.01,
    n_informative: int = 20,
    snr: float = 3.0,
    random_state: int | None = 0,
) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
    """Sparse CSC design with about ``density * n_samples`` random rows per column.

    Values are standard normal; every column holds ``max(1, round(density * n))``
    distinct rows at random.

    Returns
    -------
    X : scipy.sparse.csc_matrix of shape (n_samples, n_features), float64
    y : ndarray of shape (n_samples,)
    coef : ndarray of shape (n_features,)

    Examples
    --------
    >>> X, y, coef = make_sparse_regression(100, 300, density=0.05, n_informative=4)
    >>> X.shape, X.nnz
    ((100, 300), 1500)
    """
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density={density!r} must be in (0, 1]")
    rng = np.random.default_rng(random_state)
    per_col = max(1, int(round(density * n_samples)))
    indptr = np.arange(n_features + 1, dtype=np.int64) * per_col
    if per_col * 4 > n_samples:
        rows = np.concatenate([rng.choice(n_samples, per_col, replace=False)
                               for _ in range(n_features)])
    else:
        # draw with replacement, then redraw the (rare) duplicates of each column
        rows = rng.integers(0, n_samples, size=(n_features, per_col))
        rows.sort(axis=1)
        while True:
            dup = np.zeros(rows.shape, dtype=bool)
            dup[:, 1:] = rows[:, 1:] == rows[:, :-1]
            n_dup = int(dup.sum())
            if n_dup == 0:
                break
            rows[dup] = rng.integers(0, n_samples, size=n_dup)
            rows.sort(axis=1)
        rows = rows.ravel()
    index_dtype = np.int32 if rows.shape[0] < 2**31 else np.int64
    X = sp.csc_matrix(
        (rng.standard_normal(rows.shape[0]), rows.astype(index_dtype, copy=False),
         indptr.astype(index_dtype)),
        shape=(n_samples, n_features),
    )
    X.sort_indices()
    coef = _true_coef(n_features, n_informative, rng)
    return X, _target(X, coef, snr, rng), coef


def alpha_max(X, y: np.ndarray, *, fit_intercept: bool = True, l1_ratio: float = 1.0) -> float:
    """The smallest ``alpha`` for which scikit-learn's Lasso/ElasticNet solution is 0."""
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    if fit_intercept:
        y = y - y.mean()
        xty = np.asarray(X.T @ y).ravel()
    else:
        xty = np.asarray(X.T @ y).ravel()
    return float(np.abs(xty).max() / (n * l1_ratio))


def make_text_regression(
    n_samples: int = 2000,
    n_features: int = 10000,
    *,
    doc_length: float = 50.0,
    exponent: float = 1.1,
    n_informative: int = 20,
    snr: float = 3.0,
    random_state: int | None = 0,
) -> tuple[sp.csc_matrix, np.ndarray, np.ndarray]:
    """Sparse TF-IDF design of synthetic documents whose words follow Zipf's law.

    Each row is a document of Poisson(``doc_length``) tokens (at least one) drawn from
    ``n_features`` words with probability proportional to ``1 / (rank + 2.7) ** exponent``
    (Zipf-Mandelbrot, as in real text: a few words carry much of the text, most are
    rare); word ranks are shuffled over the columns. Values are ``log(1 + count)`` times
    the word's smoothed idf, rows scaled to unit norm (scikit-learn's
    ``TfidfVectorizer(sublinear_tf=True)``). Words that never occur are empty columns.
    The true coefficients sit on words of middling frequency.

    Returns
    -------
    X : scipy.sparse.csc_matrix of shape (n_samples, n_features), float64
    y : ndarray of shape (n_samples,)
    coef : ndarray of shape (n_features,)

    Examples
    --------
    >>> X, y, coef = make_text_regression(200, 1000, n_informative=5)
    >>> X.shape, int((coef != 0).sum())
    ((200, 1000), 5)
    """
    if doc_length <= 0 or exponent <= 0:
        raise ValueError(f"doc_length={doc_length!r} and exponent={exponent!r} must be > 0")
    rng = np.random.default_rng(random_state)
    lengths = np.maximum(rng.poisson(doc_length, n_samples), 1)
    freq = 1.0 / (np.arange(n_features) + 2.7) ** exponent
    word_of_rank = rng.permutation(n_features)
    tokens = word_of_rank[rng.choice(n_features, size=int(lengths.sum()), p=freq / freq.sum())]
    docs = np.repeat(np.arange(n_samples), lengths)
    counts = sp.csr_matrix((np.ones(tokens.shape[0]), (docs, tokens)),
                           shape=(n_samples, n_features))
    counts.sum_duplicates()
    df = np.bincount(counts.indices, minlength=n_features)
    idf = np.log((1.0 + n_samples) / (1.0 + df)) + 1.0
    counts.data = np.log1p(counts.data) * idf[counts.indices]
    norms = np.sqrt(np.asarray(counts.multiply(counts).sum(axis=1)).ravel())
    X = sp.csc_matrix(sp.diags(1.0 / np.maximum(norms, 1e-300)) @ counts)
    X.sort_indices()
    ranks = np.argsort(word_of_rank)  # rank of each column's word
    middling = np.flatnonzero((ranks >= n_features // 100) & (ranks < n_features // 5))
    if n_informative > middling.shape[0]:
        middling = np.arange(n_features)
    coef = np.zeros(n_features)
    support = rng.choice(middling, size=n_informative, replace=False)
    coef[support] = (rng.standard_normal(n_informative)
                     + np.sign(rng.standard_normal(n_informative))) * 5.0
    return X, _target(X, coef, snr, rng), coef
