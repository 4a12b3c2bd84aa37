"""The CCD++ program: same trajectory as a serial numpy CCD++, on and off the engine."""

from __future__ import annotations

import numpy as np
import pytest

from dask_strads._datasets.mf import make_ratings
from dask_strads.engine import RoundContext, run
from dask_strads.engine.inprocess import _pushes
from dask_strads.mf.program import MFProgram
from dask_strads.mf.shards import (
    RANK_TILE,
    ROW_TILE,
    balanced_bounds,
    build_shard,
    factor_chunk,
    random_factor,
)
from tests.mf._reference import ccdpp_reference, drive


def _problem(seed=1, m=120, n=80, nnz=3000):
    data = make_ratings(m, n, rank=3, n_observed=nnz, random_state=seed)
    return data, data.train.tocoo()


def _shards(A, P, validation=None, init=None):
    m, n = A.shape
    rb = balanced_bounds(np.bincount(A.row, minlength=m), P)
    cb = balanced_bounds(np.bincount(A.col, minlength=n), P)
    return {p: build_shard(A.row, A.col, A.data, A.shape, (rb[p], rb[p + 1]), (cb[p], cb[p + 1]),
                           validation, init) for p in range(P)}


def _assemble(results):
    rows = sorted(results.values(), key=lambda b: b["row_range"])
    cols = sorted(results.values(), key=lambda b: b["col_range"])
    return np.vstack([b["W"] for b in rows]), np.vstack([b["H"] for b in cols])


def test_random_factor_is_independent_of_the_rectangle():
    full = random_factor(7, "W", 0, 2 * ROW_TILE + 5, 0, RANK_TILE + 3, 0.5)
    part = random_factor(7, "W", ROW_TILE - 3, 2 * ROW_TILE + 1, RANK_TILE - 2, RANK_TILE + 3, 0.5)
    np.testing.assert_array_equal(part, full[ROW_TILE - 3:2 * ROW_TILE + 1, RANK_TILE - 2:])
    assert full.std() == pytest.approx(0.5, rel=0.02)
    other = random_factor(7, "H", 0, 10, 0, 4, 0.5)
    assert not np.allclose(other, full[:10, :4])
    given = ("given", full, other)
    np.testing.assert_array_equal(factor_chunk(given, "H", 2, 5, 1, 3), other[2:5, 1:3])


def test_balanced_bounds():
    counts = np.array([5, 0, 0, 5, 5, 5, 0, 100, 1, 1])
    bounds = balanced_bounds(counts, 3)
    assert bounds[0] == 0 and bounds[-1] == len(counts) and len(bounds) == 4
    assert np.all(np.diff(bounds) >= 0)
    sums = [counts[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])]
    assert sum(sums) == counts.sum()
    assert max(sums) == 100 or max(sums) <= 0.5 * counts.sum()
    np.testing.assert_array_equal(balanced_bounds(np.ones(12), 4), [0, 3, 6, 9, 12])
    np.testing.assert_array_equal(balanced_bounds(np.zeros(4), 2), [0, 2, 4])


def test_build_shard_holds_its_rows():
    data, A = _problem()
    shard = build_shard(A.row, A.col, A.data, A.shape, (10, 50), (20, 30), data.test)
    csr = A.tocsr()
    indptr, indices, values = shard["csr"]
    np.testing.assert_array_equal(indptr, csr[10:50].indptr)
    np.testing.assert_array_equal(indices, csr[10:50].indices)
    np.testing.assert_array_equal(values, csr[10:50].data)
    assert shard["col_range"] == (20, 30) and shard["shape"] == A.shape
    vr, vc, vv = shard["val"]
    keep = (data.test_rows >= 10) & (data.test_rows < 50)
    np.testing.assert_array_equal(vr + 10, data.test_rows[keep])
    np.testing.assert_array_equal(vc, data.test_cols[keep])
    np.testing.assert_array_equal(vv, data.test_values[keep])


def _round(program, blocks, state, rnd, can_exchange):
    """Round ``rnd`` of ``program`` in this process; returns ``(state, plan, partials)``."""
    plan = program.schedule(state, RoundContext(rnd, can_exchange))
    if plan is None:
        return state, None, None
    partials = _pushes(program, blocks, {}, plan)
    return program.pull(state, partials, plan), plan, partials


@pytest.mark.parametrize("on_workers", [True, False], ids=["on-workers", "on-client"])
@pytest.mark.parametrize("P,inner_iter", [(1, 1), (3, 1), (2, 3)])
def test_trajectory_matches_serial_numpy_ccdpp(P, inner_iter, on_workers):
    """Reduced among the blocks (a round per component) or by the client (a round per
    sweep), the fit follows the serial CCD++ iterates."""
    data, A = _problem()
    k, alpha, n_iter, seed, scale = 4, 0.1, 3, 5, 0.3
    program = MFProgram(k, alpha, n_iter, 0.0, inner_iter=inner_iter, init=("random", seed, scale))
    state, objectives, results = drive(program, _shards(A, P, data.test), can_exchange=on_workers)
    per_round = 1 if on_workers else inner_iter
    m, n = A.shape
    W0 = random_factor(seed, "W", 0, m, 0, k, scale)
    H0 = random_factor(seed, "H", 0, n, 0, k, scale)
    W, H, reference = ccdpp_reference(A.row, A.col, A.data, A.shape, W0, H0, alpha, inner_iter,
                                      n_iter)
    # the objective is refreshed after the last round (sweep) of every rank component
    assert len(objectives) == n_iter * k * per_round + 1  # and a final flush round
    per_rank = objectives[per_round - 1:-1:per_round]
    assert len(per_rank) == n_iter * k
    np.testing.assert_allclose(per_rank, reference[1:], rtol=1e-8)
    assert state["iteration_objectives"] == pytest.approx(list(reference[::k]), rel=1e-8)
    assert np.all(np.diff(reference) <= 1e-9 * reference[:-1])
    assert np.all(np.diff(per_rank) <= 1e-9 * per_rank[:-1])
    W_got, H_got = _assemble(results)
    np.testing.assert_allclose(W_got, W, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(H_got, H, rtol=1e-8, atol=1e-10)
    err = data.test_values - np.einsum("ij,ij->i", W[data.test_rows], H[data.test_cols])
    assert state["val_sse"] == pytest.approx(float(err @ err), rel=1e-8)
    assert state["val_ranks"] == n_iter * k
    # the flush round's directly summed residual equals the training loss from partial sums
    final_sse = reference[-1] - alpha * ((W**2).sum() + (H**2).sum())
    assert state["sse_check"] == pytest.approx(final_sse, rel=1e-8)
    assert state["sse"] == pytest.approx(final_sse, rel=1e-8)
    assert program.metrics(state)["rmse"] == pytest.approx(np.sqrt(np.mean(err**2)), rel=1e-8)
    assert state["done"] and not state["converged"]


@pytest.mark.parametrize("on_workers", [True, False], ids=["on-workers", "on-client"])
@pytest.mark.parametrize("P", [1, 2, 3])
def test_inner_tol_trajectory_matches_serial_numpy_ccdpp(P, on_workers):
    """With ``inner_tol`` a component leaves its inner sweeps once ``h_t`` settles; the
    program takes the same decisions as the serial reference (the blocks among
    themselves, or the client), hence the same iterates, and the objective still never
    increases."""
    data, A = _problem()
    k, alpha, n_iter, seed, scale, inner_iter, inner_tol = 4, 0.1, 4, 5, 0.3, 6, 0.05
    program = MFProgram(k, alpha, n_iter, 0.0, inner_iter=inner_iter,
                        init=("random", seed, scale), inner_tol=inner_tol)
    blocks = {b: program.init_block(b, shard) for b, shard in _shards(A, P).items()}
    state = program.init_state({b: program.block_summary(b, blk) for b, blk in blocks.items()})
    per_rank, sweeps = [], []  # sweeps: how many each component visit ran
    for rnd in range(program.n_rounds() + 1):
        state, plan, partials = _round(program, blocks, state, rnd, on_workers)
        if plan is None:
            break
        if plan.info[0] == "rank":
            ran = {p["sweeps"] for p in partials.values()}
            assert len(ran) == 1  # the blocks agreed on when the component settled
            sweeps.append(ran.pop())
            per_rank.append(program.objective(state))
        elif plan.info[0] == "sweep" and state["s"] == 0:  # the component ended
            sweeps.append(plan.info[2] + 1)
            per_rank.append(program.objective(state))
    m, n = A.shape
    W0 = random_factor(seed, "W", 0, m, 0, k, scale)
    H0 = random_factor(seed, "H", 0, n, 0, k, scale)
    W, H, reference = ccdpp_reference(A.row, A.col, A.data, A.shape, W0, H0, alpha, inner_iter,
                                      n_iter, inner_tol=inner_tol)
    assert len(per_rank) == n_iter * k
    np.testing.assert_allclose(per_rank, reference[1:], rtol=1e-8)
    assert np.all(np.diff(per_rank) <= 1e-9 * np.asarray(per_rank[:-1]))
    # components left after one sweep, after several, and after all: the rule is
    # neither a no-op nor always one sweep here
    assert 1 in sweeps and inner_iter in sweeps
    assert any(1 < s < inner_iter for s in sweeps)
    W_got, H_got = _assemble({b: program.block_result(b, blk) for b, blk in blocks.items()})
    np.testing.assert_allclose(W_got, W, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(H_got, H, rtol=1e-8, atol=1e-10)


def test_given_initialisation_equals_random_one():
    data, A = _problem(2)
    k, seed, scale = 3, 11, 0.4
    m, n = A.shape
    W0 = random_factor(seed, "W", 0, m, 0, k, scale)
    H0 = random_factor(seed, "H", 0, n, 0, k, scale)
    given = ("given", W0, H0)
    _, obj_given, res_given = drive(MFProgram(k, 0.05, 2, 0.0, init=given),
                                    _shards(A, 2, init=given))
    _, obj_random, res_random = drive(MFProgram(k, 0.05, 2, 0.0, init=("random", seed, scale)),
                                      _shards(A, 2))
    np.testing.assert_allclose(obj_given, obj_random, rtol=1e-12)
    np.testing.assert_allclose(_assemble(res_given)[0], _assemble(res_random)[0], rtol=1e-12)


def test_tol_stops_and_flags_convergence():
    _, A = _problem(3)
    program = MFProgram(3, 0.1, 500, 1e-3, init=("random", 0, 0.3))
    state, objectives, _ = drive(program, _shards(A, 2))
    assert state["converged"] and state["iteration"] < 500
    last, before = state["iteration_objectives"][-1], state["iteration_objectives"][-2]
    assert before - last < 1e-3 * before
    before2 = state["iteration_objectives"][-3]
    assert before2 - before >= 1e-3 * before2


def test_rows_and_columns_without_entries():
    # an empty row and an empty column get zero factors, not NaN
    rows = np.array([0, 0, 2, 2, 3])
    cols = np.array([0, 2, 0, 3, 2])
    values = np.array([1.0, 2.0, -1.0, 0.5, 3.0])
    shards = {p: build_shard(rows, cols, values, (4, 4), r, c)
              for p, (r, c) in enumerate([((0, 2), (0, 2)), ((2, 4), (2, 4))])}
    state, objectives, results = drive(MFProgram(2, 0.1, 3, 0.0, init=("random", 1, 0.5)),
                                       shards)
    W, H = _assemble(results)
    assert np.all(np.isfinite(objectives))
    np.testing.assert_array_equal(W[1], 0.0)
    np.testing.assert_array_equal(H[1], 0.0)


@pytest.mark.parametrize("transport", ["direct", "tasks"])
def test_engine_run_matches_in_process_driver(any_client, transport):
    """Direct pushes (a block per worker) reduce among the workers; task pushes leave
    the reduction to the client. Both follow the in-process driver exactly."""
    data, A = _problem(4, m=200, n=150, nnz=5000)
    k, n_iter = 3, 2
    program = MFProgram(k, 0.05, n_iter, 0.0, inner_iter=2, init=("random", 3, 0.3))
    shards = _shards(A, 2, data.test)
    on_workers = transport == "direct"
    _, expected, expected_results = drive(program, shards, can_exchange=on_workers)
    result = run(program, shards, client=any_client, max_rounds=10_000, progress=False,
                 transport=transport)
    assert result.stop_reason == "done"
    assert result.n_rounds == n_iter * k * (1 if on_workers else 2) + 1
    np.testing.assert_allclose(result.history["objective"].to_numpy(), expected, rtol=1e-12)
    for got, want in zip(_assemble(result.block_results), _assemble(expected_results)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert {"iteration", "rank", "train_rmse", "rmse", "rmse_ranks"} <= set(result.history.columns)


def test_shard_from_matrices_equals_build_shard():
    from dask_strads.mf.shards import shard_from_matrices

    data, A = _problem(5)
    csr = A.tocsr()
    csr.sort_indices()
    a = shard_from_matrices(csr, (30, 90), (10, 60), data.test)
    b = build_shard(A.row, A.col, A.data, A.shape, (30, 90), (10, 60), data.test)
    assert a["shape"] == b["shape"] and a["row_range"] == b["row_range"]
    assert a["col_range"] == b["col_range"]
    for key in ("csr", "val"):
        for x, y in zip(a[key], b[key]):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype


def test_rank_one_program_with_k_equal_one():
    data, A = _problem(6)
    program = MFProgram(1, 0.1, 4, 0.0, inner_iter=2, init=("random", 2, 0.5))
    m, n = A.shape
    W0 = random_factor(2, "W", 0, m, 0, 1, 0.5)
    H0 = random_factor(2, "H", 0, n, 0, 1, 0.5)
    W, H, reference = ccdpp_reference(A.row, A.col, A.data, A.shape, W0, H0, 0.1, 2, 4)
    for on_workers, per_rank in ((False, slice(1, -1, 2)), (True, slice(0, -1))):
        state, objectives, results = drive(program, _shards(A, 2, data.test),
                                           can_exchange=on_workers)
        np.testing.assert_allclose(objectives[per_rank], reference[1:], rtol=1e-8)
        np.testing.assert_allclose(_assemble(results)[1], H, rtol=1e-8)


def _copy_arrays(arrays):
    return {k: np.array(v, copy=True) for k, v in arrays.items()}


@pytest.mark.parametrize("inner_iter,inner_tol", [(2, 0.0), (4, 0.05)])
@pytest.mark.parametrize("on_workers,stop_after", [(False, 0), (False, 5), (False, 7),
                                                   (False, 18), (True, 0), (True, 4),
                                                   (True, 9)])
def test_checkpoint_round_trip_continues_identically(stop_after, inner_iter, inner_tol,
                                                     on_workers):
    """Saved and restored after any round (inside a component's visit too, where with
    inner_tol any sweep may end it; between components while the blocks hold the last
    one's h), a fit goes on exactly as without the break."""
    data, A = _problem(7)
    program = MFProgram(3, 0.05, 3, 0.0, inner_iter=inner_iter, init=("random", 4, 0.3),
                        inner_tol=inner_tol)
    shards = _shards(A, 2, data.test)
    _, expected, expected_results = drive(program, shards, can_exchange=on_workers)
    blocks = {b: program.init_block(b, shard) for b, shard in shards.items()}
    state = program.init_state({b: program.block_summary(b, blk) for b, blk in blocks.items()})
    for rnd in range(stop_after):
        state, _, _ = _round(program, blocks, state, rnd, on_workers)
    saved_state = _copy_arrays(program.state_arrays(state))
    saved_blocks = {b: _copy_arrays(program.block_arrays(blk)) for b, blk in blocks.items()}
    for arrays in [saved_state, *saved_blocks.values()]:
        assert all(a.dtype != object for a in arrays.values())
    state = program.load_state(saved_state)
    blocks = {b: program.restore_block(b, shards[b], saved_state, saved_blocks[b])
              for b in shards}
    objectives = []
    for rnd in range(stop_after, 10_000):
        state, plan, _ = _round(program, blocks, state, rnd, on_workers)
        if plan is None:
            break
        objectives.append(program.objective(state))
    np.testing.assert_array_equal(objectives, expected[stop_after:])
    results = {b: program.block_result(b, blk) for b, blk in blocks.items()}
    for got, want in zip(_assemble(results), _assemble(expected_results)):
        np.testing.assert_array_equal(got, want)


def test_engine_resume_from_checkpoint(client, tmp_path):
    data, A = _problem(8, m=150, n=100, nnz=4000)
    program = MFProgram(3, 0.05, 3, 0.0, inner_iter=2, init=("random", 1, 0.3))
    shards = _shards(A, 2, data.test)
    straight = run(program, shards, client=client, max_rounds=10_000, progress=False)
    assert straight.n_rounds == 3 * 3 + 1  # a round per component: reduced on the workers
    first = run(program, shards, client=client, max_rounds=7, progress=False,
                checkpoint=tmp_path, checkpoint_every=3)
    assert first.stop_reason == "max_rounds"
    resumed = run(program, shards, client=client, max_rounds=10_000, progress=False,
                  resume=tmp_path)
    assert resumed.stop_reason == "done"
    # the resumed fit continues from the last checkpoint (round 6, or the final one at 7)
    n_resumed = len(resumed.history)
    assert n_resumed in (straight.n_rounds - 6, straight.n_rounds - 7)
    np.testing.assert_allclose(resumed.history["objective"].to_numpy(),
                               straight.history["objective"].to_numpy()[-n_resumed:], rtol=1e-12)
    for got, want in zip(_assemble(resumed.block_results), _assemble(straight.block_results)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_switching_reductions_mid_fit_follows_the_same_iterates():
    """Blocks that come to share a worker (ctx.can_exchange turns False) hand the current
    and the previous h back to the client in a sync round; blocks that get workers of
    their own again take the reduction back at the next component. Either way the
    iterates are those of the serial CCD++."""
    data, A = _problem(9)
    k, alpha, n_iter, seed, scale, inner_iter, inner_tol = 3, 0.1, 4, 6, 0.3, 4, 0.05
    program = MFProgram(k, alpha, n_iter, 0.0, inner_iter=inner_iter,
                        init=("random", seed, scale), inner_tol=inner_tol)
    shards = _shards(A, 3, data.test)
    blocks = {b: program.init_block(b, shard) for b, shard in shards.items()}
    state = program.init_state({b: program.block_summary(b, blk) for b, blk in blocks.items()})
    kinds, per_rank = [], []
    for rnd in range(10_000):
        state, plan, _ = _round(program, blocks, state, rnd, can_exchange=(rnd // 4) % 2 == 0)
        if plan is None:
            break
        kinds.append(plan.info[0])
        if plan.info[0] == "rank" or (plan.info[0] == "sweep" and state["s"] == 0):
            per_rank.append(program.objective(state))
    assert {"rank", "sync", "sweep", "flush"} == set(kinds)
    m, n = A.shape
    W0 = random_factor(seed, "W", 0, m, 0, k, scale)
    H0 = random_factor(seed, "H", 0, n, 0, k, scale)
    W, H, reference = ccdpp_reference(A.row, A.col, A.data, A.shape, W0, H0, alpha, inner_iter,
                                      n_iter, inner_tol=inner_tol)
    np.testing.assert_allclose(per_rank, reference[1:], rtol=1e-8)
    results = {b: program.block_result(b, blk) for b, blk in blocks.items()}
    W_got, H_got = _assemble(results)
    np.testing.assert_allclose(W_got, W, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(H_got, H, rtol=1e-8, atol=1e-10)
    err = data.test_values - np.einsum("ij,ij->i", W[data.test_rows], H[data.test_cols])
    assert state["val_sse"] == pytest.approx(float(err @ err), rel=1e-8)


@pytest.mark.parametrize("P", [2, 4])
def test_client_sees_only_scalars_when_the_blocks_reduce(P):
    """A component reduced among the blocks sends the client a few numbers per block
    and receives none of the length-n vectors: the client's cost per round does not
    grow with n, nor its bytes with the number of blocks beyond those numbers."""
    data, A = _problem(10)
    program = MFProgram(3, 0.05, 2, 0.0, inner_iter=3, init=("random", 2, 0.3))
    blocks = {b: program.init_block(b, s) for b, s in _shards(A, P, data.test).items()}
    state = program.init_state({b: program.block_summary(b, blk) for b, blk in blocks.items()})
    for rnd in range(10_000):
        state, plan, partials = _round(program, blocks, state, rnd, can_exchange=True)
        if plan is None:
            break
        if plan.info[0] == "rank":
            assert plan.exchange
            for part in plan.parts.values():
                assert not any(isinstance(x, np.ndarray) for x in part)
            for partial in partials.values():
                assert all(isinstance(v, float | int) for v in partial.values()), partial
    assert state["done"] and state["iteration"] == 2
