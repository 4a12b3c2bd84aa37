"""Numba kernels of the Lasso / ElasticNet program: plain arrays in, plain arrays out.

All objectives use scikit-learn's internal scale (``cd_fast``):
``1/2 ||r||^2 + l1 ||b||_1 + l2/2 ||b||^2`` with ``l1 = alpha * l1_ratio * n`` and
``l2 = alpha * (1 - l1_ratio) * n``, residual ``r = y - X b`` (y and X centered when an
intercept is fitted).

Sparse columns (CSC) are centered implicitly, as scikit-learn does for sparse input:
the block keeps the *raw* residual ``r_raw = y_c - X_raw b`` and uses
``x_jc' r = x_j' r_raw - mu_j sum(r_raw)`` and ``||x_jc||^2 = ||x_j||^2 - n mu_j^2``, so
an update costs O(nnz of the column), never O(n).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "cd_dense",
    "cd_sparse",
    "jacobi_dense",
    "jacobi_sparse",
    "xtr_sparse",
    "sample_block",
    "update_priority",
    "steps",
    "warm_up",
    "warm_up_schedule",
]


@njit(nogil=True, cache=True, inline="always")
def _step(tmp, col_sq, l1, l2, positive):
    """Exact coordinate minimiser given ``tmp = x_j'r + b_j ||x_j||^2``."""
    if positive and tmp < 0.0:
        return 0.0
    a = abs(tmp) - l1
    if a <= 0.0:
        return 0.0
    return (a if tmp > 0.0 else -a) / (col_sq + l2)


@njit(nogil=True, cache=True)
def cd_dense(X, col_sq, coef, residual, coords, l1, l2, positive, new_values):
    """Sequential (Gauss-Seidel) coordinate descent over ``coords`` of a dense block.

    ``X`` is Fortran-ordered (n, p_block); ``coef`` and ``residual`` are updated in
    place; ``new_values[i]`` receives the new value of ``coef[coords[i]]``.
    Returns the largest absolute coefficient change.
    """
    n = X.shape[0]
    d_max = 0.0
    for i in range(coords.shape[0]):
        j = coords[i]
        c = col_sq[j]
        old = coef[j]
        if c == 0.0:
            new_values[i] = old
            continue
        dot = 0.0
        for k in range(n):
            dot += X[k, j] * residual[k]
        new = _step(dot + old * c, c, l1, l2, positive)
        if new != old:
            d = old - new
            for k in range(n):
                residual[k] += d * X[k, j]
            coef[j] = new
            if abs(d) > d_max:
                d_max = abs(d)
        new_values[i] = new
    return d_max


@njit(nogil=True, cache=True)
def cd_sparse(data, indices, indptr, mu, center, col_sq, coef, residual, coords, l1, l2,
              positive, new_values):
    """Sequential coordinate descent over ``coords`` of a CSC block (implicit centering).

    ``mu`` holds the column means and ``center`` says whether to use them (False
    without an intercept); ``col_sq`` the squared norms of the *centered* columns.
    Returns the largest absolute coefficient change.
    """
    n = residual.shape[0]
    r_sum = 0.0
    if center:
        for k in range(n):
            r_sum += residual[k]
    d_max = 0.0
    for i in range(coords.shape[0]):
        j = coords[i]
        c = col_sq[j]
        old = coef[j]
        if c == 0.0:
            new_values[i] = old
            continue
        dot = 0.0
        for q in range(indptr[j], indptr[j + 1]):
            dot += data[q] * residual[indices[q]]
        dot -= mu[j] * r_sum
        new = _step(dot + old * c, c, l1, l2, positive)
        if new != old:
            d = old - new
            for q in range(indptr[j], indptr[j + 1]):
                residual[indices[q]] += d * data[q]
            # the column's raw entries sum to n * mu_j
            r_sum += d * n * mu[j]
            coef[j] = new
            if abs(d) > d_max:
                d_max = abs(d)
        new_values[i] = new
    return d_max


@njit(nogil=True, cache=True)
def jacobi_dense(X, col_sq, coef, residual, coords, l1, l2, positive, new_values):
    """Shotgun: every coordinate of ``coords`` updated from the same residual."""
    n = X.shape[0]
    d_max = 0.0
    m = coords.shape[0]
    for i in range(m):
        j = coords[i]
        c = col_sq[j]
        if c == 0.0:
            new_values[i] = coef[j]
            continue
        dot = 0.0
        for k in range(n):
            dot += X[k, j] * residual[k]
        new_values[i] = _step(dot + coef[j] * c, c, l1, l2, positive)
    for i in range(m):
        j = coords[i]
        d = coef[j] - new_values[i]
        if d != 0.0:
            for k in range(n):
                residual[k] += d * X[k, j]
            coef[j] = new_values[i]
            if abs(d) > d_max:
                d_max = abs(d)
    return d_max


@njit(nogil=True, cache=True)
def jacobi_sparse(data, indices, indptr, mu, col_sq, coef, residual, coords, l1, l2, positive,
                  new_values):
    """Shotgun on a CSC block: every coordinate updated from the same residual."""
    n = residual.shape[0]
    r_sum = 0.0
    for k in range(n):
        r_sum += residual[k]
    d_max = 0.0
    m = coords.shape[0]
    for i in range(m):
        j = coords[i]
        c = col_sq[j]
        if c == 0.0:
            new_values[i] = coef[j]
            continue
        dot = 0.0
        for q in range(indptr[j], indptr[j + 1]):
            dot += data[q] * residual[indices[q]]
        dot -= mu[j] * r_sum
        new_values[i] = _step(dot + coef[j] * c, c, l1, l2, positive)
    for i in range(m):
        j = coords[i]
        d = coef[j] - new_values[i]
        if d != 0.0:
            for q in range(indptr[j], indptr[j + 1]):
                residual[indices[q]] += d * data[q]
            coef[j] = new_values[i]
            if abs(d) > d_max:
                d_max = abs(d)
    return d_max


@njit(nogil=True, cache=True)
def xtr_sparse(data, indices, indptr, mu, residual, out):
    """``out_j = x_jc' r`` for every column of a CSC block (implicit centering)."""
    r_sum = 0.0
    for k in range(residual.shape[0]):
        r_sum += residual[k]
    for j in range(indptr.shape[0] - 1):
        dot = 0.0
        for q in range(indptr[j], indptr[j + 1]):
            dot += data[q] * residual[indices[q]]
        out[j] = dot - mu[j] * r_sum
    return r_sum


@njit(nogil=True, cache=True)
def steps(xtr, coef, col_sq, l1, l2, positive, out):
    """``out_j = |new b_j - b_j|``: the step an exact update of ``j`` would take now."""
    for j in range(coef.shape[0]):
        c = col_sq[j]
        if c == 0.0:
            out[j] = 0.0
        else:
            out[j] = abs(_step(xtr[j] + coef[j] * c, c, l1, l2, positive) - coef[j])


# ------------------------------------------------------------------ schedule (client)
@njit(nogil=True, cache=True)
def update_priority(weight, active, position, n_active, idx, values):
    """Set ``weight[idx] = values`` keeping the list of non-zero weights current.

    ``active[:n_active]`` lists the coordinates with a non-zero weight and
    ``position[j]`` is the slot of ``j`` in it (-1 if absent); swap-remove keeps both
    O(1) per change. Returns the new ``n_active``.
    """
    for i in range(idx.shape[0]):
        j = idx[i]
        v = values[i]
        weight[j] = v
        p = position[j]
        if v > 0.0:
            if p < 0:
                active[n_active] = j
                position[j] = n_active
                n_active += 1
        elif p >= 0:
            last = active[n_active - 1]
            active[p] = last
            position[last] = p
            position[j] = -1
            n_active -= 1
    return n_active


@njit(nogil=True, cache=True)
def sample_block(weight, active, n_active, eta, uniforms, mark, alive, n_alive):
    """Draw coordinates with probability proportional to ``weight + eta`` (no repeats).

    ``uniforms`` are U(0, 1) draws (one per candidate); coordinates hit several times
    are taken once. ``mark`` is a scratch boolean array of the block's size (left
    cleared). The floor ``eta`` applies to the ``alive[:n_alive]`` coordinates only
    (the others were screened out: provably zero at the optimum). Returns the chosen
    coordinates, highest weight first.
    """
    p = n_alive
    cum = np.empty(n_active)
    s = 0.0
    for i in range(n_active):
        s += weight[active[i]]
        cum[i] = s
    total = s + eta * p
    out = np.empty(uniforms.shape[0], dtype=np.int64)
    m = 0
    for t in range(uniforms.shape[0]):
        u = uniforms[t] * total
        if u < s:
            lo = 0
            hi = n_active - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if cum[mid] > u:
                    hi = mid
                else:
                    lo = mid + 1
            j = active[lo]
        else:
            if p == 0:
                continue
            q = int((u - s) / eta) if eta > 0.0 else p - 1
            if q >= p:
                q = p - 1
            j = alive[q]
        if not mark[j]:
            mark[j] = True
            out[m] = j
            m += 1
    out = out[:m]
    for i in range(m):
        mark[out[i]] = False
    keys = np.empty(m)
    for i in range(m):
        keys[i] = -weight[out[i]]
    return out[np.argsort(keys, kind="mergesort")]


def warm_up() -> None:
    """Compile every kernel once (cheap inputs) so the first round is not slowed."""
    n, p = 4, 3
    X = np.asfortranarray(np.arange(n * p, dtype=np.float64).reshape(n, p))
    col_sq = (X**2).sum(0)
    coef = np.zeros(p)
    r = np.ones(n)
    coords = np.arange(p, dtype=np.int64)
    out = np.empty(p)
    cd_dense(X, col_sq, coef, r, coords, 0.1, 0.0, False, out)
    jacobi_dense(X, col_sq, coef, r, coords, 0.1, 0.0, False, out)
    data = np.ones(p)
    indices = np.arange(p, dtype=np.int32)
    indptr = np.arange(p + 1, dtype=np.int32)
    mu = np.zeros(p)
    cd_sparse(data, indices, indptr, mu, True, col_sq, coef, r, coords, 0.1, 0.0, False, out)
    jacobi_sparse(data, indices, indptr, mu, col_sq, coef, r, coords, 0.1, 0.0, False, out)
    xtr_sparse(data, indices, indptr, mu, r, out)
    indices64 = indices.astype(np.int64)
    indptr64 = indptr.astype(np.int64)
    cd_sparse(data, indices64, indptr64, mu, True, col_sq, coef, r, coords, 0.1, 0.0, False, out)
    xtr_sparse(data, indices64, indptr64, mu, r, out)
    steps(out, coef, col_sq, 0.1, 0.0, False, out.copy())


def warm_up_schedule() -> None:
    """Compile the client-side schedule kernels."""
    w = np.zeros(4)
    active = np.zeros(4, dtype=np.int64)
    position = np.full(4, -1, dtype=np.int64)
    n = update_priority(w, active, position, 0, np.array([1, 2], dtype=np.int64),
                        np.array([0.5, 0.25]))
    sample_block(w, active, n, 0.01, np.array([0.1, 0.9]), np.zeros(4, dtype=np.bool_),
                 np.arange(4, dtype=np.int64), 4)
