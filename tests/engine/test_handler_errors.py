"""Errors of the engine's worker handlers reach their caller, and only their caller."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os

import pytest
from distributed import Client, LocalCluster

import dask_strads.engine
from dask_strads.engine.plugin import PLUGIN_NAME, StradsPlugin
from dask_strads.engine.store import FitStore, store_of

ENGINE_DIR = os.path.dirname(dask_strads.engine.__file__)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _recording(*names):
    handler = _Records()
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield handler.messages
    finally:
        for lg in loggers:
            lg.removeHandler(handler)


def test_a_handler_error_after_its_caller_hung_up_leaves_no_traceback():
    """A client that gives a round up (a worker was lost) hangs up on the handlers it
    called; when one of them then fails (its blocks were released meanwhile), the error
    has nobody to go to: raised, it would escape the worker's connection task and asyncio
    would print "Task exception was never retrieved" with its traceback. A caller that
    still listens gets the error."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                      host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.register_plugin(StradsPlugin(), name=PLUGIN_NAME)
        worker = next(iter(cluster.workers.values()))
        fit = store_of(worker).add("f", FitStore(program=None, loop=worker.loop))

        async def scenario():
            call = asyncio.ensure_future(
                client.rpc(worker.address).strads_reply(fit_id="f", seq=0))
            for _ in range(500):  # until the handler waits for the push's reply
                if "strads_reply" in worker._comms.values():
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the handler never ran")
            call.cancel()  # the client hangs up
            with contextlib.suppress(asyncio.CancelledError):
                await call
            await asyncio.sleep(0.2)  # the worker sees the connection close
            fit.replies.post(0, "error", RuntimeError("blocks released (test)"))
            for _ in range(500):  # until the handler has answered (or failed to)
                if "strads_reply" not in worker._comms.values():
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the handler never ended")
            # a caller that listens still gets the handler's error, type and message
            fit.replies.post(1, "error", ValueError("push failed (test)"))
            with pytest.raises(ValueError, match="push failed"):
                await client.rpc(worker.address).strads_reply(fit_id="f", seq=1)
            with pytest.raises(RuntimeError, match="has no state"):
                await client.rpc(worker.address).strads_results(fit_id="nope", blocks=b"")

        try:
            with _recording("asyncio", "distributed.core") as messages:
                client.sync(scenario)
                gc.collect()  # asyncio reports an unretrieved exception when its task dies
        finally:
            store_of(worker).pop("f")  # (the store holds process-wide settings per fit)
        assert not [m for m in messages if "never retrieved" in m
                    or "Exception while handling op" in m], messages


def test_a_leaving_worker_keeps_its_handlers_until_it_is_gone():
    """A retired worker tears its plugins down while it closes; exchange messages of the
    other pushes still on their way then met "No handler strads_exchange found in
    Worker" (a traceback on the worker) instead of the handler's quiet answer. A plugin
    unregistered from a running worker still takes its handlers away."""
    from types import SimpleNamespace

    from distributed.core import Status

    for status, kept in ((Status.closing_gracefully, True), (Status.closing, True),
                         (Status.running, False)):
        worker = SimpleNamespace(status=status, handlers={}, extensions={})
        plugin = StradsPlugin()
        plugin.setup(worker)
        asyncio.run(plugin.teardown(worker))  # no fit here: nothing to hand over
        assert ("strads_exchange" in worker.handlers) is kept, status


async def _engine_tasks_pending() -> int:
    """Tasks on this event loop still running code of ``dask_strads.engine``."""
    return sum(1 for t in asyncio.all_tasks() if not t.done() and ENGINE_DIR in getattr(
        getattr(t.get_coro(), "cr_code", None), "co_filename", ""))


def test_a_failed_fit_leaves_no_round_in_flight_unretrieved(client):
    """With rounds pipelined, a push that fails leaves the next round's calls in flight;
    they failed later on their own (the blocks released), and asyncio reported each as
    "Task exception was never retrieved"."""
    import time

    from dask_strads.engine import run

    from .test_loop import FailingPush, lstsq_problem

    X, y, data = lstsq_problem()
    with _recording("asyncio") as messages:
        with pytest.raises(ZeroDivisionError):
            run(FailingPush(y, fail_at=3, how="raise"), data, client, max_rounds=20,
                progress=False, transport="tasks", staleness=2)
        # a released round's reply is confirmed lost after a few seconds of asking
        deadline = time.monotonic() + 60
        while client.sync(_engine_tasks_pending):
            assert time.monotonic() < deadline, "the rounds in flight never ended"
            time.sleep(0.1)
        gc.collect()
    assert not [m for m in messages if "never retrieved" in m], messages
