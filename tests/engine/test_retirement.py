"""Workers retired mid-fit: those that can hand their blocks over do (no round runs
again), the others are recovered from the last snapshot, and a retired worker's close
is held only while a handover can come."""

from __future__ import annotations

import asyncio
import threading
import time

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_strads.engine import run
from dask_strads.engine.cluster import workers_of

from .test_loop import coef_of, lstsq_problem
from .test_recovery import _SIGNALS, SignallingLeastSquares


def _retire(client, victim, how):
    if how == "retire_workers":
        client.retire_workers([victim])
        return

    async def close(dask_worker):
        # close_gracefully: what a worker's --lifetime does when it runs out
        asyncio.ensure_future(getattr(dask_worker, how)())

    client.run(close, workers=[victim])


def _fit_with_a_retirement(how, transport, signal):
    with LocalCluster(n_workers=3, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="2GiB") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(3)
        X, y, data = lstsq_problem(n=300, p=40)
        victim = sorted(workers_of(client))[2]
        [nanny] = [n for n in cluster.workers.values() if n.worker_address == victim]
        event = _SIGNALS.setdefault(signal, threading.Event())
        retired_at = []

        def retire():
            event.wait(60)
            retired_at.append(time.monotonic())
            _retire(client, victim, how)

        t = threading.Thread(target=retire, daemon=True)
        t.start()
        res = run(SignallingLeastSquares(y, signal, after=20, work_seconds=0.02), data,
                  client, max_rounds=20000, progress=False, transport=transport,
                  checkpoint_every=10)
        t.join(30)
        gone = victim not in workers_of(client)
        # how long the worker took to close: held for a handover, or not
        while nanny.status.name != "closed" and time.monotonic() - retired_at[0] < 60:
            time.sleep(0.1)
        res.closed_after = time.monotonic() - retired_at[0]
    assert gone and res.stop_reason == "converged"
    assert len(set(res.placement.values())) == 2  # blocks now live on the two left
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0],
                               atol=1e-8)
    return res


@pytest.mark.slow
@pytest.mark.parametrize("how", ["retire_workers", "close_gracefully"])
def test_a_retired_worker_hands_its_blocks_over(how):
    """A worker retired mid-fit (by the client, or as --lifetime does before walltime)
    waits while the fit takes its blocks: no round runs again."""
    res = _fit_with_a_retirement(how, "direct", f"handover-{how}")
    assert res.recoveries == [] and len(res.handovers) == 1
    assert res.history["round"].is_unique  # a recovery would run rounds again
    assert res.handovers[0]["round"] > 0


@pytest.mark.slow
def test_a_retired_worker_hands_over_through_copies_kept_on_the_cluster():
    """With the snapshot's copies on the workers, the retiring worker's blocks reach
    the others through the copy on its buddy, which stays; the client sees none."""
    with dask.config.set({"dask-strads.engine.snapshots-on-cluster": True}):
        res = _fit_with_a_retirement("retire_workers", "direct", "handover-kept")
    assert res.recoveries == [] and [h["from"] for h in res.handovers] == ["cluster"]
    assert res.history["round"].is_unique


@pytest.mark.slow
def test_a_worker_retired_while_rounds_go_through_the_scheduler_is_recovered():
    """The scheduler gives a retired worker no tasks: the fit recovers from its last
    snapshot, and the worker's close is not held."""
    with dask.config.set({"dask-strads.engine.handover-timeout": "120s"}):
        res = _fit_with_a_retirement("retire_workers", "tasks", "retire-tasks")
    assert len(res.recoveries) >= 1 and res.handovers == []
    assert res.closed_after < 10  # LocalCluster closes a lost worker after 15 s


@pytest.mark.slow
def test_a_retired_worker_the_fit_cannot_take_blocks_from_is_let_go(monkeypatch):
    """A retirement heard while no handover is possible (say, a push of the round in
    flight went to the worker as a task, for the dashboard, which the scheduler will not
    run there now): the fit recovers, and lets the worker go at once rather than after
    the handover timeout."""
    from dask_strads.engine.handover import _Handover

    monkeypatch.setattr(_Handover, "_hands_over", lambda self, name: False)
    with dask.config.set({"dask-strads.engine.handover-timeout": "120s"}):
        res = _fit_with_a_retirement("retire_workers", "direct", "retire-no-handover-now")
    assert len(res.recoveries) >= 1 and res.handovers == []
    # LocalCluster itself closes a worker it lost 15 s after (lost-worker-timeout)
    assert res.closed_after < 10


@pytest.mark.slow
def test_a_worker_closed_without_retiring_is_not_held():
    """A worker closed while the scheduler still counts it (a shutdown, a cancelled job)
    does not wait for a handover that will not come: the fit hears of a lost worker at
    once and recovers."""
    with dask.config.set({"dask-strads.engine.handover-timeout": "120s"}):
        t0 = time.perf_counter()
        res = _fit_with_a_retirement("close", "direct", "closed-not-retired")
    assert len(res.recoveries) >= 1 and res.handovers == []
    assert time.perf_counter() - t0 < 60


@pytest.mark.slow
def test_no_handover_when_its_timeout_is_zero():
    with dask.config.set({"dask-strads.engine.handover-timeout": 0}):
        res = _fit_with_a_retirement("retire_workers", "direct", "retire-no-handover")
    assert len(res.recoveries) >= 1 and res.handovers == []
