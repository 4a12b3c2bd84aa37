"""The Lasso program's schedule / push / pull, driven in-process (tests/lasso/_local.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import ElasticNet as SkElasticNet

from dask_strads._datasets.lasso import (
    alpha_max,
    make_correlated_regression,
    make_sparse_regression,
)
from dask_strads.lasso import kernels
from dask_strads.lasso import program as program_module
from dask_strads.lasso.program import (
    CorrelationIndex,
    LassoProgram,
    dependency_filter,
    gap_formulation,
)

from ._local import make_program, objective, run_local


def sklearn_fit(X, y, alpha, l1_ratio, fit_intercept, positive):
    return SkElasticNet(alpha=alpha, l1_ratio=l1_ratio, fit_intercept=fit_intercept,
                        positive=positive, tol=1e-12, max_iter=100_000).fit(X, y)


def assert_like_sklearn(X, y, alpha, l1_ratio, fit_intercept, positive, coef, intercept):
    """The objective within 1e-6 of scikit-learn's, and the coefficients within 1e-6."""
    sk = sklearn_fit(X, y, alpha, l1_ratio, fit_intercept, positive)
    ours = objective(X, y, coef, intercept, alpha, l1_ratio)
    ref = objective(X, y, sk.coef_, sk.intercept_, alpha, l1_ratio)
    assert abs(ours - ref) <= 1e-6 * abs(ref)
    np.testing.assert_allclose(coef, sk.coef_, atol=1e-6)


def fitted(program, state, blocks, y_offset):
    mu = np.concatenate([blocks[b]["mu"] for b in sorted(blocks)])
    intercept = y_offset - mu @ state.coef if program.fit_intercept else 0.0
    return state.coef, intercept


@pytest.fixture(scope="module")
def dense():
    X, y, _ = make_correlated_regression(120, 300, n_informative=8, correlation=0.6)
    return X, y


@pytest.fixture(scope="module")
def sparse_data():
    X, y, _ = make_sparse_regression(150, 400, density=0.05, n_informative=8)
    return X, y


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("l1_ratio", [1.0, 0.6])
def test_matches_sklearn_objective(request, kind, fit_intercept, positive, l1_ratio):
    X, y = request.getfixturevalue("dense" if kind == "dense" else "sparse_data")
    alpha = alpha_max(X, y, fit_intercept=fit_intercept) / 30
    program, shards, y_off = make_program(X, y, alpha, l1_ratio=l1_ratio,
                                          fit_intercept=fit_intercept, positive=positive,
                                          n_candidates=40, random_state=0)
    state, blocks = run_local(program, shards)
    assert state.converged
    coef, b0 = fitted(program, state, blocks, y_off)
    assert_like_sklearn(X, y, alpha, l1_ratio, fit_intercept, positive, coef, b0)
    if positive:
        assert (coef >= 0).all()
    # the final gap is scikit-learn's, on the cd_fast scale
    assert state.gap <= program.tol_abs


@pytest.mark.parametrize("schedule", ["round_robin", "random", "shotgun", "priority"])
def test_every_schedule_converges(sparse_data, schedule):
    X, y = sparse_data
    alpha = alpha_max(X, y) / 20
    program, shards, y_off = make_program(X, y, alpha, schedule=schedule, n_candidates=30,
                                          random_state=1)
    state, blocks = run_local(program, shards)
    assert state.converged
    coef, b0 = fitted(program, state, blocks, y_off)
    sk = sklearn_fit(X, y, alpha, 1.0, True, False)
    assert objective(X, y, coef, b0, alpha) == pytest.approx(
        objective(X, y, sk.coef_, sk.intercept_, alpha), rel=1e-6)


@pytest.mark.parametrize("staleness", [1, 3])
def test_staleness_still_converges(dense, staleness):
    X, y = dense
    alpha = alpha_max(X, y) / 30
    program, shards, y_off = make_program(X, y, alpha, n_candidates=40, staleness=staleness)
    state, blocks = run_local(program, shards, staleness=staleness)
    assert state.converged
    coef, b0 = fitted(program, state, blocks, y_off)
    sk = sklearn_fit(X, y, alpha, 1.0, True, False)
    assert objective(X, y, coef, b0, alpha) == pytest.approx(
        objective(X, y, sk.coef_, sk.intercept_, alpha), rel=1e-6)
    # every block's residual copy caught up with the committed coefficients
    Xc = X - X.mean(0)
    r = y - y.mean() - Xc @ state.coef
    for blk in blocks.values():
        assert np.abs(blk["residual"] - r).max() < 1e-8


def test_four_blocks_reach_a_tight_gap():
    """Near the optimum a round's objective change is rounding of the residual's
    updates; exact steps are trusted only when that cannot explain their gain. (With
    a threshold relative to the objective itself, four blocks overshooting together
    were never shortened there: the gap stalled above 1e-8 for thousands of rounds;
    1074 rounds here when written, more than 3000 before.)"""
    rng = np.random.default_rng(0)
    n, p, k = 3000, 30000, 25  # k non-zeros per column
    rows = np.sort(rng.integers(0, n, size=(p, k)), axis=1).ravel()
    X = sp.csc_matrix((rng.random(p * k), rows, np.arange(0, p * k + 1, k)), shape=(n, p))
    X.sum_duplicates()
    coef = np.zeros(p)
    coef[rng.choice(p, 100, replace=False)] = rng.standard_normal(100)
    y = X @ coef + 0.1 * rng.standard_normal(n)
    alpha = alpha_max(X, y, fit_intercept=False) / 100
    program, shards, _ = make_program(X, y, alpha, n_blocks=4, tol=1e-8, fit_intercept=False,
                                      random_state=0)
    state, _ = run_local(program, shards, max_rounds=2000)
    assert state.converged
    assert sklearn_gap(X, y, state.coef, program.l1, 0.0) <= 1.01 * program.tol_abs


@pytest.mark.filterwarnings("error")
def test_all_zero_columns_are_screened_quietly(sparse_data):
    X, y = sparse_data
    keep = np.ones(X.shape[1])
    keep[[3, 200]] = 0.0
    X = (X @ sp.diags(keep)).tocsc()
    X.eliminate_zeros()
    alpha = alpha_max(X, y) / 20
    program, shards, y_off = make_program(X, y, alpha, random_state=0)
    state, blocks = run_local(program, shards)
    assert state.converged
    assert state.coef[3] == state.coef[200] == 0.0
    assert state.screened >= 2


def test_eight_blocks_reach_a_tight_gap_on_correlated_data():
    """Eight blocks on correlated columns overshoot together by about 2x near the
    optimum, where a round's whole change is of the size of its rounding: the steps
    then come from the blocks' residual changes alone (before: full steps, the
    objective rose and the gap grew for 20000 rounds; 354 when written)."""
    X, y, _ = make_correlated_regression(1000, 3000, n_informative=30, correlation=0.7)
    alpha = alpha_max(X, y, fit_intercept=False) / 30
    program, shards, _ = make_program(X, y, alpha, l1_ratio=0.6, n_blocks=8,
                                      fit_intercept=False, random_state=0)
    state, _ = run_local(program, shards, max_rounds=2000)
    assert state.converged
    assert sklearn_gap(X, y, state.coef, program.l1, program.l2) <= 1.01 * program.tol_abs


def test_coupled_steps():
    g = 2.0
    # two blocks making the same change: together they make it once
    np.testing.assert_allclose(LassoProgram._coupled_steps(np.full((2, 2), g)), [0.5, 0.5])
    # uncoupled blocks keep their whole updates
    np.testing.assert_array_equal(LassoProgram._coupled_steps(np.diag([1.0, 3.0, 0.0])),
                                  [1.0, 1.0, 1.0])
    # never below 1 / B, and never worse than the full steps on the model
    rng = np.random.default_rng(0)
    D = rng.standard_normal((4, 30))
    D[1] = D[0] + 0.1 * D[1]
    G = D @ D.T
    t = LassoProgram._coupled_steps(G)
    assert t.min() >= 0.25 and t.max() <= 1.0

    def model(t):
        return 0.5 * t @ G @ t - np.diag(G) @ t

    assert model(t) < model(np.ones(4))


def sklearn_gap(X, y, coef, l1, l2, positive=False):
    """scikit-learn's gap_enet, written out with numpy (cd_fast scale)."""
    r = y - X @ coef
    xta = X.T @ r - l2 * coef
    dual_norm = xta.max() if positive else np.abs(xta).max()
    primal = 0.5 * (r @ r + l2 * coef @ coef) + l1 * np.abs(coef).sum()
    scale = l1 / dual_norm if dual_norm > l1 else 1.0
    dual = -0.5 * scale**2 * (r @ r + l2 * coef @ coef) + scale * (r @ y)
    return primal - dual


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_gap_round_computes_sklearn_gap(dense, sparse_data, kind):
    X, y = dense if kind == "dense" else sparse_data
    n, p = X.shape
    coef = np.random.default_rng(0).standard_normal(p) * 0.05
    alpha = alpha_max(X, y) / 10
    program, shards, _ = make_program(X, y, alpha, l1_ratio=0.8, coef_init=coef,
                                      max_updates=1)
    state, _ = run_local(program, shards, max_rounds=1)
    Xd = X.toarray() if sp.issparse(X) else X
    want = sklearn_gap(Xd - Xd.mean(0), y - y.mean(), coef, 0.8 * alpha * n,
                       0.2 * alpha * n)
    assert state.gap == pytest.approx(want, rel=1e-9)


def _block_with_support(program, shards, nonnegative=False):
    """Block 0 with 10 random non-zero coefficients (``>= 0`` if ``nonnegative``) and
    its raw residual; also its columns (dense), the support and the generator."""
    block = program.init_block(0, shards[0])
    Xb = shards[0].toarray()
    rng = np.random.default_rng(0)
    support = rng.choice(Xb.shape[1], 10, replace=False)
    values = rng.standard_normal(10) * 0.1
    block["coef"][support] = np.abs(values) if nonnegative else values
    block["residual"][:] = program.y - Xb @ block["coef"]  # raw residual of a sparse block
    return block, Xb, support, rng


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_gap_after_screening_reads_the_columns_left(sparse_data, fit_intercept):
    """Once screening has dropped most of a sparse block, a gap round reads only the
    columns left: its dual norm is the one of the problem over them (screened columns
    are zero at every optimum, so that problem has the same optimum)."""
    X, y = sparse_data
    program, shards, _ = make_program(X, y, alpha_max(X, y) / 20, random_state=0,
                                      fit_intercept=fit_intercept)
    block, Xb, support, rng = _block_with_support(program, shards)
    p_b = Xb.shape[1]
    Xc = Xb - Xb.mean(0) if fit_intercept else Xb
    r = block["residual"] - (block["residual"].mean() if fit_intercept else 0.0)
    xtr = Xc.T @ r
    # the columns left: the support and others, not the one with the largest |x_j' r|
    others = np.setdiff1d(np.arange(p_b), np.append(support, np.argmax(np.abs(xtr))))
    live = np.union1d(support, rng.choice(others, p_b // 4, replace=False))
    full = program._gap_stats(block)
    dead = np.setdiff1d(np.arange(p_b), live)
    block["alive"][dead] = False
    block["alive_version"] += 1
    reduced = program._gap_stats(block)
    np.testing.assert_array_equal(program._live_columns(block), live)
    assert full["dual_norm"] == pytest.approx(np.abs(xtr).max(), rel=1e-12)
    assert reduced["dual_norm"] == pytest.approx(np.abs(xtr[live]).max(), rel=1e-12)
    assert reduced["dual_norm"] < full["dual_norm"]  # the case is not trivial
    assert set(reduced["step_idx"].tolist()) <= set(live.tolist())
    for key in ("w_l1", "w_l2sq", "r_norm2", "r_y"):
        assert reduced[key] == pytest.approx(full[key], rel=1e-12)


@pytest.mark.parametrize("fit_intercept, l1_ratio, positive",
                         [(True, 1.0, False), (False, 1.0, False), (True, 0.5, False),
                          (False, 1.0, True)])
def test_a_gap_round_from_bounds_gives_the_full_rounds_results(sparse_data, fit_intercept,
                                                              l1_ratio, positive):
    """Near its last full gap round, a gap round reads only the columns whose
    |x_j' r| may reach l1 (or whose coefficient is not zero): its gap, priorities and
    the rest are the full round's, bit for bit, and the values it did not read are
    upper bounds (screening stays safe). Far from it, it reads every column and
    takes the new reference."""
    from dask_strads.lasso import program as program_module

    X, y = sparse_data
    program, shards, _ = make_program(X, y, alpha_max(X, y) / (5 * l1_ratio), l1_ratio=l1_ratio,
                                      random_state=0, fit_intercept=fit_intercept,
                                      positive=positive)
    block, Xb, support, rng = _block_with_support(program, shards, nonnegative=True)
    p_b = Xb.shape[1]
    program._gap_stats(block)  # a full round: the reference
    ref_r = block["gap_ref"][0].copy()
    np.testing.assert_array_equal(ref_r, block["residual"])

    def both(block):
        """The round's results and xta, then those of a full round at the same point."""
        stats = program._gap_stats(block)
        got = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in stats.items()}
        xta = block["xta_gap"].copy()
        full = dict(block, gap_ref=None, gap_buffers=None, gap_ref_buffers=None)
        return got, xta, program._gap_stats(full), full["xta_gap"]

    r0 = block["residual"].copy()
    block["residual"][:] = r0 + 1e-3 * np.abs(r0).mean() * rng.standard_normal(r0.shape[0])
    block["coef"][support[:3]] *= 1.5  # the reference knows nothing of the coefficients
    read = []
    bounded = kernels.xtr_sparse_bounded

    def counting(*args):
        out = bounded(*args)
        read.append(out[1])
        return out

    mp = pytest.MonkeyPatch()
    mp.setattr(program_module.kernels, "xtr_sparse_bounded", counting)
    try:
        got, xta, want, want_xta = both(block)
    finally:
        mp.undo()
    assert read and read[0] < p_b // 4  # most columns were not read: the case is not trivial
    for key in ("dual_norm", "w_l1", "w_l2sq", "r_norm2", "r_y"):
        assert got[key] == want[key]
    np.testing.assert_array_equal(got["step_idx"], want["step_idx"])
    np.testing.assert_array_equal(got["step"], want["step"])
    assert np.all(np.abs(xta) >= np.abs(want_xta))
    assert np.sum(xta != want_xta) >= p_b // 2
    np.testing.assert_array_equal(block["gap_ref"][0], ref_r)  # kept
    # far from the reference: every column is read, and the reference moves
    block["residual"][:] = r0 + np.abs(r0).mean() * rng.standard_normal(r0.shape[0])
    got, xta, want, want_xta = both(block)
    np.testing.assert_array_equal(xta, want_xta)
    np.testing.assert_array_equal(block["gap_ref"][0], block["residual"])


def test_gap_formulations_without_l1():
    # ridge (formulation B) and OLS (squared gradient) as in cd_fast.gap_enet
    g, primal = gap_formulation(0.0, 2.0, 0.0, 3.0, 5.0, 4.0, 0.0, xtr_sq=6.0)
    assert g == pytest.approx(5.0 + 3.0 - 4.0 + 6.0 / 4.0)
    assert primal == pytest.approx(0.5 * (5.0 + 6.0))
    assert gap_formulation(0.0, 0.0, 0.0, 0.0, 5.0, 4.0, 0.0, xtr_sq=6.0)[0] == 6.0


def _first_working_sets(program, shards):
    """Run ``program`` to convergence; the working sets' sizes per block, in order."""
    sizes = []

    def seen(plan, state):
        if not plan.info["drain"] and not plan.info["gap"] and plan.info["ws"]:
            sizes.append({b: ws.shape[0] for b, ws in plan.info["ws"].items()})

    state, blocks = run_local(program, shards, on_plan=seen)
    return sizes, state, blocks


@pytest.mark.parametrize("cold_start, first", [(30, 30), (500, 50)])
def test_a_fit_from_zero_starts_from_working_sets_of_cold_start_coordinates(
        sparse_data, cold_start, first):
    """From zero coefficients each block's first working set holds ``cold_start``
    coordinates, at most a quarter of the block (200 columns here); later ones follow
    the support as before; the fit still matches scikit-learn."""
    X, y = sparse_data
    alpha = alpha_max(X, y) / 20
    program, shards, y_off = make_program(X, y, alpha, n_candidates=8, random_state=0,
                                          cold_start=cold_start)
    sizes, state, blocks = _first_working_sets(program, shards)
    assert sizes[0] == {0: first, 1: first}
    plain, _, _ = _first_working_sets(
        make_program(X, y, alpha, n_candidates=8, random_state=0)[0], shards)
    assert plain[0] == {0: 8, 1: 8}
    assert state.converged
    coef_hat, b0 = fitted(program, state, blocks, y_off)
    sk = sklearn_fit(X, y, alpha, 1.0, True, False)
    assert objective(X, y, coef_hat, b0, alpha) == pytest.approx(
        objective(X, y, sk.coef_, sk.intercept_, alpha), rel=1e-6)


def test_a_warm_start_ignores_cold_start(sparse_data):
    """A fit from non-zero coefficients sizes its working sets from their support:
    with or without ``cold_start`` its rounds are the same."""
    X, y = sparse_data
    alpha = alpha_max(X, y) / 20
    start = sklearn_fit(X, y, 2 * alpha, 1.0, True, False).coef_
    assert np.count_nonzero(start[:200]) and np.count_nonzero(start[200:])
    shards = make_program(X, y, alpha)[1]
    runs = [_first_working_sets(make_program(X, y, alpha, n_candidates=8, random_state=0,
                                             coef_init=start, cold_start=cold)[0], shards)
            for cold in (0, 100)]
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1].coef, runs[1][1].coef)


def test_warm_start_from_the_solution_stops_at_once(dense):
    X, y = dense
    alpha = alpha_max(X, y) / 30
    sk = sklearn_fit(X, y, alpha, 1.0, True, False)
    program, shards, _ = make_program(X, y, alpha, coef_init=sk.coef_, tol=1e-6)
    state, _ = run_local(program, shards)
    assert state.converged and state.pulled == 1


# ------------------------------------------------------------------ dependency check
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_correlation_index_is_exact(kind):
    rng = np.random.default_rng(5)
    n, p = 40, 16
    X = rng.standard_normal((n, p)) + 0.3
    X[:, 9] = X[:, 2] * 2.0 + 0.01 * rng.standard_normal(n)  # strongly correlated pair
    if kind == "sparse":
        X = X * (rng.random((n, p)) < 0.5)
    block_of = np.repeat([0, 1], p // 2)
    rho = 0.25
    index = CorrelationIndex(n, rho, block_of)
    # track through the program's own column export
    program = LassoProgram(np.zeros(n), np.array([0, p // 2, p]), 1.0, 0.0, 0.0,
                           fit_intercept=False)
    for b in (0, 1):
        Xb = X[:, b * 8:(b + 1) * 8]
        block = program.init_block(b, sp.csc_matrix(Xb) if kind == "sparse" else Xb)
        local = np.arange(8)
        index.add(local + 8 * b, program._columns(block, local))
    corr = np.corrcoef(X.T)
    want = {(j, k) for j in range(8) for k in range(8, 16) if abs(corr[j, k]) >= rho}
    got = {(j, k) for j, ks in index.conflicts.items() for k in ks if j < 8}
    assert got == want
    assert (2, 9) in got


@pytest.mark.parametrize("kwargs, match", [
    ({"max_ws_rounds": 0}, "max_ws_rounds: expected an integer >= 1, got 0"),
    ({"inner_epochs": 0}, "inner_epochs: expected an integer >= 1, got 0"),
    ({"staleness": -1}, "staleness: expected an integer >= 0, got -1"),
])
def test_program_rejects_round_counts_that_cannot_work(kwargs, match):
    # max_ws_rounds=0 made every peer phase end before its first round: a fit hung
    with pytest.raises(ValueError, match=match):
        LassoProgram(np.zeros(10), np.array([0, 2, 4]), 1.0, 0.0, 0.0, **kwargs)


def test_dependency_filter_is_greedy_in_order():
    conflicts = {1: {10, 11}, 10: {1}, 11: {1, 12}, 12: {11}}
    cands = np.array([10, 1, 3, 11, 12])
    keep = dependency_filter(cands, conflicts)
    # 10 kept; 1 conflicts with 10; 3 free; 11 free (1 was rejected); 12 conflicts with 11
    assert keep.tolist() == [True, False, True, True, False]
    assert dependency_filter(cands, {}).all()


def test_numba_dependency_check_equals_the_reference():
    # the schedule runs kernels.greedy_keep on the index's CSR lists; it must keep exactly
    # what the readable reference keeps, in any visiting order
    from dask_strads.lasso import kernels

    rng = np.random.default_rng(0)
    p = 200
    index = CorrelationIndex(50, 0.5, np.repeat([0, 1], p // 2))
    for _ in range(150):
        a, b = int(rng.integers(0, p // 2)), int(rng.integers(p // 2, p))
        index.conflicts.setdefault(a, set()).add(b)
        index.conflicts.setdefault(b, set()).add(a)
    for _ in range(20):
        cands = rng.choice(p, 80, replace=False)
        ptr, nbr, scratch = index.adjacency()
        np.testing.assert_array_equal(kernels.greedy_keep(cands, ptr, nbr, scratch),
                                      dependency_filter(cands, index.conflicts))
        assert not scratch.any()  # the scratch array is left cleared


@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_correlated_pairs_are_never_scheduled_together(staleness):
    """Also with rounds in flight: a working set chosen before a gap round's new
    conflicts were pulled must respect them from then on. (With rounds in flight this
    nearly collinear problem does not reach tol = 1e-10, before this session's changes
    either: those runs check the schedule over their first 3000 rounds.)"""
    rng = np.random.default_rng(6)
    n, p = 80, 40
    X = rng.standard_normal((n, p))
    pairs = [(3, 25), (7, 31), (12, 38)]  # block 0 = columns 0..19, block 1 = 20..39
    for j, k in pairs:
        X[:, k] = X[:, j] + 0.2 * rng.standard_normal(n)  # correlation 0.97-0.985
    coef = np.zeros(p)
    coef[[3, 7, 12, 25, 31, 38]] = 1.0
    y = X @ coef + 0.1 * rng.standard_normal(n)
    alpha = alpha_max(X, y) / 50
    program, shards, y_off = make_program(X, y, alpha, n_candidates=20, rho=0.5,
                                          random_state=0, staleness=staleness)
    seen = []

    def on_plan(plan, state):
        known = {pair: pair[1] in state.corr.conflicts.get(pair[0], ()) for pair in pairs}
        seen.append((plan, known))

    state, blocks = run_local(program, shards, on_plan=on_plan, staleness=staleness,
                              max_rounds=100_000 if staleness == 0 else 3000)
    assert state.converged or staleness > 0
    conflicts = state.corr.conflicts
    for j, k in pairs:
        assert k in conflicts.get(j, ())  # the pair was tracked and found correlated
    checked = 0
    for plan, known in seen:
        if plan.info.get("drain"):
            continue
        chosen = set(plan.info["coords"][0].tolist()) | {
            c + 20 for c in plan.info["coords"][1].tolist()}
        for j, k in pairs:
            if known[(j, k)]:
                checked += 1
                assert not (j in chosen and k in chosen), (j, k)
    assert checked > 0
    assert sum(plan.info.get("rejected", 0) for plan, _ in seen) > 0
    if staleness:
        return
    coef_hat, b0 = fitted(program, state, blocks, y_off)
    sk = sklearn_fit(X, y, alpha, 1.0, True, False)
    assert objective(X, y, coef_hat, b0, alpha) == pytest.approx(
        objective(X, y, sk.coef_, sk.intercept_, alpha), rel=1e-6)


@pytest.mark.parametrize("staleness", [0, 1])
@pytest.mark.parametrize("rho", [0.1, 1.0])
def test_a_working_set_is_sent_once_and_kept_by_the_block(sparse_data, staleness, rho):
    """Rounds on an unchanged working set send no coordinates; each block then sweeps
    the ones it was last sent, which are exactly the round's scheduled coordinates.
    (With the dependency check on, correlated pairs take turns, so a small problem's
    candidates change from round to round; without it they stay the working set.)"""
    X, y = sparse_data
    alpha = alpha_max(X, y) / 20
    program, shards, y_off = make_program(X, y, alpha, random_state=0, staleness=staleness,
                                          rho=rho)
    pushed = []
    push = program.push

    def spy(block, part, carried=None):
        out = push(block, part, carried)
        pushed.append((block["id"], part[0] is None, block["coords"].copy()))
        return out

    program.push = spy
    plans = []
    state, blocks = run_local(program, shards, staleness=staleness,
                              on_plan=lambda plan, state: plans.append(plan))
    assert state.converged
    scheduled = [(b, plan.info["coords"][b]) for plan in plans if not plan.info["drain"]
                 for b in sorted(plan.parts)]
    assert len(scheduled) == len(pushed)
    reused = 0
    last = {}
    for (b, coords), (b_push, was_none, swept) in zip(scheduled, pushed, strict=True):
        assert b == b_push
        np.testing.assert_array_equal(swept, coords)
        # sent again exactly when they differ from the block's last push
        assert was_none == (b in last and np.array_equal(last[b], coords))
        last[b] = coords
        reused += was_none
    # a small problem changes working sets often (a gap round every 2-3 rounds)
    assert reused > (len(pushed) // 10 if rho >= 1.0 else 0)
    coef_hat, b0 = fitted(program, state, blocks, y_off)
    sk = sklearn_fit(X, y, alpha, 1.0, True, False)
    assert objective(X, y, coef_hat, b0, alpha) == pytest.approx(
        objective(X, y, sk.coef_, sk.intercept_, alpha), rel=1e-6)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("rho", [1.0, 0.05])
def test_working_set_copies_give_the_same_iterates(sparse_data, monkeypatch, fit_intercept,
                                                   rho):
    """A working set swept from its own copy of the block's columns (built on its
    second push, rebuilt after screening) takes the very steps the block's arrays
    give: same coefficients and residuals, bit for bit."""
    from dask_strads.lasso import program as program_module

    X, y = sparse_data
    alpha = alpha_max(X, y) / 20
    built = []
    take = kernels.take_columns

    def spy(data, indices, indptr, cols):
        if data.shape[0] > 3:  # not kernels.warm_up's
            built.append(cols.shape[0])
        return take(data, indices, indptr, cols)

    monkeypatch.setattr(kernels, "take_columns", spy)
    runs = []
    for share in (0.0, 1.0):
        monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", share)
        program, shards, _ = make_program(X, y, alpha, random_state=0, rho=rho,
                                          fit_intercept=fit_intercept)
        runs.append(run_local(program, shards) + (len(built),))
    if rho < 1.0:  # the dependency check dropped candidates: pushes over subsets
        assert runs[1][0].rejected_total > 0
    (state_off, blocks_off, n_off), (state_on, blocks_on, n_on) = runs
    assert n_off == 0 and n_on > 0  # the copies were used, and only when allowed
    assert state_on.converged and state_on.pulled == state_off.pulled
    np.testing.assert_array_equal(state_on.coef, state_off.coef)
    for b in blocks_on:
        np.testing.assert_array_equal(blocks_on[b]["residual"], blocks_off[b]["residual"])
        np.testing.assert_array_equal(blocks_on[b]["coef"], blocks_off[b]["coef"])


def test_working_set_copy_serves_the_pushes_whose_coordinates_it_holds(sparse_data,
                                                                      monkeypatch):
    """The copy is cut for a working set's coordinates (or, with the other schedules,
    for coordinates sent again), serves later pushes over a subset of them, and is cut
    anew for a coordinate it lacks or after screening."""
    from dask_strads.lasso import program as program_module

    monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", 1.0)
    X, y = sparse_data
    program, shards, _ = make_program(X, y, alpha_max(X, y) / 20, random_state=0)
    block = program.init_block(0, shards[0])
    coords = np.arange(0, 150, 3, dtype=np.int64)
    block["alive"][coords[::4]] = False  # as if screened before the copy
    sub, at, in_coords = program._sub_block(block, coords, again=False)
    live = coords[block["alive"][coords]]
    np.testing.assert_array_equal(sub.live, live)
    np.testing.assert_array_equal(coords[in_coords], live)
    np.testing.assert_array_equal(at, np.arange(live.shape[0]))
    Xs = shards[0].tocsc()[:, live]
    np.testing.assert_array_equal(sub.data, Xs.data)
    np.testing.assert_array_equal(sub.indices, Xs.indices)
    np.testing.assert_array_equal(sub.indptr, Xs.indptr)
    np.testing.assert_array_equal(sub.col_sq, block["col_sq"][live])
    np.testing.assert_array_equal(sub.mu, block["mu"][live])
    # a subset (the dependency check dropped some), with screened coordinates in it
    fewer = coords[[0, 2, 5, 6, 9, 20]]
    again, at, in_coords = program._sub_block(block, fewer, again=False)
    assert again is sub
    held = block["alive"][fewer]
    np.testing.assert_array_equal(in_coords, np.flatnonzero(held))
    np.testing.assert_array_equal(sub.live[at], fewer[held])
    # a coordinate the copy lacks, or screening: a new copy
    more = np.append(coords, 151)
    assert program._sub_block(block, more, again=False)[0] is not sub
    sub = block["sub_block"]
    block["alive_version"] += 1
    assert program._sub_block(block, more, again=False)[0] is not sub
    # other schedules: only coordinates sent again
    other, shards, _ = make_program(X, y, alpha_max(X, y) / 20, schedule="random")
    block = other.init_block(0, shards[0])
    assert other._sub_block(block, coords, again=False) is None
    assert other._sub_block(block, coords, again=True) is not None


def test_working_set_copy_is_cut_for_the_whole_working_set(sparse_data, monkeypatch):
    """Cut for the span (the whole working set, sent with its first push), the copy
    serves a later push over a coordinate that the first push lacked."""
    from dask_strads.lasso import program as program_module

    monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", 1.0)
    X, y = sparse_data
    program, shards, _ = make_program(X, y, alpha_max(X, y) / 20, random_state=0)
    block = program.init_block(0, shards[0])
    span = np.arange(0, 150, 3, dtype=np.int64)
    block["alive"][span[5]] = False  # screened
    first = np.delete(span, [0, 7])  # the dependency check dropped two
    sub, at, in_coords = program._sub_block(block, first, again=False, span=span)
    np.testing.assert_array_equal(sub.live, np.delete(span, 5))
    np.testing.assert_array_equal(sub.live[at], first[in_coords])
    np.testing.assert_array_equal(first[in_coords], np.delete(span, [0, 5, 7]))
    later = span[:-3]
    again, at, in_coords = program._sub_block(block, later, again=False)
    assert again is sub
    np.testing.assert_array_equal(sub.live[at], np.delete(later, 5))
    # an empty first push still cuts the copy for the span
    block = program.init_block(0, shards[0])
    sub, at, in_coords = program._sub_block(block, span[:0], again=False, span=span)
    np.testing.assert_array_equal(sub.live, span)
    assert at.shape == in_coords.shape == (0,)


@pytest.mark.parametrize("drop", [[], [0], [0, 5, 7], [5], [49], [1, 2, 3, 48, 49]])
def test_copy_located_from_the_dropped_positions_as_by_search(sparse_data, monkeypatch, drop):
    """A push sent as the span without a few positions finds its coordinates in the
    copy in one pass over the span (kernels.locate_without): the same columns and
    positions as searching each coordinate, with screened and dropped ones at the
    ends and in between (span position 5 is screened)."""
    from dask_strads.lasso import program as program_module

    monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", 1.0)
    X, y = sparse_data
    program, shards, _ = make_program(X, y, alpha_max(X, y) / 20, random_state=0)
    block = program.init_block(0, shards[0])
    span = np.arange(0, 150, 3, dtype=np.int64)
    block["alive"][span[[5, 30]]] = False
    block["span"] = span
    sub, _, _ = program._sub_block(block, span[:0], again=False, span=span)
    coords, pos = program._span_without(block, span[drop])
    np.testing.assert_array_equal(pos, drop)
    at, in_coords = program._locate(block, sub, coords, pos)
    want_at, want_in = program._locate(block, sub, coords)
    np.testing.assert_array_equal(at, want_at)
    np.testing.assert_array_equal(in_coords, want_in)
    np.testing.assert_array_equal(sub.live[at], coords[in_coords])
    assert not block["alive"][np.delete(coords, in_coords)].any()


def test_one_copy_per_working_set_while_pairs_take_turns(monkeypatch):
    """Correlated pairs across blocks take turns, so a working set's pushes differ
    from round to round; each block still cuts one copy per working set (and one
    more only after screening drops one of its columns). (Cut for the first push's
    coordinates, as before the span was sent, this fit cut 434 copies for 344
    working sets.)"""
    from dask_strads.lasso import program as program_module

    monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", 1.0)
    X, y, _ = make_sparse_regression(150, 400, density=0.05, n_informative=8, random_state=1)
    cuts = []
    take = kernels.take_columns
    monkeypatch.setattr(kernels, "take_columns", lambda *a: cuts.append(1) or take(*a))
    program, shards, _ = make_program(X, y, alpha_max(X, y, fit_intercept=False) / 20,
                                      fit_intercept=False, rho=0.1, random_state=0,
                                      tol=1e-8)
    spans, cycles, current, screened = [], [], {}, []

    def on_plan(plan, state):
        for b, part in plan.parts.items():
            if not plan.info["drain"] and not plan.info["gap"] and plan.info["ws"]:
                # a new working set
                spans.append(b)
                current[b] = []
                cycles.append(current[b])
            coords = part[0]
            if isinstance(coords, tuple):  # ("drop", ids) of the span: ids tell them apart
                current[b].append(b"drop" + coords[1].tobytes())
            elif coords is not None and coords.shape[0] and b in current:
                current[b].append(coords.tobytes())
        screened.append(state.screened)

    state, _ = run_local(program, shards, on_plan=on_plan)
    assert state.converged
    assert state.rejected_total > 0
    varied = [c for c in cycles if len(set(c)) > 1]
    assert varied, "no working set's pushes differed: the test misses its point"
    assert spans and len(cuts) <= len(spans) + len(set(screened))


def test_working_set_pushes_go_as_the_span_without_the_dropped(monkeypatch):
    """A push over its working set but the few coordinates the dependency check
    dropped is sent as ("drop", those) of the span the block holds: the sweeps get
    the same coordinates (the fit is bit-identical to one sent in full) and a round
    sends a few indices instead of the working set."""
    X, y, _ = make_sparse_regression(150, 400, density=0.05, n_informative=8, random_state=1)
    alpha = alpha_max(X, y, fit_intercept=False) / 20

    def fit():
        program, shards, _ = make_program(X, y, alpha, fit_intercept=False, rho=0.1,
                                          random_state=0, tol=1e-8)
        sent = []
        state, blocks = run_local(program, shards, on_plan=lambda plan, state: sent.extend(
            part[0] for part in plan.parts.values() if part[0] is not None))
        assert state.converged
        return state.coef, blocks, sent

    coef, blocks, sent = fit()
    drops = [c for c in sent if isinstance(c, tuple)]
    assert drops and all(c[0] == "drop" for c in drops)
    assert sum(c[1].shape[0] > 0 for c in drops) > 10  # pairs did take turns
    orig = LassoProgram._send
    monkeypatch.setattr(LassoProgram, "_send", staticmethod(
        lambda state, b, coords, dropped=None: orig(state, b, coords)))
    coef_full, _, sent_full = fit()
    assert not any(isinstance(c, tuple) for c in sent_full)
    np.testing.assert_array_equal(coef, coef_full)
    # (0.64 here: the dependency check drops many of this small problem's coordinates)
    indices = sum(c[1].shape[0] if isinstance(c, tuple) else c.shape[0] for c in sent)
    assert indices < 0.75 * sum(c.shape[0] for c in sent_full)
    # a block that holds no span cannot read such a push
    program, shards, _ = make_program(X, y, alpha, fit_intercept=False)
    block = program.init_block(0, shards[0])
    part = (("drop", np.zeros(0, dtype=np.int64)), None, False, False, False, None, None, 1,
            None)
    with pytest.raises(RuntimeError, match="never sent one"):
        program.push(block, part)


def test_restored_state_sends_the_working_set_again(sparse_data):
    """A state loaded from a checkpoint knows nothing of what the (rebuilt) blocks hold."""
    X, y = sparse_data
    program, shards, _ = make_program(X, y, alpha_max(X, y) / 20, random_state=0)
    state, _ = run_local(program, shards, max_rounds=6)
    assert any(s is not None for s in state.sent)
    restored = program.load_state(program.state_arrays(state))
    assert restored.sent == [None] * program.n_blocks
    plan = program.schedule(restored, 7)
    assert all(part[0] is not None for part in plan.parts.values())
    # nor which working sets the blocks drew: the next round draws them afresh
    assert plan.info["gap"]
    assert all(part[8][0] == "sample" for part in plan.parts.values())


def test_gap_rounds_draw_the_working_sets_on_the_workers(sparse_data):
    """A gap round's push draws its block's next working set from the fresh priorities
    (the support plus a sample of the coordinates with a non-zero step, sized by the
    support) and keeps it as its span; the client adopts it for the next round
    without sending it back, and gets the priorities of the tracked columns only (all
    its dependency check reads)."""
    X, y = sparse_data
    program, shards, _ = make_program(X, y, alpha_max(X, y) / 20, n_candidates=8,
                                      random_state=0)
    blocks = {b: program.init_block(b, s) for b, s in shards.items()}
    state = program.init_state({b: program.block_summary(b, blk) for b, blk in blocks.items()})
    drawn, checked = None, 0
    for rnd in range(60):
        plan = program.schedule(state, rnd)
        if plan is None:
            break
        if drawn is not None:  # the round after a gap round
            assert not plan.info["gap"]
            assert plan.info["ws"] is not None
            for b, part in plan.parts.items():
                assert plan.info["ws"][b] is drawn[b]
                assert part[8] is None  # the block has it
        sizes = list(state.ws_size)
        partials = {b: program.push(blocks[b], part) for b, part in plan.parts.items()}
        drawn = None
        if plan.info["gap"]:
            drawn = {}
            for b, out in partials.items():
                block = blocks[b]
                ws = out["ws"]
                assert block["span"] is ws
                assert np.all(np.diff(ws) > 0)
                support = np.flatnonzero((block["coef"] != 0.0) & block["alive"])
                assert np.isin(support, ws).all()
                # the rest have a non-zero step now (the others would not move)
                step = block["weight"]
                candidates = (step > 0.0) & (block["coef"] == 0.0) & block["alive"]
                assert np.isin(ws, support).sum() + candidates[ws].sum() == ws.shape[0]
                if sizes[b] and support.shape[0]:
                    growth = 4.0 if support.shape[0] >= 0.75 * sizes[b] else 2.0
                    want = max(8, int(growth * support.shape[0]))
                    assert ws.shape[0] == min(want, support.shape[0] + candidates.sum())
                    checked += 1
                step_idx = out["gap"]["step_idx"]
                assert block["tracked"][step_idx].all()
                drawn[b] = ws
        state = program.pull(state, partials, plan)
    assert checked >= 2


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_client_bookkeeping_matches_a_recount(request, kind):
    """The pulls keep the number of non-zero coefficients and the queued coefficient
    corrections (after a shortened step) without passes over all coefficients: after
    every pull the count equals a recount, every correction queued is sent, and the
    workers' coefficients plus what is still queued equal the client's."""
    X, y = request.getfixturevalue("dense" if kind == "dense" else "sparse_data")
    alpha = alpha_max(X, y) / 50
    program, shards, y_off = make_program(X, y, alpha, random_state=0, rho=1.0)
    steps, fixes = [], []

    def check(plan, state):
        assert program.metrics(state)["nnz"] == np.count_nonzero(state.coef)
        steps.append(state.step)
        for part in plan.parts.values():
            fix = part[6]
            if fix is not None:
                idx, values = fix
                # sorted, unique, and exactly the non-zero queued corrections
                assert np.all(np.diff(idx) > 0) and np.all(values != 0.0)
                fixes.append(idx.shape[0])
        for b in range(program.n_blocks):
            if not state.pending_coef_dirty[b]:
                assert not np.any(state.pending_coef[b])

    state, blocks = run_local(program, shards, on_plan=check)
    assert state.converged
    assert min(steps) < 1.0 and sum(fixes) > 0  # shortened steps happened, fixes were sent
    for b in range(program.n_blocks):
        s0, s1 = program.starts[b], program.starts[b + 1]
        np.testing.assert_allclose(blocks[b]["coef"] + state.pending_coef[b], state.coef[s0:s1],
                                   rtol=0, atol=1e-12)
    coef_hat, b0 = fitted(program, state, blocks, y_off)
    sk = sklearn_fit(X, y, alpha, 1.0, True, False)
    assert objective(X, y, coef_hat, b0, alpha) == pytest.approx(
        objective(X, y, sk.coef_, sk.intercept_, alpha), rel=1e-6)


def test_commit_block_equals_the_numpy_formula():
    rng = np.random.default_rng(0)
    coef = rng.standard_normal(50) * (rng.random(50) < 0.5)
    idx = np.sort(rng.choice(50, 20, replace=False))
    values = rng.standard_normal(20) * (rng.random(20) < 0.5)
    for step in (1.0, 0.37, 0.0):
        c, pend = coef.copy(), np.zeros(50)
        base = c[idx].copy()
        change, d_nnz = kernels.commit_block(c, idx, values, base, step, pend)
        target = values if step == 1.0 else base + step * (values - base)
        np.testing.assert_array_equal(c[idx], target)
        np.testing.assert_array_equal(np.delete(c, idx), np.delete(coef, idx))
        np.testing.assert_array_equal(change, np.abs(target - base))
        np.testing.assert_array_equal(pend[idx], 0.0 if step == 1.0 else target - values)
        assert d_nnz == np.count_nonzero(c) - np.count_nonzero(coef)


def test_working_set_pulls_reprioritise_the_conflicted_columns(dense):
    """After a working-set round the columns with a conflict (the only priorities the
    dependency check reads before the next gap round) get |change| if they moved and 0
    if they were scheduled and did not; every other priority is left as it was, and
    the list of non-zero priorities stays consistent."""
    X, y = dense
    program, _, _ = make_program(X, y, alpha_max(X, y) / 20, random_state=0)
    rng = np.random.default_rng(1)
    s0, s1 = program.starts[1], program.starts[2]
    p_b = s1 - s0
    for _trial in range(20):
        state = program.init_state({})
        others = rng.choice(s0, 40, replace=False)
        mine = rng.choice(np.arange(s0, s1), 40, replace=False)
        for a, c in zip(others.tolist(), mine.tolist(), strict=True):
            state.corr.conflicts.setdefault(a, set()).add(c)
            state.corr.conflicts.setdefault(c, set()).add(a)
        w = state.weight[s0:s1]
        start = np.flatnonzero(rng.random(p_b) < 0.4)
        state.n_active[1] = kernels.update_priority(w, state.active[1], state.position[1], 0,
                                                    start, rng.random(start.shape[0]))
        before = w.copy()
        coords = np.sort(rng.choice(p_b, 60, replace=False))
        pos = np.flatnonzero(rng.random(60) < 0.5).astype(np.int32)
        change = rng.random(pos.shape[0]) * (rng.random(pos.shape[0]) < 0.8)
        program._reprioritise(state, 1, coords, pos, change)
        want = before.copy()
        want[coords] = 0.0
        want[coords[pos]] = change
        conflicted = np.unique(mine) - s0
        np.testing.assert_array_equal(w[conflicted], want[conflicted])
        rest = np.setdiff1d(np.arange(p_b), conflicted)
        np.testing.assert_array_equal(w[rest], before[rest])
        n = state.n_active[1]
        assert set(state.active[1][:n]) == set(np.flatnonzero(w))
        assert all(state.position[1][state.active[1][i]] == i for i in range(n))
        assert np.all(state.position[1][w == 0.0] == -1)
    # without conflicts there is nothing to do
    state = program.init_state({})
    program._reprioritise(state, 1, np.arange(5), np.array([1], dtype=np.int32),
                          np.array([0.5]))
    assert not state.weight.any()


def test_ws_candidates_equals_the_numpy_formulation():
    rng = np.random.default_rng(2)
    p = 200
    coef = np.where(rng.random(p) < 0.2, rng.standard_normal(p), 0.0)
    weight = np.where(rng.random(p) < 0.5, rng.random(p), 0.0)
    alive_mask = rng.random(p) < 0.8
    active = rng.permutation(np.flatnonzero(weight))
    support, pos, pos_w, n_act, w_sum = kernels.ws_candidates(coef, weight, alive_mask, active)
    np.testing.assert_array_equal(support, np.flatnonzero((coef != 0.0) & alive_mask))
    alive_active = active[alive_mask[active]]
    free = alive_active[coef[alive_active] == 0.0]
    np.testing.assert_array_equal(pos, free)
    np.testing.assert_array_equal(pos_w, weight[free])
    assert n_act == alive_active.shape[0]
    assert w_sum == pytest.approx(weight[alive_active].sum(), rel=1e-12)


@pytest.mark.parametrize("nonzero", [0, 1, 24, 25, 26, 100])
def test_compact_keeps_a_change_dense_from_a_quarter_of_its_rows(nonzero):
    """A residual change goes as None, (index, value) pairs below a quarter of its rows
    non-zero, or dense; with or without its non-zero indices given; and add_delta
    applies each form the same."""
    from dask_strads.lasso.program import SPARSE_DELTA_FRACTION, add_delta, compact

    assert SPARSE_DELTA_FRACTION == 0.25
    rng = np.random.default_rng(nonzero)
    delta = np.zeros(100)
    idx = np.sort(rng.choice(100, nonzero, replace=False))
    delta[idx] = rng.standard_normal(nonzero)
    for nz in (None, idx):
        out = compact(delta, nz)
        if nonzero == 0:
            assert out is None
        elif nonzero < 25:
            assert isinstance(out, tuple)
            np.testing.assert_array_equal(out[0], idx)
            assert out[0].dtype == np.int32
        else:
            assert out is delta
        target = np.ones(100)
        add_delta(target, out, 0.5)
        np.testing.assert_array_equal(target, 1.0 + 0.5 * delta)


def _received(X, cls=sp.csc_matrix):
    """``X`` (CSC) as a shard arrives through Dask: its arrays are views of one larger
    buffer (the message), which scipy's constructor would copy."""
    parts = [X.data, X.indices, X.indptr]
    buf = np.zeros(sum(a.nbytes for a in parts) + 64, dtype=np.uint8)
    views, at = [], 0
    for a in parts:
        v = buf[at:at + a.nbytes].view(a.dtype)
        v[:] = a
        views.append(v)
        at += a.nbytes
    out = cls(X.shape, dtype=X.dtype)
    out.data, out.indices, out.indptr = views
    return out


@pytest.mark.parametrize("kind", ["matrix", "array"])
def test_a_received_csc_shard_is_used_in_place(kind):
    """A float64 CSC shard (matrix or array) becomes a block's csc_matrix that shares
    its arrays: no copy of X per block and fit."""
    from dask_strads.lasso.program import _as_block

    X = sp.random(50, 40, density=0.2, format="csc", random_state=0)
    shard = _received(X, sp.csc_matrix if kind == "matrix" else sp.csc_array)
    assert not np.shares_memory(sp.csc_matrix(shard).data, shard.data)  # scipy copies
    block = _as_block(shard)
    assert type(block) is sp.csc_matrix and block is not shard
    for name in ("data", "indices", "indptr"):
        assert getattr(block, name) is getattr(shard, name)
    assert (block != X).nnz == 0


def test_an_unsorted_or_other_shard_is_converted_and_left_as_it_was():
    """A CSC shard with unsorted indices is copied before it is sorted (Dask's object
    is never changed); CSR and float32 shards are converted to float64 CSC."""
    from dask_strads.lasso.program import _as_block

    X = sp.random(30, 20, density=0.3, format="csc", random_state=1)
    unsorted = X.copy()
    for j in range(20):  # reverse each column's rows
        a, b = unsorted.indptr[j], unsorted.indptr[j + 1]
        unsorted.indices[a:b] = unsorted.indices[a:b][::-1].copy()
        unsorted.data[a:b] = unsorted.data[a:b][::-1].copy()
    unsorted.has_sorted_indices = False
    before = unsorted.indices.copy()
    block = _as_block(unsorted)
    assert block.has_canonical_format and (block != X).nnz == 0
    np.testing.assert_array_equal(unsorted.indices, before)
    for other in (X.tocsr(), X.astype(np.float32)):
        block = _as_block(other)
        assert block.format == "csc" and block.dtype == np.float64
        assert not np.shares_memory(block.data, other.data)
        assert abs(block - X).max() < 1e-6


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("l1_ratio", [1.0, 0.6])
def test_peer_phases_match_sklearn_objective(request, kind, fit_intercept, positive, l1_ratio):
    """Working-set rounds reduced among the pushes (exchange plans) reach the same
    objective, with the blocks' residuals kept equal to y - X coef."""
    X, y = request.getfixturevalue("dense" if kind == "dense" else "sparse_data")
    alpha = alpha_max(X, y, fit_intercept=fit_intercept) / 30
    program, shards, y_off = make_program(X, y, alpha, l1_ratio=l1_ratio,
                                          fit_intercept=fit_intercept, positive=positive,
                                          n_candidates=40, random_state=0, n_blocks=3,
                                          rho=1.0)  # no dependency check: no conflicts
    phases = []
    state, blocks = run_local(program, shards, peers=True,
                              on_plan=lambda plan, st: phases.append(plan.exchange))
    assert state.converged
    assert any(phases) and state.peer_rounds > sum(phases)  # phases of several rounds
    coef, b0 = fitted(program, state, blocks, y_off)
    assert_like_sklearn(X, y, alpha, l1_ratio, fit_intercept, positive, coef, b0)
    _check_one_residual(program, state, blocks, X, y, y_off, coef, fit_intercept)


def _check_one_residual(program, state, blocks, X, y, y_off, coef, fit_intercept):
    """The client committed what the blocks hold, and every block holds one residual,
    ``y - X coef``."""
    for b, blk in blocks.items():
        np.testing.assert_array_equal(blk["coef"],
                                      state.coef[program.starts[b]:program.starts[b + 1]])
    r = [blk["residual"] for blk in blocks.values()]
    for other in r[1:]:
        np.testing.assert_allclose(other, r[0], rtol=0, atol=1e-12 * np.abs(r[0]).max())
    # (sparse blocks keep the raw residual: with an intercept, compare centered ones)
    raw = (y - y_off) - np.asarray(X @ coef).ravel()
    res = r[0]
    if fit_intercept:
        raw, res = raw - raw.mean(), res - res.mean()
    np.testing.assert_allclose(res, raw, atol=1e-9)


@pytest.mark.parametrize("solo", [True, False])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("l1_ratio", [1.0, 0.6])
def test_solo_phases_match_sklearn_objective(monkeypatch, sparse_data, solo, fit_intercept,
                                             positive, l1_ratio):
    """Two blocks' peer phases run by one of them (the other's working-set columns
    sent over) reach scikit-learn's objective, and leave both blocks the same residual
    and the client the blocks' coefficients; with ``solo_phases=False`` they are peer
    phases."""
    # this small problem's working sets are a large share of a block: copy them anyway
    monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", 1.0)
    X, y = sparse_data
    alpha = alpha_max(X, y, fit_intercept=fit_intercept) / 30
    program, shards, y_off = make_program(X, y, alpha, l1_ratio=l1_ratio,
                                          fit_intercept=fit_intercept, positive=positive,
                                          n_candidates=40, random_state=0, n_blocks=2,
                                          rho=1.0)
    program.solo_phases = solo
    state, blocks = run_local(program, shards, peers=True)
    assert state.converged
    assert state.peer_rounds > 0
    assert (state.solo_phases > 0) == solo
    coef, b0 = fitted(program, state, blocks, y_off)
    assert_like_sklearn(X, y, alpha, l1_ratio, fit_intercept, positive, coef, b0)
    _check_one_residual(program, state, blocks, X, y, y_off, coef, fit_intercept)


def _phase_solvers(plans):
    """The solver of each exchange plan (a phase) of ``plans``: None for a peer phase."""
    return [next(iter(plan.parts.values()))[9][3] for plan in plans if plan.exchange]


@pytest.mark.parametrize("why", ["too large", "dense"])
def test_solo_phases_fall_back_to_peer_phases(monkeypatch, request, why):
    """The client plans peer phases when the working sets hold too many non-zeros or
    the blocks are dense."""
    X, y = request.getfixturevalue("dense" if why == "dense" else "sparse_data")
    monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", 1.0)
    if why == "too large":
        monkeypatch.setattr(program_module, "SOLO_MAX_NNZ", 10)
    alpha = alpha_max(X, y) / 30
    program, shards, y_off = make_program(X, y, alpha, n_candidates=40, random_state=0,
                                          n_blocks=2, rho=1.0)
    plans = []
    state, blocks = run_local(program, shards, peers=True,
                              on_plan=lambda plan, st: plans.append(plan))
    assert state.converged
    assert state.peer_rounds > 0 and state.solo_phases == 0
    assert _phase_solvers(plans) and set(_phase_solvers(plans)) == {None}
    coef, b0 = fitted(program, state, blocks, y_off)
    assert_like_sklearn(X, y, alpha, 1.0, True, False, coef, b0)
    _check_one_residual(program, state, blocks, X, y, y_off, coef, True)


def test_solo_phases_run_on_the_larger_working_set_and_need_no_column_copy(monkeypatch,
                                                                          sparse_data):
    """Each solo phase runs on the block whose working set holds more non-zeros (the
    other sends its columns); a block without a copy of its working set's columns
    (too large a share of the block) sweeps them in the block itself."""
    monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", 0.0)
    X, y = sparse_data
    alpha = alpha_max(X, y) / 30
    program, shards, y_off = make_program(X, y, alpha, n_candidates=40, random_state=0,
                                          n_blocks=2, rho=1.0)
    phases = []

    def on_plan(plan, st):
        if plan.exchange:
            phases.append((next(iter(plan.parts.values()))[9][3], list(st.ws_nnz)))

    state, blocks = run_local(program, shards, peers=True, on_plan=on_plan)
    assert state.converged
    assert len(phases) > 1 and state.solo_phases == len(phases)
    assert all(solver == int(np.argmax(nnz)) for solver, nnz in phases)
    assert len({tuple(nnz) for _, nnz in phases}) > 1  # working sets of several sizes
    assert all(blk.get("sub_block") is None for blk in blocks.values())
    coef, b0 = fitted(program, state, blocks, y_off)
    assert_like_sklearn(X, y, alpha, 1.0, True, False, coef, b0)
    _check_one_residual(program, state, blocks, X, y, y_off, coef, True)


def test_solo_phases_sweep_the_nonzero_coefficients_between_full_sweeps(monkeypatch,
                                                                        sparse_data):
    """A solo phase sweeps both working sets, then only the coefficients that were
    non-zero after that sweep, and ends on a sweep over both working sets (unless it
    ran out of rounds)."""
    monkeypatch.setattr(program_module, "SUB_BLOCK_SHARE", 1.0)
    X, y = sparse_data
    alpha = alpha_max(X, y) / 30
    program, shards, y_off = make_program(X, y, alpha, n_candidates=40, random_state=0,
                                          n_blocks=2, rho=1.0)
    rounds = [0]
    calls = []  # (round, the swept vector's id, coordinates, the non-zero ones after)
    solve = kernels.solve_sparse

    def recording(data, indices, indptr, mu, center, col_sq, coef, r, coords, *rest):
        out = solve(data, indices, indptr, mu, center, col_sq, coef, r, coords, *rest)
        calls.append((rounds[0], id(coef), coords.copy(), coords[coef[coords] != 0.0]))
        return out

    def on_plan(plan, st):
        rounds[0] += 1

    monkeypatch.setattr(kernels, "solve_sparse", recording)
    state, blocks = run_local(program, shards, peers=True, on_plan=on_plan)
    assert state.converged and state.solo_phases > 0
    coef, b0 = fitted(program, state, blocks, y_off)
    assert_like_sklearn(X, y, alpha, 1.0, True, False, coef, b0)
    partial = 0
    for rnd in sorted({c[0] for c in calls}):
        for vec in {c[1] for c in calls if c[0] == rnd}:  # the solver's, the other's
            seq = [c for c in calls if c[0] == rnd and c[1] == vec]
            ws = seq[0][2]
            active = seq[0][3]
            for _, _, coords, nonzero in seq[1:]:
                if np.array_equal(coords, ws):
                    active = nonzero
                else:
                    np.testing.assert_array_equal(coords, active)
                    partial += 1
            assert (np.array_equal(seq[-1][2], ws)
                    or len(seq) == program.max_ws_rounds)
    assert partial > 0


def test_peer_phases_need_the_engine_to_allow_them(sparse_data):
    X, y = sparse_data
    program, shards, _ = make_program(X, y, alpha_max(X, y) / 30, n_candidates=40)
    plans = []
    run_local(program, shards, on_plan=lambda plan, st: plans.append(plan))
    assert not any(p.exchange for p in plans)
    assert all(len(part) == 9 for p in plans for part in p.parts.values())


@pytest.mark.parametrize("n_blocks", [2, 5])
def test_queued_residual_changes_reach_every_other_block(n_blocks):
    """A pull's residual changes, dense and sparse, with and without shortened steps,
    reach each block's pending residual as the one-by-one rule says: ``step`` times
    the change for the other blocks, ``step - 1`` times it for its source."""
    X, y, _ = make_sparse_regression(60, 40, density=0.2, n_informative=4)
    program, _, _ = make_program(X, y, 0.1, n_blocks=n_blocks)
    rng = np.random.default_rng(1)
    n = program.n
    pending = [rng.standard_normal(n) for _ in range(n_blocks)]
    state = program_module.LassoState(
        coef=np.zeros(40), weight=np.zeros(40), active=[], position=[], n_active=[],
        pending=[p.copy() for p in pending], pending_dirty=[False] * n_blocks, rng=rng,
        corr=None, rr_pos=[], marks=[])
    expected = [p.copy() for p in pending]
    changes = []
    for b in range(n_blocks):
        dense = rng.standard_normal(n)
        idx = np.sort(rng.choice(n, 5, replace=False)).astype(np.int32)
        changes += [(b, dense, 0.5 if b == 1 else 1.0), (b, (idx, rng.standard_normal(5)), 1.0)]
    for source, delta, step in changes:
        program._queue(state, source, delta, step)
        for o in range(n_blocks):
            program_module.add_delta(expected[o], delta, step if o != source else step - 1.0)
    assert state.pending[0].tolist() == pending[0].tolist()  # nothing added before the flush
    program._flush(state)
    assert state.queued == []
    for o in range(n_blocks):
        np.testing.assert_allclose(state.pending[o], expected[o], rtol=0, atol=1e-12)
        assert state.pending_dirty[o]


def test_eight_blocks_with_dense_changes_match_sklearn(dense):
    """Eight blocks of a dense design: every round queues eight dense residual
    changes at once (the batched way of LassoProgram._flush) and the fit still
    reaches scikit-learn's objective."""
    X, y = dense
    alpha = alpha_max(X, y) / 20
    program, shards, y_off = make_program(X, y, alpha, n_blocks=8, random_state=0)
    batched = []
    flush = program._flush

    def counting_flush(state):
        batched.append(sum(not isinstance(q[1], tuple) for q in state.queued) >= 2)
        flush(state)

    program._flush = counting_flush
    state, blocks = run_local(program, shards)
    assert state.converged
    assert sum(batched) >= 10
    coef, b0 = fitted(program, state, blocks, y_off)
    assert_like_sklearn(X, y, alpha, 1.0, True, False, coef, b0)
