"""A set of columns of X: what a working set is solved over.

Long dense columns stay where the block holds them (a Fortran array's column is
contiguous, so a sweep reads it as fast from the block as from a copy, and a copy of a
large working set costs several sweeps and its size in memory); short dense columns and
CSC columns are copied into compact arrays (see
:meth:`dask_strads.cd.block.ColumnBlock.columns`), unless the phase reads each column
only once or twice (one on a Gram matrix), which no copy pays for. Columns travel to
another worker, compacted, when that worker solves them (see :mod:`dask_strads.cd.phase`),
unless they lie in a file in ``/dev/shm`` that the solver maps as well
(:class:`MappedColumns`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dask_strads.cd import kernels
from dask_strads.engine import shared

# a dense column at least this long is swept as fast where the block holds it as from a
# copy; shorter ones, a page or so each, are read faster packed together in a copy
IN_PLACE_COLUMN_BYTES = 16384


def read_in_place(n_rows: int) -> bool:
    """Whether dense columns of ``n_rows`` are swept where they lie (else from a copy)."""
    return n_rows * 8 >= IN_PLACE_COLUMN_BYTES


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

    @property
    def parts(self) -> tuple:
        """The sets a sweep goes through in turn (see :class:`JoinedColumns`)."""
        return (self,)

    @staticmethod
    def concat(sets: list) -> ColumnSet | JoinedColumns:
        """One set holding the columns of ``sets`` in order, none of them copied."""
        sets = [s for s in sets if s.size]
        if not sets:
            raise ValueError("concat: no columns")
        if len(sets) == 1:
            return sets[0].writable()
        return JoinedColumns(sets)


@dataclass
class MappedColumns:
    """Columns ``cols`` of the dense block of ``shape`` at ``offset`` of the file at
    ``path`` in ``/dev/shm``: sent instead of the columns' bytes to a solver that sees
    the same file (columns are the bulk of what a solo phase moves)."""

    path: str
    offset: int
    shape: tuple
    cols: np.ndarray
    ids: np.ndarray
    coef: np.ndarray
    mu: np.ndarray
    col_sq: np.ndarray


class LastCopy:
    """The last copy made of some columns, handed out again while the same columns are
    asked for (a working set often stays the same for many phases)."""

    def __init__(self):
        self.cols: np.ndarray | None = None
        self.arrays = None

    def get(self, cols: np.ndarray, make):
        """The copy of columns ``cols``: the last one, or ``make()``'s."""
        if self.cols is None or not np.array_equal(self.cols, cols):
            self.cols, self.arrays = cols.copy(), make()
        return self.arrays


class PeerColumns:
    """Columns of other blocks that a solver reads from their files: the files' mappings,
    and of each file the last copy of short columns (as a block keeps its own)."""

    def __init__(self):
        self.maps: dict = {}
        self.copies: dict = {}  # path -> LastCopy

    def read(self, sent: MappedColumns, swept: bool = True) -> ColumnSet:
        """The columns ``sent`` names, where they lie unless they are short and ``swept``
        (as :meth:`dask_strads.cd.block.ColumnBlock.columns` reads a block's own)."""
        dense = shared.open_mapped(sent.path, sent.offset, sent.shape, self.maps)
        common = dict(ids=sent.ids, coef=sent.coef.copy(), mu=sent.mu, col_sq=sent.col_sq)
        if read_in_place(sent.shape[0]) or not swept:
            return ColumnSet(dense=dense, cols=sent.cols, **common)
        packed = self.copies.setdefault(sent.path, LastCopy()).get(
            sent.cols, lambda: np.asfortranarray(dense[:, sent.cols]))
        return ColumnSet(dense=packed, **common)


class JoinedColumns:
    """Column sets swept one after the other as one set: ``coef`` is one array and each
    set's coefficients a view of it, so extrapolating the whole moves every part."""

    def __init__(self, sets: list[ColumnSet]):
        self.ids = np.concatenate([s.ids for s in sets])
        self.coef = np.concatenate([s.coef for s in sets])
        self.sets = []
        at = 0
        for s in sets:
            self.sets.append(replace(s, coef=self.coef[at:at + s.size]))
            at += s.size

    @property
    def parts(self) -> tuple:
        return tuple(self.sets)

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    @property
    def nnz(self) -> int:
        return sum(s.nnz for s in self.sets)

    def subtract(self, delta: np.ndarray, residual: np.ndarray) -> float:
        shift, at = 0.0, 0
        for s in self.sets:
            shift += s.subtract(delta[at:at + s.size], residual)
            at += s.size
        return shift
