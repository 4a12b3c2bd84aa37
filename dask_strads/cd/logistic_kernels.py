"""Numba kernels of the logistic datafit ``sum_i log(1 + exp(-y_i z_i))``, ``y_i = +-1``.

Blocks keep ``r = -z`` (``z = X b + b0`` the margins), so that a coefficient's change
moves ``r`` exactly as it moves the quadratic datafit's residual. A coordinate step is a
proximal Newton step along the column: the curvature ``sum_i x_ij^2 p_i (1 - p_i)`` (at
least ``||x_j||^2 / 4`` times a small floor, so that a step never runs away), with
``p_i = sigmoid(y_i r_i)``; a step that raises the column's objective is halved until it
does not (it never does for steps of curvature ``||x_j||^2 / 4``, the loss's Lipschitz
bound).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dask_strads.cd.kernels import coordinate_minimiser
from dask_strads.engine.indexing import u

# the curvature used is at least this share of the Lipschitz bound ||x_j||^2 / 4
CURVATURE_FLOOR = 1e-3


@njit(nogil=True, cache=True, inline="always")
def sigmoid(t):
    if t >= 0.0:
        return 1.0 / (1.0 + math.exp(-t))
    e = math.exp(t)
    return e / (1.0 + e)


@njit(nogil=True, cache=True, inline="always")
def log1pexp(t):
    """``log(1 + exp(t))`` without overflow."""
    if t > 0.0:
        return t + math.log1p(math.exp(-t))
    return math.log1p(math.exp(t))


@njit(nogil=True, cache=True, inline="always")
def _step(old, g, h, col_sq, l1, l2, positive):
    """The proximal Newton step's new value for gradient ``-g`` and curvature ``h``."""
    h = max(h, CURVATURE_FLOOR * 0.25 * col_sq)
    return coordinate_minimiser(g + old * h, h, l1, l2, positive)


@njit(nogil=True, cache=True)
def epoch_dense(X, cols, col_sq, coef, r, y, l1, l2, positive):
    """One sweep over the columns ``cols`` of the Fortran array ``X`` (``col_sq`` and
    ``coef`` are theirs); ``coef`` and ``r`` change in place. Returns the largest
    ``|coefficient change|``."""
    n = X.shape[0]
    d_max = 0.0
    for i in range(cols.shape[0]):
        c = col_sq[i]
        if c == 0.0:
            continue
        j = u(cols[i])
        old = coef[i]
        g = 0.0
        h = 0.0
        for k in range(n):
            p = sigmoid(y[k] * r[k])
            g += X[k, j] * y[k] * p
            h += X[k, j] * X[k, j] * p * (1.0 - p)
        new = _step(old, g, h, c, l1, l2, positive)
        while new != old:
            # the column's objective change, exactly, before committing the step
            d = old - new
            change = l1 * (abs(new) - abs(old)) + 0.5 * l2 * (new * new - old * old)
            for k in range(n):
                t = y[k] * r[k]
                change += log1pexp(t + y[k] * d * X[k, j]) - log1pexp(t)
            if change <= 1e-12 * (1.0 + abs(change)) or abs(d) < 1e-15 * (1.0 + abs(old)):
                break
            new = 0.5 * (old + new)
        if new != old:
            d = old - new
            for k in range(n):
                r[k] += d * X[k, j]
            coef[i] = new
            if abs(d) > d_max:
                d_max = abs(d)
    return d_max


@njit(nogil=True, cache=True)
def epoch_sparse(data, indices, indptr, col_sq, coef, r, y, l1, l2, positive):
    """:func:`epoch_dense` over the columns of a CSC matrix (O(non-zeros) per column)."""
    d_max = 0.0
    for j in range(indptr.shape[0] - 1):
        c = col_sq[j]
        if c == 0.0:
            continue
        a, b = u(indptr[j]), u(indptr[j + 1])
        old = coef[j]
        g = 0.0
        h = 0.0
        for q in range(a, b):
            i = u(indices[q])
            p = sigmoid(y[i] * r[i])
            g += data[q] * y[i] * p
            h += data[q] * data[q] * p * (1.0 - p)
        new = _step(old, g, h, c, l1, l2, positive)
        while new != old:
            d = old - new
            change = l1 * (abs(new) - abs(old)) + 0.5 * l2 * (new * new - old * old)
            for q in range(a, b):
                i = u(indices[q])
                t = y[i] * r[i]
                change += log1pexp(t + y[i] * d * data[q]) - log1pexp(t)
            if change <= 1e-12 * (1.0 + abs(change)) or abs(d) < 1e-15 * (1.0 + abs(old)):
                break
            new = 0.5 * (old + new)
        if new != old:
            d = old - new
            for q in range(a, b):
                r[u(indices[q])] += d * data[q]
            coef[j] = new
            if abs(d) > d_max:
                d_max = abs(d)
    return d_max


@njit(nogil=True, cache=True)
def loss(r, y):
    """``sum_i log(1 + exp(y_i r_i))`` (the loss at margins ``z = -r``), in a fixed order."""
    s = 0.0
    for i in range(r.shape[0]):
        s += log1pexp(y[i] * r[i])
    return s


@njit(nogil=True, cache=True)
def neg_gradient(r, y, out):
    """``out = -grad loss = y * sigmoid(y r)``; returns ``sum(out)`` (the intercept's)."""
    s = 0.0
    for i in range(r.shape[0]):
        out[i] = y[i] * sigmoid(y[i] * r[i])
        s += out[i]
    return s


@njit(nogil=True, cache=True)
def intercept_step(r, y):
    """One Newton step on the intercept (every row's ``r`` moves by ``-step``); returns
    the step. Its size is bounded: far from the optimum the curvature misleads."""
    g = 0.0
    h = 0.0
    for i in range(r.shape[0]):
        p = sigmoid(y[i] * r[i])
        g += y[i] * p
        h += p * (1.0 - p)
    step = g / max(h, 1e-12 * r.shape[0])
    step = min(max(step, -4.0), 4.0)
    for i in range(r.shape[0]):
        r[i] -= step
    return step


@njit(nogil=True, cache=True)
def entropy_sum(p, scale):
    """``sum_i H(p_i / scale)`` with ``H(q) = -q log q - (1 - q) log(1 - q)``."""
    s = 0.0
    for i in range(p.shape[0]):
        q = abs(p[i]) / scale
        if 0.0 < q < 1.0:
            s -= q * math.log(q) + (1.0 - q) * math.log1p(-q)
    return s


def warm_up() -> None:
    X = np.asfortranarray(np.arange(12, dtype=np.float64).reshape(4, 3))
    col_sq = (X**2).sum(0)
    y = np.array([1.0, -1.0, 1.0, -1.0])
    r = np.zeros(4)
    epoch_dense(X, np.arange(3, dtype=np.int64), col_sq, np.zeros(3), r, y, 0.1, 0.0, False)
    for ind_t, ptr_t in ((np.int32, np.int32), (np.int32, np.int64), (np.int64, np.int64)):
        epoch_sparse(np.ones(3), np.arange(3, dtype=ind_t), np.arange(4, dtype=ptr_t), col_sq,
                     np.zeros(3), r, y, 0.1, 0.0, False)
    loss(r, y)
    neg_gradient(r, y, np.empty(4))
    intercept_step(r.copy(), y)
    entropy_sum(r, 1.0)
