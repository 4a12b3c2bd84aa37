"""What a fit needs from each column of a dense ``X`` in the client's memory, taken in
the one pass that checks ``X``: the columns' squared norms (finite norms prove every
value finite, as a sum does) and ``X' y`` (the first gap round's gradient while the
coefficients are zero). The blocks are handed both and need not read their columns
for them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from dask_strads.cd.finite import client_threads

# reassociation lets LLVM vectorise the sums; NaN and infinity still carry through them
_SUMS = {"reassoc", "contract"}


@njit(nogil=True, cache=True, fastmath=_SUMS)
def _down_columns(X, y, squares, xty):
    for j in range(X.shape[1]):
        s = 0.0
        d = 0.0
        for i in range(X.shape[0]):
            v = X[i, j]
            s += v * v
            d += v * y[i]
        squares[j] = s
        xty[j] = d


@njit(nogil=True, cache=True, fastmath=_SUMS)
def _along_rows(X, y, squares, xty):
    for i in range(X.shape[0]):
        yi = y[i]
        for j in range(X.shape[1]):
            v = X[i, j]
            squares[j] += v * v
            xty[j] += v * yi


def _stats(X: np.ndarray, y: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    if y is None:
        return np.einsum("ij,ij->j", X, X), None
    p = X.shape[1]
    squares, xty = np.zeros(p), np.zeros(p)
    # walk the array in the order it lies in memory
    kernel = _down_columns if X.strides[0] <= X.strides[1] else _along_rows
    kernel(X, y, squares, xty)
    return squares, xty


def column_stats_in_parallel(X: np.ndarray, y: np.ndarray | None,
                             ) -> tuple[np.ndarray, np.ndarray | None]:
    """``(squares, xty)`` of a dense 2-D float64 ``X`` and float64 ``y`` (``xty`` None
    without ``y``): by ranges of columns on the client's cores at once."""
    y = None if y is None else np.ascontiguousarray(y, dtype=np.float64)
    p = X.shape[1]
    threads = client_threads(X.size, p)
    if threads < 2:
        return _stats(X, y)
    edges = np.linspace(0, p, threads + 1).round().astype(np.int64)
    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(lambda ab: _stats(X[:, ab[0]:ab[1]], y),
                              zip(edges[:-1], edges[1:])))
    squares = np.concatenate([s for s, _ in parts])
    return squares, None if y is None else np.concatenate([d for _, d in parts])
