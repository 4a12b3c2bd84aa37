"""Seeded synthetic low-rank rating matrices for matrix factorisation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["Ratings", "make_ratings"]


@dataclass
class Ratings:
    """A synthetic rating problem split into observed training and held-out entries.

    Attributes
    ----------
    train : scipy.sparse.csr_matrix, shape (n_rows, n_cols)
        The observed training entries (explicit zeros may not occur: values are
        continuous).
    test_rows, test_cols : ndarray of int64
        Coordinates of the held-out entries.
    test_values : ndarray of float64
        Their values.
    row_factors, col_factors : ndarray
        The true factors ``U`` (n_rows x rank) and ``V`` (n_cols x rank); the noiseless
        matrix is ``U @ V.T``.
    noise : float
        Standard deviation of the Gaussian noise added to every entry.
    """

    train: sp.csr_matrix
    test_rows: np.ndarray
    test_cols: np.ndarray
    test_values: np.ndarray
    row_factors: np.ndarray
    col_factors: np.ndarray
    noise: float

    @property
    def test(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, cols, values)`` of the held-out entries."""
        return self.test_rows, self.test_cols, self.test_values


def make_ratings(n_rows: int = 1000, n_cols: int = 500, rank: int = 5, n_observed: int = 20000,
                 *, noise: float = 0.1, test_size: float = 0.1,
                 random_state: int | None = 0) -> Ratings:
    """Sample observed entries of a noisy rank-``rank`` matrix, uniformly without replacement.

    Entries are ``a_ij = u_i'v_j + noise * e_ij`` with ``u_i, v_j ~ N(0, I / sqrt(rank))``
    (so the noiseless entries have unit variance) and ``e_ij ~ N(0, 1)``. A random
    ``test_size`` share of the ``n_observed`` entries is held out.

    Parameters
    ----------
    n_rows, n_cols : int
        Matrix shape.
    rank : int
        Rank of the noiseless matrix.
    n_observed : int
        Number of distinct observed entries (training plus held out); at most
        ``n_rows * n_cols``.
    noise : float, default=0.1
        Standard deviation of the additive Gaussian noise.
    test_size : float, default=0.1
        Share of the observed entries held out, in [0, 1).
    random_state : int or None, default=0
        Seed; equal seeds give equal problems.

    Returns
    -------
    Ratings

    Examples
    --------
    >>> from dask_strads._datasets.mf import make_ratings
    >>> data = make_ratings(200, 100, rank=3, n_observed=4000, random_state=0)
    >>> data.train.shape, data.train.nnz, data.test_values.shape
    ((200, 100), 3600, (400,))
    """
    for name, value in (("n_rows", n_rows), ("n_cols", n_cols), ("rank", rank),
                        ("n_observed", n_observed)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if n_observed > n_rows * n_cols:
        raise ValueError(
            f"n_observed must be at most n_rows * n_cols = {n_rows * n_cols}, got {n_observed}"
        )
    if not 0.0 <= test_size < 1.0:
        raise ValueError(f"test_size must be in [0, 1), got {test_size!r}")
    if noise < 0 or not np.isfinite(noise):
        raise ValueError(f"noise must be a finite non-negative number, got {noise!r}")
    rng = np.random.default_rng(random_state)
    scale = rank ** -0.25
    row_factors = rng.standard_normal((n_rows, rank)) * scale
    col_factors = rng.standard_normal((n_cols, rank)) * scale

    # Distinct linear indices without materialising the population (n_rows * n_cols can
    # be 5e8): oversample with replacement, deduplicate, keep a random subset.
    total = n_rows * n_cols
    chosen = np.empty(0, dtype=np.int64)
    while chosen.size < n_observed:
        want = int((n_observed - chosen.size) * 1.1) + 16
        draw = rng.integers(0, total, size=want, dtype=np.int64)
        chosen = np.unique(np.concatenate([chosen, draw]))
    chosen = rng.permutation(chosen)[:n_observed]
    rows = chosen // n_cols
    cols = chosen % n_cols
    values = np.einsum("ij,ij->i", row_factors[rows], col_factors[cols])
    values += noise * rng.standard_normal(n_observed)

    n_test = int(round(test_size * n_observed))
    test, train = np.arange(n_test), np.arange(n_test, n_observed)
    matrix = sp.csr_matrix((values[train], (rows[train], cols[train])), shape=(n_rows, n_cols))
    matrix.sort_indices()
    return Ratings(
        train=matrix,
        test_rows=rows[test], test_cols=cols[test], test_values=values[test],
        row_factors=row_factors, col_factors=col_factors, noise=float(noise),
    )
