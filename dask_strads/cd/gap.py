"""The duality gap (the stopping rule) and Gap Safe screening, on the ``cd_fast`` scale."""

from __future__ import annotations

import numpy as np

from dask_strads.cd import kernels, working_set
from dask_strads.cd.messages import GapOrder, GapReport, ScreenRule


def duality_gap(l1: float, l2: float, reports: list[GapReport]) -> tuple[float, float, float]:
    """scikit-learn's duality gap and primal from the blocks' gap reports; also the dual
    norm ``max_j |x_j'r - l2 b_j|``.

    Formulation A for ``l1 > 0``; for ``l1 == 0`` formulation B (ridge) or, without any
    penalty, the squared gradient norm, as ``cd_fast.gap_enet`` does."""
    dual_norm = max(r.dual_norm for r in reports)
    w_l1 = sum(r.w_l1 for r in reports)
    w_l2sq = sum(r.w_l2sq for r in reports)
    xtr_sq = sum(r.xtr_sq for r in reports)
    r_norm2, r_y = reports[0].r_norm2, reports[0].r_y
    primal = 0.5 * (r_norm2 + l2 * w_l2sq) + l1 * w_l1
    if l1 == 0.0:
        if l2 == 0.0:
            return xtr_sq, primal, dual_norm
        return r_norm2 + 0.5 * l2 * w_l2sq - r_y + xtr_sq / (2.0 * l2), primal, dual_norm
    scale = l1 / dual_norm if dual_norm > l1 else 1.0
    dual = -0.5 * scale**2 * (r_norm2 + l2 * w_l2sq) + scale * r_y
    return primal - dual, primal, dual_norm


def screen_rule(l1: float, gap: float, dual_norm: float) -> ScreenRule | None:
    """Gap Safe screening (Ndiaye et al. 2017, as scikit-learn's ``cd_fast``) from a
    gap round: the dual point ``r / max(l1, dual_norm)`` and the radius
    ``sqrt(2 gap) / l1``; None without an L1 penalty."""
    if l1 <= 0.0:
        return None
    return ScreenRule(dual_scale=max(l1, dual_norm), radius=np.sqrt(2.0 * max(gap, 0.0)) / l1)


def measure_gap(block, order: GapOrder, pen, y: np.ndarray) -> GapReport:
    """A block's gap round: its share of the gap, its priorities, its candidates."""
    block.apply(order.correction)
    xtr = block.gradient()
    dual, w_l1, w_l2sq, xtr_sq, top = kernels.gap_summary(
        xtr, block.coef, block.col_sq, block.alive, pen.l1, pen.l2, pen.positive,
        block.score)
    r_norm2, r_y = block.residual_norms(y)
    cand, scores = working_set.block_candidates(block.score, block.coef, order.n_candidates)
    support = np.flatnonzero(block.coef)
    new_columns = None
    if order.track:
        new = support[~block.tracked[support]]
        if new.shape[0]:
            block.tracked[new] = True
            new_columns = (new, block.standardized(new))
    return GapReport(dual_norm=float(dual), w_l1=w_l1, w_l2sq=w_l2sq, xtr_sq=xtr_sq,
                     r_norm2=r_norm2, r_y=r_y, max_score=top, support=support,
                     candidates=cand, scores=scores, support_nnz=block.column_nnz(support),
                     candidate_nnz=block.column_nnz(cand),
                     entry_bytes=12 if block.sparse else 8, new_columns=new_columns)
