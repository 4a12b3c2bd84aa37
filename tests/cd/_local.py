"""An in-process driver of the coordinate-descent programs (no cluster).

It mirrors the engine's contract, including bounded staleness (``staleness + 1``
rounds scheduled before their pulls), so the program's logic is tested without Dask.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np
import scipy.sparse as sp

from dask_strads.cd.program import CDProgram
from dask_strads.engine import worker as engine_worker


def make_program(X, y, alpha, *, l1_ratio=1.0, fit_intercept=True, n_blocks=2, tol=1e-10,
                 **kwargs):
    n, p = X.shape
    y = np.asarray(y, dtype=np.float64)
    y_offset = y.mean() if fit_intercept else 0.0
    yc = y - y_offset
    starts = np.linspace(0, p, n_blocks + 1).round().astype(np.int64)
    program = CDProgram(yc, starts, alpha * l1_ratio * n, alpha * (1 - l1_ratio) * n,
                           tol * float(yc @ yc), fit_intercept=fit_intercept, **kwargs)
    Xb = X.tocsc() if sp.issparse(X) else X
    shards = {b: Xb[:, starts[b]:starts[b + 1]] for b in range(n_blocks)}
    return program, shards, y_offset


def _exchange_round(program, blocks, plan) -> dict:
    """The pushes of an exchange plan, each in a thread of its own, with an in-process
    :func:`dask_strads.engine.exchange` (every push gets the same objects)."""
    order = list(plan.parts)
    mail, errors, results = {}, {}, {}
    cond = threading.Condition()

    def run(b):
        step = 0

        def exchange(value):
            nonlocal step
            key, step = step, step + 1
            with cond:
                mail[key, b] = value
                cond.notify_all()
                if not cond.wait_for(lambda: errors or all((key, o) in mail for o in order),
                                     timeout=120) or errors:
                    raise RuntimeError(f"exchange of block {b}: another push failed")
                return {o: mail[key, o] for o in order}

        engine_worker._current.exchange = exchange
        try:
            results[b] = program.push(blocks[b], plan.parts[b])
        except BaseException as exc:
            with cond:
                errors[b] = exc
                cond.notify_all()
        finally:
            engine_worker._current.exchange = None

    threads = [threading.Thread(target=run, args=(b,)) for b in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise next(iter(errors.values()))
    return results


def run_local(program, shards, *, max_rounds=100_000, staleness=0, on_plan=None,
              peers=False):
    """``peers``: the engine's ``can_exchange`` (exchange plans run their pushes in
    threads)."""
    blocks = {b: program.init_block(b, s) for b, s in shards.items()}
    state = program.init_state({b: program.block_summary(b, blk) for b, blk in blocks.items()})
    inflight = deque()
    next_round = 0
    done = False
    while True:
        while not done and len(inflight) < staleness + 1 and next_round < max_rounds:
            program.can_exchange = peers
            plan = program.schedule(state, next_round)
            if plan is None:
                done = True
                break
            if on_plan is not None:
                on_plan(plan, state)
            # pushes of a round run at once, in round order, as on the workers
            if plan.exchange:
                partials = _exchange_round(program, blocks, plan)
            else:
                partials = {b: program.push(blocks[b], part) for b, part in plan.parts.items()}
            inflight.append((plan, partials))
            next_round += 1
        if not inflight:
            break
        plan, partials = inflight.popleft()
        state = program.pull(state, partials, plan)
        if program.converged(state):
            done = True
    return state, blocks


def objective(X, y, coef, intercept, alpha, l1_ratio=1.0):
    r = y - np.asarray(X @ coef).ravel() - intercept
    return (r @ r / (2 * len(y)) + alpha * l1_ratio * np.abs(coef).sum()
            + alpha * (1 - l1_ratio) / 2 * coef @ coef)
