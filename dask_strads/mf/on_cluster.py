"""A fitted factorisation left on the cluster (``gather_model=False``).

The factors are dask arrays whose chunks are the blocks' results on the workers that
fitted them; predictions and recommendations run there too, so the client only ever
holds what it asked for (predicted values, a row's factor, the best columns).
"""

from __future__ import annotations

import numpy as np


def factor_chunk(result: dict, name: str, column: int | None = None, values=None):
    """``result[name]`` (``"W"`` or ``"H"``), with ``column`` set to ``values`` if given
    (a fit stopped mid-component: the blocks have not stored its newest vector)."""
    factor = result[name]
    if column is not None:
        factor = factor.copy()
        factor[:, column] = values
    return factor


def factor_row(factor: np.ndarray, local_row: int) -> np.ndarray:
    return factor[local_row].copy()


def seen_columns(result: dict, local_row: int) -> np.ndarray:
    """Columns observed for one row of a block's rows, in the training data."""
    indptr, indices = result["seen_indptr"], result["seen_indices"]
    return np.asarray(indices[indptr[local_row]:indptr[local_row + 1]])


def top_columns(H: np.ndarray, w: np.ndarray, offset: int, seen: np.ndarray, n: int):
    """The ``n`` columns of ``H`` (its first one numbered ``offset``) with the highest
    ``H @ w``, leaving out ``seen``: (columns, scores), best first."""
    scores = H @ w
    mask = np.ones(len(scores), dtype=bool)
    local = seen - offset
    mask[local[(local >= 0) & (local < len(scores))]] = False
    candidates = np.flatnonzero(mask)
    n = min(int(n), candidates.size)
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    part = candidates[np.argpartition(-scores[candidates], n - 1)[:n]]
    best = part[np.lexsort((part, -scores[part]))]
    return (best + offset).astype(np.int64), scores[best]


def merge_top(parts: list, n: int) -> np.ndarray:
    """The ``n`` best columns of several :func:`top_columns` answers."""
    cols = np.concatenate([c for c, _ in parts])
    scores = np.concatenate([s for _, s in parts])
    return cols[np.lexsort((cols, -scores))][:n]


class ClusterFactors:
    """``W`` and ``H`` of a fit, in the row and column blocks where they were fitted.

    Parameters
    ----------
    client : distributed.Client
        The fit's client; the futures live on its cluster.
    results : dict
        ``block id -> future`` of the block's ``block_result``.
    row_bounds, col_bounds : ndarray
        Block ``p`` holds rows ``row_bounds[p]:row_bounds[p+1]`` of ``W`` and columns
        ``col_bounds[p]:col_bounds[p+1]`` of ``H``.
    n_components : int
    h_column : (int, ndarray) or None
        A column of ``H`` to overwrite, with its full-length values.
    """

    def __init__(self, client, results: dict, row_bounds, col_bounds, n_components: int,
                 h_column=None):
        import dask.array as da
        from distributed.client import _wait  # without the data, on the fit's client

        self.client = client
        self.results = [results[p] for p in range(len(results))]
        self.row_bounds = np.asarray(row_bounds, dtype=np.int64)
        self.col_bounds = np.asarray(col_bounds, dtype=np.int64)
        k = int(n_components)
        w_parts, h_parts = [], []
        for p, result in enumerate(self.results):
            c0, c1 = self.col_bounds[p:p + 2]
            w_parts.append(client.submit(factor_chunk, result, "W", pure=False))
            fix = (h_column[0], h_column[1][c0:c1]) if h_column is not None else (None, None)
            h_parts.append(client.submit(factor_chunk, result, "H", *fix, pure=False))
        client.sync(_wait, w_parts + h_parts)  # a failure shows in fit, not at first use
        self.w_chunks, self.h_chunks = w_parts, h_parts
        self.W = da.concatenate([
            da.from_delayed(f, shape=(int(self.row_bounds[p + 1] - self.row_bounds[p]), k),
                            dtype=np.float64) for p, f in enumerate(w_parts)])
        self.H = da.concatenate([
            da.from_delayed(f, shape=(int(self.col_bounds[p + 1] - self.col_bounds[p]), k),
                            dtype=np.float64) for p, f in enumerate(h_parts)])

    def predict(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``w_i'h_j`` at the given (checked) coordinates, computed on the cluster."""
        if rows.size == 0:
            return np.empty(0)
        product = (self.W[rows] * self.H[cols]).sum(axis=1)
        return np.asarray(self.client.compute(product).result())

    def recommend(self, row: int, n: int, exclude_seen: bool) -> np.ndarray:
        """The ``n`` best columns for ``row``: each column block ranks its own."""
        block = int(np.searchsorted(self.row_bounds, row, side="right") - 1)
        local = row - int(self.row_bounds[block])
        w = self.client.submit(factor_row, self.w_chunks[block], local, pure=False)
        seen = (self.client.submit(seen_columns, self.results[block], local, pure=False)
                if exclude_seen else np.empty(0, dtype=np.int64))
        parts = [self.client.submit(top_columns, H, w, int(self.col_bounds[p]), seen, n,
                                    pure=False) for p, H in enumerate(self.h_chunks)]
        return merge_top(self.client.gather(parts), n)
