"""The store of carried blocks a worker holds between pushes (direct transport)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from tornado.ioloop import IOLoop

from dask_strads.engine.held import Held


def _run(coro_fn):
    async def main():
        return await coro_fn(Held(IOLoop.current()))

    return asyncio.run(main())


def test_a_block_is_taken_once_and_only_as_the_round_that_made_it():
    held = Held()
    held.put("c", 3, "v3")
    with pytest.raises(RuntimeError, match="round 2 is not on this worker.*round 3's"):
        held.take_here("c", 2)
    assert held.take_here("c", 3) == "v3"
    with pytest.raises(RuntimeError, match="holds nothing"):
        held.take_here("c", 3)


def test_a_remote_taker_waits_for_the_round_that_makes_the_block():
    async def scenario(held):
        held.put("c", 4, "old")
        waiter = asyncio.ensure_future(held.take("c", 5))
        await asyncio.sleep(0.05)
        assert not waiter.done()  # round 5 has not run here yet
        # the push that makes it runs in another thread
        threading.Thread(target=held.put, args=("c", 5, "new")).start()
        value = await asyncio.wait_for(waiter, 5)
        return value, dict(held.values)

    value, left = _run(scenario)
    assert value == "new" and left == {}


def test_a_snapshot_copy_leaves_the_block_in_place():
    async def scenario(held):
        held.put("c", 1, "v")
        kept = await held.take("c", 1, keep=True)
        return kept, held.take_here("c", 1)

    assert _run(scenario) == ("v", "v")


def test_asking_for_a_round_already_replaced_is_an_error():
    async def scenario(held):
        held.put("c", 7, "v7")
        await held.take("c", 6)

    with pytest.raises(RuntimeError, match="asked for after round 7 replaced it"):
        _run(scenario)


def test_releasing_the_fit_wakes_the_takers_with_nothing():
    async def scenario(held):
        waiter = asyncio.ensure_future(held.take("c", 0))
        await asyncio.sleep(0.05)
        held.close()
        value = await asyncio.wait_for(waiter, 5)
        held.put("c", 0, "late")  # a push that ends after the release keeps nothing
        return value, dict(held.values)

    assert _run(scenario) == (None, {})
