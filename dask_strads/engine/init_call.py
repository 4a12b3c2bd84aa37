"""A block built by a call to its worker (the direct transport's ``strads_init``
handler) rather than by a task through the scheduler."""

from __future__ import annotations

import asyncio
import contextvars

from dask_strads.engine.store import _worker_cvar
from dask_strads.engine.tasks import init_block_on
from dask_strads.engine.wire import pack, unpack


def _make_init_handler(worker):
    # one block at a time, as the tasks ran: the first block of a fit here makes its store
    one_at_a_time = asyncio.Lock()

    async def strads_init(payload) -> bytes:
        """:func:`~dask_strads.engine.tasks.init_block_task` over the direct channel, for
        a shard that is not a Dask future (a task's trip through the scheduler costs
        several times the call): ``payload`` packs its arguments after the worker.
        Off the event loop, which keeps answering meanwhile."""
        args = unpack(payload)
        async with one_at_a_time:
            summary = await asyncio.get_running_loop().run_in_executor(
                None, _as_task_here, worker, init_block_on, args)
        return pack(summary)

    return strads_init


def _as_task_here(worker, func, args):
    """``func(worker, *args)`` where ``get_worker()`` answers ``worker``, as in a task."""
    if _worker_cvar is None:
        return func(worker, *args)
    return contextvars.copy_context().run(_with_worker, worker, func, args)


def _with_worker(worker, func, args):
    _worker_cvar.set(worker)
    return func(worker, *args)
