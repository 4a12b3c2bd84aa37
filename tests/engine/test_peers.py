"""Workers' calls to one another survive the scheduler forgetting the worker they call
(a retired worker, which still answers while it hands its blocks over)."""

from __future__ import annotations

import asyncio

import pytest
from distributed import Client, LocalCluster

from dask_strads.engine.peers import EXTENSION, peer


def test_a_call_in_flight_survives_the_removal_of_its_worker():
    """The scheduler's removal of worker B makes every other worker close its pooled
    connections to B, calls in flight included: over the worker's own pool such a call
    fails, over dask_strads' pool it gets B's answer."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://",
                      host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False):
        a, b = cluster.workers.values()
        release = asyncio.Event()
        entered = []

        async def slow_answer():
            entered.append(True)
            await release.wait()
            return "answer"

        b.handlers["slow_answer"] = slow_answer

        async def call_across_removal(rpc):
            entered.clear()
            release.clear()
            call = asyncio.ensure_future(rpc.slow_answer())
            while not entered:
                await asyncio.sleep(0.01)
            a._handle_remove_worker(worker=b.address, stimulus_id="test-remove")
            await asyncio.sleep(0.1)  # the pool closes its connections on the next tick
            release.set()
            return await asyncio.wait_for(call, 10)

        def run(make_rpc):
            async def scenario():
                return await call_across_removal(await make_rpc())
            return asyncio.run_coroutine_threadsafe(scenario(), a.loop.asyncio_loop).result(30)

        async def own_rpc():
            return a.rpc(b.address)

        with pytest.raises(OSError):
            run(own_rpc)
        assert run(lambda: peer(a, b.address)) == "answer"
        pool = a.extensions[EXTENSION].pool
    assert pool.open == 0  # closed with its worker
