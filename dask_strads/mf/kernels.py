"""Numba kernels of CCD++ matrix factorisation.

Every kernel sees one compressed layout of the observed entries: ``indptr`` and
``indices`` of a CSR (rows of a block, global column indices) or of a CSC (columns of
a block, global row indices), and ``resid``, the residual ``a_ij - w_i'h_j`` stored on
those entries. The CSR and the CSC cases are the same computation with the roles of W
and H swapped, so one kernel serves both: "own" is the side the layout is compressed
on (local rows of W for a CSR, local rows of H for a CSC), "other" the side its
indices point into (all rows of H for a CSR, all rows of W for a CSC).
"""

from __future__ import annotations

import numba
import numpy as np

from dask_strads.engine.indexing import u

__all__ = [
    "pair_rank_one_update",
    "rank_one_rows",
    "rank_one_subtract",
    "rank_one_sweep",
    "rank_one_sweep_parallel",
    "subtract_pair_products",
    "subtract_products",
    "warm_up",
]


@numba.njit(nogil=True, cache=True, inline="always")
def _bring_and_dot(indices, resid, start, stop, sub_r, other_sub, add_r, other_add, other_new,
                   do_sub, do_add):
    """Bring one own index's residuals to the current rank-one problem (``resid -= sub_r
    other_sub[j]``, ``resid += add_r other_add[j]``, as flagged; neither: read only) and
    return ``(sum resid_j other_new[j], sum other_new[j]^2)`` over its entries."""
    acc = 0.0
    nrm = 0.0
    if do_sub or do_add:
        for e in range(u(start), u(stop)):
            j = u(indices[e])
            v = resid[e]
            if do_sub:
                v -= sub_r * other_sub[j]
            if do_add:
                v += add_r * other_add[j]
            resid[e] = v
            x = other_new[j]
            acc += v * x
            nrm += x * x
    else:
        for e in range(u(start), u(stop)):
            x = other_new[u(indices[e])]
            acc += resid[e] * x
            nrm += x * x
    return acc, nrm


@numba.njit(nogil=True, cache=True)
def rank_one_sweep(indptr, indices, resid, own_sub, other_sub, own_add, other_add,
                   other_new, lam, out_own, do_sub, do_add, do_post):
    """One CCD++ half-step over a compressed layout, in place.

    For each own index ``r`` (row of the layout) the residual of its entries is first
    brought to the current rank-one problem::

        resid -= own_sub[r] * other_sub[j]      (if do_sub: drop the previous rank's final term)
        resid += own_add[r] * other_add[j]      (if do_add: R_hat = R + w_t h_t' of this rank)

    then the closed-form coordinate update is written to ``out_own[r]``::

        out_own[r] = sum_j resid_rj other_new[j] / (lam + sum_j other_new[j]^2)

    and, if ``do_post``, the new rank-one term is subtracted again
    (``resid -= out_own[r] * other_new[j]``) so that ``resid`` is the true residual.

    Returns the sum of squared residuals over the layout when ``do_post`` (else 0).
    """
    n_own = indptr.shape[0] - 1
    sse = 0.0
    for r in range(n_own):
        start = indptr[r]
        stop = indptr[r + 1]
        num, den = _bring_and_dot(indices, resid, start, stop,
                                  own_sub[r] if do_sub else 0.0, other_sub,
                                  own_add[r] if do_add else 0.0, other_add, other_new,
                                  do_sub, do_add)
        den += lam
        new = num / den if den > 0.0 else 0.0
        out_own[r] = new
        if do_post:
            for e in range(u(start), u(stop)):
                v = resid[e] - new * other_new[u(indices[e])]
                resid[e] = v
                sse += v * v
    return sse


@numba.njit(nogil=True, cache=True)
def rank_one_rows(indptr, indices, resid, w_sub, w_add, hh, lam, w_out, do_sub, do_add, nd,
                  want_ssq=True):
    """The row half of a CCD++ sweep over a CSR block, plus the column half's partial sums.

    ``hh`` interleaves two length-``n`` vectors: ``hh[2j + 1] = h[j]``, the current column
    factor of the rank being updated, and ``hh[2j] = h_sub[j]``, read only when
    ``do_sub`` (the ravelled ``(n, 2)`` array of columns ``h_sub, h``). For each
    local row ``r`` the residual is first brought to the current rank-one problem
    (``resid -= w_sub[r] h_sub[j]`` if ``do_sub``, ``resid += w_add[r] h[j]`` if
    ``do_add``, ``j`` the global column), then ``w_out[r]`` is set to the exact
    coordinate minimiser ``sum_j resid_rj h[j] / (lam + sum_j h[j]^2)``, and the sums
    that the column update needs are accumulated over the row's entries::

        nd[2j] += resid_rj * w_out[r]        nd[2j + 1] += w_out[r]^2

    (``nd`` ravels an ``(n, 2)`` array of numerators and denominators) so that, summed
    over all row blocks, ``h_new = nd[0::2] / (lam + nd[1::2])``.
    ``w_out`` may be ``w_add`` (each row reads its ``w_add`` before writing).

    Pairing ``h_sub`` with ``h`` and the numerator with the denominator puts what one
    entry reads (and writes) in one cache line, where separate vectors take two (and
    interleaved scalars index faster than ``(n, 2)`` arrays).

    Returns ``sum resid^2`` over the block (after the sub / add steps) if ``want_ssq``,
    else 0. The common sweep (neither step) reads the residual without rewriting it.
    """
    n_rows = indptr.shape[0] - 1
    ssq = 0.0
    for r in range(n_rows):
        start = indptr[r]
        stop = indptr[r + 1]
        acc = 0.0
        nrm = 0.0
        if do_sub or do_add:
            a = w_sub[r] if do_sub else 0.0
            b = w_add[r] if do_add else 0.0
            for e in range(u(start), u(stop)):
                j = 2 * indices[e]
                x = hh[u(j + 1)]
                v = resid[e]
                if do_sub:
                    v -= a * hh[u(j)]
                if do_add:
                    v += b * x
                resid[e] = v
                acc += v * x
                nrm += x * x
        else:
            for e in range(u(start), u(stop)):
                x = hh[u(2 * indices[e] + 1)]
                acc += resid[e] * x
                nrm += x * x
        nrm += lam
        new = acc / nrm if nrm > 0.0 else 0.0
        w_out[r] = new
        sq = new * new
        if want_ssq:
            for e in range(u(start), u(stop)):
                v = resid[e]
                j = 2 * indices[e]
                nd[u(j)] += v * new
                nd[u(j + 1)] += sq
                ssq += v * v
        else:
            for e in range(u(start), u(stop)):
                j = 2 * indices[e]
                nd[u(j)] += resid[e] * new
                nd[u(j + 1)] += sq
    return ssq


@numba.njit(nogil=True, cache=True)
def rank_one_subtract(indptr, indices, resid, w, h):
    """``resid -= w[r] h[j]`` over a CSR block; returns the new ``sum resid^2``."""
    n_rows = indptr.shape[0] - 1
    ssq = 0.0
    for r in range(n_rows):
        w_r = w[r]
        for e in range(u(indptr[r]), u(indptr[r + 1])):
            v = resid[e] - w_r * h[u(indices[e])]
            resid[e] = v
            ssq += v * v
    return ssq


@numba.njit(nogil=True, cache=True, parallel=True)
def rank_one_sweep_parallel(indptr, indices, resid, own_sub, other_sub, own_add, other_add,
                            other_new, lam, out_own, do_sub, do_add, do_post):
    """Multi-threaded :func:`rank_one_sweep` (``prange`` over own indices).

    Used by the single-process CCD++ peer of the benchmark; same contract and result
    up to the summation order of the returned sum of squares, and the same inner loop
    as the engine's kernels (the peer gets every optimisation ours get).
    """
    n_own = indptr.shape[0] - 1
    sse = 0.0
    for r in numba.prange(n_own):
        start = indptr[r]
        stop = indptr[r + 1]
        num, den = _bring_and_dot(indices, resid, start, stop,
                                  own_sub[r] if do_sub else 0.0, other_sub,
                                  own_add[r] if do_add else 0.0, other_add, other_new,
                                  do_sub, do_add)
        den += lam
        new = num / den if den > 0.0 else 0.0
        out_own[r] = new
        row_sse = 0.0
        if do_post:
            for e in range(u(start), u(stop)):
                v = resid[e] - new * other_new[u(indices[e])]
                resid[e] = v
                row_sse += v * v
        sse += row_sse
    return sse


@numba.njit(nogil=True, cache=True)
def subtract_products(indptr, indices, resid, own_factor, other_factor):
    """``resid[e] -= own_factor[r] . other_factor[indices[e]]`` for every stored entry.

    ``own_factor`` holds (some rank columns of) the layout's own rows, ``other_factor``
    the same rank columns of all rows of the other factor: with ``resid`` starting at
    the observed values this builds the initial residual one rank tile at a time.
    """
    n_own = indptr.shape[0] - 1
    k = own_factor.shape[1]
    for r in range(n_own):
        for e in range(indptr[r], indptr[r + 1]):
            j = indices[e]
            acc = 0.0
            for t in range(k):
                acc += own_factor[r, t] * other_factor[j, t]
            resid[e] -= acc


@numba.njit(nogil=True, cache=True)
def subtract_pair_products(rows, cols, resid, row_factor, col_factor):
    """``resid[e] -= row_factor[rows[e]] . col_factor[cols[e]]`` for listed entries."""
    k = row_factor.shape[1]
    for e in range(rows.shape[0]):
        i = rows[e]
        j = cols[e]
        acc = 0.0
        for t in range(k):
            acc += row_factor[i, t] * col_factor[j, t]
        resid[e] -= acc


@numba.njit(nogil=True, cache=True)
def pair_rank_one_update(rows, cols, resid, w_old, h_old, w_new, h_new):
    """Replace one rank-one term on listed entries and return their sum of squares.

    ``resid[e] += w_old[rows[e]] h_old[cols[e]] - w_new[rows[e]] h_new[cols[e]]``:
    keeps the residual of held-out (validation) entries current as rank ``t`` changes.
    """
    sse = 0.0
    for e in range(rows.shape[0]):
        i = rows[e]
        j = cols[e]
        v = resid[e] + w_old[i] * h_old[j] - w_new[i] * h_new[j]
        resid[e] = v
        sse += v * v
    return sse


def warm_up(parallel: bool = False) -> None:
    """Compile (or load from the cache) every kernel on tiny inputs."""
    indptr = np.array([0, 1, 2], dtype=np.int64)
    indices = np.array([0, 1], dtype=np.int64)
    values = np.ones(2)
    vec = np.ones(2)
    out = np.empty(2)
    rank_one_sweep(indptr, indices, values.copy(), vec, vec, vec, vec, vec, 0.1, out,
                   True, True, True)
    for flags in ((True, True, True), (False, False, False)):
        rank_one_rows(indptr, indices, values.copy(), vec, vec, np.ones(4), 0.1, out,
                      flags[0], flags[1], np.zeros(4), flags[2])
    rank_one_subtract(indptr, indices, values.copy(), vec, vec)
    if parallel:
        rank_one_sweep_parallel(indptr, indices, values.copy(), vec, vec, vec, vec, vec, 0.1,
                                out, True, True, True)
    factor = np.ones((2, 1))
    subtract_products(indptr, indices, values.copy(), factor, factor)
    subtract_pair_products(indices, indices, values.copy(), factor, factor)
    pair_rank_one_update(indices, indices, values.copy(), vec, vec, vec, vec)
