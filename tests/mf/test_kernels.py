"""Kernels of CCD++ against plain numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from dask_strads.mf import kernels


def _layout(seed=0, n_own=30, n_other=20, density=0.3):
    rng = np.random.default_rng(seed)
    A = sp.random(n_own, n_other, density=density, random_state=rng, format="csr")
    A.data = rng.standard_normal(A.nnz)
    A.indptr = A.indptr.astype(np.int64)
    A.indices = A.indices.astype(np.int64)
    rows = np.repeat(np.arange(n_own), np.diff(A.indptr))
    return A, rows, rng


def _numpy_sweep(A, rows, resid, own_sub, other_sub, own_add, other_add, other_new, lam,
                 do_sub, do_add, do_post):
    cols = A.indices
    resid = resid.copy()
    if do_sub:
        resid -= own_sub[rows] * other_sub[cols]
    if do_add:
        resid += own_add[rows] * other_add[cols]
    n_own = A.shape[0]
    num = np.bincount(rows, resid * other_new[cols], minlength=n_own)
    den = lam + np.bincount(rows, other_new[cols] ** 2, minlength=n_own)
    new = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    sse = 0.0
    if do_post:
        resid -= new[rows] * other_new[cols]
        sse = float(resid @ resid)
    return new, resid, sse


@pytest.mark.parametrize("do_sub,do_add,do_post", list(itertools.product([False, True], repeat=3)))
@pytest.mark.parametrize("parallel", [False, True])
def test_rank_one_sweep_matches_numpy(do_sub, do_add, do_post, parallel):
    A, rows, rng = _layout()
    n_own, n_other = A.shape
    vecs = [rng.standard_normal(n) for n in (n_own, n_other, n_own, n_other, n_other)]
    lam = 0.3
    expected_new, expected_resid, expected_sse = _numpy_sweep(
        A, rows, A.data, *vecs, lam, do_sub, do_add, do_post)
    resid = A.data.copy()
    out = np.full(n_own, np.nan)
    fn = kernels.rank_one_sweep_parallel if parallel else kernels.rank_one_sweep
    sse = fn(A.indptr, A.indices, resid, *vecs, lam, out, do_sub, do_add, do_post)
    np.testing.assert_allclose(out, expected_new, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(resid, expected_resid, rtol=1e-12, atol=1e-14)
    assert sse == pytest.approx(expected_sse, rel=1e-12)


def test_rank_one_sweep_in_place_update_reads_old_value_first():
    # The program passes the same column of W as own_add (old value) and out_own.
    A, rows, rng = _layout(1)
    w = rng.standard_normal(A.shape[0])
    h = rng.standard_normal(A.shape[1])
    expected_new, expected_resid, _ = _numpy_sweep(A, rows, A.data, w, h, w.copy(), h, h, 0.1,
                                                   False, True, False)
    resid = A.data.copy()
    kernels.rank_one_sweep(A.indptr, A.indices, resid, w, h, w, h, h, 0.1, w, False, True, False)
    np.testing.assert_allclose(w, expected_new, rtol=1e-12)
    np.testing.assert_allclose(resid, expected_resid, rtol=1e-12)


def test_empty_rows_and_zero_lambda_give_zero_not_nan():
    indptr = np.array([0, 0, 2], dtype=np.int64)
    indices = np.array([0, 1], dtype=np.int64)
    resid = np.array([1.0, 2.0])
    out = np.full(2, np.nan)
    h = np.array([1.0, 1.0])
    kernels.rank_one_sweep(indptr, indices, resid, h, h, h, h, h, 0.0, out, False, False, False)
    np.testing.assert_array_equal(out, [0.0, 1.5])


def test_subtract_products_and_pairs():
    A, rows, rng = _layout(2)
    own = rng.standard_normal((A.shape[0], 5))
    other = rng.standard_normal((A.shape[1], 5))
    resid = A.data.copy()
    kernels.subtract_products(A.indptr, A.indices, resid, own, other)
    np.testing.assert_allclose(resid, A.data - np.einsum("ij,ij->i", own[rows], other[A.indices]),
                               rtol=1e-12)
    resid = A.data.copy()
    kernels.subtract_pair_products(rows, A.indices, resid, own, other)
    np.testing.assert_allclose(resid, A.data - np.einsum("ij,ij->i", own[rows], other[A.indices]),
                               rtol=1e-12)


def test_pair_rank_one_update():
    A, rows, rng = _layout(3)
    cols = A.indices
    w_old, w_new = rng.standard_normal((2, A.shape[0]))
    h_old, h_new = rng.standard_normal((2, A.shape[1]))
    resid = A.data.copy()
    sse = kernels.pair_rank_one_update(rows, cols, resid, w_old, h_old, w_new, h_new)
    expected = A.data + w_old[rows] * h_old[cols] - w_new[rows] * h_new[cols]
    np.testing.assert_allclose(resid, expected, rtol=1e-12)
    assert sse == pytest.approx(float(expected @ expected), rel=1e-12)


@pytest.mark.parametrize("do_sub,do_add,want_ssq",
                         list(itertools.product([False, True], repeat=3)))
def test_rank_one_rows_matches_numpy(do_sub, do_add, want_ssq):
    """The fused row half of a sweep: new w, the column sums num/den and the residual
    (h_sub is NaN where unused: a kernel that reads it without do_sub fails)."""
    A, rows, rng = _layout(seed=1)
    n_own, n_other = A.shape
    w_sub, w_add = rng.standard_normal(n_own), rng.standard_normal(n_own)
    h_sub, h = (rng.standard_normal(n_other) for _ in range(2))
    lam = 0.3
    cols = A.indices
    resid = A.data.copy()
    if do_sub:
        resid -= w_sub[rows] * h_sub[cols]
    if do_add:  # the added rank-one term is the current one, w_add h'
        resid += w_add[rows] * h[cols]
    acc = np.bincount(rows, resid * h[cols], minlength=n_own)
    nrm = np.bincount(rows, h[cols] ** 2, minlength=n_own) + lam
    new = acc / nrm
    num = np.bincount(cols, resid * new[rows], minlength=n_other)
    den = np.bincount(cols, new[rows] ** 2, minlength=n_other)

    got_resid = A.data.copy()
    out = np.full(n_own, np.nan)
    hh = np.column_stack([h_sub if do_sub else np.full(n_other, np.nan), h])
    nd = np.zeros((n_other, 2))
    ssq = kernels.rank_one_rows(A.indptr, A.indices, got_resid, w_sub, w_add, hh.reshape(-1),
                                lam, out, do_sub, do_add, nd.reshape(-1), want_ssq)
    np.testing.assert_allclose(out, new, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got_resid, resid, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(nd[:, 0], num, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(nd[:, 1], den, rtol=1e-12, atol=1e-14)
    assert ssq == (pytest.approx(np.sum(resid ** 2), rel=1e-12) if want_ssq else 0.0)
