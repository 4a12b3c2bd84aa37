"""Working-set columns shipped between blocks: only what the solver lacks travels, and
what it solves is what a fresh copy would be."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from dask_strads.cd.block import ColumnBlock


def _as_dense(cols, n):
    if cols.dense is not None:
        return cols.dense
    return sp.csc_matrix((cols.data, cols.indices, cols.indptr), shape=(n, cols.size)).toarray()


@pytest.mark.parametrize("sparse", [False, True])
def test_the_solver_gets_fresh_columns_while_only_missing_ones_travel(sparse):
    rng = np.random.default_rng(0)
    X = sp.random(20, 12, density=0.4, random_state=1, format="csc")
    sender = ColumnBlock(1, 100, X if sparse else X.toarray(), rng.standard_normal(20), False)
    solver = ColumnBlock(0, 0, np.ones((20, 3)), np.ones(20), False)
    working_sets = [[1, 4, 7], [1, 4, 7, 9], [4, 9], [2, 4, 9, 11], [2, 4, 9, 11]]
    shipped = []
    for ws in working_sets:
        sender.coef[:] = rng.standard_normal(12)  # the coefficients move between phases
        local = np.array(ws)
        parcel = pickle.loads(pickle.dumps(sender.outbox.parcel(sender, local, solver=0)))
        shipped.append([] if parcel["new"] is None else (parcel["new"].ids - 100).tolist())
        got = solver.inbox.receive(1, parcel)
        fresh = sender.columns(local)
        np.testing.assert_array_equal(got.ids, fresh.ids)
        np.testing.assert_array_equal(got.coef, fresh.coef)
        np.testing.assert_array_equal(got.col_sq, fresh.col_sq)
        np.testing.assert_array_equal(_as_dense(got, 20), _as_dense(fresh, 20))
        got.coef[:] = 0.0  # a solve changes the copy's coefficients, not the next parcel's
    assert shipped == [[1, 4, 7], [9], [], [2, 11], []]


def test_each_solver_is_remembered_apart():
    X = np.arange(40.0).reshape(10, 4)
    sender = ColumnBlock(2, 8, X, np.ones(10), False)
    first = sender.outbox.parcel(sender, np.array([0, 1]), solver=0)
    other = sender.outbox.parcel(sender, np.array([1, 2]), solver=1)
    again = sender.outbox.parcel(sender, np.array([1, 2]), solver=0)
    assert first["new"].ids.tolist() == [8, 9]
    assert other["new"].ids.tolist() == [9, 10]
    assert again["new"].ids.tolist() == [10]  # solver 0 still holds column 9
