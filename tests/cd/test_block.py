"""Column blocks, column sets and residual changes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dask_strads.cd.block import ColumnBlock, add_delta, compact
from dask_strads.cd.columns import IN_PLACE_COLUMN_BYTES, ColumnSet, PeerColumns
from dask_strads.cd.datafits import Quadratic
from dask_strads.cd.shards import CentredColumns, dense_shard
from dask_strads.engine import shared


@pytest.mark.parametrize("form", ["dense", "sparse", "shard", "centred shard"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_block_gradient_is_the_centred_one(form, fit_intercept):
    rng = np.random.default_rng(2)
    X = sp.random(30, 8, density=0.4, random_state=2, format="csc")
    Xd = X.toarray()
    y = rng.standard_normal(30)
    yc = y - y.mean() if fit_intercept else y
    coef = rng.standard_normal(8)
    shard = {"dense": Xd, "sparse": X, "shard": dense_shard(Xd, centre=False),
             "centred shard": dense_shard(Xd, centre=True)}[form]
    block = ColumnBlock(0, 0, shard, yc, fit_intercept, coef)
    if fit_intercept:
        np.testing.assert_allclose(block.means, Xd.mean(0), atol=1e-15)
    else:
        assert block.means is None
    if form == ("centred shard" if fit_intercept else "shard"):
        # a shard made as the block uses it is its matrix, not copied again
        assert np.shares_memory(block.X, getattr(shard, "values", shard))
    Xc = Xd - Xd.mean(0) if fit_intercept else Xd
    r = yc - Xc @ coef
    np.testing.assert_allclose(block.gradient(block.residual), Xc.T @ r, atol=1e-12)
    norm2, r_y = Quadratic(yc).gap_terms(block, block.residual, block.xtr, False)
    assert norm2 == pytest.approx(r @ r)
    assert r_y == pytest.approx(r @ yc)
    cols = block.columns(np.array([1, 4]))
    assert cols.ids.tolist() == [1, 4] and cols.nnz == block.column_nnz(np.array([1, 4])).sum()


def test_a_dense_block_keeps_its_gradient_while_the_residual_is_unchanged():
    rng = np.random.default_rng(5)
    X = np.asfortranarray(rng.standard_normal((40, 6)))
    y = rng.standard_normal(40)
    block = ColumnBlock(0, 0, X, y, False, rng.standard_normal(6))
    assert block.kept_gradient(np.array([1])) is None  # no gap round yet
    block.gradient(block.residual)
    local = np.array([4, 0, 2])
    np.testing.assert_allclose(block.kept_gradient(local), X[:, local].T @ block.residual,
                               atol=1e-12)
    block.apply((np.array([3], np.int32), np.array([1e-9])))  # any change of r, however small
    assert block.kept_gradient(local) is None
    block.gradient(block.residual)
    block.restore_state(block.copy_state())
    assert block.kept_gradient(local) is None
    # of the datafit's gradient other than the residual, or of sparse columns: never kept
    block.gradient(block.residual.copy())
    assert block.kept_gradient(local) is None
    sparse = ColumnBlock(0, 0, sp.csc_matrix(X), y, False)
    sparse.gradient(sparse.residual)
    assert sparse.kept_gradient(local) is None


@pytest.mark.parametrize("form", ["dense", "sparse"])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_after_screening_most_columns_the_gradient_is_exact_on_the_live_ones(form,
                                                                            fit_intercept):
    rng = np.random.default_rng(3)
    X = sp.random(40, 24, density=0.5, random_state=3, format="csc")
    Xd = X.toarray()
    y = rng.standard_normal(40)
    yc = y - y.mean() if fit_intercept else y
    coef = np.where(rng.random(24) < 0.5, rng.standard_normal(24), 0.0)
    block = ColumnBlock(0, 0, Xd if form == "dense" else X, yc, fit_intercept, coef)
    xtr = block.gradient(block.residual).copy()
    # a radius that keeps only the 4 columns nearest their dual constraint
    dual_scale = np.abs(xtr).max() * 1.01
    inv_norm = 1.0 / np.sqrt(block.col_sq)
    margin = (1.0 - np.abs(xtr) / dual_scale) * inv_norm
    radius = np.sort(margin)[4] * (1 - 1e-9)
    dropped, _ = block.screen(0.0, dual_scale, radius)
    assert dropped.shape[0] == 20 and block.live_cols is not None
    assert np.all(block.coef[dropped] == 0.0)
    # the screened columns' coefficients left the residual (raw for sparse columns)
    Xc = Xd - Xd.mean(0) if fit_intercept else Xd
    r = yc - Xc @ block.coef
    np.testing.assert_allclose(block.residual + block.mu @ block.coef, r, atol=1e-12)
    live = np.flatnonzero(block.alive)
    g = block.gradient(block.residual)
    np.testing.assert_allclose(g[live], (Xc.T @ r)[live], atol=1e-12)
    np.testing.assert_array_equal(g[dropped], xtr[dropped])  # left as they were


def test_dense_shard_is_fortran_and_keeps_the_means():
    chunk = np.arange(12.0).reshape(4, 3) ** 2  # C order, as dask makes chunks
    plain = dense_shard(chunk, centre=False)
    assert plain.flags.f_contiguous and np.array_equal(plain, chunk)
    centred = dense_shard(chunk, centre=True)
    assert isinstance(centred, CentredColumns) and centred.values.flags.f_contiguous
    np.testing.assert_allclose(centred.values + centred.means, chunk)
    np.testing.assert_allclose(centred.values.sum(axis=0), 0.0, atol=1e-12)
    assert np.array_equal(chunk, np.arange(12.0).reshape(4, 3) ** 2)  # left as it was


@pytest.mark.parametrize("dense", [False, True])
def test_joined_column_sets_sweep_as_one_set_without_copies(dense):
    rng = np.random.default_rng(3)
    X = sp.random(IN_PLACE_COLUMN_BYTES // 8, 6, density=0.5, random_state=0, format="csc")
    X = X.toarray(order="F") if dense else X
    y = rng.standard_normal(X.shape[0])
    block = ColumnBlock(0, 100, X, y, False)
    a, b = block.columns(np.array([0, 2])), block.columns(np.array([5]))
    both = ColumnSet.concat([a, b])
    assert both.ids.tolist() == [100, 102, 105]
    assert both.nnz == a.nnz + b.nnz
    if dense:  # long dense columns stay where the block holds them
        assert all(part.dense is block.X for part in both.parts)
    # one set over a copy of the same columns: the same sweep, bit for bit
    alone = ColumnSet(ids=both.ids, coef=both.coef.copy(), mu=np.zeros(3),
                      col_sq=block.col_sq[[0, 2, 5]],
                      **({"dense": np.asfortranarray(X[:, [0, 2, 5]])} if dense else
                         dict(zip(("data", "indices", "indptr"),
                                  (lambda c: (c.data, c.indices, c.indptr))(
                                      sp.csc_matrix(X[:, [0, 2, 5]]))))))
    r1, r2 = y.copy(), y.copy()
    for _ in range(3):  # a sweep of the joined set goes through its parts in turn
        d_max, r_sum = 0.0, 0.0
        for part in both.parts:
            d, r_sum = part.epoch(r1, r_sum, 1.0, 0.0, False)
            d_max = max(d_max, d)
        assert (d_max, r_sum) == alone.epoch(r2, 0.0, 1.0, 0.0, False)
    np.testing.assert_array_equal(both.coef, alone.coef)
    np.testing.assert_array_equal(r1, r2)
    # the parts' coefficients are views of the joined ones: a jump moves them all
    both.coef[:] = [1.0, 0.0, 2.0]
    assert [p.coef.tolist() for p in both.parts] == [[1.0, 0.0], [2.0]]
    r = np.ones(X.shape[0])
    both.subtract(np.array([1.0, 0.0, 2.0]), r)
    np.testing.assert_allclose(r, 1 - X[:, [0, 2, 5]] @ [1.0, 0.0, 2.0])


@pytest.mark.parametrize("n", [10, IN_PLACE_COLUMN_BYTES // 8])
def test_dense_column_sets_long_columns_in_place_short_ones_copied(n):
    rng = np.random.default_rng(4)
    X = np.asfortranarray(rng.standard_normal((n, 6)))
    block = ColumnBlock(0, 100, X, np.ones(n), False)
    a = block.columns(np.array([0, 2]))
    assert a.nnz == 2 * n
    # long columns are swept where the block holds them; short ones from a copy
    assert (a.dense is block.X) == (n * 8 >= IN_PLACE_COLUMN_BYTES)
    shipped = a.compact()
    assert shipped.cols is None and not np.shares_memory(shipped.dense, block.X)
    np.testing.assert_array_equal(shipped.dense, X[:, [0, 2]])
    r = np.ones(n)
    a.subtract(np.array([1.0, 2.0]), r)
    np.testing.assert_allclose(r, 1 - X[:, [0, 2]] @ [1.0, 2.0])
    # columns read once or twice (a Gram phase's) are read where they lie, whatever
    # their length
    once = block.columns(np.array([0, 2]), swept=False)
    assert once.dense is block.X and once.dense_cols.tolist() == [0, 2]


def test_compact_deltas_round_trip():
    d = np.zeros(100)
    d[[3, 50]] = [1.0, -2.0]
    c = compact(d)
    assert isinstance(c, tuple)
    out = np.zeros(100)
    add_delta(out, c, 2.0)
    np.testing.assert_array_equal(out, 2 * d)
    assert compact(np.zeros(5)) is None
    assert isinstance(compact(np.ones(5)), np.ndarray)


@pytest.mark.skipif(not shared.available(), reason="no /dev/shm")
@pytest.mark.parametrize("n", [10, IN_PLACE_COLUMN_BYTES // 8])
def test_another_blocks_columns_are_read_from_its_file_as_its_own_would_be(n):
    """A solver reads a mapped block's long columns where they lie and packs short ones
    into a copy, kept while the same columns come again."""
    X = np.asfortranarray(np.random.default_rng(5).standard_normal((n, 8)))
    path = shared.new_path("dask-strads-test")
    handle = shared.share(X, path)
    try:
        block = ColumnBlock(1, 8, shared.attach(handle), np.ones(n), False)
        assert block.column_source == shared.shm_id()
        reader = PeerColumns()
        got = reader.read(block.mapped_columns(np.array([1, 4, 6])))
        assert got.ids.tolist() == [9, 12, 14]
        np.testing.assert_array_equal(got.dense[:, got.dense_cols], X[:, [1, 4, 6]])
        assert not np.shares_memory(got.dense, block.X)  # another mapping of the file
        long = n * 8 >= IN_PLACE_COLUMN_BYTES
        assert (got.dense.shape[1] == 8) == long
        again = reader.read(block.mapped_columns(np.array([1, 4, 6])))
        other = reader.read(block.mapped_columns(np.array([0, 4])))
        if not long:
            assert again.dense is got.dense and other.dense is not got.dense
        np.testing.assert_array_equal(other.dense[:, other.dense_cols], X[:, [0, 4]])
        once = reader.read(block.mapped_columns(np.array([1, 4, 6])), swept=False)
        assert once.dense.shape[1] == 8 and once.dense_cols.tolist() == [1, 4, 6]
    finally:
        shared.remove([path])


def test_centred_columns_that_arrive_misaligned_are_aligned():
    """A message's view can start at any byte: BLAS would refuse it and numpy fall back
    to a slow loop."""
    X = np.asfortranarray(np.random.default_rng(6).standard_normal((40, 5)))
    raw = np.empty(X.nbytes + 1, np.uint8)
    odd = np.ndarray(X.shape, dtype=np.float64, buffer=raw, offset=1, order="F")
    odd[...] = X
    assert not odd.flags.aligned
    block = ColumnBlock(0, 0, CentredColumns(odd, np.zeros(5)), np.ones(40), True)
    assert block.X.flags.aligned and block.X.flags.f_contiguous
    np.testing.assert_array_equal(block.X, X)
