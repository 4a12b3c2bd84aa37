"""The numba reduction kernels against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from dask_strads.engine.reduce import concat_slices, sum_dense, sum_sparse


def test_sum_dense_matches_numpy():
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(50) for _ in range(4)]
    np.testing.assert_allclose(sum_dense(parts), np.sum(parts, axis=0))
    out = np.ones(50)
    sum_dense(parts, out=out)
    np.testing.assert_allclose(out, 1 + np.sum(parts, axis=0))


def test_sum_sparse_accumulates_repeated_indices():
    out = sum_sparse([(np.array([0, 3, 3]), np.array([1.0, 2.0, 3.0])),
                      (np.array([3, 9]), np.array([1.0, -1.0]))], size=10)
    expected = np.zeros(10)
    expected[0], expected[3], expected[9] = 1, 6, -1
    np.testing.assert_array_equal(out, expected)


def test_sum_sparse_integer_counts():
    out = sum_sparse([(np.array([1, 1]), np.array([2, 3]))], size=3, dtype=np.int64)
    assert out.dtype == np.int64 and out.tolist() == [0, 5, 0]


def test_concat_slices():
    out = concat_slices([(3, np.array([4.0, 5.0])), (0, np.array([1.0, 2.0, 3.0]))], size=5)
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 5])


def test_reduce_argument_errors():
    with pytest.raises(ValueError, match="out"):
        sum_dense([])
    with pytest.raises(ValueError, match="size"):
        sum_sparse([])
