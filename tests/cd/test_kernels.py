"""The coordinate-descent kernels against plain numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dask_strads.cd import kernels


def soft(tmp, col_sq, l1, l2, positive=False):
    if positive and tmp < 0:
        return 0.0
    return np.sign(tmp) * max(abs(tmp) - l1, 0.0) / (col_sq + l2)


def reference_epoch(Xc, coef, r, l1, l2, positive=False):
    """Gauss-Seidel over the columns of the centred dense ``Xc``."""
    coef, r = coef.copy(), r.copy()
    d_max = 0.0
    for j in range(Xc.shape[1]):
        c = Xc[:, j] @ Xc[:, j]
        if c == 0:
            continue
        new = soft(Xc[:, j] @ r + coef[j] * c, c, l1, l2, positive)
        r -= (new - coef[j]) * Xc[:, j]
        d_max = max(d_max, abs(new - coef[j]))
        coef[j] = new
    return coef, r, d_max


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    X = sp.random(40, 12, density=0.3, random_state=1, format="csc")
    X.data = rng.standard_normal(X.nnz)
    y = rng.standard_normal(40)
    return X, y


@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("l2", [0.0, 0.7])
def test_dense_epoch_is_exact_coordinate_descent(problem, positive, l2):
    X, y = problem
    Xd = np.asfortranarray(X.toarray())
    coef = np.linspace(-0.2, 0.3, 12)
    r = y - Xd @ coef
    want_coef, want_r, want_d = reference_epoch(Xd, coef, r, 1.5, l2, positive)
    d = kernels.epoch_dense(Xd, np.arange(Xd.shape[1]), (Xd**2).sum(0), coef, r, 1.5, l2,
                            positive)
    np.testing.assert_allclose(coef, want_coef, atol=1e-12)
    np.testing.assert_allclose(r, want_r, atol=1e-12)
    assert d == pytest.approx(want_d)


def test_dense_epoch_and_subtract_on_some_columns_read_them_in_place(problem):
    """Columns picked by index from the block's array: the same sweep as on a copy of
    them, and the array itself is left alone."""
    X, y = problem
    Xd = np.asfortranarray(X.toarray())
    before = Xd.copy()
    cols = np.array([1, 4, 5, 9])
    sub = np.asfortranarray(Xd[:, cols])
    coef = np.array([0.1, -0.2, 0.0, 0.3])
    r = y - sub @ coef
    want_coef, want_r, want_d = reference_epoch(sub, coef, r, 0.8, 0.0, False)
    d = kernels.epoch_dense(Xd, cols, (sub**2).sum(0), coef, r, 0.8, 0.0, False)
    np.testing.assert_allclose(coef, want_coef, atol=1e-12)
    np.testing.assert_allclose(r, want_r, atol=1e-12)
    assert d == pytest.approx(want_d)
    delta = np.array([0.5, 0.0, -1.0, 2.0])
    r2 = y.copy()
    kernels.subtract_dense(Xd, cols, delta, r2)
    np.testing.assert_allclose(r2, y - sub @ delta, atol=1e-12)
    np.testing.assert_array_equal(Xd, before)


@pytest.mark.parametrize("centre", [False, True])
def test_sparse_epoch_centres_implicitly(problem, centre):
    """A CSC epoch with column means equals a dense epoch on the centred matrix, the
    residual kept raw (its centred version is the dense one's)."""
    X, y = problem
    n = X.shape[0]
    Xd = X.toarray()
    mu = Xd.mean(0) if centre else np.zeros(12)
    Xc = Xd - mu
    coef = np.zeros(12)
    yc = y - y.mean() if centre else y
    want_coef, want_r, _ = reference_epoch(Xc, coef, yc, 0.5, 0.0)
    r = yc.copy()
    col_sq = (Xc**2).sum(0)
    _, r_sum = kernels.epoch_sparse(X.data, X.indices, X.indptr, mu, col_sq, coef, r,
                                    r.sum(), 0.5, 0.0, False)
    np.testing.assert_allclose(coef, want_coef, atol=1e-12)
    if centre:  # the sum is kept only where the centring needs it
        assert r_sum == pytest.approx(r.sum())
    np.testing.assert_allclose(r - (r.mean() if centre else 0.0), want_r, atol=1e-12)
    assert n == r.shape[0]


def test_xtr_and_subtract_match_scipy(problem):
    X, y = problem
    mu = X.toarray().mean(0)
    out = np.full(12, np.nan)
    kernels.xtr_sparse_all(X.data, X.indices, X.indptr, mu, y, y.sum(), out)
    np.testing.assert_allclose(out, (X.toarray() - mu).T @ (y - y.mean()), atol=1e-12)
    some = np.array([1, 5, 7])
    part = np.full(12, np.nan)
    kernels.xtr_sparse(X.data, X.indices, X.indptr, mu, y, y.sum(), some, part)
    np.testing.assert_allclose(part[some], out[some])
    assert np.isnan(np.delete(part, some)).all()
    r = y.copy()
    delta = np.linspace(-1, 1, 12)
    shift = kernels.subtract_sparse(X.data, X.indices, X.indptr, mu, delta, r)
    np.testing.assert_allclose(r, y - X @ delta, atol=1e-12)
    assert shift == pytest.approx(-X.shape[0] * mu @ delta)


def test_take_columns_copies_the_columns(problem):
    X, _ = problem
    cols = np.array([0, 3, 4, 11])
    data, indices, ptr = kernels.take_columns(X.data, X.indices, X.indptr, cols)
    got = sp.csc_matrix((data, indices, ptr), shape=(X.shape[0], 4))
    np.testing.assert_array_equal(got.toarray(), X[:, cols].toarray())


@pytest.mark.parametrize("positive", [False, True])
def test_gap_summary(problem, positive):
    X, y = problem
    Xd = X.toarray()
    coef = np.array([0.0, 0.4, 0, 0, -0.3, 0, 0, 0, 0, 0, 0, 0.1])
    r = y - Xd @ coef
    xtr = Xd.T @ r
    col_sq = (Xd**2).sum(0)
    alive = np.ones(12, bool)
    alive[7] = False
    score = np.empty(12)
    l1, l2 = 0.8, 0.3
    dual, w_l1, w_l2sq, xtr_sq, top = kernels.gap_summary(xtr, coef, col_sq, alive, l1, l2,
                                                          positive, score)
    a = (xtr - l2 * coef)[alive]
    assert dual == pytest.approx(a.max() if positive else np.abs(a).max())
    assert w_l1 == pytest.approx(np.abs(coef).sum())
    assert w_l2sq == pytest.approx(coef @ coef)
    assert xtr_sq == pytest.approx((xtr[alive] ** 2).sum())
    want = [abs(soft(xtr[j] + coef[j] * col_sq[j], col_sq[j], l1, l2, positive) - coef[j])
            if alive[j] else 0.0 for j in range(12)]
    np.testing.assert_allclose(score, want, atol=1e-12)
    assert top == pytest.approx(max(want))


def test_screening_drops_only_columns_zero_at_the_optimum():
    """Gap Safe with the exact gap of a near-optimal point: every dropped column is zero
    in scikit-learn's solution."""
    from sklearn.linear_model import Lasso

    from dask_strads.cd.gap import screen_rule

    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 200))
    y = X[:, :4] @ [2.0, -1.0, 1.5, 0.5] + 0.1 * rng.standard_normal(60)
    n = 60
    alpha = np.abs(X.T @ y).max() / n / 5
    sk = Lasso(alpha=alpha, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y)
    coef = sk.coef_ * (1 + 1e-3)  # near, not at, the optimum
    r = y - X @ coef
    xtr = X.T @ r
    l1 = alpha * n
    dual_norm = np.abs(xtr).max()
    scale = min(1.0, l1 / dual_norm)
    gap = 0.5 * r @ r + l1 * np.abs(coef).sum() - (-0.5 * scale**2 * r @ r + scale * r @ y)
    rule = screen_rule(l1, gap, dual_norm)
    out = np.empty(200, np.int64)
    inv_norm = 1.0 / np.sqrt((X**2).sum(0))
    count = kernels.screen_out(xtr, coef, 0.0, inv_norm, rule.dual_scale, rule.radius,
                               np.ones(200, bool), out)
    assert count > 100  # it does screen
    assert not sk.coef_[out[:count]].any()
