"""Sweeps of several solvers at once: a peer phase's inner loop.

After every sweep the blocks swap their residual changes (worker to worker) and take
the same steps (:mod:`dask_strads.cd.steps`) from the same numbers, so every block ends
each sweep with the same residual, bit for bit. Every block takes part in every
exchange, solver or not. Every ``K + 1`` sweeps the blocks extrapolate their iterates
together (Anderson): the coefficients' differences give each block a ``K x K`` share of
``U'U``; the residuals, being the same everywhere and linear in the coefficients,
extrapolate with the same weights on every block; one more exchange of the penalty's
shares decides, identically everywhere, whether the extrapolated point is kept.
"""

from __future__ import annotations

import time

import numpy as np

from dask_strads.cd import kernels
from dask_strads.cd.block import add_delta, compact
from dask_strads.cd.steps import ROUNDING, fold, residual_change, steps


def peer_sweeps(block, cols, order, pen, swap, report) -> None:
    r = block.residual
    n = block.n
    centred = block.sparse and bool(np.any(block.mu))
    K = order.anderson
    coef_iterates: list = []
    residual_iterates: list = []
    epochs = 0
    sweep_s = 0.0
    swept = 0
    d_all = 0.0
    while epochs < order.max_epochs:
        before = r.copy()
        msg = moved = None
        if cols is not None:
            prev = cols.coef.copy()
            t0 = time.perf_counter()
            d_max, _ = cols.epoch(r, block.r_sum, pen.l1, pen.l2, pen.positive)
            sweep_s += time.perf_counter() - t0
            swept += cols.nnz
            change, rd, _, s0, sd, bt = residual_change(before, r)
            if centred:
                rd -= s0 * sd / n
            moved = np.flatnonzero(cols.coef != prev)
            base, d = prev[moved], cols.coef[moved] - prev[moved]
            rows = max(int(np.count_nonzero(change)), 1)
            noise = ROUNDING * (np.sqrt(cols.nnz / rows * bt)
                                + pen.l1 * float(np.abs(base).sum() + np.abs(d).sum()))
            msg = {"delta": compact(change), "rd": rd, "folded": fold(base, d, pen.l1, pen.l2),
                   "noise": noise, "d_max": d_max}
        values = swap(msg)
        active = [b for b in order.solvers if values.get(b) is not None
                  and values[b]["delta"] is not None]
        r[:] = before
        if active:
            t = _steps(values, active, n, centred, pen)
            for i, b in enumerate(active):
                add_delta(r, values[b]["delta"], float(t[i]))
            if block.id in active:
                t_own = float(t[active.index(block.id)])
                cols.coef[moved] = base + t_own * d
        block.resum()
        d_all = max((values[b]["d_max"] for b in order.solvers if values.get(b) is not None),
                    default=0.0)
        epochs += 1
        if d_all <= order.tol or not active:
            break
        if K:
            coef_iterates.append(None if cols is None else cols.coef.copy())
            residual_iterates.append(r.copy())
            if len(residual_iterates) > K:
                _extrapolate(block, cols, coef_iterates, residual_iterates, pen, swap,
                             centred)
                coef_iterates, residual_iterates = [], []
    report.epochs = epochs
    report.updates = epochs * (0 if cols is None else cols.size)
    report.d_max = d_all
    report.sweep_s = sweep_s
    report.swept_nnz = swept


def _steps(values, active, n, centred, pen) -> np.ndarray:
    rows = [_dense(values[b]["delta"], n) for b in active]
    G = np.empty((len(active), len(active)))
    for i in range(len(active)):
        for j in range(i, len(active)):
            G[i, j] = G[j, i] = _cdot(rows[i], rows[j], n, centred)
    c = np.array([values[b]["rd"] for b in active])
    return steps(G, c, [values[b]["folded"] for b in active],
                 sum(values[b]["noise"] for b in active), pen.l1, pen.l2)


def _extrapolate(block, cols, coef_iterates, residual_iterates, pen, swap, centred) -> None:
    """Anderson over the blocks' iterates; keeps the point if it lowers the objective."""
    K = len(residual_iterates) - 1
    share = np.zeros((K, K))
    if cols is not None:
        U = np.diff(np.stack(coef_iterates, axis=1), axis=1)
        share = U.T @ U
    shares = swap(share)
    UtU = np.zeros((K, K))
    for b in sorted(shares):
        UtU += shares[b]
    try:
        z = np.linalg.solve(UtU, np.ones(K))
    except np.linalg.LinAlgError:
        return
    if not np.isfinite(z).all() or z.sum() == 0.0:
        return
    C = z / z.sum()
    r_acc = np.stack(residual_iterates[1:], axis=1) @ C
    w_acc = None
    pens = (0.0, 0.0)
    if cols is not None:
        w_acc = np.stack(coef_iterates[1:], axis=1) @ C
        pens = (kernels.penalty(cols.coef, pen.l1, pen.l2),
                kernels.penalty(w_acc, pen.l1, pen.l2))
    parts = swap(pens)
    now = sum(parts[b][0] for b in sorted(parts)) + _half_norm2(block.residual, block.n,
                                                                centred)
    then = sum(parts[b][1] for b in sorted(parts)) + _half_norm2(r_acc, block.n, centred)
    if then < now:
        block.residual[:] = r_acc
        block.resum()
        if cols is not None:
            cols.coef[:] = w_acc


def _half_norm2(r: np.ndarray, n: int, centred: bool) -> float:
    out = kernels.dot(r, r)
    if centred:
        s = kernels.total(r)
        out -= s * s / n
    return 0.5 * out


def _dense(delta, n: int) -> np.ndarray:
    if not isinstance(delta, tuple):
        return delta
    out = np.zeros(n)
    add_delta(out, delta)
    return out


def _cdot(u: np.ndarray, v: np.ndarray, n: int, centred: bool) -> float:
    """``u' v`` of two residual changes, centred when the residuals are raw."""
    out = kernels.dot(u, v)
    if centred:
        out -= kernels.total(u) * kernels.total(v) / n
    return out
