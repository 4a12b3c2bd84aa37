"""The coordinate-descent program, driven in-process: scikit-learn's objective in every
mode a phase can run in, and the program's own bookkeeping."""

from __future__ import annotations

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model

from dask_strads._datasets.lasso import (
    alpha_max,
    make_correlated_regression,
    make_text_regression,
)

from ._local import make_program, objective, run_local

# a phase's solvers are chosen by cost: these settings force each kind
SOLO = {"dask-strads.cd.exchange-seconds": 10.0}
PEER = {"dask-strads.cd.exchange-seconds": 0.0, "dask-strads.cd.bandwidth": 1e-3}


@pytest.fixture(scope="module")
def dense():
    X, y, _ = make_correlated_regression(120, 300, n_informative=12, correlation=0.6)
    return X, y


@pytest.fixture(scope="module")
def text():
    X, y, _ = make_text_regression(400, 900, n_informative=8)
    return X, y


def sklearn_objective(X, y, alpha, l1_ratio=1.0, **kw):
    sk = linear_model.ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-12, max_iter=100_000,
                                 **kw).fit(X, y)
    return objective(X, y, sk.coef_, sk.intercept_, alpha, l1_ratio)


def fit(X, y, alpha, n_blocks, mode, *, fit_intercept=False, l1_ratio=1.0, on_plan=None,
        **kwargs):
    config = {"solo": SOLO, "peer": PEER}.get(mode, {})
    with dask.config.set(config):
        program, shards, y_offset = make_program(X, y, alpha, l1_ratio=l1_ratio,
                                                 fit_intercept=fit_intercept,
                                                 n_blocks=n_blocks, **kwargs)
        state, blocks = run_local(program, shards, peers=mode != "turns", on_plan=on_plan)
    intercept = 0.0
    if fit_intercept:
        means = np.concatenate([blocks[b].means for b in range(n_blocks)])
        intercept = y_offset - means @ state.coef
    return state, blocks, intercept


@pytest.mark.parametrize("data", ["dense", "text"])
@pytest.mark.parametrize("n_blocks, mode", [(1, "alone"), (2, "solo"), (3, "solo"),
                                            (2, "peer"), (3, "peer"), (2, "turns")])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_every_mode_reaches_sklearn_objective(request, data, n_blocks, mode, fit_intercept):
    X, y = request.getfixturevalue(data)
    alpha = alpha_max(X, y, fit_intercept=fit_intercept) / 30
    modes = set()

    def on_plan(plan, state):
        if plan.info and plan.info.get("kind") == "phase":
            modes.add(plan.info["mode"])

    state, blocks, b0 = fit(X, y, alpha, n_blocks, mode, fit_intercept=fit_intercept,
                            on_plan=on_plan)
    assert state.converged and state.stop == "converged"
    ours = objective(X, y, state.coef, b0, alpha)
    ref = sklearn_objective(X, y, alpha, fit_intercept=fit_intercept)
    assert abs(ours - ref) <= 1e-9 * abs(ref)
    assert modes == {mode}
    # every block holds the same residual, y - X b, bit for bit
    for b in range(1, n_blocks):
        np.testing.assert_array_equal(blocks[b].residual, blocks[0].residual)


@pytest.mark.parametrize("positive, l1_ratio", [(True, 1.0), (False, 0.5), (True, 0.3)])
def test_positive_and_elastic_net(dense, positive, l1_ratio):
    X, y = dense
    alpha = alpha_max(X, y, fit_intercept=False) / 20
    state, _, _ = fit(X, y, alpha, 2, "peer", l1_ratio=l1_ratio, positive=positive)
    ours = objective(X, y, state.coef, 0.0, alpha, l1_ratio)
    ref = sklearn_objective(X, y, alpha, l1_ratio, fit_intercept=False, positive=positive)
    assert abs(ours - ref) <= 1e-9 * abs(ref)
    if positive:
        assert (state.coef.values > 0).all()


def test_ridge_and_ordinary_least_squares_use_the_other_gaps():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 8))
    y = X @ rng.standard_normal(8) + 0.1 * rng.standard_normal(50)
    # a gap of 1e-14 ||y||^2 puts the coefficients within 1e-6 (strong convexity >= 24:
    # the ridge's l2 and X'X's smallest eigenvalue); the default 1e-10 would not promise
    # it, and whether a phase sweeps the Gram matrix follows measured times
    state, _, _ = fit(X, y, 0.5, 2, "solo", l1_ratio=0.0, tol=1e-14)  # ridge: l1 = 0
    np.testing.assert_allclose(state.coef, linear_model.Ridge(alpha=0.5 * 50, fit_intercept=False)
                               .fit(X, y).coef_, atol=1e-6)
    state, _, _ = fit(X, y, 0.0, 1, "alone", tol=1e-14)  # no penalty at all
    np.testing.assert_allclose(state.coef, np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-6)


def test_warm_start_from_the_solution_needs_one_gap_round(dense):
    X, y = dense
    alpha = alpha_max(X, y, fit_intercept=False) / 30
    state, _, _ = fit(X, y, alpha, 2, "solo")
    again, _, _ = fit(X, y, alpha, 2, "solo", coef_init=state.coef)
    assert again.converged and again.gap_rounds == 1 and again.phases == 0


@pytest.mark.parametrize("n_blocks", [1, 2])
def test_the_clients_norms_and_xty_spare_the_blocks_their_first_pass(monkeypatch, dense,
                                                                      n_blocks):
    """Given X's column norms and X'y (the client's check of X takes them), the blocks
    read no column before their second gap round, and the fit ends where it does
    without them; a warm start or a restored block takes its own gradient."""
    from dask_strads.cd.block import ColumnBlock

    X, y = dense
    X = np.asfortranarray(X)
    alpha = alpha_max(X, y, fit_intercept=False) / 30
    calls = []
    gradient = ColumnBlock.gradient
    monkeypatch.setattr(ColumnBlock, "gradient",
                        lambda self, v: calls.append(self.id) or gradient(self, v))
    stats = dict(col_sq=(X**2).sum(axis=0), xty=X.T @ y)
    given, blocks, _ = fit(X, y, alpha, n_blocks, "alone" if n_blocks == 1 else "solo", **stats)
    assert given.converged and given.gap_rounds >= 2
    # one gradient per block per gap round but the first
    assert sorted(calls) == sorted(list(range(n_blocks)) * (given.gap_rounds - 1))
    for b, block in blocks.items():
        cols = slice(*program_starts(X, n_blocks)[b:b + 2])
        np.testing.assert_array_equal(block.col_sq, stats["col_sq"][cols])
    calls.clear()
    taken, _, _ = fit(X, y, alpha, n_blocks, "alone" if n_blocks == 1 else "solo")
    assert len(calls) == n_blocks * taken.gap_rounds
    assert objective(X, y, given.coef, 0.0, alpha) == pytest.approx(
        objective(X, y, taken.coef, 0.0, alpha), rel=1e-12)
    calls.clear()
    warm, _, _ = fit(X, y, alpha, n_blocks, "solo", coef_init=taken.coef, **stats)
    assert warm.gap_rounds == 1 and len(calls) == n_blocks  # its residual is not y
    program, shards, _ = make_program(X, y, alpha, fit_intercept=False, n_blocks=1, **stats)
    block = program.init_block(0, shards[0])
    block.restore_state({"coef": np.zeros(X.shape[1]), "residual": y - 1.0})
    assert block.first_gradient(untouched=True) is None  # of another residual


def program_starts(X, n_blocks):
    return np.linspace(0, X.shape[1], n_blocks + 1).round().astype(np.int64)


def test_working_sets_grow_from_the_smallest_and_hold_the_support(text):
    X, y = text
    alpha = alpha_max(X, y, fit_intercept=False) / 100
    sizes, supports = [], []

    def on_plan(plan, state):
        if plan.info and plan.info.get("kind") == "phase":
            sizes.append(sum(w.shape[0] for w in state.ws))
            starts = np.array([0, 450, 900])
            for b in range(2):
                nz = np.flatnonzero(np.asarray(state.coef)[starts[b]:starts[b + 1]])
                supports.append(np.isin(nz, state.ws[b]).all())

    state, _, _ = fit(X, y, alpha, 2, "solo", ws_min_size=10, on_plan=on_plan)
    assert sizes[0] == 10 and max(sizes) > 10
    assert all(supports)
    assert state.converged


def test_max_iter_stops_after_a_last_gap_round(dense):
    X, y = dense
    alpha = alpha_max(X, y, fit_intercept=False) / 100
    state, _, _ = fit(X, y, alpha, 2, "solo", max_updates=300, tol=1e-14)
    assert state.stop == "max_iter" and not state.converged
    assert state.fresh  # the gap reported is the one of the coefficients returned


def test_screening_drops_columns_and_keeps_the_optimum(text):
    X, y = text
    alpha = alpha_max(X, y, fit_intercept=False) / 10
    state, blocks, _ = fit(X, y, alpha, 2, "solo")
    assert state.screened > 0
    dropped = np.concatenate([np.flatnonzero(~blk.alive) + blk.start
                              for blk in blocks.values()])
    sk = linear_model.Lasso(alpha=alpha, fit_intercept=False, tol=1e-12,
                            max_iter=100_000).fit(X, y)
    assert not sk.coef_[dropped].any()
    nothing, _, _ = fit(X, y, alpha, 2, "solo", screening=False)
    assert nothing.screened == 0
    assert objective(X, y, nothing.coef, 0, alpha) == pytest.approx(
        objective(X, y, state.coef, 0, alpha), rel=1e-9)


def test_peers_solve_their_own_correlated_coordinates_to_the_optimum():
    # columns correlated at 0.95 across the two blocks: the step lengths keep peers that
    # sweep at once from overshooting, with no coordinate moved to the other block
    X, y, _ = make_correlated_regression(150, 200, n_informative=30, correlation=0.95,
                                         random_state=2)
    alpha = alpha_max(X, y, fit_intercept=False) / 100
    peer_phases = []

    def on_plan(plan, state):
        if plan.info and plan.info.get("mode") == "peer":
            peer_phases.append([part.solver_of.tolist() == [b] * part.ws.shape[0]
                                for b, part in plan.parts.items()])

    state, _, _ = fit(X, y, alpha, 2, "peer", on_plan=on_plan)
    assert peer_phases and all(all(own) for own in peer_phases)
    assert objective(X, y, state.coef, 0, alpha) == pytest.approx(
        sklearn_objective(X, y, alpha, fit_intercept=False), rel=1e-9)


def test_checkpointed_state_resumes_to_the_same_optimum(dense):
    X, y = dense
    alpha = alpha_max(X, y, fit_intercept=False) / 30
    program, shards, _ = make_program(X, y, alpha, fit_intercept=False, n_blocks=2)
    state, blocks = run_local(program, shards, peers=True, max_rounds=6)
    arrays = program.state_arrays(state)
    restored = program.load_state({k: np.array(v, copy=True) for k, v in arrays.items()})
    np.testing.assert_array_equal(restored.coef, state.coef)
    # only the support travels: the checkpoint holds no dense coefficient vector
    assert arrays["coef_ids"].shape == (state.coef.nnz,) and "coef" not in arrays
    assert restored.next == "gap" and restored.updates == state.updates
    # rebuilt blocks continue from their arrays
    block_arrays = {b: program.block_arrays(blk) for b, blk in blocks.items()}
    rebuilt = {b: program.restore_block(b, shards[b], arrays, block_arrays[b])
               for b in blocks}
    for b in blocks:
        np.testing.assert_array_equal(rebuilt[b].residual, blocks[b].residual)


def test_progress_counts_decades_of_the_gap(dense):
    X, y = dense
    alpha = alpha_max(X, y, fit_intercept=False) / 30
    program, shards, _ = make_program(X, y, alpha, fit_intercept=False, n_blocks=1, tol=1e-8)
    state, _ = run_local(program, shards)
    done, total, unit = program.progress(state)
    assert done == total >= 1 and unit == "gap decade"


def test_sparse_blocks_of_int64_indices():
    X, y, _ = make_text_regression(200, 300, n_informative=5)
    X = sp.csc_matrix(X)
    X.indices = X.indices.astype(np.int64)
    X.indptr = X.indptr.astype(np.int64)
    alpha = alpha_max(X, y, fit_intercept=True) / 20
    state, _, b0 = fit(X, y, alpha, 2, "solo", fit_intercept=True)
    # scikit-learn takes 32-bit indices only; the reference runs on a converted copy
    X32 = sp.csc_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)),
                        shape=X.shape)
    assert objective(X, y, state.coef, b0, alpha) == pytest.approx(
        sklearn_objective(X32, y, alpha, fit_intercept=True), rel=1e-9)


def test_sparse_coefficients_keep_only_the_support():
    from dask_strads.cd.coefficients import SparseCoef
    from dask_strads.cd.program import coef_of_arrays

    coef = SparseCoef.from_dense([0.0, 2.0, 0.0, -1.0, 0.0])
    assert coef.nnz == 2 and coef.ids.tolist() == [1, 3]
    coef.set(np.array([3, 0, 4]), np.array([0.0, 5.0, 0.5]))  # 3 leaves, 0 and 4 join
    np.testing.assert_array_equal(coef.dense(), [5.0, 2.0, 0.0, 0.0, 0.5])
    assert coef.ids.tolist() == [0, 1, 4] and coef.nnz == 3
    coef.set(np.array([1]), 0.0)
    np.testing.assert_array_equal(np.asarray(coef), [5.0, 0.0, 0.0, 0.0, 0.5])
    np.testing.assert_array_equal(coef.sparse().toarray().ravel(), coef.dense())
    coef.set(np.array([], dtype=np.int64), np.array([]))
    assert coef.nnz == 2
    coef.set(np.array([4, 2, 0]), np.array([0.0, 7.0, -1.0]))  # in any order
    np.testing.assert_array_equal(coef.dense(), [-1.0, 0.0, 7.0, 0.0, 0.0])
    # checkpoints written with a dense vector still load
    old = coef_of_arrays({"coef": np.array([0.0, 0.0, 3.0])})
    assert old.size == 3 and old.ids.tolist() == [2] and old.values.tolist() == [3.0]
