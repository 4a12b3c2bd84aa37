"""A set of columns of X: what a working set is solved over.

Long dense columns stay where the block holds them (a Fortran array's column is
contiguous, so a sweep reads it as fast from the block as from a copy, and a copy of a
large working set costs several sweeps and its size in memory); short dense columns and
CSC columns are copied into compact arrays (see
:meth:`dask_strads.cd.block.ColumnBlock.columns`). Columns travel to another worker,
compacted, when that worker solves them (see :mod:`dask_strads.cd.phase`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dask_strads.cd import kernels


@dataclass
class ColumnSet:
    """Columns ``ids`` (global) of ``X`` with their coefficients ``coef``.

    ``dense`` holds them as columns ``cols`` of a Fortran array (all of them, in order,
    when ``cols`` is None), or ``data``/``indices``/``indptr`` as CSC arrays; ``mu`` are
    their means (0 without an intercept: see :mod:`dask_strads.cd.kernels`), ``col_sq``
    their centred squared norms."""

    ids: np.ndarray
    coef: np.ndarray
    mu: np.ndarray
    col_sq: np.ndarray
    dense: np.ndarray | None = None
    data: np.ndarray | None = None
    indices: np.ndarray | None = None
    indptr: np.ndarray | None = None
    cols: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    @property
    def nnz(self) -> int:
        """Stored entries: the work of one sweep."""
        if self.dense is not None:
            return int(self.dense.shape[0]) * self.size
        return int(self.indptr[-1])

    @property
    def dense_cols(self) -> np.ndarray:
        """Which of ``dense``'s columns the set holds."""
        if self.cols is None:
            return np.arange(self.dense.shape[1], dtype=np.int64)
        return self.cols

    def compact(self) -> ColumnSet:
        """The set with its dense columns copied into an array of their own: what is
        shipped to another worker, which must not receive the whole block."""
        if self.dense is None or self.cols is None:
            return self
        return replace(self, dense=np.asfortranarray(self.dense[:, self.cols]), cols=None)

    def epoch(self, residual: np.ndarray, r_sum: float, l1: float, l2: float,
              positive: bool) -> tuple[float, float]:
        """One sweep over the columns; returns ``(largest change, new r_sum)``."""
        if self.dense is not None:
            return kernels.epoch_dense(self.dense, self.dense_cols, self.col_sq, self.coef,
                                       residual, l1, l2, positive), r_sum
        return kernels.epoch_sparse(self.data, self.indices, self.indptr, self.mu,
                                    self.col_sq, self.coef, residual, r_sum, l1, l2,
                                    positive)

    def subtract(self, delta: np.ndarray, residual: np.ndarray) -> float:
        """``residual -= X_set delta``; returns the change of ``sum(residual)``."""
        if self.dense is not None:
            kernels.subtract_dense(self.dense, self.dense_cols, delta, residual)
            return 0.0  # dense columns are centred already
        return kernels.subtract_sparse(self.data, self.indices, self.indptr, self.mu, delta,
                                       residual)

    def writable(self) -> ColumnSet:
        """The set with a coefficient array of its own (one that arrived over the wire
        is read-only)."""
        if not self.coef.flags.writeable:
            self.coef = self.coef.copy()
        return self

    @staticmethod
    def concat(sets: list[ColumnSet]) -> ColumnSet:
        """One set holding the columns of ``sets`` in order (all dense or all CSC)."""
        sets = [s for s in sets if s.size]
        if not sets:
            raise ValueError("concat: no columns")
        if len(sets) == 1:
            return sets[0].writable()
        first = sets[0]
        common = dict(ids=np.concatenate([s.ids for s in sets]),
                      coef=np.concatenate([s.coef for s in sets]),
                      mu=np.concatenate([s.mu for s in sets]),
                      col_sq=np.concatenate([s.col_sq for s in sets]))
        if first.dense is not None:
            return ColumnSet(dense=np.asfortranarray(np.hstack([s.compact().dense
                                                                for s in sets])), **common)
        offsets = np.cumsum([0] + [s.nnz for s in sets])
        indptr = np.concatenate([s.indptr[:-1] + off for s, off in zip(sets, offsets)]
                                + [offsets[-1:]]).astype(np.int64)
        indices = np.concatenate([s.indices for s in sets])
        return ColumnSet(data=np.concatenate([s.data for s in sets]), indices=indices,
                         indptr=indptr, **common)
