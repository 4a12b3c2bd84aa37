"""The choice of blocks and of a phase's solvers, and the settings."""

from __future__ import annotations

import dask
import numpy as np
import pytest

from dask_strads._datasets.lasso import alpha_max, make_text_regression
from dask_strads.cd import parallelism

from ._local import make_program, run_local


def test_blocks_follow_the_work_not_the_workers():
    assert parallelism.n_blocks(10**6, 8, 4_000_000) == 1
    assert parallelism.n_blocks(10**7, 8, 4_000_000) == 2
    assert parallelism.n_blocks(10**9, 8, 4_000_000) == 8


def test_phase_solvers_weigh_sweeps_against_exchanges():
    costs = parallelism.Costs(sweep_per_nnz=1e-9, exchange=1e-3, bandwidth=1e9,
                              peer_factor=1.25, epochs=20)
    assert parallelism.phase_solvers([10_000, 20_000], 12, costs).solvers == (1,)  # tiny sweeps
    assert parallelism.phase_solvers([5 * 10**7, 5 * 10**7], 8, costs).solvers == (0, 1)
    assert parallelism.phase_solvers([0, 500], 12, costs).solvers == (1,)
    assert parallelism.phase_solvers([0, 0], 12, costs).solvers == ()
    costs.observe(epochs=10, sweep_s=1.0, swept_nnz=10**8, exchanges=12, wait_s=0.012)
    assert costs.sweep_per_nnz == pytest.approx((1e-9 + 1e-8) / 2)
    assert costs.exchange == pytest.approx(1e-3)


def test_columns_a_solver_reads_in_place_cost_it_no_shipping():
    costs = parallelism.Costs(sweep_per_nnz=1e-9, exchange=1e-3, bandwidth=1e9,
                              peer_factor=1.25, epochs=20)
    ws = [1_500_000, 1_500_000]
    # sweeping alone 60 ms; shipping half the columns 12 ms more; peers 62.5 ms
    assert parallelism.phase_solvers(ws, 8, costs).solvers == (0, 1)
    assert parallelism.phase_solvers(ws, 8, costs, lambda b, s: True).solvers == (0,)
    # three blocks, dearer exchanges: alone 60 ms, peers 62.5 ms; shipping one block's
    # columns (the one the solver cannot read in place) costs 8 ms more
    costs.exchange = 1.5e-3
    three = [1_000_000, 1_000_000, 1_000_000]
    assert parallelism.phase_solvers(three, 8, costs, lambda b, s: True).solvers == (0,)
    assert parallelism.phase_solvers(three, 8, costs, lambda b, s: b == 1).solvers == (0, 1, 2)


def test_a_setting_from_dask_config_steers_the_program():
    """``ws-growth`` set through Dask's config sizes the working sets of a program built
    under it: growth times the support, set at each gap round."""
    X, y, _ = make_text_regression(400, 900, n_informative=8)
    alpha = alpha_max(X, y, fit_intercept=False) / 100
    targets = []
    with dask.config.set({"dask-strads.cd.ws-growth": 3.0}):
        program, shards, _ = make_program(X, y, alpha, fit_intercept=False, ws_min_size=10)
    pull_gap = program._pull_gap

    def record(state, reports):  # the target each gap round sets, and the support then
        pull_gap(state, reports)
        support = int(np.count_nonzero(state.coef))
        targets.append((state.ws_target, min(900, max(10, 3.0 * support))))

    program._pull_gap = record
    state, _ = run_local(program, shards)
    assert state.converged
    assert any(want > 10 for _, want in targets)  # the growth, not the minimum, decided
    assert all(got == int(want) for got, want in targets), targets
