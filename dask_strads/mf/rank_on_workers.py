"""One CCD++ rank component in one round, reduced among the workers.

The push of every block runs all the component's inner sweeps. After each sweep's row
half, the column sums ``num, den`` are reduce-scattered among the pushes: each block
receives the other blocks' sums for the columns of its own rows of ``H`` (its
``col_range``), adds them up and divides; an all-gather of those slices then gives every
block the full new ``h_t``. What a worker sends and receives per sweep is about three
length-``n`` vectors whatever the number of workers, and the client receives scalars
only (the loss's terms), once per component.

Every push takes the same decisions (whether the component has settled) from the same
all-gathered numbers, summed in the same order, so the pushes stay in step.
"""

from __future__ import annotations

import numpy as np

from dask_strads.engine import all_to_all, exchange
from dask_strads.mf import kernels


def _in_column_order(gathered: dict) -> list:
    """The all-gathered per-block values, ordered by the first column of each block."""
    return sorted(gathered.values(), key=lambda v: v[0])


def push_rank(block: dict, t: int, h_prev: np.ndarray | None, prev_t: int, alpha: float,
              inner_iter: int, inner_tol: float) -> tuple[dict, np.ndarray]:
    """Rank ``t``'s inner sweeps on ``block``, exchanging with the round's other pushes.

    ``h_prev``: the previous component's final ``h`` (full length), whose term the first
    sweep moves from the residual into the block, or None at the fit's first component.
    Stores this block's rows of the new ``h_t`` in ``H`` and returns the loss's terms
    over this block (its rows, and its columns for the ``h`` terms) and the full new
    ``h_t``, which the next component's first sweep applies to the residual.
    """
    c0, c1 = block["col_range"]
    H, W = block["H"], block["W"]
    gathered = exchange((c0, c1, np.ascontiguousarray(H[:, t])))
    ranges = {b: (v[0], v[1]) for b, v in gathered.items()}
    h = np.concatenate([v[2] for v in _in_column_order(gathered)])
    indptr, indices, resid = block["csr"]
    w_t = W[:, t]
    block["w_old"] = w_t.copy()
    block["h_old"] = h
    do_sub = h_prev is not None
    hh = np.empty((len(h), 2))  # (h_prev, h) side by side, as rank_one_rows reads them
    if do_sub:
        hh[:, 0] = h_prev
    # the loss needs sum R_hat^2 of the component's last sweep, which with inner_tol
    # could be any of them
    want_ssq = inner_tol > 0.0
    for s in range(inner_iter):
        last = s == inner_iter - 1
        hh[:, 1] = h
        nd = np.zeros((len(h), 2))
        ssq = kernels.rank_one_rows(
            indptr, indices, resid, W[:, prev_t] if do_sub else w_t, w_t, hh.reshape(-1),
            alpha, w_t, do_sub, s == 0, nd.reshape(-1), want_ssq or last)
        do_sub = False
        mine = all_to_all({b: nd[lo:hi] for b, (lo, hi) in ranges.items()}).values()
        num = np.sum([p[:, 0] for p in mine], axis=0)
        den = np.sum([p[:, 1] for p in mine], axis=0)
        den_l = den + alpha
        h_own = np.divide(num, den_l, out=np.zeros(c1 - c0), where=den_l > 0)
        moved = float(np.sum((h_own - h[c0:c1]) ** 2))
        norm = float(np.dot(h_own, h_own))
        gathered = exchange((c0, h_own, moved, norm))
        h = np.concatenate([v[1] for v in _in_column_order(gathered)])
        # the rank-one subproblem has settled when h hardly moves (as on the client)
        settled = inner_tol > 0.0 and sum(v[2] for v in gathered.values()) <= \
            inner_tol**2 * sum(v[3] for v in gathered.values())
        if last or settled:
            break
    H[:, t] = h_own
    return {"ssq_hat": ssq, "w_norm": float(np.dot(w_t, w_t)), "h_norm": norm,
            "h_num": float(np.dot(h_own, num)), "hh_den": float(np.dot(h_own * h_own, den)),
            "sweeps": s + 1}, h
