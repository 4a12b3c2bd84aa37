"""Serial pure-numpy CCD++ and an in-process driver of the MF program (test helpers)."""

from __future__ import annotations

import numpy as np

from dask_strads.engine import run_in_process


def ccdpp_reference(rows, cols, values, shape, W0, H0, alpha, inner_iter, n_iter,
                    inner_tol=0.0):
    """CCD++ of Yu et al. (2012) in plain numpy, same order as the program (with
    ``inner_tol``: a sweep that moves ``h_t`` by at most that share of its norm is the
    component's last).

    Returns ``(W, H, objectives)`` with the objective after every rank update
    (``n_iter * k`` values, preceded by the initial objective).
    """
    m, n = shape
    W, H = W0.astype(np.float64).copy(), H0.astype(np.float64).copy()
    k = W.shape[1]
    R = values - np.einsum("ij,ij->i", W[rows], H[cols])

    def objective():
        return float(R @ R + alpha * ((W**2).sum() + (H**2).sum()))

    objectives = [objective()]
    for _ in range(n_iter):
        for t in range(k):
            R_hat = R + W[rows, t] * H[cols, t]
            s = 0
            while s < inner_iter:
                old = H[:, t].copy()
                h = H[cols, t]
                W[:, t] = np.bincount(rows, R_hat * h, minlength=m) / (
                    alpha + np.bincount(rows, h * h, minlength=m))
                w = W[rows, t]
                H[:, t] = np.bincount(cols, R_hat * w, minlength=n) / (
                    alpha + np.bincount(cols, w * w, minlength=n))
                settled = inner_tol > 0 and np.sum((H[:, t] - old) ** 2) <= \
                    inner_tol**2 * np.sum(H[:, t] ** 2)
                s = inner_iter if settled else s + 1
            R = R_hat - W[rows, t] * H[cols, t]
            objectives.append(objective())
    return W, H, np.array(objectives)


def drive(program, shards, max_rounds=100_000, can_exchange=True):
    """Run ``program`` in this process (:func:`dask_strads.engine.run_in_process`, staleness
    0) and record its objective after every round's pull. ``can_exchange``: whether the
    blocks may reduce among themselves (one round per rank component) or the client
    reduces (one round per sweep).

    Returns ``(state, history_objectives, block_results)``.
    """
    objectives, planned = [], [0]

    def on_plan(plan, state):
        if planned[0]:  # the state after the previous round's pull
            objectives.append(program.objective(state))
        planned[0] += 1

    res = run_in_process(program, shards, max_rounds=max_rounds, on_plan=on_plan,
                         can_exchange=can_exchange)
    if res.rounds:
        objectives.append(program.objective(res.state))  # after the last pull
    results = {b: program.block_result(b, blk) for b, blk in res.blocks.items()}
    return res.state, np.array(objectives), results
