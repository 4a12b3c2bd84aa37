"""The coordinate-descent programs built as the estimators build them, run in this
process (:func:`dask_strads.engine.run_in_process`)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dask_strads.cd.program import CDProgram
from dask_strads.engine import run_in_process


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


def run_local(program, shards, *, max_rounds=100_000, staleness=0, on_plan=None,
              peers=False):
    """The program in this process; ``peers``: whether rounds may exchange (every
    block on a worker of its own)."""
    res = run_in_process(program, shards, max_rounds=max_rounds, staleness=staleness,
                         can_exchange=peers, on_plan=on_plan)
    return res.state, res.blocks


def objective(X, y, coef, intercept, alpha, l1_ratio=1.0):
    coef = np.asarray(coef, dtype=np.float64)  # a program's SparseCoef too
    r = y - np.asarray(X @ coef).ravel() - intercept
    return (r @ r / (2 * len(y)) + alpha * l1_ratio * np.abs(coef).sum()
            + alpha * (1 - l1_ratio) / 2 * coef @ coef)
