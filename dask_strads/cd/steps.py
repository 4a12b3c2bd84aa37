"""Step lengths of a peer phase's sweep: how much of each block's update to keep.

Blocks sweeping at once each solve against the residual as it was before the sweep, so
their updates overshoot together, or undo part of each other's work when their columns
are coupled. The committed point is ``b + sum_b t_b d_b`` with ``t`` in ``[0, 1]^B``
minimising the objective exactly: it is convex in ``t`` and separable in its
non-smooth part, so cyclic exact line searches converge. All it needs is small: the Gram
matrix ``G`` of the blocks' residual changes, ``c_b = r0' D_b`` and each block's
coefficient changes. Every block computes the steps from the same numbers, in the same
order, and gets the same bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# cyclic line-search passes at most, and the change of a step that ends them
STEP_SWEEPS = 10
STEP_TOL = 1e-3
# the relative rounding of one floating-point operation, with a margin
ROUNDING = 4.0 * np.finfo(np.float64).eps


@njit(nogil=True, cache=True)
def residual_change(before, after):
    """``d = after - before`` and the sums the steps need: ``before' d``, ``d' d``,
    ``sum(before)``, ``sum(d)`` and ``sum(before_k^4)`` over the rows that changed (the
    size of the rounding of ``before' d``: each update of row ``k`` adds about
    ``eps |before_k|`` with a random sign). Sums of ``d`` itself: near the optimum a
    difference of sums of ``before`` and ``after`` would be mostly rounding."""
    n = before.shape[0]
    change = np.empty(n)
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
            bt += b * b * b * b
        rd += b * d
        dd += d * d
        s0 += b
        sd += d
    return change, rd, dd, s0, sd, bt


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
    """Exact minimiser over ``[lo, hi]`` of ``r0d t + dd t^2 / 2 + l1 ||b + t d||_1 +
    l2/2 ||b + t d||^2`` (the objective along ``b + t d``, up to a constant). Its slope
    is non-decreasing and piecewise linear: regula falsi (Illinois) on the slope."""
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
    """Split the line search's slope for ``t`` in ``[0, 1]``: a coordinate whose sign
    cannot change along ``b + t d`` adds ``l2 (b + t d) d + l1 sign d``, linear in
    ``t``. Returns the mask of the other coordinates and the folded constant and ``t``
    coefficient, so the search costs the sign-changing coordinates only."""
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
def penalty_change(b, d, t, l1, l2):
    """``pen(b + t d) - pen(b)``, summed per coordinate (no cancellation of totals)."""
    s = 0.0
    for i in range(b.shape[0]):
        v = b[i] + t * d[i]
        s += l1 * (abs(v) - abs(b[i])) + 0.5 * l2 * (v * v - b[i] * b[i])
    return s


def fold(base: np.ndarray, change: np.ndarray, l1: float, l2: float) -> tuple:
    """A block's coefficient change as :func:`steps` reads it."""
    keep, lin, quad = fold_linear(base, change, l1, l2)
    return base[keep], change[keep], lin, quad


def steps(G: np.ndarray, c: np.ndarray, folded: list, noise: float, l1: float,
          l2: float) -> np.ndarray:
    """The blocks' step lengths in ``[0, 1]``: cyclic exact line searches along
    ``sum_b t_b d_b``, then the verdict of :func:`_verdict`. ``folded``: each block's
    :func:`fold`; ``noise``: the size of the rounding of ``c`` and of the penalty's
    change."""
    t = np.ones(G.shape[0])
    for _ in range(STEP_SWEEPS):
        moved = 0.0
        for i in range(G.shape[0]):
            if G[i, i] <= 0.0:
                continue
            lin = c[i] + G[i] @ t - G[i, i] * t[i]
            b_i, d_i, lin_extra, quad_extra = folded[i]
            new = float(line_search(b_i, d_i, lin + lin_extra, G[i, i] + quad_extra, l1, l2,
                                    0.0, 1.0))
            moved = max(moved, abs(new - t[i]))
            t[i] = new
        if moved < STEP_TOL:
            break
    verdict = _verdict(t, G, c, folded, noise, l1, l2)
    if verdict == "full":
        t[:] = 1.0
    elif verdict == "noise":
        t = _coupled_steps(G)
    return t


def _verdict(t, G, c, folded, noise, l1, l2) -> str:
    """``"shorten"`` when the steps beat the plain sum of the updates by a margin,
    ``"full"`` when by little, ``"noise"`` when the whole change is of the size of its
    rounding: near the optimum an "exact" step could be 0 and undo an update round
    after round."""
    def change(s):
        out = float(c @ s + 0.5 * s @ G @ s)
        for i, s_i in enumerate(s):
            b_i, d_i, lin_extra, quad_extra = folded[i]
            s_i = float(s_i)
            out += (lin_extra * s_i + 0.5 * quad_extra * s_i * s_i
                    + penalty_change(b_i, d_i, s_i, l1, l2))
        return out

    full = change(np.ones_like(t))
    best = change(t)
    if full - best > max(0.1 * -best, noise):
        return "shorten"
    return "full" if full - best > noise or max(-best, abs(full)) > 10.0 * noise else "noise"


def _coupled_steps(G: np.ndarray) -> np.ndarray:
    """Steps from ``G`` alone, for sweeps whose first-order terms are rounding: were each
    block's update the solution of its own subproblem, the objective along the steps
    would be ``1/2 t'Gt - diag(G)'t``; minimised over ``[1/B, 1]^B`` (at ``1/B`` each,
    the mean of the updates: never an increase, by convexity)."""
    B = G.shape[0]
    t = np.ones(B)
    diag = np.diag(G)
    for _ in range(STEP_SWEEPS):
        moved = 0.0
        for i in range(B):
            if diag[i] <= 0.0:
                continue
            new = min(1.0, max(1.0 / B, (diag[i] - G[i] @ t + diag[i] * t[i]) / diag[i]))
            moved = max(moved, abs(new - t[i]))
            t[i] = new
        if moved < STEP_TOL:
            break
    return t


def warm_up() -> None:
    b = np.ones(2)
    residual_change(b, b)
    line_search(b, -b, -1.0, 1.0, 0.1, 0.0, 0.0, 1.0)
    fold_linear(b, -b, 0.1, 0.0)
    penalty_change(b, -b, 0.5, 0.1, 0.0)
