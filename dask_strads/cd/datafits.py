"""Datafits of coordinate descent: what the program minimises besides the penalty.

A datafit is a function of the margins ``z = X b (+ b0)``. Every block keeps the same
vector ``r`` of length ``n`` that changes by ``-x_j d`` when coefficient ``j`` changes by
``d``: the residual ``y - X b`` for the quadratic datafit, ``-z`` for the logistic one.
So the working sets, gap rounds, screening, relays and solo phases are the same code for
both; a datafit says how a column is swept, what the gradient is, how the duality gap
is formed, and whether peers may sweep it at once (their joint line search is exact only
for a quadratic).
"""

from __future__ import annotations

import numpy as np

from dask_strads.cd import gram, kernels, steps
from dask_strads.cd import logistic_kernels as lk


class Quadratic:
    """``1/2 ||y - X b - b0||^2`` (scikit-learn's ``cd_fast`` scale); the intercept is
    handled by centring (see :mod:`dask_strads.cd.kernels`)."""

    peers = True
    gram = True  # the objective is a quadratic in the coefficients (see cd.gram)
    centres = True  # the intercept is fitted by centring X and y
    target_is_first_gradient = True  # neg_gradient at b = 0 is y (centred, if X is)
    dual_curvature = 1.0  # strong convexity of the conjugate, for Gap Safe screening

    def __init__(self, y: np.ndarray):
        self.y = np.ascontiguousarray(y, dtype=np.float64)

    def offset(self) -> np.ndarray:
        """``r`` at ``b = 0``."""
        return self.y

    def epoch(self, cols, block, pen) -> float:
        d_max, block.r_sum = cols.epoch(block.residual, block.r_sum, pen.l1, pen.l2,
                                        pen.positive)
        return d_max

    def intercept_step(self, block) -> float:
        return 0.0

    def fit_intercept(self, block) -> float:
        return 0.0

    def value(self, block, r, r_sum) -> float:
        """The datafit at ``r`` (``r_sum`` its sum, for implicit centring)."""
        norm2 = kernels.dot(r, r)
        if block.sparse and np.any(block.mu):
            norm2 -= r_sum * r_sum / block.n
        return 0.5 * norm2

    def neg_gradient(self, block) -> np.ndarray:
        return block.residual

    @staticmethod
    def warm_up() -> None:
        steps.warm_up()  # the peers' line search
        gram.warm_up()

    def gap_terms(self, block, g, xtr, with_vector: bool) -> tuple:
        norm2 = 2.0 * self.value(block, block.residual, block.r_sum)
        return norm2, kernels.dot(block.residual, self.y)

    def duality_gap(self, l1, l2, reports) -> tuple[float, float, float]:
        """scikit-learn's duality gap, primal and dual norm ``max_j |x_j'r - l2 b_j|``:
        formulation A for ``l1 > 0``; for ``l1 == 0`` formulation B (ridge) or, without
        any penalty, the squared gradient norm, as ``cd_fast.gap_enet`` does."""
        dual_norm, w_l1, w_l2sq, xtr_sq = _sums(reports)
        r_norm2, r_y = reports[0].terms
        primal = 0.5 * (r_norm2 + l2 * w_l2sq) + l1 * w_l1
        if l1 == 0.0:
            if l2 == 0.0:
                return xtr_sq, primal, dual_norm
            return r_norm2 + 0.5 * l2 * w_l2sq - r_y + xtr_sq / (2.0 * l2), primal, dual_norm
        scale = l1 / dual_norm if dual_norm > l1 else 1.0
        dual = -0.5 * scale**2 * (r_norm2 + l2 * w_l2sq) + scale * r_y
        return primal - dual, primal, dual_norm

    def screens(self, l2: float) -> bool:
        return True


class Logistic:
    """``sum_i log(1 + exp(-y_i z_i))`` with labels ``y_i = +-1``; blocks keep ``r = -z``.

    The intercept is a coordinate of its own: a Newton step on it after every sweep of a
    phase, and solved exactly at the start of every gap round (so that the dual point is
    feasible: ``sum_i theta_i = 0``). Peers do not sweep at once (their joint step is a
    quadratic's), so a phase has one solver."""

    peers = False
    gram = False
    centres = False
    target_is_first_gradient = False
    dual_curvature = 4.0  # each loss term is 1/4-smooth

    def __init__(self, labels: np.ndarray, fit_intercept: bool, l1: float,
                 intercept: float = 0.0):
        self.y = np.ascontiguousarray(labels, dtype=np.float64)
        self.l1 = float(l1)  # for the blocks' share of the dual's penalty conjugate
        self.with_intercept = bool(fit_intercept)
        self.intercept = float(intercept)

    def offset(self) -> np.ndarray:
        return np.full(self.y.shape[0], -self.intercept)

    def epoch(self, cols, block, pen) -> float:
        r = block.residual
        if cols.dense is not None:
            return lk.epoch_dense(cols.dense, cols.dense_cols, cols.col_sq, cols.coef, r,
                                  self.y, pen.l1, pen.l2, pen.positive)
        return lk.epoch_sparse(cols.data, cols.indices, cols.indptr, cols.col_sq, cols.coef,
                               r, self.y, pen.l1, pen.l2, pen.positive)

    def intercept_step(self, block) -> float:
        """One Newton step on the intercept; returns its change."""
        return lk.intercept_step(block.residual, self.y) if self.with_intercept else 0.0

    def fit_intercept(self, block, max_steps: int = 100) -> float:
        """The intercept's optimum for the current coefficients (the same bits on every
        block, which hold the same ``r``); returns its change."""
        total = 0.0
        if not self.with_intercept:
            return total
        for _ in range(max_steps):
            step = lk.intercept_step(block.residual, self.y)
            total += step
            if abs(step) <= 1e-13 * (1.0 + abs(total)):
                break
        return total

    def value(self, block, r, r_sum) -> float:
        return lk.loss(r, self.y)

    def neg_gradient(self, block) -> np.ndarray:
        g = np.empty_like(block.residual)
        lk.neg_gradient(block.residual, self.y, g)
        return g

    @staticmethod
    def warm_up() -> None:
        lk.warm_up()

    def gap_terms(self, block, g, xtr, with_vector: bool) -> tuple:
        # the dual point is g = y * sigmoid(y r) (scaled); the client needs its entries
        # (once), and with an L2 part each block's conjugate-penalty share
        p = np.abs(g) if with_vector else None
        over = np.maximum(np.abs(xtr[block.alive]) - self.l1, 0.0)
        return lk.loss(block.residual, self.y), p, float(over @ over)

    def duality_gap(self, l1, l2, reports) -> tuple[float, float, float]:
        """Gap of ``loss + l1 ||b||_1 + l2/2 ||b||^2`` at the dual point
        ``theta = -grad loss``, scaled into the constraint ``||X' theta||_inf <= l1``
        without an L2 part; with one, the conjugate of the penalty takes it whole."""
        dual_norm, w_l1, w_l2sq, _ = _sums(reports)
        loss, p, _ = reports[0].terms
        primal = loss + l1 * w_l1 + 0.5 * l2 * w_l2sq
        if l2 > 0.0:
            excess = sum(r.terms[2] for r in reports)
            dual = lk.entropy_sum(p, 1.0) - excess / (2.0 * l2)
        else:
            scale = max(1.0, dual_norm / l1) if l1 > 0.0 else 1.0
            dual = lk.entropy_sum(p, scale)
        return primal - dual, primal, dual_norm

    def screens(self, l2: float) -> bool:
        return l2 == 0.0


def _sums(reports) -> tuple[float, float, float, float]:
    return (max(r.dual_norm for r in reports), sum(r.w_l1 for r in reports),
            sum(r.w_l2sq for r in reports), sum(r.xtr_sq for r in reports))
