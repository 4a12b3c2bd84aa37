"""A block's gap round, and Gap Safe screening from the gap the client sums.

The gap itself is the datafit's (:mod:`dask_strads.cd.datafits`)."""

from __future__ import annotations

import numpy as np

from dask_strads.cd import kernels, working_set
from dask_strads.cd.messages import GapOrder, GapReport, ScreenRule
from dask_strads.engine import shared


def screen_rule(l1: float, gap: float, dual_norm: float,
                curvature: float = 1.0) -> ScreenRule | None:
    """Gap Safe screening (Ndiaye et al. 2017, as scikit-learn's ``cd_fast``) from a
    gap round: the dual point ``-grad / max(l1, dual_norm)`` and the radius
    ``sqrt(2 gap / curvature) / l1``, ``curvature`` the strong convexity of the
    datafit's conjugate; None without an L1 penalty."""
    if l1 <= 0.0:
        return None
    radius = np.sqrt(2.0 * max(gap, 0.0) / curvature) / l1
    return ScreenRule(dual_scale=max(l1, dual_norm), radius=radius)


def measure_gap(block, order: GapOrder, pen, datafit) -> GapReport:
    """A block's gap round: its share of the gap, its priorities, its candidates."""
    block.apply(order.correction)
    intercept_delta = datafit.fit_intercept(block)
    g = datafit.neg_gradient(block)
    xtr = block.first_gradient(untouched=order.correction is None and not intercept_delta)
    if xtr is None:
        xtr = block.gradient(g)
    dual, w_l1, w_l2sq, xtr_sq, top = kernels.gap_summary(
        xtr, block.coef, block.curvature, block.alive, pen.l1, pen.l2, pen.positive,
        block.score)
    terms = datafit.gap_terms(block, g, xtr, order.dual_vector)
    cand, scores = working_set.block_candidates(block.score, block.coef, order.n_candidates)
    support = np.flatnonzero(block.coef)
    return GapReport(dual_norm=float(dual), w_l1=w_l1, w_l2sq=w_l2sq, xtr_sq=xtr_sq,
                     terms=terms, max_score=top, support=support,
                     candidates=cand, scores=scores, support_nnz=block.column_nnz(support),
                     candidate_nnz=block.column_nnz(cand),
                     entry_bytes=12 if block.sparse else 8,
                     intercept_delta=intercept_delta, shm=shared.shm_id(),
                     column_source=block.column_source,
                     gram_ids=block.gram_cache.ids if block.gram_usable else None)
