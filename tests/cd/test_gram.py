"""Sweeps on a working set's Gram matrix: the same steps as over the columns, the
matrix kept from phase to phase, and the rule that decides when it pays."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from sklearn import linear_model

from dask_strads._datasets.lasso import alpha_max, make_correlated_regression
from dask_strads.cd import gram, parallelism, phase
from dask_strads.cd.block import ColumnBlock
from dask_strads.cd.columns import ColumnSet
from dask_strads.cd.datafits import Logistic, Quadratic
from dask_strads.cd.messages import PhaseOrder, PhaseReport
from dask_strads.cd.phase import Penalty, _solve

from ._local import objective
from .test_program import fit


def _phase(X, y, ws, pen, *, epochs, on_gram, coef=None, kept=False):
    block = ColumnBlock(0, 0, X, y.copy(), fit_intercept=False, coef=coef)
    cols = block.columns(ws)
    order = PhaseOrder(ws=ws, solver_of=np.zeros(ws.shape[0], np.int64), solvers=(0,),
                       exchange=False, tol=0.0, max_epochs=epochs, anderson=5,
                       gram=on_gram)
    report = PhaseReport(moved=np.zeros(0, np.int64), values=np.zeros(0),
                         screened=np.zeros(0, np.int64))
    g0 = None
    if kept:  # as after a gap round
        block.gradient(block.residual)
        g0 = block.kept_gradient(ws)
    _solve(cols, block, pen, Quadratic(y), order, report, g0=g0)
    return cols.coef, block.residual, report


@pytest.mark.parametrize("l2, positive", [(0.0, False), (3.0, False), (0.0, True)])
def test_a_phase_on_the_gram_matrix_takes_the_steps_of_one_over_the_columns(l2, positive):
    rng = np.random.default_rng(0)
    X = np.asfortranarray(rng.standard_normal((400, 60)))
    y = X[:, :5] @ rng.standard_normal(5) + 0.1 * rng.standard_normal(400)
    ws = np.arange(0, 60, 2)
    start = np.where(rng.random(60) < 0.3, rng.standard_normal(60), 0.0)
    pen = Penalty(0.05 * np.abs(X.T @ y).max(), l2, positive)
    on_gram = _phase(X, y, ws, pen, epochs=25, on_gram=True, coef=start)
    on_cols = _phase(X, y, ws, pen, epochs=25, on_gram=False, coef=start)
    kept = _phase(X, y, ws, pen, epochs=25, on_gram=True, coef=start, kept=True)
    assert on_gram[2].gram and not on_cols[2].gram
    assert on_cols[2].epochs == 25
    # the same steps, up to the matrix's single-precision rounding (which can leave every
    # coefficient where it is a few sweeps earlier: the phase then ends)
    assert 15 <= on_gram[2].epochs <= 25
    scale = np.abs(on_cols[0]).max()
    np.testing.assert_allclose(on_gram[0], on_cols[0], atol=1e-5 * scale)
    # the gap round's X'r in place of the phase's own pass: the same steps
    np.testing.assert_allclose(kept[0], on_gram[0], atol=1e-12)
    # the residual after the phase is y - X b, as over the columns
    b = start.copy()
    b[ws] = on_gram[0]
    np.testing.assert_allclose(on_gram[1], y - X @ b, atol=1e-10)


def _close_to_single(G, exact):
    """``G`` is ``exact`` rounded to single precision: a few units in the last place of
    its largest entries, not more."""
    assert G.dtype == np.float32
    np.testing.assert_allclose(G, exact, rtol=0, atol=1e-6 * np.abs(exact).max())


def test_the_kept_matrix_follows_the_working_sets():
    rng = np.random.default_rng(1)
    X = np.asfortranarray(rng.standard_normal((300, 40)))
    block = ColumnBlock(0, 0, X, np.zeros(300), fit_intercept=False)
    cache = gram.GramCache()
    for ws in ([3, 7, 11], [3, 7, 11], [1, 3, 11, 20, 30], [30, 2, 11], list(range(40))):
        ws = np.array(ws)
        cols = block.columns(ws)
        assert gram.missing(cache.ids, cols.ids) == np.setdiff1d(ws, cache.ids).shape[0]
        _close_to_single(cache.matrix(cols, 300), X[:, ws].T @ X[:, ws])
        assert cache.ids.tolist() == ws.tolist()


def test_rows_formed_over_shares_of_the_samples_add_up_to_the_matrix():
    rng = np.random.default_rng(4)
    X = np.asfortranarray(rng.standard_normal((1000, 30)))
    block = ColumnBlock(0, 0, X, np.zeros(1000), fit_intercept=False)
    cache = gram.GramCache()
    cache.matrix(block.columns(np.arange(0, 30, 3)), 1000)
    cols = block.columns(np.arange(0, 30, 2))
    _, known, new = gram.positions(cache.ids, cols.ids)
    shares = [gram.rows(cols, new, known, lo, hi) for lo, hi in ((0, 333), (333, 1000))]
    formed = (shares[0][0] + shares[1][0], shares[0][1] + shares[1][1])
    _close_to_single(cache.matrix(cols, 1000, formed), X[:, ::2].T @ X[:, ::2])


def test_rows_of_columns_from_several_sets_gathered_a_few_rows_at_a_time(monkeypatch):
    rng = np.random.default_rng(7)
    X = np.asfortranarray(rng.standard_normal((500, 12)))
    Y = np.asfortranarray(rng.standard_normal((500, 5)))
    joined = ColumnSet.concat([
        ColumnSet(ids=np.array([1, 3, 7, 8]), coef=np.zeros(4), mu=np.zeros(4),
                  col_sq=np.ones(4), dense=X, cols=np.array([1, 3, 7, 8])),
        ColumnSet(ids=np.array([20, 22, 24]), coef=np.zeros(3), mu=np.zeros(3),
                  col_sq=np.ones(3), dense=Y, cols=np.array([0, 2, 4]))])
    A = np.hstack([X[:, [1, 3, 7, 8]], Y[:, [0, 2, 4]]])
    new, known = np.array([1, 2, 4, 6]), np.array([0, 3, 5])  # of both sets, interleaved
    # blocks of at most 64 rows
    monkeypatch.setattr(gram, "CHUNK_BYTES", gram.DTYPE().itemsize * 7 * 64)
    nn, nk = gram.rows(joined, new, known, 30, 480)
    rows = A[30:480]
    _close_to_single(nn, rows[:, new].T @ rows[:, new])
    _close_to_single(nk, rows[:, new].T @ rows[:, known])


def test_rows_of_more_columns_than_a_tile_are_the_whole_symmetric_matrix():
    rng = np.random.default_rng(11)
    w = 2 * gram.TILE + 9  # tiles on and off the diagonal, the last ones partial
    X = np.asfortranarray(rng.standard_normal((300, w)))
    cols = ColumnSet(ids=np.arange(w), coef=np.zeros(w), mu=np.zeros(w), col_sq=np.ones(w),
                     dense=X, cols=np.arange(w))
    nn, nk = gram.rows(cols, np.arange(w), np.zeros(0, np.int64), 0, 300)
    assert nn.flags.c_contiguous and nk.shape == (w, 0)
    np.testing.assert_array_equal(nn, nn.T)
    _close_to_single(nn, X.T @ X)


def test_the_matrix_of_columns_from_several_sets_is_theirs_in_order():
    rng = np.random.default_rng(2)
    X = np.asfortranarray(rng.standard_normal((200, 12)))
    first = ColumnSet(ids=np.array([4, 9]), coef=np.zeros(2), mu=np.zeros(2),
                      col_sq=np.ones(2), dense=X, cols=np.array([4, 9]))
    second = ColumnSet(ids=np.array([100, 101]), coef=np.zeros(2), mu=np.zeros(2),
                       col_sq=np.ones(2), dense=np.asfortranarray(X[:, [0, 1]]))
    joined = ColumnSet.concat([first, second])
    A = X[:, [4, 9, 0, 1]]
    _close_to_single(gram.GramCache().matrix(joined, 200), A.T @ A)


def _costs(**kw):
    return parallelism.Costs(sweep_per_nnz=1e-9, exchange=1e-3, bandwidth=1e9,
                             peer_factor=1.25, gram_step=1.0, gram_build=0.02, **kw)


def test_the_matrix_pays_for_tall_columns_once_the_fit_has_swept_enough():
    costs = _costs()
    # nothing swept yet: a fit that ends at once never forms it
    assert not gram.pays(costs, 10_000, 500, 500, 0)
    # forming 500 rows costs 10,000 x 500 x 500 x 0.02 ns = 50 ms, about 10 sweeps over
    # the columns (5 ms each); a sweep over G costs 0.25 ms
    assert not gram.pays(costs, 10_000, 500, 500, 8)
    assert gram.pays(costs, 10_000, 500, 500, 13)
    # kept rows cost nothing more: a few sweeps pay for them
    assert gram.pays(costs, 10_000, 500, 0, 3)
    # columns shorter than the working set is wide: a sweep over G costs more
    assert not gram.pays(costs, 300, 2_000, 0, 10**6)
    with dask.config.set({"dask-strads.cd.gram-max-bytes": 4 * 499**2}):
        assert not gram.pays(costs, 10_000, 500, 0, 10**6)
    # forming rows is shared by the sweeps the matrix is expected to serve
    assert gram.phase_seconds(costs, 10_000, 500, 500, 10, 10) > \
        gram.phase_seconds(costs, 10_000, 500, 500, 10, 1_000)
    assert gram.phase_seconds(costs, 10_000, 500, 0, 10, 10) == \
        gram.phase_seconds(costs, 10_000, 500, 0, 10, 1_000)
    # a Gram phase sweeps to a tolerance tighter by what its sweeps save
    assert gram.tolerance(10_000, 500, 1.0) == pytest.approx(0.05)
    assert gram.tolerance(300, 2_000, 1.0) == 1.0


def test_measured_costs_replace_the_first_guesses():
    costs = _costs()
    # shares of a column sweep's cost per entry (1 ns here)
    costs.observe_gram(sweep_s=2e-3, entries=10**6, build_s=1.0, madds=10**10)
    assert costs.gram_step == pytest.approx((1.0 + 2.0) / 2)
    assert costs.gram_build == pytest.approx((0.02 + 0.1) / 2)
    # a small forming is mostly reading columns: it says little of a multiply-add
    costs.observe_gram(sweep_s=0.0, entries=0, build_s=1.0, madds=10**6)
    assert costs.gram_build == pytest.approx((0.02 + 0.1) / 2)


def test_only_the_quadratic_datafit_over_dense_columns_sweeps_a_gram_matrix():
    dense = ColumnSet(ids=np.arange(2), coef=np.zeros(2), mu=np.zeros(2), col_sq=np.ones(2),
                      dense=np.ones((3, 2), order="F"))
    sparse = ColumnSet(ids=np.arange(1), coef=np.zeros(1), mu=np.zeros(1), col_sq=np.ones(1),
                       data=np.ones(1), indices=np.zeros(1, np.int32),
                       indptr=np.array([0, 1]))
    assert gram.usable(dense, Quadratic(np.ones(3)))
    assert not gram.usable(sparse, Quadratic(np.ones(3)))
    assert not gram.usable(dense, Logistic(np.ones(3), False, 1.0))


def test_the_solo_solver_is_the_block_whose_phase_is_cheapest():
    costs = _costs(epochs=20)
    costs.exchange = 1.0
    ws = [3_000_000, 2_000_000]
    everywhere = lambda b, s: True  # noqa: E731
    assert parallelism.phase_solvers(ws, 8, costs, everywhere).solvers == (0,)
    # block 1 keeps the working set's Gram matrix: its sweeps cost a tenth
    kept = lambda s, epochs, rent: epochs * 5e-4 if s == 1 else None  # noqa: E731
    assert parallelism.phase_solvers(ws, 8, costs, everywhere, kept) == ((1,), True)
    # peers sweep faster than a Gram matrix that costs more than their sweeps
    dear = lambda s, epochs, rent: epochs * 5e-2  # noqa: E731
    big = [30_000_000, 20_000_000]  # peers 0.78 s, one solver 1 s
    assert parallelism.phase_solvers(big, 8, _costs(epochs=20), everywhere, dear) == \
        ((0, 1), False)


@pytest.mark.parametrize("n_blocks, mode", [(1, "alone"), (2, "solo"), (3, "solo")])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_a_tall_problem_reaches_sklearn_objective_on_the_gram_matrix(n_blocks, mode,
                                                                     fit_intercept,
                                                                     monkeypatch):
    X, y, _ = make_correlated_regression(3000, 80, n_informative=10, correlation=0.9,
                                         random_state=3)
    alpha = alpha_max(X, y, fit_intercept=fit_intercept) / 200
    passes = []
    dots = gram._column_dots
    monkeypatch.setattr(gram, "_column_dots",
                        lambda X, *a: passes.append(X.shape) or dots(X, *a))
    changes = []
    take_change = phase._take_change
    monkeypatch.setattr(phase, "_take_change",
                        lambda block, *a: changes.append(block.id) or take_change(block, *a))
    state, blocks, b0 = fit(X, y, alpha, n_blocks, mode, fit_intercept=fit_intercept)
    assert state.converged
    # a phase that follows its gap round takes X'r from it, not from a pass of its own
    assert X.shape[0] not in [shape[0] for shape in passes]  # (the warm-up's are tiny)
    # the solver formed the matrix once the fit had swept enough, and kept it
    assert state.gram_phases > 0
    assert any(blocks[b].gram_cache.ids.shape[0] for b in range(n_blocks))
    sk = linear_model.Lasso(alpha=alpha, fit_intercept=fit_intercept, tol=1e-12,
                            max_iter=100_000).fit(X, y)
    ref = objective(X, y, sk.coef_, sk.intercept_, alpha)
    assert abs(objective(X, y, state.coef, b0, alpha) - ref) <= 1e-9 * abs(ref)
    for b in range(1, n_blocks):
        np.testing.assert_array_equal(blocks[b].residual, blocks[0].residual)
    # after a solo phase's Gram sweeps every block took the change of its own columns
    assert set(changes) == (set(range(n_blocks)) if mode == "solo" else set())
    Xc = X - X.mean(0) if fit_intercept else X
    yc = y - y.mean() if fit_intercept else y
    np.testing.assert_allclose(blocks[0].residual, yc - Xc @ state.coef, atol=1e-9)


def test_a_gram_matrix_holds_columns_at_the_ends_of_single_precisions_range():
    rng = np.random.default_rng(8)
    X = rng.standard_normal((500, 6))
    for col_sq in (gram.SQ_MAX / 2, gram.SQ_MIN * 2):
        Xs = np.asfortranarray(X * np.sqrt(col_sq / (X ** 2).sum(0)))
        block = ColumnBlock(0, 0, Xs, np.zeros(500), fit_intercept=False)
        assert gram.in_range(block.col_sq)
        _close_to_single(gram.GramCache().matrix(block.columns(np.arange(6)), 500),
                         Xs.T @ Xs)
    assert gram.in_range(np.array([0.0, 1.0]))  # a zero column enters no matrix
    assert not gram.in_range(np.array([1.0, gram.SQ_MAX * 2]))
    assert not gram.in_range(np.array([1.0, gram.SQ_MIN / 2]))


def test_a_fit_with_a_column_beyond_single_precision_sweeps_no_gram_matrix():
    X, y, _ = make_correlated_regression(3000, 80, n_informative=10, correlation=0.9,
                                         random_state=3)
    alpha = alpha_max(X, y) / 200
    state, _, _ = fit(X, y, alpha, 2, "solo", max_updates=200 * 80)
    assert state.gram_phases > 0  # as in the tall problem above
    X = np.asfortranarray(X)
    X[:, 7] *= np.sqrt(gram.SQ_MAX)  # its products would overflow single precision
    state, _, _ = fit(X, y, alpha, 2, "solo", max_updates=200 * 80)
    assert state.gram_phases == 0
    assert np.all(np.isfinite(state.coef))
