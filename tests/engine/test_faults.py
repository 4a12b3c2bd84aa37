"""Workers lost at the moments the fault soak (bench/soak.py) found fragile, each pinned
deterministically: the engine kills a worker itself at that moment (SIGKILL), waits until
it has heard of the loss, and goes on."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
import weakref

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_strads.engine import loop, run

from .programs import BlockLeastSquares
from .test_handler_errors import _recording
from .test_loop import coef_of, lstsq_problem


@pytest.fixture(scope="module")
def cluster3():
    # a killed worker's nanny may take longer than the default 15 s to bring it back on
    # a busy machine, after which LocalCluster would give the nanny up
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "120s"}), \
            LocalCluster(n_workers=3, threads_per_worker=1, host="127.0.0.1",
                         dashboard_address=":0", memory_limit="2GiB") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(3, timeout=120)
        yield client


@pytest.fixture
def client3(cluster3):
    cluster3.wait_for_workers(3, timeout=120)
    return cluster3


def kill_first(monkeypatch, client, method: str, block=0):
    """Make ``_Runner.<method>`` SIGKILL the worker of ``block`` on its first call and wait
    until the engine knows (the scheduler's remove-worker event), then do its work.
    Returns a list that then holds the blocks the killed worker held."""
    pids = client.run(os.getpid)
    original = getattr(loop._Runner, method)
    fired = []

    async def patched(self, *args, **kwargs):
        if not fired:
            victim = self.addresses[self.placement[block]]
            os.kill(pids[victim], signal.SIGKILL)
            fired.append(sorted(b for b, w in self.placement.items()
                                if self.addresses[w] == victim))
            deadline = time.monotonic() + 30
            while not self.lost.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(loop._Runner, method, patched)
    return fired


def test_a_worker_lost_before_its_shard_arrives_is_not_waited_for(client3, monkeypatch,
                                                                  caplog):
    """The direct transport sends the shards straight to their workers, in the calls
    that build the blocks. A call to a worker that died retries its connection for
    distributed's connect timeout (30 s): the engine gives it up as soon as the loss is
    known and places the blocks again."""
    X, y, data = lstsq_problem(n=300, p=40)
    fired = kill_first(monkeypatch, client3, "_shard_futures")
    t0 = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="dask_strads"):
        res = run(BlockLeastSquares(y), data, client3, max_rounds=5000, progress=False,
                  transport="direct")
    assert fired
    assert time.perf_counter() - t0 < 20
    assert res.stop_reason == "converged"
    assert "while placing blocks; placing again" in caplog.text
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


@pytest.mark.parametrize("transport", ["direct", "tasks"])
def test_a_worker_lost_at_the_final_gather_is_recovered(client3, monkeypatch, transport):
    """The fit's end reads the blocks' results: a worker lost then is recovered like one
    lost in a round (it failed the fit with WorkerLost)."""
    X, y, data = lstsq_problem(n=300, p=40)
    fired = kill_first(monkeypatch, client3, "_block_results")
    res = run(BlockLeastSquares(y), data, client3, max_rounds=5000, progress=False,
              transport=transport, checkpoint_every=10)
    assert fired
    assert res.stop_reason == "converged"
    [recovery] = res.recoveries
    assert recovery["round"] >= 10 and recovery["round"] % 10 == 0
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_a_worker_lost_at_the_first_checkpoint_is_recovered(client3, monkeypatch, tmp_path):
    """A fit that writes checkpoints snapshots round 0 first: a worker lost then restarts
    it from the data (it failed the fit with WorkerLost)."""
    X, y, data = lstsq_problem(n=300, p=40)
    fired = kill_first(monkeypatch, client3, "_take_snapshot")
    res = run(BlockLeastSquares(y), data, client3, max_rounds=5000, progress=False,
              transport="direct", checkpoint=tmp_path, checkpoint_every=10)
    assert fired
    assert res.stop_reason == "converged"
    assert [r["round"] for r in res.recoveries] == [0]
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_a_recovery_is_one_log_line_that_says_what_happened(client3, monkeypatch, caplog):
    """Which workers were lost, which blocks moved where, from which round, how long;
    through the ``dask_strads`` logger (silenced like any other)."""
    X, y, data = lstsq_problem(n=300, p=40)
    fired = kill_first(monkeypatch, client3, "_block_results", block=1)
    with caplog.at_level(logging.INFO, logger="dask_strads"):
        res = run(BlockLeastSquares(y), data, client3, max_rounds=5000, progress=False,
                  transport="direct", checkpoint_every=10)
    lines = [r for r in caplog.records if r.name == "dask_strads"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    [rec] = lines
    [recovery] = res.recoveries
    event = rec.strads
    assert event["lost"] == recovery["lost"] and len(event["lost"]) == 1
    assert event["round"] == recovery["round"] and event["seconds"] == recovery["seconds"]
    [blocks] = fired
    assert sorted(event["moved"]) == blocks  # the killed worker's blocks, and only them
    msg = rec.getMessage()
    assert f"lost workers {event['lost']}" in msg
    assert f"blocks [{', '.join(map(str, blocks))}] moved to" in msg
    assert f"restarted from round {recovery['round']} in" in msg


def test_a_worker_lost_while_the_engine_reads_the_workers_gets_no_blocks(client3,
                                                                        monkeypatch):
    """Two workers die one after the other. Recovering from the first, the engine asks
    the scheduler for the workers left; the second dies after the scheduler answered,
    and the news of it reaches the client before the answer. The answer still lists the
    dead worker: blocks placed on it waited for it (a shard's scatter for distributed's
    30 s connect timeout; a task pinned to it for good), since the news had been cleared
    with the first loss's."""
    X, y, data = lstsq_problem(n=300, p=40)
    pids = client3.run(os.getpid)
    kill_first(monkeypatch, client3, "_collect", block=0)
    original = loop._Runner._replace_lost
    second = []

    async def replace_lost(self):
        if second:
            return await original(self)
        scheduler = self.client.scheduler
        identity = scheduler.identity
        first = {a for n, a in self.addresses.items() if n in self.lost_workers}

        async def stale_identity(*args, **kwargs):
            info = await identity(*args, **kwargs)
            victim = sorted(a for a in info["workers"] if a not in first)[0]
            os.kill(pids[victim], signal.SIGKILL)
            second.append(victim)
            deadline = time.monotonic() + 30  # until the scheduler has removed it ...
            while victim in (await identity())["workers"] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            while victim not in self.gone and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # ... and its event reached this client
            return info  # as it was before

        scheduler.identity = stale_identity
        try:
            return await original(self)
        finally:
            del scheduler.identity

    monkeypatch.setattr(loop._Runner, "_replace_lost", replace_lost)
    t0 = time.perf_counter()
    res = run(BlockLeastSquares(y), data, client3, max_rounds=5000, progress=False,
              transport="direct")
    assert second
    assert time.perf_counter() - t0 < 20
    assert res.stop_reason == "converged"
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_a_fit_starts_when_a_worker_dies_while_the_plugin_is_sent_around(monkeypatch):
    """The scheduler sends the engine's worker plugin to every worker when a fit starts;
    a worker that died meanwhile failed that broadcast, and with it the fit
    (CommClosedError from ``register_worker_plugin``), maybe before the broadcast
    reached the workers that are fine."""
    from distributed.comm.core import CommClosedError

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://",
                      host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        scheduler = cluster.scheduler
        broadcast = scheduler.broadcast
        failed = []

        async def partial_broadcast(*, msg, workers=None, **kwargs):
            if msg.get("op") == "plugin-add" and not failed:
                failed.append(msg["name"])  # reaches no worker, as if the first had died
                raise CommClosedError("in <TCP (closed) Scheduler Broadcast>: Stream is "
                                      "closed (test)")
            return await broadcast(msg=msg, workers=workers, **kwargs)

        monkeypatch.setattr(scheduler, "broadcast", partial_broadcast)
        X, y, data = lstsq_problem()
        res = run(BlockLeastSquares(y), data, client, max_rounds=5000, progress=False,
                  transport="direct")
        assert failed
        assert res.stop_reason == "converged"
        np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0],
                                   atol=1e-8)


def _ended(task_ref) -> bool:
    """The weakly referenced task is done (or already collected)."""
    task = task_ref()
    return task is None or task.done()


def test_a_scatter_given_up_for_a_lost_worker_ends_quietly(client3, monkeypatch):
    """A shard scatter to a worker that died is given up when the loss is known, but not
    cancelled: distributed's scatter sends through an inner task of its own, which a
    cancel orphans; its failure then came out as "Task exception was never retrieved".
    (The tasks transport scatters; the direct one sends a shard with its block's init.)"""
    from distributed.utils import All

    X, y, data = lstsq_problem(n=300, p=40)
    pids = client3.run(os.getpid)
    real_scatter = client3.scatter
    fired, given_up = [], []

    async def scatter(data, workers=None, **kwargs):
        if not fired:
            fired.append(workers[0])
            given_up.append(weakref.ref(asyncio.current_task()))  # this scatter's task
            os.kill(pids[workers[0]], signal.SIGKILL)

            async def send():  # to the dead worker: refused, after a while
                given_up.append(weakref.ref(asyncio.current_task()))
                await asyncio.sleep(0.5)
                raise OSError("connection refused (test)")

            await All([send()])  # the way distributed's scatter_to_workers sends
        return await real_scatter(data, workers=workers, **kwargs)

    monkeypatch.setattr(client3, "scatter", scatter)
    with _recording("asyncio") as messages:
        res = run(BlockLeastSquares(y), data, client3, max_rounds=5000, progress=False,
                  transport="tasks")
        deadline = time.monotonic() + 30
        # until the scatter given up and its send have ended (failed)
        while not (len(given_up) == 2 and all(map(_ended, given_up))):
            assert time.monotonic() < deadline, "the scatter given up never failed"
            time.sleep(0.01)
        gc.collect()
    assert fired and res.stop_reason == "converged"
    assert not [m for m in messages if "never retrieved" in m and "(test)" in m], messages


@pytest.mark.timeout(180)
def test_a_recovery_does_not_wait_for_the_release_of_the_lost_blocks(client3, monkeypatch):
    """A recovery releases the fit's old blocks on every worker, through the scheduler's
    broadcast; a worker that died but is still listed holds that broadcast up (as after a
    second kill during a recovery). The recovery goes on without it; the release,
    epoch-aware, cannot drop the blocks placed meanwhile."""
    from dask_strads.engine.tasks import release_fit

    X, y, data = lstsq_problem(n=300, p=40)
    kill_first(monkeypatch, client3, "_collect", block=0)
    real_run = client3.run
    held = []

    def run_on_workers(function, *args, **kwargs):
        if function is release_fit and args[1:2] != (None,) and not held:
            held.append(args)

            async def stuck():  # the broadcast that waits on a dead worker
                await asyncio.sleep(30)
                return await real_run(function, *args, **kwargs)

            return stuck()
        return real_run(function, *args, **kwargs)

    monkeypatch.setattr(client3, "run", run_on_workers)
    t0 = time.perf_counter()
    res = run(BlockLeastSquares(y), data, client3, max_rounds=5000, progress=False,
              transport="direct", checkpoint_every=10)
    assert held
    assert time.perf_counter() - t0 < 25
    assert res.stop_reason == "converged" and len(res.recoveries) == 1
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_a_late_release_leaves_the_blocks_of_a_later_placement_alone():
    from types import SimpleNamespace

    from dask_strads.engine.store import EXTENSION, FitStore, WorkerStore
    from dask_strads.engine.tasks import release_fit

    store = WorkerStore()
    store.add("f", FitStore(program=None, epoch=3))
    worker = SimpleNamespace(extensions={EXTENSION: store})
    try:
        assert release_fit("f", 3, dask_worker=worker) == 0  # of epochs 0-2: not these
        assert "f" in store.fits
        assert release_fit("f", 4, dask_worker=worker) == 0  # no blocks held: 0 released
        assert "f" not in store.fits
    finally:
        store.pop("f")
