"""The worker plugin and the comm handlers it registers.

:class:`StradsPlugin` gives every worker its block store and the handlers the client
and the other workers call without the scheduler: ``strads_push`` (the direct
transport), ``strads_relay`` (a round's pushes of a group of workers, forwarded by one
of them), ``strads_reply`` (a push task's partials, the moment it ends),
``strads_exchange`` (a value of another push of an exchange round),
``strads_snapshot`` (the blocks' checkpoint arrays), ``strads_keep`` and the other
``strads_kept_*`` (snapshots kept on the cluster; see :mod:`~dask_strads.engine.kept`),
``strads_let_go`` (a retired worker's blocks taken; see
:mod:`~dask_strads.engine.handover`),
``strads_carried`` / ``strads_carried_put`` (a carried block held here, taken or
placed; see :mod:`~dask_strads.engine.held`) and ``strads_results`` (the blocks'
results over the direct channel). :data:`HANDLERS` is the one table of them.
"""

from __future__ import annotations

import asyncio
import functools
import os

from distributed.core import error_message
from distributed.diagnostics.plugin import WorkerPlugin

from dask_strads.engine.carried import Carried
from dask_strads.engine.exchanges import _Exchange
from dask_strads.engine.handover import _make_let_go_handler, hold_while_handing_over
from dask_strads.engine.held import CarriedLost, HeldHere
from dask_strads.engine.init_call import _make_init_handler
from dask_strads.engine.kept import (
    Kept,
    _make_keep_handler,
    _make_kept_commit_handler,
    _make_kept_get_handler,
    _make_kept_put_handler,
    _make_kept_stage_handler,
    carried_key,
    kept_of,
)
from dask_strads.engine.peers import peer
from dask_strads.engine.shared_carried import CarriedFile, memory_room
from dask_strads.engine.store import _loop_job, store_of
from dask_strads.engine.tasks import _block_results, block_snapshots, release_every_fit
from dask_strads.engine.util import _retrieve
from dask_strads.engine.wire import forward, pack, unpack

PLUGIN_NAME = "dask_strads"
# Direct pushes shorter than this run inline on the worker's event loop when due (cheaper
# than a thread hop); longer ones go to the fit's runner thread so comms and heartbeats
# stay responsive.
INLINE_SECONDS = 0.002
# With one round in flight (staleness 0) the worker has nothing else to do for the fit:
# pushes up to this long run inline too, sparing the hop to the runner thread and back.
# Longer ones would hold up heartbeats and comms.
SYNC_INLINE_SECONDS = 0.05


def _answers_errors(handler):
    """``handler`` answering its errors instead of raising them.

    The caller's ``rpc`` raises an answered error just as it raises one the handler
    raised (both arrive as distributed's "uncaught-error" message). Raised, distributed
    also logs it on the worker with its traceback, and when the caller has hung up
    meanwhile (a client that gave up a round after losing a worker, or one whose exchange
    was abandoned) the error escapes the connection's task, which asyncio reports as
    "Task exception was never retrieved": a traceback for each such error, of errors
    the client handles."""

    @functools.wraps(handler)
    async def answered(**kwargs):
        try:
            return await handler(**kwargs)
        except Exception as exc:
            return error_message(exc, status="uncaught-error")

    return answered


def _make_push_handler(worker):
    async def strads_push(fit_id: str, seq: int, payload: bytes, epoch: int = 0,
                          sync: bool = False, peers: bytes | None = None,
                          round: int | None = None) -> bytes:
        """Run push ``seq`` (of round ``round``) and answer with its partials. ``sync``:
        the client keeps one round in flight, so no later push can arrive meanwhile and
        a push of up to SYNC_INLINE_SECONDS runs on the event loop itself. ``peers``
        (packed): the pushing blocks of exchange round ``round`` and their workers.
        Items with a carried block name where it is, ``(address, round that made it)``
        or None for its first value; the new values stay here."""
        fit = store_of(worker).fit(fit_id)
        fit.check_epoch(fit_id, epoch)
        fit.direct = True
        items = unpack(payload)
        made = None
        if any(cid is not None for _, _, cid, _ in items):
            made = round
            items = await _fetch_carried(worker, fit, fit_id, epoch, items)
        inline = SYNC_INLINE_SECONDS if sync else INLINE_SECONDS
        if peers is not None:
            # it waits for the other pushes' values, which this event loop delivers:
            # never inline
            loop = asyncio.get_running_loop()
            ex = _Exchange(worker, fit, fit_id, epoch, round, unpack(peers), loop)
            job, future = _loop_job(seq, items, loop, ex)
            fit.queue(fit_id, job)
            result = await future
        elif fit.push_seconds < inline and fit.claim_now(fit_id, seq):
            try:
                result = fit.push_items(items, made=made)
            finally:
                fit._release(seq)
        else:
            job, future = _loop_job(seq, items, asyncio.get_running_loop(), made=made)
            fit.queue(fit_id, job)
            result = await future
        partials, _, elapsed = result
        return pack((partials, elapsed))

    return strads_push


def _make_relay_handler(worker):
    push = _make_push_handler(worker)

    async def strads_relay(fit_id: str, calls: list, epoch: int = 0,
                           sync: bool = False, peers=None, round: int | None = None) -> list:
        """Run the pushes ``calls`` (``(address, seq, payload)``, one of them this
        worker's) and answer with their answers in order: the client sends one message
        per group of workers instead of one per worker, and waits for as many. Any
        push's error is the relay's answer. ``peers``, ``round``: of an exchange round
        (see ``strads_push``)."""
        if peers is not None:
            peers = forward(peers)

        async def one(address, seq, payload):
            if address == worker.address:
                return await push(fit_id=fit_id, seq=seq, payload=payload, epoch=epoch,
                                  sync=sync, peers=peers, round=round)
            return forward(await (await peer(worker, address)).strads_push(
                fit_id=fit_id, seq=seq, payload=forward(payload), epoch=epoch, sync=sync,
                peers=peers, round=round))

        # the others' messages leave before this worker's own push may take the loop
        order = sorted(range(len(calls)), key=lambda i: calls[i][0] == worker.address)
        jobs = {i: asyncio.ensure_future(one(*calls[i])) for i in order}
        try:
            await asyncio.gather(*jobs.values())
        finally:
            for job in jobs.values():
                if not job.done():
                    job.cancel()
        return [jobs[i].result() for i in range(len(calls))]

    return strads_relay


async def _fetch_carried(worker, fit, fit_id, epoch, items) -> list:
    """``items`` with their carried blocks: those held on another worker fetched from it
    (as soon as the round that makes them has run there; through shared memory when it
    sees this worker's marker there), those held here marked to be taken when the push
    runs."""
    files = fit.carried_files(fit_id)

    async def source(cid, where):
        if where is None:
            return None  # the block's first value: the push makes it
        address, made = where
        if address == worker.address:
            return HeldHere(made)
        # a worker in this process hands the block over by reference
        shared_via = None if address.startswith("inproc://") else files.marker()
        try:
            reply = await (await peer(worker, address)).strads_carried(
                fit_id=fit_id, epoch=epoch, key=pack((cid, made)), marker=shared_via)
        except Exception as exc:
            # the holder gone, or this worker closing (its connection pool closed)
            if isinstance(exc, OSError) or worker.status.name != "running":
                raise CarriedLost(f"dask_strads: carried block {cid!r} could not be "
                                  f"fetched from {address}: {exc}") from exc
            raise
        if reply is None:
            raise CarriedLost(f"dask_strads: carried block {cid!r} is gone from {address} "
                              "(the fit's blocks there were released)")
        value = unpack(reply)
        if isinstance(value, CarriedFile):
            try:
                return files.open(cid, value)
            except FileNotFoundError as exc:
                raise CarriedLost(f"dask_strads: carried block {cid!r} from {address} is "
                                  f"gone from shared memory: {exc}") from exc
        return value

    values = await asyncio.gather(*(source(cid, where) for _, _, cid, where in items))
    return [(b, part, cid, value) for (b, part, cid, _), value in
            zip(items, values, strict=True)]


def _make_carried_handler(worker):
    async def strads_carried(fit_id: str, epoch: int, key: bytes, keep: bool = False,
                             marker: str | None = None) -> bytes | None:
        """The carried block ``key`` = (id, round that made it) held here, once that
        round has run; ``keep``: a copy for a snapshot, the block stays. ``marker``: a
        file of the asking worker, which this one sees if they share ``/dev/shm`` (the
        block then goes as a :class:`CarriedFile`). None when the fit's blocks here are
        gone."""
        fit = store_of(worker).fits.get(fit_id)
        if fit is None or fit.epoch != epoch:
            return None
        cid, made = unpack(key)
        value = await fit.held.take(cid, made, keep=keep)
        if value is None:
            return None
        if not keep and marker is not None and _shares_files_with(marker):
            raw = value.value if isinstance(value, Carried) else value
            handle = fit.carried_files(fit_id).hand(cid, raw, memory_room(worker))
            if handle is not None:
                if isinstance(value, Carried):
                    value.open(None)  # its memory is shared now: never recycled here
                return pack(handle)
        if not keep and isinstance(value, Carried):
            value = value.leaving()
        return pack(value)

    return strads_carried


def _shares_files_with(marker: str) -> bool:
    """Whether this worker sees the asker's ``marker`` and runs as its owner (who then
    may open the files this worker makes)."""
    try:
        return os.stat(marker).st_uid == os.getuid()
    except OSError:
        return False


def _make_carried_put_handler(worker):
    async def strads_carried_put(fit_id: str, epoch: int, payload: bytes) -> bool:
        """Hold a carried block restored from a snapshot: payload (id, round, value);
        a :class:`Kept` value is the copy staged here."""
        fit = store_of(worker).fit(fit_id)
        fit.check_epoch(fit_id, epoch)
        cid, made, value = unpack(payload)
        if isinstance(value, Kept):
            value = kept_of(worker).value(fit_id, value.number, carried_key(cid))
        fit.held.put(cid, made, value)
        return True

    return strads_carried_put


def _make_exchange_handler(worker):
    async def strads_exchange(fit_id: str, epoch: int, round: int, payload: bytes) -> bool:
        """A value of another push of exchange round ``round``, for the push here."""
        fit = store_of(worker).fits.get(fit_id)
        if fit is None or fit.epoch != epoch:
            return False  # of a fit or placement that is gone: nobody waits for it
        block, step, value = unpack(payload)
        if step == "failed":
            fit.mail.deliver((round, "failed"), f"{block!r} failed ({value})")
        else:
            fit.mail.deliver((round, step, block), value)
        return True

    return strads_exchange


def _make_results_handler(worker):
    async def strads_results(fit_id: str, blocks: bytes, epoch: int = 0) -> bytes:
        """:func:`~dask_strads.engine.tasks.result_task` over the direct channel, for
        programs whose blocks' results are small (a task's trip through the scheduler
        would cost more)."""
        fit = store_of(worker).fit(fit_id)
        fit.check_epoch(fit_id, epoch)
        return pack(_block_results(fit, unpack(blocks)))

    return strads_results


def _make_snapshot_handler(worker):
    async def strads_snapshot(fit_id: str, epoch: int, blocks: bytes) -> bytes | None:
        """:func:`~dask_strads.engine.tasks.snapshot_task` over the direct channel; None
        when the fit's blocks here are gone or of another placement."""
        fit = store_of(worker).fits.get(fit_id)
        if fit is None or fit.epoch != epoch:
            return None
        # copies of whole blocks: off the event loop, which keeps answering meanwhile
        arrays = await asyncio.get_running_loop().run_in_executor(
            None, block_snapshots, fit, unpack(blocks))
        return pack(arrays)

    return strads_snapshot


def _make_reply_handler(worker):
    async def strads_reply(fit_id: str, seq: int, epoch: int = 0) -> bytes | None:
        """Answer with push task ``seq``'s partials as soon as it has run (None: the fit's
        blocks here were released before it ran)."""
        fit = store_of(worker).fit(fit_id)
        fit.check_epoch(fit_id, epoch)
        reply = await fit.replies.wait(seq)
        if reply is None:
            return None
        kind, value = reply
        if kind == "error":
            raise value
        return value

    return strads_reply


# name -> factory of the handler, given the worker
HANDLERS = {
    "strads_init": _make_init_handler,
    "strads_push": _make_push_handler,
    "strads_relay": _make_relay_handler,
    "strads_reply": _make_reply_handler,
    "strads_exchange": _make_exchange_handler,
    "strads_carried": _make_carried_handler,
    "strads_carried_put": _make_carried_put_handler,
    "strads_results": _make_results_handler,
    "strads_snapshot": _make_snapshot_handler,
    "strads_let_go": _make_let_go_handler,
    "strads_keep": _make_keep_handler,
    "strads_kept_put": _make_kept_put_handler,
    "strads_kept_get": _make_kept_get_handler,
    "strads_kept_stage": _make_kept_stage_handler,
    "strads_kept_commit": _make_kept_commit_handler,
}


class StradsPlugin(WorkerPlugin):
    """Registers the block store and the handlers of :data:`HANDLERS` on each worker."""

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker):
        store_of(worker)
        for name, make in HANDLERS.items():
            worker.handlers[name] = _answers_errors(make(worker))

    async def teardown(self, worker):
        # Keep the store: a re-registration must not wipe the blocks of running fits.
        if getattr(worker.status, "name", "") in ("closing", "closing_gracefully", "closed"):
            # The worker is leaving (retired, say): its handlers stay until it is gone, or
            # the other pushes' exchange messages still on their way get "No handler
            # strads_exchange found" with a traceback instead of a quiet answer. A retired
            # worker waits for its fits to take their blocks.
            await hold_while_handing_over(worker)
            asyncio.ensure_future(_release_once_closed(worker)).add_done_callback(_retrieve)
            return
        for name in HANDLERS:
            worker.handlers.pop(name, None)


async def _release_once_closed(worker) -> None:
    """Drop every fit's state here once the worker has closed (until then a late push
    must still find its fit, or fail as a lost worker): its process may be the client's
    (an in-process cluster), which gets back what the fits changed."""
    await worker.finished()
    release_every_fit(worker)


def install_handlers(dask_worker=None) -> bool:
    """Set up :class:`StradsPlugin` on this worker unless it is (run with ``client.run``
    when the scheduler's broadcast of the plugin failed part way). True if it was not."""
    if "strads_push" in dask_worker.handlers:
        return False
    StradsPlugin().setup(dask_worker)
    return True
