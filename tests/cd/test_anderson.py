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


def test_a_companion_affine_in_the_iterates_is_combined_to_its_value_at_the_proposal():
    rng = np.random.default_rng(1)
    A = np.diag(np.linspace(0.1, 0.9, 20))
    b = rng.standard_normal(20)
    M, v = rng.standard_normal((7, 20)), rng.standard_normal(7)  # as g0 - G (w - w0)
    acc = Anderson(K=3)
    x = np.zeros(20)
    for _ in range(4):
        x = A @ x + b
        proposal = acc.propose(x, M @ x + v)
    assert proposal is not None
    np.testing.assert_allclose(acc.companion, M @ proposal + v, atol=1e-9)
    assert acc.propose(x, M @ x + v) is None and acc.companion is None
