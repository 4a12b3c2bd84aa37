"""A carried count block as it travels: its non-zero entries row by row (see
``program.CountBlock``)."""

from __future__ import annotations

import numba

from dask_strads.lda.kernels.common import _JIT


@numba.njit(**_JIT)
def count_row_nnz(nwk, indptr):
    """``indptr[r + 1] = indptr[r] +`` non-zero entries of row ``r``; the largest count.
    (Branch-free: a pass over 100 MB of counts is memory-bound, not branch-bound.)"""
    n_rows, n_topics = nwk.shape
    n = 0
    big = 0
    indptr[0] = 0
    for r in range(n_rows):
        row = nwk[r]
        m = 0
        for k in range(n_topics):
            c = row[k]
            m += c != 0
            big = max(big, c)
        n += m
        indptr[r + 1] = n
    return big


@numba.njit(**_JIT)
def gather_rows(nwk, indptr, topics, counts):
    """The non-zero entries of ``nwk`` row by row, into ``topics`` and ``counts``.
    (A branch per entry: at a few % non-zeros it predicts well, and beats storing every
    entry and advancing on non-zeros.)"""
    n_rows, n_topics = nwk.shape
    for r in range(n_rows):
        j = indptr[r]
        if j == indptr[r + 1]:
            continue
        row = nwk[r]
        for k in range(n_topics):
            c = row[k]
            if c != 0:
                topics[j] = k
                counts[j] = c
                j += 1


@numba.njit(**_JIT)
def scatter_rows(nwk, indptr, topics, counts):
    """Add the entries ``gather_rows`` took into ``nwk`` (zeros: sets them)."""
    for r in range(nwk.shape[0]):
        for j in range(indptr[r], indptr[r + 1]):
            nwk[r, topics[j]] += counts[j]


@numba.njit(**_JIT)
def zero_rows(nwk, indptr, topics):
    """Zero the entries listed (a block's non-zeros, as packed)."""
    for r in range(nwk.shape[0]):
        for j in range(indptr[r], indptr[r + 1]):
            nwk[r, topics[j]] = 0
