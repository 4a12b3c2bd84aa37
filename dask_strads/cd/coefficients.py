"""The client's copy of a coordinate-descent fit's coefficients: the non-zeros only.

The coefficients live in the column blocks, on the workers; the client keeps what the
schedule and the result need, the support and its values. So the client's memory and
its work per round follow the number of non-zeros, not the number of features.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class SparseCoef:
    """Coefficients ``0..size-1``, stored as sorted ``ids`` and their non-zero
    ``values``; ``np.asarray`` of it is the dense vector."""

    __slots__ = ("size", "ids", "values")

    def __init__(self, size: int, ids=None, values=None):
        self.size = int(size)
        self.ids = np.empty(0, np.int64) if ids is None else np.asarray(ids, np.int64)
        self.values = np.empty(0) if values is None else np.asarray(values, np.float64)

    @classmethod
    def from_dense(cls, dense) -> SparseCoef:
        dense = np.asarray(dense, dtype=np.float64).ravel()
        ids = np.flatnonzero(dense)
        return cls(dense.shape[0], ids, dense[ids])

    @property
    def nnz(self) -> int:
        return int(self.ids.shape[0])

    def set(self, ids, values) -> None:
        """Coefficients ``ids`` (distinct) take ``values`` (zeros leave the support).
        Costs O(len(ids) + nnz) when ``ids`` are sorted (as blocks report them)."""
        ids = np.asarray(ids, np.int64)
        if ids.shape[0] == 0:
            return
        values = np.broadcast_to(np.asarray(values, np.float64), ids.shape)
        if np.any(ids[1:] < ids[:-1]):
            order = np.argsort(ids, kind="stable")
            ids, values = ids[order], values[order]
        at = np.minimum(np.searchsorted(ids, self.ids), ids.shape[0] - 1)
        keep = ids[at] != self.ids
        moved = values != 0
        all_ids = np.concatenate([self.ids[keep], ids[moved]])
        all_values = np.concatenate([self.values[keep], values[moved]])
        order = np.argsort(all_ids, kind="stable")
        self.ids, self.values = all_ids[order], all_values[order]

    def dense(self) -> np.ndarray:
        out = np.zeros(self.size)
        out[self.ids] = self.values
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.dense()
        return out if dtype is None else out.astype(dtype)

    def sparse(self) -> sp.csr_matrix:
        """As a ``1 x size`` CSR row."""
        return sp.csr_matrix((self.values.copy(), self.ids.copy(), [0, self.nnz]),
                             shape=(1, self.size))

    def to_dask(self):
        """The dense vector as a lazy dask array: each chunk is made where it is
        computed, from the non-zeros that fall in it (never whole on the client)."""
        import dask
        import dask.array as da

        (chunks,) = da.core.normalize_chunks("auto", (self.size,), dtype=np.float64)
        bounds = np.concatenate(([0], np.cumsum(chunks)))
        cuts = np.searchsorted(self.ids, bounds)
        parts = [da.from_delayed(
            dask.delayed(_dense_chunk)(int(bounds[i + 1] - bounds[i]),
                                       self.ids[cuts[i]:cuts[i + 1]] - bounds[i],
                                       self.values[cuts[i]:cuts[i + 1]]),
            shape=(int(chunks[i]),), dtype=np.float64) for i in range(len(chunks))]
        return da.concatenate(parts) if parts else da.zeros(0)

    def copy(self) -> SparseCoef:
        return SparseCoef(self.size, self.ids.copy(), self.values.copy())


def _dense_chunk(size: int, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(size)
    out[ids] = values
    return out
