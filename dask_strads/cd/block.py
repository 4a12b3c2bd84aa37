"""The worker-side state of one column block: its columns of X, its coefficients, and
its copy of the residual, which every block keeps equal to every other's."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dask_strads.cd import kernels
from dask_strads.cd.columns import (
    ColumnSet,
    LastCopy,
    MappedColumns,
    PeerColumns,
    read_in_place,
)
from dask_strads.cd.gram import GramCache, in_range
from dask_strads.cd.shards import CentredColumns, ColumnsAsGiven, dense_shard
from dask_strads.engine import shared
from dask_strads.engine.wire import realign


def as_block_matrix(shard):
    """A shard (dense, scipy.sparse, pydata sparse or already centred) as float64
    Fortran, CSC or :class:`CentredColumns`, sharing the shard's arrays where it can (a
    shard that arrived through Dask is a view of its message; scipy's constructor would
    copy it)."""
    if isinstance(shard, CentredColumns):
        # the engine aligns a shard's arrays, but not those inside this dataclass
        values = realign(shard.values)
        return shard if values is shard.values else \
            CentredColumns(values, shard.means, shard.squares)
    if hasattr(shard, "to_scipy_sparse"):  # pydata sparse
        shard = shard.to_scipy_sparse()
    if sp.issparse(shard):
        if shard.format == "csc" and shard.dtype == np.float64 and \
                shard.indices.dtype == shard.indptr.dtype:
            X = sp.csc_matrix(shard.shape, dtype=np.float64)
            X.indptr, X.indices, X.data = shard.indptr, shard.indices, shard.data
            X.has_canonical_format = shard.has_canonical_format
        else:
            X = sp.csc_matrix(shard, dtype=np.float64)
        if not X.has_canonical_format:
            X = X.copy()  # never sort a Dask-held object in place
            X.sum_duplicates()
            X.sort_indices()
        return X
    if isinstance(shard, ColumnsAsGiven):  # handed over in this process
        return as_block_matrix(shard.laid_out())
    return dense_shard(shard, centre=False)


class ColumnBlock:
    """Columns ``start:start + p_b`` of ``X`` on their worker.

    ``residual`` is ``y_c - X b`` (raw for sparse columns, with ``r_sum`` its sum: see
    :mod:`dask_strads.cd.kernels`); ``alive`` marks the columns Gap Safe screening has
    not removed; ``xtr`` keeps the last gap round's ``X_b' r`` for screening;
    ``means``: the columns' means, for the intercept (None when ``fit_intercept`` is
    false: a pass over the columns for nothing). ``col_sq``: the squared norms of
    dense columns when the fit does not centre them and the client has them (else
    taken here, or by the pass that centred them); ``first_xtr``: the first gap
    round's gradient at ``b = 0``, when the client has it."""

    def __init__(self, block_id, start: int, shard, y: np.ndarray, fit_intercept: bool,
                 coef: np.ndarray | None = None, curvature_scale: float = 1.0,
                 col_sq: np.ndarray | None = None, first_xtr: np.ndarray | None = None):
        X = as_block_matrix(shard)
        n = y.shape[0]
        if X.shape[0] != n:
            raise ValueError(f"block {block_id}: {X.shape[0]} rows, expected {n}")
        self.id = block_id
        self.start = int(start)
        self.n = n
        self.sparse = sp.issparse(X)
        if self.sparse:
            sums, sq = kernels.column_sums(X.data, X.indptr)
            self.mu = sums / n if fit_intercept else np.zeros(X.shape[1])
            centred_sq = np.maximum(sq - n * self.mu**2, 0.0)
            self.X = X
            self.col_sq = centred_sq
            self.means = sums / n if fit_intercept else None
        else:
            if fit_intercept and not isinstance(X, CentredColumns):
                X = dense_shard(X, centre=True)  # a private copy: the shard is Dask's
            self.means = X.means if fit_intercept else None
            if fit_intercept:
                col_sq = X.squares  # taken by the pass that centred the columns, or None
            if isinstance(X, CentredColumns):
                X = X.values if fit_intercept else np.asfortranarray(X.values + X.means)
            self.mu = np.zeros(X.shape[1])  # centred explicitly, or no intercept
            self.X = X
            if col_sq is None:
                col_sq = np.einsum("ij,ij->j", X, X)
            self.col_sq = np.array(col_sq, dtype=np.float64)
        # where X lies in /dev/shm, for solvers on this host to read it there
        self.origin = None if self.sparse else shared.mapped_at(self.X)
        self.peer_columns = PeerColumns()  # other blocks' columns read from their files
        self.gram_cache = GramCache()  # the Gram matrix of what it last solved
        # whether its columns can have one (dense, of norms single precision holds)
        self.gram_usable = not self.sparse and in_range(self.col_sq)
        p_b = X.shape[1]
        self.coef = np.zeros(p_b) if coef is None else np.array(coef, dtype=np.float64)
        self.residual = y.copy()
        if np.any(self.coef):
            self.subtract(np.arange(p_b), self.coef, self.residual)
        self.resum()
        # a coordinate step's curvature bound: the datafit's smoothness times ||x_j||^2
        self.curvature = self.col_sq * curvature_scale if curvature_scale != 1.0 \
            else self.col_sq
        self.alive = self.col_sq > 0.0
        self.n_alive = int(self.alive.sum())
        self.xtr = np.zeros(p_b)
        self._xtr_residual: np.ndarray | None = None  # the residual xtr was taken at
        self._first_xtr = first_xtr
        self.score = np.empty(p_b)
        self.live_cols: np.ndarray | None = None  # the alive columns, once few are
        self._copied = LastCopy()  # the last copy of some of its columns
        self._inv_norm: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.coef.shape[0])

    @property
    def column_source(self) -> str | None:
        """The ``/dev/shm`` (:func:`~dask_strads.engine.shared.shm_id`) in which a
        solver can read this block's columns where they lie; None when they must be
        sent (CSC columns, or dense ones centred here or received through Dask)."""
        return None if self.origin is None else shared.shm_id()

    def mapped_columns(self, local: np.ndarray) -> MappedColumns:
        """Columns ``local`` as a solver that sees :attr:`column_source` reads them."""
        path, offset = self.origin
        return MappedColumns(path, offset, self.X.shape, local, ids=local + self.start,
                             coef=self.coef[local], mu=self.mu[local],
                             col_sq=self.col_sq[local])

    def owns(self, ids: np.ndarray) -> np.ndarray:
        """Which of the global column ids ``ids`` are this block's."""
        return (ids >= self.start) & (ids < self.start + self.size)

    @property
    def nnz(self) -> int:
        return int(self.X.nnz) if self.sparse else int(self.X.size)

    # ------------------------------------------------------------- residual
    def apply(self, delta) -> None:
        """Add another block's residual change (see :func:`compact`)."""
        if delta is None:
            return
        if isinstance(delta, tuple):
            idx, val = delta
            self.residual[idx] += val
        else:
            self.residual += delta
        self.resum()

    def resum(self) -> None:
        """``r_sum`` from the residual, in a fixed order: every block gets the same bits."""
        self.r_sum = kernels.total(self.residual) if self.sparse else 0.0

    def subtract(self, local: np.ndarray, delta: np.ndarray, residual: np.ndarray) -> float:
        """``residual -= X[:, local] delta``; returns the change of ``sum(residual)``."""
        if self.sparse:
            X = self.X
            data, indices, ptr = kernels.take_columns(X.data, X.indices, X.indptr, local)
            return kernels.subtract_sparse(data, indices, ptr, self.mu[local], delta, residual)
        residual -= self.X[:, local] @ delta
        return 0.0

    # ------------------------------------------------------------- gap rounds
    def gradient(self, v: np.ndarray) -> np.ndarray:
        """``X_b' v`` for the residual or the datafit's negative gradient ``v`` (of the
        centred columns when ``mu`` is set, which only the residual needs: ``r_sum``
        is its sum); screened columns are left as they were: callers skip them."""
        X, live = self.X, self.live_cols
        self._xtr_residual = v.copy() if v is self.residual and not self.sparse else None
        if not self.sparse:
            if live is None:
                np.dot(X.T, v, out=self.xtr)
            else:
                kernels.xtr_dense(X, live, v, self.xtr)
        elif live is None:
            kernels.xtr_sparse_all(X.data, X.indices, X.indptr, self.mu, v, self.r_sum,
                                   self.xtr)
        else:
            kernels.xtr_sparse(X.data, X.indices, X.indptr, self.mu, v, self.r_sum, live,
                               self.xtr)
        return self.xtr

    def first_gradient(self, untouched: bool) -> np.ndarray | None:
        """:meth:`gradient` at ``b = 0`` as the client took it, once: at the first gap
        round, if the residual is ``untouched`` since the block was made (None
        otherwise, or later)."""
        first, self._first_xtr = self._first_xtr, None
        if first is None or not untouched or self.coef.any():
            return None
        self.xtr[:] = first
        self._xtr_residual = None if self.sparse else self.residual.copy()
        return self.xtr

    def kept_gradient(self, local: np.ndarray) -> np.ndarray | None:
        """``X' r`` of dense columns ``local`` as the last gap round took it, while the
        residual is still the one it was taken at (an O(n) comparison that saves a pass
        over the columns); None otherwise."""
        r = self._xtr_residual
        if r is None or not np.array_equal(r, self.residual):
            return None
        return self.xtr[local]

    def screen(self, l2: float, dual_scale: float, radius: float) -> tuple[np.ndarray, object]:
        """Gap Safe screening with the last gap round's ``X_b' r``: drop the columns that
        are zero at every optimum. Returns them (local ids) and the residual change of
        zeroing those among them that were not zero (None when there were none)."""
        if self._inv_norm is None:
            with np.errstate(divide="ignore"):
                self._inv_norm = 1.0 / np.sqrt(self.col_sq + l2)
        out = np.empty(self.size, dtype=np.int64)
        count = kernels.screen_out(self.xtr, self.coef, l2, self._inv_norm, dual_scale, radius,
                                   self.alive, out)
        dropped = out[:count].copy()
        delta = None
        if count:
            self.alive[dropped] = False
            self.n_alive -= count
            # a pass over every column streams faster than a list, until most are gone
            if self.n_alive <= self.size // 2:
                self.live_cols = np.flatnonzero(self.alive)
            moved = dropped[self.coef[dropped] != 0.0]
            if moved.shape[0]:
                before = self.residual.copy()
                self.subtract(moved, -self.coef[moved], self.residual)
                self.resum()
                self.coef[moved] = 0.0
                delta = compact(self.residual - before)
        return dropped, delta

    # ------------------------------------------------------------- working sets
    def column_nnz(self, local: np.ndarray) -> np.ndarray:
        """Stored entries of columns ``local``."""
        if self.sparse:
            ptr = self.X.indptr
            return (ptr[local + 1] - ptr[local]).astype(np.int64)
        return np.full(local.shape[0], self.n, dtype=np.int64)

    def columns(self, local: np.ndarray, swept: bool = True) -> ColumnSet:
        """Columns ``local`` (swept in that order) with copies of their coefficients.
        The columns are read-only: long dense ones are the block's own (see
        :mod:`dask_strads.cd.columns`), and all dense ones where they are not
        ``swept`` (a Gram phase reads a column once or twice: a copy would not pay);
        others are the block's arrays when ``local`` is every column in order, else a
        copy that is kept for the next call with the same ``local`` (a working set often
        stays the same for many phases)."""
        local = np.asarray(local, dtype=np.int64)
        common = dict(ids=local + self.start, coef=self.coef[local].copy(),
                      mu=self.mu[local], col_sq=self.col_sq[local])
        if not self.sparse and (read_in_place(self.n) or not swept) and \
                self.X.flags.writeable:
            return ColumnSet(dense=self.X, cols=local, **common)
        return ColumnSet(**self._copied_columns(local), **common)

    def _copied_columns(self, local: np.ndarray) -> dict:
        X = self.X
        whole = local.shape[0] == self.size and np.array_equal(local, np.arange(self.size))
        # A read-only array (a view of a Dask message) would compile the kernels once
        # more, so it is copied
        if whole and (X.data if self.sparse else X).flags.writeable:
            if self.sparse:
                return dict(data=X.data, indices=X.indices, indptr=X.indptr)
            return dict(dense=X)

        def copy() -> dict:
            if self.sparse:
                data, indices, ptr = kernels.take_columns(X.data, X.indices, X.indptr, local)
                return dict(data=data, indices=indices, indptr=ptr)
            return dict(dense=np.asfortranarray(X[:, local]))

        return self._copied.get(local, copy)

    def copy_state(self) -> dict:
        return {"coef": self.coef.copy(), "residual": self.residual.copy()}

    def restore_state(self, arrays: dict) -> None:
        self._first_xtr = None  # of the residual at b = 0, not of this one
        self._xtr_residual = None
        self.coef[:] = arrays["coef"]
        self.residual[:] = arrays["residual"]
        self.resum()


# residual changes touching fewer rows than this share travel as (index, value) pairs
SPARSE_DELTA_SHARE = 0.25


def compact(delta: np.ndarray):
    """A residual change as a dense array or, when mostly zero, ``(index, value)``;
    None when it is all zero."""
    nz = np.flatnonzero(delta)
    if nz.shape[0] == 0:
        return None
    if nz.shape[0] >= SPARSE_DELTA_SHARE * delta.shape[0]:
        return delta
    return (nz.astype(np.int32), delta[nz])


def add_delta(target: np.ndarray, delta, scale: float = 1.0) -> None:
    """``target += scale * delta`` for a change made by :func:`compact`."""
    if delta is None:
        return
    if isinstance(delta, tuple):
        idx, val = delta
        target[idx] += val if scale == 1.0 else scale * val
    elif scale == 1.0:
        target += delta
    else:
        target += scale * delta



def relay(pending: list, source: int, delta, n: int) -> None:
    """Queue block ``source``'s residual change for every other block (``pending[b]``:
    what the client sends block ``b`` with its next order)."""
    if delta is None:
        return
    for b in range(len(pending)):
        if b != source:
            if pending[b] is None:
                pending[b] = np.zeros(n)
            add_delta(pending[b], delta)


def take_pending(pending: list, b: int):
    """Block ``b``'s queued change, compacted, and its queue emptied."""
    delta, pending[b] = pending[b], None
    return None if delta is None else compact(delta)
