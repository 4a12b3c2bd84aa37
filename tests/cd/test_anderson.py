"""Anderson extrapolation of iterates."""

from __future__ import annotations

import numpy as np

from dask_strads.cd.anderson import Anderson


def test_anderson_extrapolates_a_linear_iteration_towards_its_fixed_point():
    rng = np.random.default_rng(0)
    A = np.diag(np.linspace(0.0, 0.95, 50))
    b = rng.standard_normal(50)
    fixed = np.linalg.solve(np.eye(50) - A, b)
    acc = Anderson(K=5)
    x = np.zeros(50)
    proposals = []
    for _ in range(6):
        x = A @ x + b
        proposals.append(acc.propose(x))
    assert all(p is None for p in proposals[:-1])
    assert np.linalg.norm(proposals[-1] - fixed) < 0.5 * np.linalg.norm(x - fixed)
    assert acc.propose(x) is None  # it starts collecting again
