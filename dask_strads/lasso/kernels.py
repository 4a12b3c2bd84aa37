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

from dask_strads.engine.indexing import u

__all__ = [
    "cd_dense",
    "cd_sparse",
    "jacobi_dense",
    "jacobi_sparse",
    "xtr_sparse",
    "xtr_sparse_at",
    "solve_dense",
    "solve_sparse",
    "line_search",
    "dot",
    "greedy_keep",
    "penalty_change",
    "fold_linear",
    "gather_fold",
    "coef_max",
    "gap_summary",
    "screen_out",
    "working_set",
    "ws_candidates",
    "sample_block",
    "update_priority",
    "column_sums",
    "shift_from",
    "xtr_sparse_bounded",
    "take_columns",
    "locate_without",
    "load_sub_coef",
    "store_sub_coef",
    "residual_change",
    "warm_up",
    "warm_up_schedule",
    "commit_block",
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
        j = u(coords[i])
        c = col_sq[j]
        old = coef[j]
        if c == 0.0:
            new_values[i] = old
            continue
        dot = 0.0
        for q in range(u(indptr[j]), u(indptr[j + 1])):
            dot += data[q] * residual[u(indices[q])]
        dot -= mu[j] * r_sum
        new = _step(dot + old * c, c, l1, l2, positive)
        if new != old:
            d = old - new
            for q in range(u(indptr[j]), u(indptr[j + 1])):
                residual[u(indices[q])] += d * data[q]
            # the column's raw entries sum to n * mu_j
            r_sum += d * n * mu[j]
            coef[j] = new
            if abs(d) > d_max:
                d_max = abs(d)
        new_values[i] = new
    return d_max


@njit(nogil=True, cache=True)
def take_columns(data, indices, indptr, cols):
    """Columns ``cols`` (increasing) of a CSC matrix as compact CSC arrays, with an
    int64 ``indptr`` (the copy is what a working set's sweeps stream through)."""
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
def load_sub_coef(coef, coords, in_coords, at, sub_coef, sub_indptr):
    """``sub_coef[at] = coef[coords[in_coords]]`` (a working set's copy takes the block's
    coefficients before its sweeps); returns the non-zeros of the copy's columns ``at``."""
    nnz = 0
    for i in range(at.shape[0]):
        k = u(at[i])
        sub_coef[k] = coef[u(coords[u(in_coords[i])])]
        nnz += sub_indptr[k + 1] - sub_indptr[k]
    return nnz


@njit(nogil=True, cache=True)
def store_sub_coef(coef, coords, in_coords, at, sub_coef, moved_pos, moved_val):
    """The reverse of :func:`load_sub_coef` after the sweeps, for the coefficients that
    changed only; their positions in ``coords`` and new values go to ``moved_pos[:m]``
    and ``moved_val[:m]``. Returns ``m``."""
    m = 0
    for i in range(at.shape[0]):
        j = u(coords[u(in_coords[i])])
        v = sub_coef[u(at[i])]
        if v != coef[j]:
            coef[j] = v
            moved_pos[m] = in_coords[i]
            moved_val[m] = v
            m += 1
    return m


@njit(nogil=True, cache=True)
def locate_without(n_span, dropped, live_pos, at, in_coords):
    """Where a working set's copy holds ``coords``, the span without the positions
    ``dropped`` (increasing), in one pass: the copy's column ``k`` is span position
    ``live_pos[k]`` (increasing). Writes the copy columns ``at[:m]`` and the positions
    ``in_coords[:m]`` in ``coords`` of the coordinates the copy holds; returns ``m``."""
    d = 0
    k = 0
    c = 0
    m = 0
    n_drop = dropped.shape[0]
    n_live = live_pos.shape[0]
    for i in range(n_span):
        held = k < n_live and live_pos[k] == i
        if held:
            k += 1
        if d < n_drop and dropped[d] == i:
            d += 1
            continue
        if held:
            at[m] = k - 1
            in_coords[m] = c
            m += 1
        c += 1
    return m


@njit(nogil=True, cache=True)
def residual_change(before, after):
    """A push's residual change ``d = after - before`` in one pass: the change, the
    indices where it is non-zero (the first ``count`` entries), ``count``, and the
    sums a pull needs: ``before' d``, ``d' d``, ``sum(before)``, ``sum(d)`` and
    ``sum(before_k^4)`` over the rows that changed. Sums of ``d`` itself, not
    differences of sums of ``before`` and ``after``: near the optimum ``d`` is many
    orders of magnitude smaller than the residual, and such a difference would be
    mostly rounding. (``d`` itself carries the rounding of the updates of the
    residual, about ``eps |before_k|`` per update of row ``k`` with a random sign, so
    ``before' d`` carries about ``eps sqrt(sum before_k^4)`` per update of a row.)"""
    n = before.shape[0]
    change = np.empty(n)
    idx = np.empty(n, dtype=np.int32)
    count = 0
    rd = 0.0
    dd = 0.0
    s0 = 0.0
    sd = 0.0
    bt = 0.0
    for k in range(n):
        b = before[k]
        d = after[k] - b
        change[k] = d
        if d != 0.0:
            idx[count] = k
            count += 1
            bt += b * b * b * b
        rd += b * d
        dd += d * d
        s0 += b
        sd += d
    return change, idx, count, rd, dd, s0, sd, bt


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
        j = u(coords[i])
        c = col_sq[j]
        if c == 0.0:
            new_values[i] = coef[j]
            continue
        dot = 0.0
        for q in range(u(indptr[j]), u(indptr[j + 1])):
            dot += data[q] * residual[u(indices[q])]
        dot -= mu[j] * r_sum
        new_values[i] = _step(dot + coef[j] * c, c, l1, l2, positive)
    for i in range(m):
        j = u(coords[i])
        d = coef[j] - new_values[i]
        if d != 0.0:
            for q in range(u(indptr[j]), u(indptr[j + 1])):
                residual[u(indices[q])] += d * data[q]
            coef[j] = new_values[i]
            if abs(d) > d_max:
                d_max = abs(d)
    return d_max


@njit(nogil=True, cache=True)
def coef_max(coef, coords):
    """``max |coef[coords]|`` (0 for no coordinates)."""
    w = 0.0
    for i in range(coords.shape[0]):
        a = abs(coef[coords[i]])
        if a > w:
            w = a
    return w


@njit(nogil=True, cache=True)
def solve_dense(X, col_sq, coef, residual, coords, l1, l2, positive, max_epochs, tol_w,
                tol_first):
    """Up to ``max_epochs`` Gauss-Seidel sweeps of :func:`cd_dense` over ``coords``.

    Stops after a sweep whose largest change is at most ``tol_w`` times the largest
    ``|coef|`` over ``coords`` (scikit-learn's trigger) or ``tol_first`` times the
    first sweep's largest change (the block-local solve has gained enough).
    Returns ``(sweeps run, largest change of the first sweep)``.
    """
    scratch = np.empty(coords.shape[0])
    first = 0.0
    epoch = 0
    while epoch < max_epochs:
        d_max = cd_dense(X, col_sq, coef, residual, coords, l1, l2, positive, scratch)
        if epoch == 0:
            first = d_max
        epoch += 1
        if d_max <= tol_w * coef_max(coef, coords) or d_max <= tol_first * first:
            break
    return epoch, first


@njit(nogil=True, cache=True)
def solve_sparse(data, indices, indptr, mu, center, col_sq, coef, residual, coords, l1, l2,
                 positive, max_epochs, tol_w, tol_first):
    """:func:`solve_dense` for a CSC block (sweeps of :func:`cd_sparse`)."""
    scratch = np.empty(coords.shape[0])
    first = 0.0
    epoch = 0
    while epoch < max_epochs:
        d_max = cd_sparse(data, indices, indptr, mu, center, col_sq, coef, residual, coords,
                          l1, l2, positive, scratch)
        if epoch == 0:
            first = d_max
        epoch += 1
        if d_max <= tol_w * coef_max(coef, coords) or d_max <= tol_first * first:
            break
    return epoch, first


@njit(nogil=True, cache=True)
def dot(a, b):
    """``a' b`` for 1-d float arrays without BLAS: a threaded BLAS ``ddot`` spins its
    threads against the workers' on a small machine (measured: 6 ms for n = 20000
    on the client of a 2-worker LocalCluster on 2 cores), and its result may depend on
    the arrays' alignment, where a peer phase needs every worker to get the same bits
    (see ``LassoProgram._peer_phase``). Four partial sums in a fixed order: one sum
    waited on each add's latency (0.19 ms for n = 100 000, against 0.05 ms)."""
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
def sweep_moves(vec, idx, prev, l1, l2):
    """What a peer phase's round sends about its sweep over ``vec[idx]``, which held
    ``prev`` before, in one pass: the largest ``|vec[idx]|``, the positions in ``idx``
    that moved with their old values and changes, :func:`fold_linear`'s split of
    those, and ``sum |old| + |change|`` over them (the size of the penalty's
    rounding)."""
    m = idx.shape[0]
    w_max = 0.0
    pos = np.empty(m, dtype=np.int64)
    base = np.empty(m)
    d = np.empty(m)
    k = 0
    size = 0.0
    for i in range(m):
        v = vec[idx[i]]
        a = abs(v)
        if a > w_max:
            w_max = a
        step = v - prev[i]
        if step != 0.0:
            pos[k] = i
            base[k] = prev[i]
            d[k] = step
            size += abs(prev[i]) + abs(step)
            k += 1
    keep, lin, quad = fold_linear(base[:k], d[:k], l1, l2)
    return w_max, pos[:k], base[:k], d[:k], keep, lin, quad, size


@njit(nogil=True, cache=True)
def _slope(t, b, d, r0d, dd, l1, l2):
    g = r0d + t * dd
    for i in range(b.shape[0]):
        v = b[i] + t * d[i]
        g += l2 * v * d[i]
        if v > 0.0:
            g += l1 * d[i]
        elif v < 0.0:
            g -= l1 * d[i]
        else:
            g += l1 * abs(d[i])  # right derivative at a kink
    return g


@njit(nogil=True, cache=True)
def line_search(b, d, r0d, dd, l1, l2, lo, hi):
    """Exact minimiser over ``[lo, hi]`` of the convex function of ``t``
    ``r0d t + dd t^2 / 2 + l1 ||b + t d||_1 + l2/2 ||b + t d||^2``.

    With ``r0d = r0' D`` and ``dd = ||D||^2`` (``D`` the residual change that goes
    with the coefficient change ``d``) this is the objective along ``b + t d``
    up to a constant. Its slope is non-decreasing and piecewise linear: regula
    falsi (Illinois) on the slope is exact once the bracket holds one piece.
    """
    g_hi = _slope(hi, b, d, r0d, dd, l1, l2)
    if g_hi <= 0.0:
        return hi
    g_lo = _slope(lo, b, d, r0d, dd, l1, l2)
    if g_lo >= 0.0:
        return lo
    width = hi - lo
    side = 0
    for _ in range(100):
        t = hi - g_hi * (hi - lo) / (g_hi - g_lo)
        if not lo < t < hi:
            t = 0.5 * (lo + hi)
        g = _slope(t, b, d, r0d, dd, l1, l2)
        if g == 0.0:
            return t
        if g > 0.0:
            hi, g_hi = t, g
            if side == 1:
                g_lo *= 0.5
            side = 1
        else:
            lo, g_lo = t, g
            if side == -1:
                g_hi *= 0.5
            side = -1
        if hi - lo < 1e-6 * width:
            break
    return 0.5 * (lo + hi)


@njit(nogil=True, cache=True)
def fold_linear(b, d, l1, l2):
    """Split :func:`line_search`'s slope over ``t`` in ``[0, 1]``: coordinates whose
    sign cannot change along ``b + t d`` (``b`` and ``b + d`` of one strict sign, or
    ``b == 0``, where the right derivative holds for every ``t > 0``) add
    ``l2 (b + t d) d + l1 sign d``, linear in ``t``. Returns the mask of the other
    coordinates and the folded constant and ``t`` coefficient, so that
    ``line_search(b[keep], d[keep], r0d + lin, dd + quad, ...)`` is the same search
    at the cost of the sign-changing coordinates only."""
    m = b.shape[0]
    keep = np.zeros(m, dtype=np.bool_)
    lin = 0.0
    quad = 0.0
    for i in range(m):
        bi = b[i]
        di = d[i]
        e = bi + di
        if bi > 0.0 and e > 0.0:
            lin += l2 * bi * di + l1 * di
        elif bi < 0.0 and e < 0.0:
            lin += l2 * bi * di - l1 * di
        elif bi == 0.0:
            lin += l1 * abs(di)
        else:
            keep[i] = True
            continue
        quad += l2 * di * di
    return keep, lin, quad


@njit(nogil=True, cache=True)
def gather_fold(coef, coords, pos, new, l1, l2):
    """A block's moved coordinates as a working-set round's pull needs them, in one
    kernel: ``moved = coords[pos]``, ``base = coef[moved]``, ``d = new - base``, and
    :func:`fold_linear`'s split of ``(base, d)`` as the kept coordinates' ``base`` and
    ``d`` and the folded constant and ``t`` coefficient. With a cold cache, on a block
    of Lasso problem (c): 0.64-0.86 ms, against 0.80-1.16 ms for numpy's passes.

    The gathers run as loops of their own: ``coef`` is large and cold, and its loads
    overlap only where no branch follows each (fused with the fold's sign tests into
    one loop, the kernel took 1.27 ms against 1.0 ms for numpy's passes)."""
    m = pos.shape[0]
    moved = np.empty(m, dtype=np.int64)
    for i in range(m):
        moved[i] = coords[pos[i]]
    base = np.empty(m)
    for i in range(m):
        base[i] = coef[moved[i]]
    d = new - base
    keep, lin, quad = fold_linear(base, d, l1, l2)
    return moved, base, d, base[keep], d[keep], lin, quad


@njit(nogil=True, cache=True)
def penalty_change(b, d, t, l1, l2):
    """``pen(b + t d) - pen(b)`` for ``pen = l1 ||.||_1 + l2/2 ||.||^2``, summed per
    coordinate (no cancellation between large totals)."""
    s = 0.0
    for i in range(b.shape[0]):
        v = b[i] + t * d[i]
        s += l1 * (abs(v) - abs(b[i])) + 0.5 * l2 * (v * v - b[i] * b[i])
    return s


@njit(nogil=True, cache=True)
def greedy_keep(candidates, ptr, neighbours, kept):
    """The dependency check: keep candidates in order unless a neighbour (a column
    with ``|corr| >= rho``, CSR lists ``ptr``/``neighbours``) was kept before.
    ``kept`` is a boolean scratch array over all columns (left cleared)."""
    m = candidates.shape[0]
    keep = np.ones(m, dtype=np.bool_)
    for i in range(m):
        j = candidates[i]
        if ptr[j] == ptr[j + 1]:
            continue
        for q in range(ptr[j], ptr[j + 1]):
            if kept[neighbours[q]]:
                keep[i] = False
                break
        if keep[i]:
            kept[j] = True
    for i in range(m):
        kept[candidates[i]] = False
    return keep


@njit(nogil=True, cache=True)
def xtr_sparse(data, indices, indptr, mu, residual, out):
    """``out_j = x_jc' r`` for every column of a CSC block (implicit centering)."""
    r_sum = 0.0
    for k in range(residual.shape[0]):
        r_sum += residual[k]
    for j in range(indptr.shape[0] - 1):
        out[j] = _column_dot(data, indices, indptr, residual, j) - mu[j] * r_sum
    return r_sum


@njit(nogil=True, cache=True)
def xtr_sparse_at(data, indices, indptr, mu, residual, cols, out):
    """:func:`xtr_sparse` for the columns ``cols`` only (``out`` elsewhere untouched)."""
    r_sum = 0.0
    for k in range(residual.shape[0]):
        r_sum += residual[k]
    for i in range(cols.shape[0]):
        j = u(cols[i])
        out[j] = _column_dot(data, indices, indptr, residual, j) - mu[j] * r_sum
    return r_sum


@njit(nogil=True, cache=True)
def xtr_sparse_bounded(data, indices, indptr, mu, residual, cols, all_cols, coef, ref_abs,
                       abs_sum, shift, sum_shift, thresh, out):
    """:func:`xtr_sparse` (over every column, or over ``cols`` unless ``all_cols``)
    where it can matter to a gap round: a zero coefficient's column whose
    ``|x_jc' r|`` is provably below ``thresh`` gets that bound instead of its value.

    ``ref_abs_j = |x_jc' r_ref|`` at a reference residual with ``max |r - r_ref| =
    shift`` and ``|sum (r - r_ref)| = sum_shift``; then ``|x_jc' r| <= ref_abs_j +
    ||x_j||_1 shift + |mu_j| sum_shift`` (``abs_sum_j = ||x_j||_1``). Returns
    ``(sum r, columns read)``."""
    r_sum = 0.0
    for k in range(residual.shape[0]):
        r_sum += residual[k]
    m = indptr.shape[0] - 1 if all_cols else cols.shape[0]
    n_read = 0
    for i in range(m):
        j = u(i) if all_cols else u(cols[i])
        if coef[j] == 0.0:
            bound = ref_abs[j] + abs_sum[j] * shift + abs(mu[j]) * sum_shift
            if bound < thresh:
                out[j] = bound
                continue
        out[j] = _column_dot(data, indices, indptr, residual, j) - mu[j] * r_sum
        n_read += 1
    return r_sum, n_read


@njit(nogil=True, cache=True)
def shift_from(residual, ref):
    """``(max |r - r_ref|, |sum (r - r_ref)|)``."""
    top = 0.0
    total = 0.0
    for k in range(residual.shape[0]):
        d = residual[k] - ref[k]
        total += d
        if abs(d) > top:
            top = abs(d)
    return top, abs(total)


@njit(nogil=True, cache=True, inline="always")
def _column_dot(data, indices, indptr, residual, j):
    dot = 0.0
    for q in range(u(indptr[j]), u(indptr[j + 1])):
        dot += data[q] * residual[u(indices[q])]
    return dot


@njit(nogil=True, cache=True)
def column_sums(data, indptr):
    """Per-column sums, sums of squares and sums of absolute values of a CSC matrix, in
    one pass over its non-zeros (scipy's ``X.multiply(X).sum(0)`` builds a copy of the
    matrix first)."""
    p = indptr.shape[0] - 1
    sums = np.zeros(p)
    sq = np.zeros(p)
    abs_sums = np.zeros(p)
    for j in range(p):
        s = 0.0
        q2 = 0.0
        a = 0.0
        for q in range(indptr[j], indptr[j + 1]):
            v = data[q]
            s += v
            q2 += v * v
            a += abs(v)
        sums[j] = s
        sq[j] = q2
        abs_sums[j] = a
    return sums, sq, abs_sums


@njit(nogil=True, cache=True, error_model="numpy")
def screen_out(xta, inv_norm, dual_scale, radius, alive, out):
    """Gap Safe screening test in one pass: the columns ``j`` still ``alive`` with
    ``(1 - |xta_j| / dual_scale) inv_norm_j > radius`` go to ``out[:count]``, where
    ``inv_norm_j = 1 / sqrt(||x_j||^2 + l2)`` (kept per block: a square root and a
    division per column took 6 of the pass's 8 ms on a block of 1 000 000 columns);
    returns ``count``. (An all-zero column has ``inv_norm`` +inf: screened, unless
    its numerator is not positive.)"""
    count = 0
    for j in range(xta.shape[0]):
        if alive[j]:
            if (1.0 - abs(xta[j]) / dual_scale) * inv_norm[j] > radius:
                out[count] = j
                count += 1
    return count


@njit(nogil=True, cache=True)
def gap_summary(xtr, coef, col_sq, l1, l2, positive, xta, step_idx, step_val):
    """One pass over a block's ``X_b' r`` for a duality-gap round: ``xta = xtr - l2 b``
    (written in place, kept for screening), the dual norm (``max xta`` when
    ``positive``, else ``max |xta|``), ``||b||_1``, ``||b||^2``, ``||xtr||^2``, and the
    non-zero steps ``|new b_j - b_j|`` (the step an exact update of ``j`` would take
    now; 0 for an empty column) compacted into ``step_idx`` / ``step_val``.
    Returns ``(dual_norm, w_l1, w_l2sq, xtr_sq, n_steps)``."""
    dual = -np.inf if positive else 0.0
    w_l1 = 0.0
    w_l2sq = 0.0
    xtr_sq = 0.0
    n = 0
    for j in range(coef.shape[0]):
        g = xtr[j]
        b = coef[j]
        a = g - l2 * b
        xta[j] = a
        if positive:
            if a > dual:
                dual = a
        elif abs(a) > dual:
            dual = abs(a)
        w_l1 += abs(b)
        w_l2sq += b * b
        xtr_sq += g * g
        c = col_sq[j]
        if c != 0.0:
            d = abs(_step(g + b * c, c, l1, l2, positive) - b)
            if d != 0.0:
                step_idx[n] = j
                step_val[n] = d
                n += 1
    if coef.shape[0] == 0:
        dual = 0.0
    return dual, w_l1, w_l2sq, xtr_sq, n


# ------------------------------------------------------------------ working sets (worker)
@njit(nogil=True, cache=True)
def ws_candidates(coef, weight, alive_mask, active):
    """What :func:`working_set` starts from, in two passes: the support (alive
    non-zero coefficients, increasing), and the alive zero coefficients with a positive
    weight (in ``active`` order) with their weights; also how many ``active`` entries
    are alive."""
    p = coef.shape[0]
    n_sup = 0
    for j in range(p):
        if coef[j] != 0.0 and alive_mask[j]:
            n_sup += 1
    support = np.empty(n_sup, dtype=np.int64)
    n_sup = 0
    for j in range(p):
        if coef[j] != 0.0 and alive_mask[j]:
            support[n_sup] = j
            n_sup += 1
    pos = np.empty(active.shape[0], dtype=np.int64)
    pos_w = np.empty(active.shape[0])
    n_pos = 0
    n_act = 0
    w_sum = 0.0
    for i in range(active.shape[0]):
        j = active[i]
        if alive_mask[j]:
            n_act += 1
            w_sum += weight[j]
            if coef[j] == 0.0:
                pos[n_pos] = j
                pos_w[n_pos] = weight[j]
                n_pos += 1
    return support, pos[:n_pos], pos_w[:n_pos], n_act, w_sum


def working_set(weight, coef, alive_mask, active, k_of_support, rng):
    """A block's working set: its support plus coordinates sampled without replacement
    with probability proportional to ``weight + eta`` among those with a positive
    weight (``eta`` = 1% of their mean weight), ``k_of_support(|support|)`` in all or
    fewer (when fewer have a positive weight), sorted.

    ``alive_mask`` marks the coordinates that may be picked and ``active`` those with a
    positive weight (a gap round's non-zero steps).

    A coordinate of weight 0 is never picked. Its weight is the step its exact update
    would take at the gap round's residual: it is at its optimum there, and its
    first sweep would not move it. STRADS's floor exists for priorities that are
    stale (a coordinate's last change); here every gap round re-evaluates every
    coordinate. Filling the rest of the working set with weight-0 coordinates,
    uniformly (the floor's share), took 2 workers 0.70 s to 1e-6 on Lasso problem
    (b) of the benchmark against 0.56 s without (1.38 s against 1.20 s on (c), 58 s
    against 43 s on (a)): late in a fit they were half the working set, swept, cut
    and sent for nothing.

    Sampling without replacement is an exponential race: the picks are the
    coordinates whose arrival times ``E_j / (w_j + eta)`` (``E_j ~ Exp(1)``) come
    first, as with Efraimidis-Spirakis keys.
    """
    support, pos, pos_w, n_act, w_sum = ws_candidates(coef, weight, alive_mask, active)
    need = k_of_support(support.shape[0]) - support.shape[0]
    if need <= 0 or pos.shape[0] == 0:
        return support
    if pos.shape[0] > need:
        eta = 0.01 * (w_sum / n_act)
        arrive = rng.standard_exponential(pos.shape[0]) / (pos_w + eta)
        pos = pos[np.argpartition(arrive, need - 1)[:need]]
    return np.sort(np.concatenate([support, pos]))


# ------------------------------------------------------------------ schedule (client)
@njit(nogil=True, cache=True)
def commit_block(coef, idx, values, base, step, pending):
    """Commit a block's working-set update at step length ``step``: ``coef[idx]``
    becomes ``base + step (values - base)`` (``values`` itself at step 1, bit for bit),
    and at a shortened step ``pending[idx]`` gains what the worker must add to its own
    coefficients to match. ``base`` is ``coef[idx]`` before the round.

    Returns ``|coef[idx] - base|`` (the coordinates' new priorities) and the change in
    the number of non-zero coefficients. No numpy temporaries: this runs on the
    client every round, while the workers wait. The scatters into the large, cold
    ``coef`` and ``pending`` are loops of their own, without branches, so that their
    misses overlap (at step 1, 344 -> 279 us for 29 000 of 1 000 000 coordinates).
    """
    m = idx.shape[0]
    change = np.empty(m)
    nnz = 0
    if step == 1.0:
        for i in range(m):
            coef[idx[i]] = values[i]
        for i in range(m):
            change[i] = abs(values[i] - base[i])
            nnz += (values[i] != 0.0) - (base[i] != 0.0)
        return change, nnz
    new = np.empty(m)
    for i in range(m):
        old = base[i]
        new[i] = old + step * (values[i] - old)
        change[i] = abs(new[i] - old)
        nnz += (new[i] != 0.0) - (old != 0.0)
    for i in range(m):
        coef[idx[i]] = new[i]
    for i in range(m):
        pending[idx[i]] += new[i] - values[i]
    return change, nnz


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
            n_active = _drop_active(active, position, n_active, j, p)
    return n_active


@njit(nogil=True, cache=True, inline="always")
def _drop_active(active, position, n_active, j, p):
    """Swap-remove ``j`` (at slot ``p``) from ``active[:n_active]``; the new count."""
    last = active[n_active - 1]
    active[p] = last
    position[last] = p
    position[j] = -1
    return n_active - 1


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
    solve_dense(X, col_sq, coef, r, coords, 0.1, 0.0, False, 2, 0.0, 0.0)
    solve_sparse(data, indices, indptr, mu, True, col_sq, coef, r, coords, 0.1, 0.0, False, 2,
                 0.0, 0.0)
    jacobi_sparse(data, indices, indptr, mu, col_sq, coef, r, coords, 0.1, 0.0, False, out)
    xtr_sparse(data, indices, indptr, mu, r, out)
    xtr_sparse_at(data, indices, indptr, mu, r, coords, out)
    for ind, ptr in ((indices, indptr), (indices.astype(np.int64), indptr.astype(np.int64))):
        xtr_sparse_bounded(data, ind, ptr, mu, r, coords, False, coef, out, out, 0.0, 0.0, 1.0,
                           out.copy())
    shift_from(r, r)
    column_sums(data, indptr)
    dot(r, r)
    residual_change(r, r)
    indices64 = indices.astype(np.int64)
    indptr64 = indptr.astype(np.int64)
    cd_sparse(data, indices64, indptr64, mu, True, col_sq, coef, r, coords, 0.1, 0.0, False, out)
    # a working set's compact copy: int64 indptr with the block's int32 or int64 indices
    locate_without(p, coords[:1], coords, np.empty(p, np.int64), np.empty(p, np.int64))
    for ind, ptr in ((indices, indptr), (indices64, indptr64)):
        sub_data, sub_indices, sub_ptr = take_columns(data, ind, ptr, coords)
        solve_sparse(sub_data, sub_indices, sub_ptr, mu, True, col_sq, coef, r, coords, 0.1,
                     0.0, False, 2, 0.0, 0.0)
        sub_coef = np.zeros(p)
        load_sub_coef(coef, coords, coords, coords, sub_coef, sub_ptr)
        store_sub_coef(coef, coords, coords, coords, sub_coef, np.empty(p, np.int32),
                       np.empty(p))
    xtr_sparse(data, indices64, indptr64, mu, r, out)
    xtr_sparse_at(data, indices64, indptr64, mu, r, coords, out)
    column_sums(data, indptr64)
    solve_sparse(data, indices64, indptr64, mu, True, col_sq, coef, r, coords, 0.1, 0.0, False,
                 2, 0.0, 0.0)
    gap_summary(out, coef, col_sq, 0.1, 0.0, False, out.copy(), np.empty(p, dtype=np.int64),
                out.copy())
    screen_out(out, col_sq, 1.0, 0.5, np.ones(p, dtype=np.bool_), np.empty(p, np.int64))
    # a gap round's working set (see LassoProgram._sample_ws)
    ws_candidates(np.array([0.0, 1.0]), np.ones(2), np.ones(2, dtype=np.bool_),
                  np.arange(2, dtype=np.int64))
    # a peer phase's rounds repeat the client's step computation on the workers
    sweep_moves(coef, coords, np.ones(p), 0.1, 0.0)
    line_search(np.ones(2), -np.ones(2), -1.0, 1.0, 0.1, 0.0, 0.0, 1.0)
    penalty_change(np.ones(2), -np.ones(2), 0.5, 0.1, 0.0)


def warm_up_schedule() -> None:
    """Compile the client-side schedule kernels."""
    w = np.zeros(4)
    active = np.zeros(4, dtype=np.int64)
    position = np.full(4, -1, dtype=np.int64)
    n = update_priority(w, active, position, 0, np.array([1, 2], dtype=np.int64),
                        np.array([0.5, 0.25]))
    sample_block(w, active, n, 0.01, np.array([0.1, 0.9]), np.zeros(4, dtype=np.bool_),
                 np.arange(4, dtype=np.int64), 4)
    line_search(np.ones(2), -np.ones(2), -1.0, 1.0, 0.1, 0.0, 0.0, 1.0)
    greedy_keep(np.array([0, 1], dtype=np.int64), np.array([0, 1, 2, 2], dtype=np.int64),
                np.array([1, 0], dtype=np.int64), np.zeros(3, dtype=np.bool_))
    dot(np.ones(2), np.ones(2))
    commit_block(np.zeros(4), np.array([1, 2], dtype=np.int64), np.ones(2), np.zeros(2), 0.5,
                 np.zeros(4))
    penalty_change(np.ones(2), -np.ones(2), 0.5, 0.1, 0.0)
    fold_linear(np.ones(2), -np.ones(2), 0.1, 0.0)
    gather_fold(np.ones(4), np.arange(4, dtype=np.int64), np.array([1, 3], dtype=np.int32),
                np.zeros(2), 0.1, 0.0)
    coef_max(np.ones(2), np.arange(2, dtype=np.int64))
