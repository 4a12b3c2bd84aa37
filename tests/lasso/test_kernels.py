"""Kernels against plain numpy references."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dask_strads.lasso import kernels


def soft(a, t):
    return np.sign(a) * max(abs(a) - t, 0.0)


def reference_cd(X, coef, r, coords, l1, l2, positive, jacobi=False):
    """Textbook coordinate descent on centered dense columns."""
    coef, r = coef.copy(), r.copy()
    col_sq = (X**2).sum(0)
    r0 = r.copy()
    new = []
    for j in coords:
        if col_sq[j] == 0.0:
            new.append(coef[j])
            continue
        rr = r0 if jacobi else r
        tmp = X[:, j] @ rr + coef[j] * col_sq[j]
        v = 0.0 if (positive and tmp < 0) else soft(tmp, l1) / (col_sq[j] + l2)
        new.append(v)
        if not jacobi:
            r -= (v - coef[j]) * X[:, j]
            coef[j] = v
    if jacobi:
        for j, v in zip(coords, new, strict=True):
            if col_sq[j] == 0.0:
                continue
            r -= (v - coef[j]) * X[:, j]
            coef[j] = v
    return coef, r, np.array(new)


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    n, p = 30, 12
    X = rng.standard_normal((n, p))
    X[:, 3] = 0.0  # an empty column is skipped
    y = rng.standard_normal(n)
    coef = rng.standard_normal(p) * (rng.random(p) < 0.5)
    coef[3] = 0.0
    return X, y, coef


@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("l2", [0.0, 2.5])
@pytest.mark.parametrize("jacobi", [False, True])
def test_dense_cd_matches_reference(problem, positive, l2, jacobi):
    X, y, coef = problem
    Xc = np.asfortranarray(X - X.mean(0))
    r = y - y.mean() - Xc @ coef
    coords = np.array([5, 0, 3, 7, 5, 11, 2], dtype=np.int64)
    if jacobi:
        coords = np.unique(coords)
    want_coef, want_r, want_new = reference_cd(Xc, coef, r, coords, 1.5, l2, positive, jacobi)
    got_coef, got_r, got_new = coef.copy(), r.copy(), np.empty(coords.shape[0])
    kern = kernels.jacobi_dense if jacobi else kernels.cd_dense
    d_max = kern(Xc, (Xc**2).sum(0), got_coef, got_r, coords, 1.5, l2, positive, got_new)
    np.testing.assert_allclose(got_coef, want_coef, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_r, want_r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_new, want_new, rtol=1e-12, atol=1e-12)
    assert d_max == pytest.approx(np.abs(want_coef - coef).max())
    if positive:
        assert (got_coef[coords] >= 0).all()


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("jacobi", [False, True])
def test_sparse_cd_with_implicit_centering_matches_dense(problem, center, jacobi):
    X, y, coef = problem
    rng = np.random.default_rng(1)
    X = X * (rng.random(X.shape) < 0.4)
    Xs = sp.csc_matrix(X)
    n = X.shape[0]
    mu = X.mean(0) if center else np.zeros(X.shape[1])
    Xc = np.asfortranarray(X - mu)
    yc = y - y.mean()
    coords = np.array([1, 4, 6, 9, 10], dtype=np.int64)
    want_coef, want_r, _ = reference_cd(Xc, coef, yc - Xc @ coef, coords, 0.7, 0.3, False,
                                        jacobi)
    # the block keeps the raw residual y_c - X b; the true one is raw - mean(raw)
    r_raw = yc - X @ coef
    col_sq = (Xc**2).sum(0)
    got = coef.copy()
    out = np.empty(coords.shape[0])
    if jacobi:
        kernels.jacobi_sparse(Xs.data, Xs.indices, Xs.indptr, mu, col_sq, got, r_raw, coords,
                              0.7, 0.3, False, out)
    else:
        kernels.cd_sparse(Xs.data, Xs.indices, Xs.indptr, mu, center, col_sq, got, r_raw,
                          coords, 0.7, 0.3, False, out)
    np.testing.assert_allclose(got, want_coef, rtol=1e-11, atol=1e-12)
    true_r = r_raw - r_raw.mean() if center else r_raw
    np.testing.assert_allclose(true_r, want_r, rtol=1e-11, atol=1e-11)
    del n


def test_xtr_sparse_and_steps(problem):
    X, y, coef = problem
    X = X * (np.random.default_rng(2).random(X.shape) < 0.5)
    Xs = sp.csc_matrix(X)
    mu = X.mean(0)
    r_raw = y - X @ coef
    out = np.empty(X.shape[1])
    kernels.xtr_sparse(Xs.data, Xs.indices, Xs.indptr, mu, r_raw, out)
    Xc = X - mu
    np.testing.assert_allclose(out, Xc.T @ (r_raw - r_raw.mean()), rtol=1e-12, atol=1e-12)
    col_sq = (Xc**2).sum(0)
    st = _steps(out, coef, col_sq, 0.5, 0.1, False)
    for j in range(X.shape[1]):
        if col_sq[j] == 0:
            assert st[j] == 0
        else:
            new = soft(out[j] + coef[j] * col_sq[j], 0.5) / (col_sq[j] + 0.1)
            assert st[j] == pytest.approx(abs(new - coef[j]), abs=1e-12)


def test_update_priority_keeps_active_list_consistent():
    rng = np.random.default_rng(3)
    p = 50
    w = np.zeros(p)
    active = np.zeros(p, dtype=np.int64)
    position = np.full(p, -1, dtype=np.int64)
    n_active = 0
    for _ in range(200):
        idx = rng.choice(p, 7, replace=False).astype(np.int64)
        vals = rng.random(7) * (rng.random(7) < 0.6)
        n_active = kernels.update_priority(w, active, position, n_active, idx, vals)
        listed = np.sort(active[:n_active])
        np.testing.assert_array_equal(listed, np.flatnonzero(w))
        for slot in range(n_active):
            assert position[active[slot]] == slot
        assert (position[w == 0] == -1).all()


def test_sample_block_follows_the_weights():
    rng = np.random.default_rng(4)
    p = 20
    w = np.zeros(p)
    w[[2, 7]] = [3.0, 1.0]
    active = np.array([2, 7] + [0] * (p - 2), dtype=np.int64)
    mark = np.zeros(p, dtype=np.bool_)
    counts = np.zeros(p)
    eta = 0.05  # total floor mass 1.0 vs weights 4.0
    alive = np.arange(p, dtype=np.int64)
    for _ in range(4000):
        s = kernels.sample_block(w, active, 2, eta, rng.random(1), mark, alive, p)
        counts[s] += 1
    freq = counts / counts.sum()
    assert freq[2] == pytest.approx(3.0 / 5.0 + eta / 5.0, abs=0.03)
    assert freq[7] == pytest.approx(1.0 / 5.0 + eta / 5.0, abs=0.03)
    assert freq[0] == pytest.approx(eta / 5.0, abs=0.01)
    assert not mark.any()
    # repeated draws are taken once, highest weight first
    s = kernels.sample_block(w, active, 2, eta, np.array([0.1, 0.1, 0.7, 0.79, 0.99]), mark,
                             alive, p)
    assert len(set(s.tolist())) == len(s)
    assert list(s[:2]) == [2, 7]


def test_column_sums_match_scipy():
    X = sp.random(40, 25, density=0.2, format="csc", random_state=3)
    X[:, 7] = 0.0  # an empty column
    X.eliminate_zeros()
    X.data -= 0.5  # both signs
    sums, sq, abs_sums = kernels.column_sums(X.data, X.indptr)
    np.testing.assert_allclose(sums, np.asarray(X.sum(0)).ravel(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(sq, np.asarray(X.multiply(X).sum(0)).ravel(), rtol=1e-13,
                               atol=1e-15)
    np.testing.assert_allclose(abs_sums, np.asarray(abs(X).sum(0)).ravel(), rtol=1e-13,
                               atol=1e-15)
    assert sums[7] == sq[7] == abs_sums[7] == 0.0
    assert (sums < abs_sums).any()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("l2", [0.0, 0.7])
def test_folded_line_search_is_the_same_search(seed, l2):
    """Coordinates that keep their sign along the step (or start at zero) enter the
    slope linearly: folding them gives the same minimiser from the other coordinates."""
    rng = np.random.default_rng(seed)
    m = 200
    b = rng.standard_normal(m) * (rng.random(m) < 0.7)
    d = rng.standard_normal(m) * rng.choice([0.05, 0.5, 3.0], m)
    d[rng.random(m) < 0.1] = 0.0
    d[:3] = -b[:3]  # steps that end exactly at zero
    l1 = 0.3
    r0d, dd = rng.standard_normal() * 20.0, abs(rng.standard_normal()) * 30.0
    keep, lin, quad = kernels.fold_linear(b, d, l1, l2)
    moving_sign = (b != 0.0) & (np.sign(b + d) != np.sign(b))
    np.testing.assert_array_equal(keep, moving_sign)
    full = kernels.line_search(b, d, r0d, dd, l1, l2, 0.0, 1.0)
    folded = kernels.line_search(b[keep], d[keep], r0d + lin, dd + quad, l1, l2, 0.0, 1.0)
    assert folded == pytest.approx(full, abs=1e-7)
    # and the slopes agree everywhere on [0, 1]
    for t in np.linspace(0.0, 1.0, 11):
        assert kernels._slope(t, b[keep], d[keep], r0d + lin, dd + quad, l1, l2) == \
            pytest.approx(kernels._slope(t, b, d, r0d, dd, l1, l2), rel=1e-10, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_gather_fold_is_the_pulls_numpy_passes_bit_for_bit(seed):
    """One pass for the moved coordinates of a working-set round: the same arrays and
    sums as numpy's gathers and fold_linear."""
    rng = np.random.default_rng(seed)
    p, m = 5000, 800
    coef = rng.standard_normal(p) * (rng.random(p) < 0.4)
    coords = np.sort(rng.choice(p, m, replace=False)).astype(np.int64)
    pos = np.flatnonzero(rng.random(m) < 0.6).astype(np.int32)
    new = coef[coords[pos]] + rng.standard_normal(pos.shape[0]) * rng.choice([0.01, 1.0, 5.0],
                                                                          pos.shape[0])
    new[:5] = 0.0
    new[5:8] = -coef[coords[pos[5:8]]]
    for l1, l2 in ((0.3, 0.0), (0.3, 0.7)):
        moved, base, d, kb, kd, lin, quad = kernels.gather_fold(coef, coords, pos, new, l1, l2)
        ref_moved = coords[pos]
        ref_base = coef[ref_moved]
        ref_d = new - ref_base
        keep, ref_lin, ref_quad = kernels.fold_linear(ref_base, ref_d, l1, l2)
        for got, ref in ((moved, ref_moved), (base, ref_base), (d, ref_d),
                         (kb, ref_base[keep]), (kd, ref_d[keep])):
            np.testing.assert_array_equal(got, ref)
        assert lin == ref_lin and quad == ref_quad
    empty = kernels.gather_fold(coef, coords, pos[:0], new[:0], 0.3, 0.0)
    assert all(a.shape == (0,) for a in empty[:5]) and empty[5:] == (0.0, 0.0)


@pytest.mark.parametrize("step", [1.0, 0.37])
def test_commit_block_is_numpys_commit(step):
    rng = np.random.default_rng(3)
    p = 3000
    coef = rng.standard_normal(p) * (rng.random(p) < 0.5)
    idx = np.sort(rng.choice(p, 700, replace=False)).astype(np.int64)
    base = coef[idx].copy()
    values = rng.standard_normal(700) * (rng.random(700) < 0.7)
    pending = rng.standard_normal(p)
    ref_coef, ref_pending = coef.copy(), pending.copy()
    new = values if step == 1.0 else base + step * (values - base)
    ref_coef[idx] = new
    if step != 1.0:
        ref_pending[idx] += new - values
    change, d_nnz = kernels.commit_block(coef, idx, values, base, step, pending)
    np.testing.assert_array_equal(coef, ref_coef)
    np.testing.assert_array_equal(pending, ref_pending)
    np.testing.assert_array_equal(change, np.abs(new - base))
    assert d_nnz == np.count_nonzero(new) - np.count_nonzero(base)


def _steps(xtr, coef, col_sq, l1, l2, positive):
    """The steps of a gap round, dense, from :func:`kernels.gap_summary`."""
    p = coef.shape[0]
    idx, val = np.empty(p, dtype=np.int64), np.empty(p)
    *_, n = kernels.gap_summary(xtr, coef, col_sq, l1, l2, positive, np.empty(p), idx, val)
    out = np.zeros(p)
    out[idx[:n]] = val[:n]
    return out


@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("l2", [0.0, 1.5])
def test_gap_summary_matches_numpy(problem, positive, l2):
    X, y, coef = problem
    col_sq = (X**2).sum(0)
    xtr = X.T @ (y - X @ coef)
    p = coef.shape[0]
    xta, idx, val = np.empty(p), np.empty(p, dtype=np.int64), np.empty(p)
    dual, w_l1, w_l2sq, xtr_sq, n = kernels.gap_summary(xtr, coef, col_sq, 0.4, l2, positive,
                                                        xta, idx, val)
    ref_xta = xtr - l2 * coef
    np.testing.assert_allclose(xta, ref_xta, rtol=1e-14)
    assert dual == pytest.approx(ref_xta.max() if positive else np.abs(ref_xta).max())
    assert w_l1 == pytest.approx(np.abs(coef).sum())
    assert w_l2sq == pytest.approx(coef @ coef)
    assert xtr_sq == pytest.approx(xtr @ xtr)
    tmp = xtr + coef * col_sq
    with np.errstate(invalid="ignore", divide="ignore"):  # the empty column: 0 / 0
        new = np.sign(tmp) * np.maximum(np.abs(tmp) - 0.4, 0.0) / (col_sq + l2)
    if positive:
        new[tmp < 0] = 0.0
    step = np.where(col_sq > 0, np.abs(new - coef), 0.0)
    np.testing.assert_array_equal(idx[:n], np.flatnonzero(step))
    np.testing.assert_allclose(val[:n], step[step != 0.0], rtol=1e-12)
    assert 0 < n < p


def _active(weight):
    active = np.flatnonzero(weight > 0.0).astype(np.int64)
    return active[np.random.default_rng(5).permutation(active.shape[0])]  # any order


@pytest.mark.parametrize("k", [5, 8])
def test_working_set_samples_like_exponential_keys(k):
    """The exponential race picks each coordinate with a positive weight as often as
    Efraimidis-Spirakis keys over them (weight + floor); the support always, screened
    and weight-0 coordinates never (with fewer candidates than places, the working
    set is the support and every candidate)."""
    weight = np.array([0.0, 3.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.0, 2.0, 0.0, 0.1, 0.0, 0.25, 0.0])
    coef = np.zeros(weight.shape[0])
    coef[[2, 9]] = 1.5  # the support
    alive = np.array([0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13], dtype=np.int64)  # 5 screened
    alive_mask = np.zeros(weight.shape[0], dtype=bool)
    alive_mask[alive] = True
    weight[5] = 9.0  # a screened coordinate with a stale weight is never picked
    trials = 20000
    rng = np.random.default_rng(0)
    ours = np.zeros(weight.shape[0])
    candidates = np.flatnonzero((weight > 0) & alive_mask & (coef == 0))  # 6 of them
    for _ in range(trials):
        ws = kernels.working_set(weight, coef, alive_mask, _active(weight),
                                 lambda n_support: k, rng)
        assert ws.shape[0] == min(k, 2 + candidates.shape[0])
        assert np.all(np.diff(ws) > 0)  # sorted, no repeats
        assert {2, 9} <= set(ws.tolist()) and 5 not in ws
        ours[ws] += 1
    assert ours[(weight == 0.0) & (coef == 0.0)].sum() == 0
    assert ours[5] == 0 and ours[2] == ours[9] == trials
    ref = np.zeros(weight.shape[0])
    w = weight[candidates]
    eta = 0.01 * weight[alive_mask & (weight > 0)].mean()
    for _ in range(trials):
        keys = np.log(rng.random(candidates.shape[0])) / (w + eta)
        ref[candidates[np.argsort(-keys)[:k - 2]]] += 1
    np.testing.assert_allclose(ours[candidates] / trials, ref[candidates] / trials, atol=0.02)


def test_working_set_is_everything_with_a_step_when_small():
    rng = np.random.default_rng(1)
    weight = np.array([0.0, 1.0, 0.0, 2.0])
    coef = np.array([0.0, 0.0, 3.0, 0.0])
    mask = np.ones(4, dtype=bool)
    np.testing.assert_array_equal(
        kernels.working_set(weight, coef, mask, _active(weight), lambda n: 100, rng),
        [1, 2, 3])
    none = np.zeros(4, dtype=bool)
    assert kernels.working_set(np.zeros(4), np.zeros(4), none, np.zeros(0, np.int64),
                               lambda n: 100, rng).shape == (0,)
    # the support is kept even when the size asks for less
    np.testing.assert_array_equal(
        kernels.working_set(weight, coef, mask, _active(weight), lambda n: 0, rng), [2])


def test_residual_change_equals_numpy():
    rng = np.random.default_rng(3)
    before = rng.standard_normal(50)
    after = before.copy()
    touched = np.sort(rng.choice(50, 7, replace=False))
    after[touched] += rng.standard_normal(7)
    change, idx, count, rd, dd, s0, sd, bt = kernels.residual_change(before, after)
    d = after - before
    np.testing.assert_array_equal(change, d)
    np.testing.assert_array_equal(idx[:count], touched)
    assert rd == pytest.approx(before @ d, rel=1e-12)
    assert (dd, s0, sd) == pytest.approx((d @ d, before.sum(), d.sum()), rel=1e-12)
    assert bt == pytest.approx((before[touched] ** 4).sum(), rel=1e-12)
    assert kernels.residual_change(before, before.copy())[2] == 0


def test_residual_change_sums_are_exact_for_tiny_changes():
    """Near the optimum a push changes a residual of mean ~100 by ~1e-10: the centered
    ``r0' dr`` must come from sums of the change, not differences of large sums."""
    rng = np.random.default_rng(5)
    n = 400
    before = 100.0 + rng.standard_normal(n)
    after = before.copy()
    after[::3] += 1e-10 * rng.standard_normal(after[::3].shape[0])
    change, _, _, rd, dd, s0, sd, _ = kernels.residual_change(before, after)
    centered = rd - s0 * sd / n
    b = before.astype(np.longdouble)
    d = change.astype(np.longdouble)
    exact = float((b - b.mean()) @ (d - d.mean()))
    assert centered == pytest.approx(exact, rel=1e-6)
    assert dd - sd * sd / n == pytest.approx(float((d - d.mean()) @ (d - d.mean())), rel=1e-9)


def test_take_columns_equals_scipy():
    X = sp.random(30, 40, density=0.2, format="csc", random_state=4)
    cols = np.array([0, 3, 4, 17, 39], dtype=np.int64)
    data, indices, indptr = kernels.take_columns(X.data, X.indices, X.indptr, cols)
    sub = sp.csc_matrix((data, indices, indptr), shape=(30, cols.shape[0]))
    np.testing.assert_array_equal(sub.toarray(), X[:, cols].toarray())


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_xtr_sparse_is_scipys_product_bit_for_bit(index_dtype):
    """The unsigned-index kernels (see dask_strads.engine.indexing) sum in scipy's order:
    the same numbers to the last bit, with 32- and 64-bit indices, with and without a
    column list."""
    X = sp.random(300, 500, density=0.05, format="csc", random_state=7)
    X.indices = X.indices.astype(index_dtype)
    X.indptr = X.indptr.astype(index_dtype)
    r = np.random.default_rng(7).standard_normal(300)
    out = np.empty(500)
    kernels.xtr_sparse(X.data, X.indices, X.indptr, np.zeros(500), r, out)
    np.testing.assert_array_equal(out, X.T @ r)
    cols = np.array([3, 17, 250, 499], dtype=np.int64)
    at = np.full(500, np.nan)
    kernels.xtr_sparse_at(X.data, X.indices, X.indptr, np.zeros(500), r, cols, at)
    np.testing.assert_array_equal(at[cols], (X.T @ r)[cols])
    assert np.isnan(np.delete(at, cols)).all()


@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_screen_out_is_the_gap_safe_rule(l2):
    rng = np.random.default_rng(3)
    p = 400
    xta = rng.standard_normal(p)
    col_sq = rng.random(p) * 2.0
    col_sq[:6] = 0.0  # all-zero columns: screened unless |x_j' theta| reaches the scale
    xta[:3] = 0.0
    xta[3:6] = [1.5, -1.5, 1.5]
    alive = rng.random(p) < 0.8
    alive[:6] = True
    out = np.empty(p, dtype=np.int64)
    with np.errstate(divide="ignore"):
        inv_norm = 1.0 / np.sqrt(col_sq + l2)
    for scale, radius in [(1.5, 0.2), (2.0, 0.05), (1.5, 10.0)]:
        count = kernels.screen_out(xta, inv_norm, scale, radius, alive, out)
        with np.errstate(divide="ignore", invalid="ignore"):
            d = (1.0 - np.abs(xta) / scale) / np.sqrt(col_sq + l2)
        want = np.flatnonzero((d > radius) & alive)
        np.testing.assert_array_equal(out[:count], want)
    # radius 10: only the all-zero columns with x_j' theta = 0 (d = inf), and only at l2 = 0
    np.testing.assert_array_equal(out[:count], [0, 1, 2] if l2 == 0.0 else [])


@pytest.mark.parametrize("n", [0, 1, 3, 4, 7, 1000, 100_003])
def test_dot_is_the_dot_product_whatever_the_alignment(n):
    rng = np.random.default_rng(n)
    buf = rng.standard_normal((2, n + 1))
    a, b = buf[0, 1:], buf[1, 1:]  # views 8 bytes off the buffers' alignment
    got = kernels.dot(a, b)
    assert got == pytest.approx(float(np.dot(a, b)), rel=1e-12, abs=1e-12)
    # the same bits from aligned copies: the peer phases need every worker to agree
    assert kernels.dot(a.copy(), b.copy()) == got


def test_sweep_moves_matches_numpy_passes():
    rng = np.random.default_rng(3)
    vec = rng.standard_normal(50)
    idx = np.sort(rng.choice(50, 20, replace=False)).astype(np.int64)
    prev = vec[idx].copy()
    moved = rng.random(20) < 0.5
    vec[idx[moved]] += rng.standard_normal(moved.sum())
    vec[idx[2]] = -prev[2] if moved[2] else vec[idx[2]]  # a sign change
    w_max, pos, base, d, keep, lin, quad, size = kernels.sweep_moves(vec, idx, prev, 0.3, 0.2)
    d_all = vec[idx] - prev
    want = np.flatnonzero(d_all)
    np.testing.assert_array_equal(pos, want)
    np.testing.assert_array_equal(base, prev[want])
    np.testing.assert_array_equal(d, d_all[want])
    assert w_max == np.abs(vec[idx]).max()
    ref_keep, ref_lin, ref_quad = kernels.fold_linear(prev[want], d_all[want], 0.3, 0.2)
    np.testing.assert_array_equal(keep, ref_keep)
    assert (lin, quad) == (ref_lin, ref_quad)
    assert size == pytest.approx(np.abs(prev[want]).sum() + np.abs(d_all[want]).sum())
