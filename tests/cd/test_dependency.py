"""The dependency check: correlated columns and the partition of a working set."""

from __future__ import annotations

import numpy as np

from dask_strads.cd.block import ColumnBlock
from dask_strads.cd.dependency import CorrelationIndex, partition


def test_correlation_index_records_exactly_the_correlated_pairs_across_blocks():
    rng = np.random.default_rng(1)
    n = 200
    base = rng.standard_normal(n)
    X = np.column_stack([base, rng.standard_normal(n), base + 0.1 * rng.standard_normal(n),
                         rng.standard_normal(n)])
    starts = np.array([0, 2, 4])
    blocks = [ColumnBlock(b, starts[b], X[:, starts[b]:starts[b + 1]], np.zeros(n), True)
              for b in range(2)]
    index = CorrelationIndex(n, 0.3, starts)
    for b, blk in enumerate(blocks):
        index.add(b, np.arange(2) + starts[b], blk.standardized(np.arange(2)))
    rows, cols = index.pairs()
    C = np.corrcoef(X.T)
    want = {(a, c) for a in (2, 3) for c in (0, 1) if abs(C[a, c]) >= 0.3}
    assert set(zip(rows.tolist(), cols.tolist())) == want == {(2, 0)}


def test_partition_puts_conflicting_coordinates_on_one_solver():
    starts = np.array([0, 3, 6])
    index = CorrelationIndex(10, 0.5, starts)
    index.rows, index.cols = [np.array([4])], [np.array([1])]  # columns 1 and 4 conflict
    ws = [np.array([0, 1, 2]), np.array([0, 1])]  # globals 0 1 2 | 3 4
    solver_of = partition(ws, starts, index, solvers=(0, 1))
    np.testing.assert_array_equal(solver_of[0], [0, 0, 0])
    np.testing.assert_array_equal(solver_of[1], [1, 0])  # 4 joins 1 on block 0
    assert partition(ws, starts, None, (0, 1))[1].tolist() == [1, 1]
