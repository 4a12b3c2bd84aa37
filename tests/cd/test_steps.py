"""Step lengths of peer sweeps: the exact line search and the steps over blocks."""

from __future__ import annotations

import numpy as np
import pytest

from dask_strads.cd.steps import _coupled_steps, fold, line_search, penalty_change, steps


def objective_along(t, b, d, r0d, dd, l1, l2):
    v = b + t * d
    return r0d * t + 0.5 * dd * t * t + l1 * np.abs(v).sum() + 0.5 * l2 * v @ v


@pytest.mark.parametrize("seed", range(5))
def test_line_search_finds_the_minimum(seed):
    rng = np.random.default_rng(seed)
    b, d = rng.standard_normal(6), rng.standard_normal(6)
    r0d, dd = rng.standard_normal() * 3, abs(rng.standard_normal()) + 0.1
    t = line_search(b, d, r0d, dd, 0.7, 0.2, 0.0, 1.0)
    grid = np.linspace(0, 1, 20001)
    values = [objective_along(s, b, d, r0d, dd, 0.7, 0.2) for s in grid]
    assert objective_along(t, b, d, r0d, dd, 0.7, 0.2) <= min(values) + 1e-9
    assert penalty_change(b, d, 0.5, 0.7, 0.2) == pytest.approx(
        0.7 * (np.abs(b + 0.5 * d).sum() - np.abs(b).sum())
        + 0.1 * ((b + 0.5 * d) @ (b + 0.5 * d) - b @ b))


def test_steps_shorten_blocks_that_undo_each_other():
    """Two blocks whose residual changes are nearly opposite: the full sum of their
    updates gains little, the steps find a better point."""
    D = np.array([[1.0, 0.5, 0.0], [-0.9, -0.45, 0.1]])
    r0 = np.array([-1.0, -0.5, 0.2])
    G = D @ D.T
    c = D @ r0
    empty = (np.zeros(0), np.zeros(0), 0.0, 0.0)
    t = steps(G, c, [empty, empty], 0.0, 0.0, 0.0)

    def f(s):
        return c @ s + 0.5 * s @ G @ s
    assert f(t) < f(np.ones(2)) - 1e-6
    assert ((0 <= t) & (t <= 1)).all()


def test_coupled_steps_average_identical_updates():
    np.testing.assert_allclose(_coupled_steps(np.full((2, 2), 3.0)), [0.5, 0.5])
    np.testing.assert_array_equal(_coupled_steps(np.diag([1.0, 3.0])), [1.0, 1.0])


def test_fold_keeps_only_coordinates_whose_sign_can_change():
    base = np.array([1.0, -1.0, 0.0, 0.5])
    d = np.array([0.5, 0.5, 2.0, -1.0])  # the last crosses zero
    b, dk, lin, quad = fold(base, d, 0.3, 0.0)
    np.testing.assert_array_equal(b, [0.5])
    np.testing.assert_array_equal(dk, [-1.0])
    assert lin == pytest.approx(0.3 * 0.5 - 0.3 * 0.5 + 0.3 * 2.0)
