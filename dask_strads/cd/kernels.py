"""Numba kernels of coordinate descent on column blocks: plain arrays in and out.

Objectives use scikit-learn's internal scale (``cd_fast``): ``1/2 ||r||^2 + l1 ||b||_1
+ l2/2 ||b||^2`` with ``l1 = alpha l1_ratio n``, ``l2 = alpha (1 - l1_ratio) n`` and the
residual ``r = y - X b``.

Sparse columns (CSC) are centred implicitly, as scikit-learn does for sparse input:
blocks keep the *raw* residual ``r_raw = y_c - X_raw b`` and its sum, and use
``x_jc' r = x_j' r_raw - mu_j sum(r_raw)`` and ``||x_jc||^2 = ||x_j||^2 - n mu_j^2``, so
an update costs O(non-zeros of the column), never O(n). Without an intercept ``mu`` is 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dask_strads.engine.indexing import u


@njit(nogil=True, cache=True, inline="always")
def coordinate_minimiser(tmp, col_sq, l1, l2, positive):
    """The exact minimiser along coordinate ``j`` given ``tmp = x_j'r + b_j ||x_j||^2``."""
    if positive and tmp < 0.0:
        return 0.0
    a = abs(tmp) - l1
    if a <= 0.0:
        return 0.0
    return (a if tmp > 0.0 else -a) / (col_sq + l2)


@njit(nogil=True, cache=True)
def epoch_dense(X, cols, col_sq, coef, residual, l1, l2, positive):
    """One Gauss-Seidel sweep over the columns ``cols`` of the Fortran array ``X``
    (``col_sq`` and ``coef`` are theirs); ``coef`` and ``residual`` change in place.
    Returns the largest ``|coefficient change|``."""
    n = X.shape[0]
    d_max = 0.0
    for i in range(cols.shape[0]):
        c = col_sq[i]
        if c == 0.0:
            continue
        j = u(cols[i])
        old = coef[i]
        # four partial sums: a single one is a chain of dependent adds the compiler
        # may not reorder, so the sweep would wait on the adder rather than on memory
        new = coordinate_minimiser(dot(X[:, j], residual) + old * c, c, l1, l2, positive)
        if new != old:
            d = old - new
            for k in range(n):
                residual[k] += d * X[k, j]
            coef[i] = new
            if abs(d) > d_max:
                d_max = abs(d)
    return d_max


@njit(nogil=True, cache=True)
def subtract_dense(X, cols, delta, residual):
    """``residual -= X[:, cols] delta`` without copying the columns."""
    n = X.shape[0]
    for i in range(cols.shape[0]):
        d = delta[i]
        if d == 0.0:
            continue
        j = u(cols[i])
        for k in range(n):
            residual[k] -= d * X[k, j]


@njit(nogil=True, cache=True)
def epoch_sparse(data, indices, indptr, mu, col_sq, coef, residual, r_sum, l1, l2, positive):
    """:func:`epoch_dense` over every column of a CSC matrix (implicit centring; ``r_sum``
    is ``sum(residual)``). Returns ``(largest change, new r_sum)``."""
    n = residual.shape[0]
    d_max = 0.0
    for j in range(indptr.shape[0] - 1):
        c = col_sq[j]
        if c == 0.0:
            continue
        old = coef[j]
        dot = -mu[j] * r_sum
        for q in range(u(indptr[j]), u(indptr[j + 1])):
            dot += data[q] * residual[u(indices[q])]
        new = coordinate_minimiser(dot + old * c, c, l1, l2, positive)
        if new != old:
            d = old - new
            for q in range(u(indptr[j]), u(indptr[j + 1])):
                residual[u(indices[q])] += d * data[q]
            r_sum += d * n * mu[j]  # a column's raw entries sum to n mu_j
            coef[j] = new
            if abs(d) > d_max:
                d_max = abs(d)
    return d_max, r_sum


@njit(nogil=True, cache=True)
def subtract_sparse(data, indices, indptr, mu, delta, residual):
    """``residual -= X_raw delta`` for a CSC matrix; returns the change of
    ``sum(residual)`` (``-n mu' delta``)."""
    n = residual.shape[0]
    shift = 0.0
    for j in range(indptr.shape[0] - 1):
        d = delta[j]
        if d == 0.0:
            continue
        for q in range(u(indptr[j]), u(indptr[j + 1])):
            residual[u(indices[q])] -= d * data[q]
        shift -= d * n * mu[j]
    return shift


@njit(nogil=True, cache=True)
def xtr_dense(X, cols, residual, out):
    """``out_j = x_j' r`` for the columns ``cols`` of the Fortran array ``X`` (``out``
    elsewhere untouched). BLAS: only a block's own gap round reads these, so no other
    worker needs the same bits."""
    for i in range(cols.shape[0]):
        j = u(cols[i])
        out[j] = np.dot(X[:, j], residual)


@njit(nogil=True, cache=True)
def xtr_sparse(data, indices, indptr, mu, residual, r_sum, cols, out):
    """``out_j = x_jc' r`` for the columns ``cols`` of a CSC matrix (``out`` elsewhere
    untouched)."""
    for i in range(cols.shape[0]):
        j = u(cols[i])
        dot = -mu[j] * r_sum
        for q in range(u(indptr[j]), u(indptr[j + 1])):
            dot += data[q] * residual[u(indices[q])]
        out[j] = dot


@njit(nogil=True, cache=True)
def xtr_sparse_all(data, indices, indptr, mu, residual, r_sum, out):
    """:func:`xtr_sparse` for every column (a plain pass streams faster than a list)."""
    for j in range(indptr.shape[0] - 1):
        dot = -mu[j] * r_sum
        for q in range(u(indptr[j]), u(indptr[j + 1])):
            dot += data[q] * residual[u(indices[q])]
        out[j] = dot


@njit(nogil=True, cache=True)
def gap_summary(xtr, coef, col_sq, alive, l1, l2, positive, score):
    """One pass over a block's ``X_b' r`` for a duality-gap round.

    Returns the dual norm's share (``max |x_j'r - l2 b_j|``, or the signed max when
    ``positive``), ``||b||_1``, ``||b||^2``, ``||X_b' r||^2`` and the largest score, and
    writes each column's score: the step an exact update of it would take now, the
    priority of the working-set schedule (0 for screened and empty columns)."""
    dual = -np.inf if positive else 0.0
    w_l1 = 0.0
    w_l2sq = 0.0
    xtr_sq = 0.0
    top = 0.0
    for j in range(coef.shape[0]):
        b = coef[j]
        w_l1 += abs(b)
        w_l2sq += b * b
        if not alive[j]:
            score[j] = 0.0
            continue
        g = xtr[j]
        a = g - l2 * b
        if positive:
            if a > dual:
                dual = a
        elif abs(a) > dual:
            dual = abs(a)
        xtr_sq += g * g
        c = col_sq[j]
        s = 0.0
        if c != 0.0:
            s = abs(coordinate_minimiser(g + b * c, c, l1, l2, positive) - b)
        score[j] = s
        if s > top:
            top = s
    if dual == -np.inf:
        dual = 0.0
    return dual, w_l1, w_l2sq, xtr_sq, top


@njit(nogil=True, cache=True, error_model="numpy")
def screen_out(xtr, coef, l2, inv_norm, dual_scale, radius, alive, out):
    """Gap Safe screening: the live columns with ``(1 - |x_j'r - l2 b_j| / dual_scale)
    inv_norm_j > radius`` go to ``out[:count]`` (``inv_norm_j = 1 / sqrt(||x_j||^2 +
    l2)``); returns ``count``. They are zero at every optimum."""
    count = 0
    for j in range(xtr.shape[0]):
        if alive[j]:
            a = xtr[j] - l2 * coef[j]
            if (1.0 - abs(a) / dual_scale) * inv_norm[j] > radius:
                out[count] = j
                count += 1
    return count


@njit(nogil=True, cache=True)
def column_sums(data, indptr):
    """Per-column sums and sums of squares of a CSC matrix, in one pass."""
    p = indptr.shape[0] - 1
    sums = np.zeros(p)
    sq = np.zeros(p)
    for j in range(p):
        s = 0.0
        q2 = 0.0
        for q in range(indptr[j], indptr[j + 1]):
            v = data[q]
            s += v
            q2 += v * v
        sums[j] = s
        sq[j] = q2
    return sums, sq


@njit(nogil=True, cache=True)
def take_columns(data, indices, indptr, cols):
    """Columns ``cols`` of a CSC matrix as compact CSC arrays (int64 ``indptr``)."""
    m = cols.shape[0]
    ptr = np.empty(m + 1, dtype=np.int64)
    ptr[0] = 0
    for i in range(m):
        j = cols[i]
        ptr[i + 1] = ptr[i] + (indptr[j + 1] - indptr[j])
    out_data = np.empty(ptr[m], dtype=data.dtype)
    out_indices = np.empty(ptr[m], dtype=indices.dtype)
    for i in range(m):
        j = u(cols[i])
        src = u(indptr[j])
        dst = u(ptr[i])
        for q in range(u(ptr[i + 1] - ptr[i])):
            out_data[dst + q] = data[src + q]
            out_indices[dst + q] = indices[src + q]
    return out_data, out_indices, ptr


@njit(nogil=True, cache=True)
def dot(a, b):
    """``a' b`` in a fixed order of four partial sums: every worker of a peer phase
    must get the same bits, which a BLAS ``ddot`` does not promise across alignments."""
    n = a.shape[0]
    m = n - n % 4
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for i in range(0, m, 4):
        s0 += a[i] * b[i]
        s1 += a[i + 1] * b[i + 1]
        s2 += a[i + 2] * b[i + 2]
        s3 += a[i + 3] * b[i + 3]
    for i in range(m, n):
        s0 += a[i] * b[i]
    return (s0 + s1) + (s2 + s3)


@njit(nogil=True, cache=True)
def total(a):
    """``sum(a)`` in a fixed order (the same bits on every worker)."""
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i]
    return s


@njit(nogil=True, cache=True)
def penalty(coef, l1, l2):
    """``l1 ||b||_1 + l2/2 ||b||^2``."""
    s1 = 0.0
    s2 = 0.0
    for i in range(coef.shape[0]):
        s1 += abs(coef[i])
        s2 += coef[i] * coef[i]
    return l1 * s1 + 0.5 * l2 * s2


def warm_up() -> None:
    """Compile the kernels once, on small inputs, for int32 and int64 indices."""
    X = np.asfortranarray(np.arange(12, dtype=np.float64).reshape(4, 3))
    col_sq = (X**2).sum(0)
    coef = np.zeros(3)
    r = np.ones(4)
    all_cols = np.arange(3, dtype=np.int64)
    epoch_dense(X, all_cols, col_sq, coef, r, 0.1, 0.0, False)
    subtract_dense(X, all_cols, coef, r)
    xtr_dense(X, all_cols, r, np.empty(3))
    mu = np.zeros(3)
    out = np.empty(3)
    alive = np.ones(3, dtype=np.bool_)
    cols = np.arange(3, dtype=np.int64)
    for ind_t, ptr_t in ((np.int32, np.int32), (np.int32, np.int64), (np.int64, np.int64)):
        data = np.ones(3)
        indices = np.arange(3, dtype=ind_t)
        indptr = np.arange(4, dtype=ptr_t)
        epoch_sparse(data, indices, indptr, mu, col_sq, coef, r, 4.0, 0.1, 0.0, False)
        subtract_sparse(data, indices, indptr, mu, coef, r)
        xtr_sparse(data, indices, indptr, mu, r, 4.0, cols, out)
        xtr_sparse_all(data, indices, indptr, mu, r, 4.0, out)
        column_sums(data, indptr)
        take_columns(data, indices, indptr, cols)
    gap_summary(out, coef, col_sq, alive, 0.1, 0.0, False, out.copy())
    screen_out(out, coef, 0.0, col_sq, 1.0, 0.5, alive, np.empty(3, np.int64))
    dot(r, r)
    total(r)
    penalty(coef, 0.1, 0.0)
