"""Serial pure-numpy CCD++ and an in-process driver of the MF program (test helpers)."""

from __future__ import annotations

import numpy as np

from dask_strads.engine import RoundContext


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


def drive(program, shards, max_rounds=100_000):
    """Run ``program`` in this process, block by block, as the engine would at staleness 0.

    Returns ``(state, history_objectives, block_results)``.
    """
    blocks = {b: program.init_block(b, shard) for b, shard in shards.items()}
    state = program.init_state({b: program.block_summary(b, blk) for b, blk in blocks.items()})
    objectives = []
    for rnd in range(max_rounds):
        plan = program.schedule(state, RoundContext(rnd))
        if plan is None:
            break
        partials = {b: program.push(blocks[b], part) for b, part in plan.parts.items()}
        state = program.pull(state, partials, plan)
        objectives.append(program.objective(state))
        if program.converged(state):
            break
    results = {b: program.block_result(b, blk) for b, blk in blocks.items()}
    return state, np.array(objectives), results
