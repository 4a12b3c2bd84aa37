"""One CCD++ rank component in one round, reduced among the workers.

The push of every block runs all the component's inner sweeps. After each sweep's row
half, the column sums ``num, den`` are summed over the pushes with
:func:`dask_strads.engine.all_reduce` (about ``log2 N`` messages per worker), and every
block divides them into the full new ``h_t`` itself. A sweep that may be the
component's last also sums the blocks' rows of the next component's ``h`` (each at its
place, zeros elsewhere), so that the next round starts without a reduction of its own.
The client receives scalars only (the loss's terms), once per component.

``all_reduce`` gives every push the same bits, so every push takes the same decisions
(whether the component has settled) and holds the same ``h_t``: the pushes stay in step.
"""

from __future__ import annotations

import numpy as np

from dask_strads.engine import all_reduce
from dask_strads.mf import kernels


def _spread(block: dict, column: int) -> np.ndarray:
    """The block's rows of ``H[:, column]`` at their place in a zero vector of length n:
    summed over the blocks, the full column."""
    c0, c1 = block["col_range"]
    out = np.zeros(block["n_cols"])
    out[c0:c1] = block["H"][:, column]
    return out


def push_rank(block: dict, t: int, h_prev: np.ndarray | None, prev_t: int, next_t: int,
              h_t: np.ndarray | None, alpha: float, inner_iter: int,
              inner_tol: float) -> tuple[dict, np.ndarray, np.ndarray]:
    """Rank ``t``'s inner sweeps on ``block``, reducing with the round's other pushes.

    ``h_prev``: the previous component's final ``h`` (full length), whose term the first
    sweep moves from the residual into the block, or None at the fit's first component.
    ``h_t``: the full current ``h_t`` if the previous round summed it, else None (then
    this round sums it first). Stores this block's rows of the new ``h_t`` in ``H``
    and returns the loss's terms over this block (its rows, and its columns for the
    ``h`` terms), the full new ``h_t``, which the next component's first sweep applies
    to the residual, and the full ``h`` of component ``next_t``.
    """
    c0, c1 = block["col_range"]
    H, W = block["H"], block["W"]
    n = block["n_cols"]
    h = all_reduce(_spread(block, t)) if h_t is None else h_t
    # summed with the sweeps that may end the component (one all_reduce, not two)
    h_next_part = _spread(block, next_t).reshape(n, 1)
    indptr, indices, resid = block["csr"]
    w_t = W[:, t]
    block["w_old"] = w_t.copy()
    block["h_old"] = h
    do_sub = h_prev is not None
    hh = np.empty((n, 2))  # (h_prev, h) side by side, as rank_one_rows reads them
    if do_sub:
        hh[:, 0] = h_prev
    # the loss needs sum R_hat^2 of the component's last sweep, which with inner_tol
    # could be any of them
    want_ssq = inner_tol > 0.0
    for s in range(inner_iter):
        last = s == inner_iter - 1
        hh[:, 1] = h
        nd = np.zeros((n, 2))
        ssq = kernels.rank_one_rows(
            indptr, indices, resid, W[:, prev_t] if do_sub else w_t, w_t, hh.reshape(-1),
            alpha, w_t, do_sub, s == 0, nd.reshape(-1), want_ssq or last)
        do_sub = False
        if want_ssq or last:
            sums = all_reduce(np.hstack([nd, h_next_part]))
            h_next = sums[:, 2]
        else:
            sums = all_reduce(nd)
        num, den = sums[:, 0], sums[:, 1]
        den_l = den + alpha
        h_new = np.divide(num, den_l, out=np.zeros(n), where=den_l > 0)
        # the rank-one subproblem has settled when h hardly moves (as on the client)
        settled = inner_tol > 0.0 and float(np.sum((h_new - h) ** 2)) <= \
            inner_tol**2 * float(np.dot(h_new, h_new))
        h = h_new
        if last or settled:
            break
    own = slice(c0, c1)
    H[:, t] = h[own]
    terms = {"ssq_hat": ssq, "w_norm": float(np.dot(w_t, w_t)),
             "h_norm": float(np.dot(h[own], h[own])), "h_num": float(np.dot(h[own], num[own])),
             "hh_den": float(np.dot(h[own] * h[own], den[own])), "sweeps": s + 1}
    # with one component, the next is this one, now updated
    return terms, h, (h if next_t == t else np.ascontiguousarray(h_next))
