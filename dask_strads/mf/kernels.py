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

__all__ = [
    "initial_residual",
    "pair_rank_one_update",
    "rank_one_sweep",
    "rank_one_sweep_parallel",
    "warm_up",
]


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
        num = 0.0
        den = 0.0
        sub_r = own_sub[r] if do_sub else 0.0
        add_r = own_add[r] if do_add else 0.0
        for e in range(start, stop):
            j = indices[e]
            v = resid[e]
            if do_sub:
                v -= sub_r * other_sub[j]
            if do_add:
                v += add_r * other_add[j]
            resid[e] = v
            x = other_new[j]
            num += v * x
            den += x * x
        den += lam
        new = num / den if den > 0.0 else 0.0
        out_own[r] = new
        if do_post:
            for e in range(start, stop):
                v = resid[e] - new * other_new[indices[e]]
                resid[e] = v
                sse += v * v
    return sse


@numba.njit(nogil=True, cache=True, parallel=True)
def rank_one_sweep_parallel(indptr, indices, resid, own_sub, other_sub, own_add, other_add,
                            other_new, lam, out_own, do_sub, do_add, do_post):
    """Multi-threaded :func:`rank_one_sweep` (``prange`` over own indices).

    Used by the single-process CCD++ peer of the benchmark; same contract and result
    up to the summation order of the returned sum of squares.
    """
    n_own = indptr.shape[0] - 1
    sse = 0.0
    for r in numba.prange(n_own):
        start = indptr[r]
        stop = indptr[r + 1]
        num = 0.0
        den = 0.0
        sub_r = own_sub[r] if do_sub else 0.0
        add_r = own_add[r] if do_add else 0.0
        for e in range(start, stop):
            j = indices[e]
            v = resid[e]
            if do_sub:
                v -= sub_r * other_sub[j]
            if do_add:
                v += add_r * other_add[j]
            resid[e] = v
            x = other_new[j]
            num += v * x
            den += x * x
        den += lam
        new = num / den if den > 0.0 else 0.0
        out_own[r] = new
        row_sse = 0.0
        if do_post:
            for e in range(start, stop):
                v = resid[e] - new * other_new[indices[e]]
                resid[e] = v
                row_sse += v * v
        sse += row_sse
    return sse


@numba.njit(nogil=True, cache=True)
def initial_residual(indptr, indices, values, own_factor, other_factor):
    """``values[e] - own_factor[r] . other_factor[indices[e]]`` for every stored entry.

    ``own_factor`` holds the layout's own rows (local), ``other_factor`` all rows of
    the other factor. Returns a new array of the layout's length.
    """
    n_own = indptr.shape[0] - 1
    k = own_factor.shape[1]
    resid = np.empty(values.shape[0], dtype=np.float64)
    for r in range(n_own):
        for e in range(indptr[r], indptr[r + 1]):
            j = indices[e]
            acc = 0.0
            for t in range(k):
                acc += own_factor[r, t] * other_factor[j, t]
            resid[e] = values[e] - acc
    return resid


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
    if parallel:
        rank_one_sweep_parallel(indptr, indices, values.copy(), vec, vec, vec, vec, vec, 0.1,
                                out, True, True, True)
    factor = np.ones((2, 1))
    initial_residual(indptr, indices, values, factor, factor)
    pair_rank_one_update(indices, indices, values.copy(), vec, vec, vec, vec)
