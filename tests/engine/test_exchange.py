"""Rounds whose pushes exchange values worker to worker (``Plan.exchange``)."""

from __future__ import annotations

import numpy as np
import pytest

from dask_strads.engine import exchange, run, run_in_process

from .programs import PeerJacobi, SumAmongPushes


def problem(n_blocks, n=200, p=24, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = X @ rng.standard_normal(p) + 0.1 * rng.standard_normal(n)
    w = p // n_blocks
    return X, y, {b: (X[:, b * w:(b + 1) * w], y) for b in range(n_blocks)}


def test_pushes_reduce_among_themselves_and_reach_lstsq(any_client):
    X, y, data = problem(2)
    res = run(PeerJacobi(y), data, any_client, max_rounds=2000, progress=False)
    assert res.stop_reason == "done"
    coef = np.concatenate([res.block_results[b] for b in range(2)])
    np.testing.assert_allclose(coef, np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)
    pushes = res.state["pushes"]
    assert len(pushes) == res.n_rounds > 1
    for partials in pushes:
        assert sorted(partials) == [0, 1]
        for out in partials.values():
            # every step of every push saw every block's value, in the plan's order
            assert out["seen"] == [out["order"]] * 5
            assert out["thread"].startswith("dask-strads-pushes")  # not the event loop
        # the blocks reduced the same values: one residual
        assert partials[0]["loss"] == partials[1]["loss"]


def test_a_failing_push_fails_the_round_not_hangs_it(client):
    X, y, data = problem(2)
    with pytest.raises(ValueError, match="block 1 fails at step 2"):
        run(PeerJacobi(y, fail_block=1, fail_step=2), data, client, max_rounds=50,
            progress=False)
    # the other push gave up its wait: the workers take the next fit at once
    res = run(PeerJacobi(y), data, client, max_rounds=2000, progress=False)
    assert res.stop_reason == "done"


def test_no_exchange_while_blocks_share_a_worker(client):
    X, y, data = problem(4)  # 4 blocks on 2 workers
    res = run(PeerJacobi(y), data, client, max_rounds=5, progress=False)
    assert res.state["pushes"] == []  # can_exchange was False: the program did not ask
    with pytest.raises(ValueError, match="can_exchange was False"):
        run(PeerJacobi(y, ask_always=True), data, client, max_rounds=5, progress=False)


def test_exchange_outside_an_exchange_round_is_an_error():
    with pytest.raises(RuntimeError, match="only inside the push of a plan"):
        exchange(1.0)


def test_a_push_error_wins_over_the_exchanges_it_abandoned_when_both_arrive_at_once():
    """When both calls have failed by the time the runner wakes, the push's own error is
    raised, not the other push's ExchangeAbandoned, whatever order the set yields."""
    import asyncio
    import types

    from dask_strads.engine.exchanges import ExchangeAbandoned
    from dask_strads.engine.loop import _Runner

    async def failing(exc):
        raise exc

    async def main(n_abandoned):
        runner = types.SimpleNamespace(lost=asyncio.Event(), _lost_watcher=None)
        tasks = [asyncio.ensure_future(failing(ExchangeAbandoned(f"gave up {i}")))
                 for i in range(n_abandoned)]
        tasks.insert(n_abandoned // 2, asyncio.ensure_future(failing(ValueError("root"))))
        await asyncio.sleep(0)  # all have failed before the wait starts
        try:
            with pytest.raises(ValueError, match="root"):
                await _Runner._wait_direct(runner, tasks)
        finally:
            runner._lost_watcher.cancel()

    for n in range(1, 8):
        asyncio.run(main(n))


def _vectors(n_blocks, length=11, seed=3):
    rng = np.random.default_rng(seed)
    return {b: rng.standard_normal(length) for b in range(n_blocks)}


def _check_sums(pulls, data):
    for rnd, partials in enumerate(pulls):
        want = (2.0 ** rnd) * np.sum([data[b] for b in sorted(data)], axis=0)
        totals = [out["total"] for out in partials.values()]
        np.testing.assert_allclose(totals[0], want, rtol=1e-12)
        for out, total in zip(partials.values(), totals):
            # the same bits on every push: the pushes may take decisions from them
            np.testing.assert_array_equal(total, totals[0])
            assert out["input_unchanged"]


def test_all_reduce_sums_among_the_workers(any_client):
    data = _vectors(2)
    res = run(SumAmongPushes(), data, any_client, max_rounds=10, progress=False)
    assert res.stop_reason == "done" and len(res.state["pulls"]) == 3
    _check_sums(res.state["pulls"], data)


@pytest.mark.parametrize("n_blocks", [1, 3, 4, 5, 7, 8])
def test_all_reduce_in_process_gives_every_push_the_same_sum(n_blocks):
    """Any number of pushes, powers of two or not (some fold into a partner first)."""
    data = _vectors(n_blocks, length=1000)
    res = run_in_process(SumAmongPushes(rounds=2), data)
    _check_sums(res.state["pulls"], data)


def test_all_reduce_outside_an_exchange_round_is_an_error():
    from dask_strads.engine import all_reduce

    with pytest.raises(RuntimeError, match="only inside the push of a plan"):
        all_reduce(np.zeros(3))
