"""Worker side of the engine: the block store and the push entry points.

A :class:`StradsPlugin` registered on every worker owns a store of worker-local, mutable
block state keyed by fit id and block id (memory Dask does not manage: it is released
when the fit ends). Pushes reach the store two ways:

* ``push_task`` runs as a Dask task pinned to the block's worker (the ``tasks``
  transport; carried blocks arrive as task dependencies, moved worker to worker by Dask).
  Its partials come back through the ``strads_reply`` handler, which the client calls
  when it submits the task and which answers the moment the push ends: waiting for the
  scheduler to report the task and then gathering its result took 7-8 ms a round;
* the ``strads_push`` comm handler, called from the client's connection pool (the
  ``direct`` transport, about 1 ms per round), for programs made of many tiny rounds.

Both run the same :meth:`FitStore.push_items` and keep a block's pushes in round order.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from collections.abc import Hashable
from typing import Any

import numpy as np
from distributed import get_worker, rejoin, secede
from distributed.diagnostics.plugin import WorkerPlugin

PLUGIN_NAME = "dask_strads"
EXTENSION = "dask_strads"
# Pushes shorter than this run inline on the worker's event loop (cheaper than a thread
# hop); longer ones go to the worker's executor so comms and heartbeats stay responsive.
INLINE_SECONDS = 0.002


class FitStore:
    """Worker-local state of one fit: its program and the blocks placed here."""

    def __init__(self, program: Any, owner: str | None = None, epoch: int = 0):
        self.program = program
        self.owner = owner  # id of the client that runs the fit
        self.epoch = epoch  # placement epoch of the fit these blocks belong to
        self.blocks: dict[Hashable, Any] = {}
        self.next_seq = 0
        self._turn: asyncio.Condition | None = None
        self.task_turn = threading.Condition()
        self.push_seconds = 0.0  # moving average, decides inline vs executor
        # replies of push tasks, seq -> ("ok", pickled partials) | ("error", exception),
        # handed to the client by the strads_reply handler
        self.replies: dict[int, tuple[str, Any]] = {}
        self._reply_cond: asyncio.Condition | None = None
        self.closed = False
        self.loop = None  # the worker's event loop, where replies are delivered

    def push_items(self, items) -> tuple[dict, dict, float]:
        """Run the pushes of one round for the blocks listed in ``items``."""
        t0 = time.perf_counter()
        partials, carried_out = {}, {}
        for block_id, part, carried_id, carried in items:
            block = self.blocks[block_id]
            if carried_id is None:
                partials[block_id] = self.program.push(block, part)
            else:
                if carried is None:
                    carried = self.program.init_carried(carried_id)
                partial, new_value = self.program.push(block, part, carried)
                partials[block_id] = partial
                carried_out[carried_id] = new_value
        elapsed = time.perf_counter() - t0
        self.push_seconds = 0.7 * self.push_seconds + 0.3 * elapsed
        return partials, carried_out, elapsed

    def check_epoch(self, fit_id: str, epoch: int) -> None:
        """Refuse a push of an earlier placement: after a recovery the scheduler may rerun
        a lost push task (a carried block's history), and a late direct call may arrive;
        either would replay an old round on the rebuilt blocks."""
        if epoch != self.epoch:
            raise RuntimeError(f"dask_strads: stale push of fit {fit_id} (placement epoch "
                               f"{epoch}; the blocks here are of epoch {self.epoch})")

    def turn(self) -> asyncio.Condition:
        if self._turn is None:
            self._turn = asyncio.Condition()
        return self._turn

    def advance(self, seq: int, in_loop: bool = False) -> None:
        """Push ``seq`` is done: let the next one go, whichever way it came (a task waits
        on the threading condition, a direct call on the asyncio one). ``in_loop``: the
        caller holds the asyncio condition and notifies it itself."""
        with self.task_turn:
            self.next_seq = seq + 1
            self.task_turn.notify_all()
        if not in_loop and self.loop is not None:
            self.loop.add_callback(self._notify_turn)

    async def _notify_turn(self) -> None:
        cond = self.turn()
        async with cond:
            cond.notify_all()

    def reply_cond(self) -> asyncio.Condition:
        if self._reply_cond is None:
            self._reply_cond = asyncio.Condition()
        return self._reply_cond

    def post_reply(self, seq: int, kind: str, value: Any) -> None:
        """Hand a push task's outcome to the event loop (called from the task's thread)."""
        self.loop.add_callback(self._deliver, seq, (kind, value))

    def close(self) -> None:
        """The fit was released or re-placed: wake the handlers waiting for replies."""
        self.closed = True
        if self.loop is not None:
            self.loop.add_callback(self._deliver, None, None)

    async def _deliver(self, seq, reply) -> None:
        cond = self.reply_cond()
        async with cond:
            if seq is not None and not self.closed:
                self.replies[seq] = reply
            cond.notify_all()

    async def wait_reply(self, seq: int) -> tuple[str, Any] | None:
        """Push task ``seq``'s outcome, or None when the fit's blocks here were released or
        re-placed first (the client has given the round up by then)."""
        cond = self.reply_cond()
        async with cond:
            await cond.wait_for(lambda: seq in self.replies or self.closed)
            return self.replies.pop(seq, None)


class WorkerStore:
    """All fits' state on one worker."""

    def __init__(self):
        self.fits: dict[str, FitStore] = {}

    def fit(self, fit_id: str) -> FitStore:
        try:
            return self.fits[fit_id]
        except KeyError:
            raise RuntimeError(
                f"dask_strads: fit {fit_id!r} has no state on this worker (was it restarted "
                "or was the fit released?)"
            ) from None


def store_of(worker) -> WorkerStore:
    store = worker.extensions.get(EXTENSION)
    if store is None:
        store = worker.extensions[EXTENSION] = WorkerStore()
    return store


class StradsPlugin(WorkerPlugin):
    """Registers the block store and the ``strads_push`` handler on each worker."""

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker):
        store_of(worker)
        worker.handlers["strads_push"] = _make_handler(worker)
        worker.handlers["strads_reply"] = _make_reply_handler(worker)

    def teardown(self, worker):
        # Keep the store: a re-registration must not wipe the blocks of running fits.
        worker.handlers.pop("strads_push", None)
        worker.handlers.pop("strads_reply", None)


def _make_handler(worker):
    async def strads_push(fit_id: str, seq: int, payload: bytes, epoch: int = 0) -> bytes:
        fit = store_of(worker).fit(fit_id)
        fit.check_epoch(fit_id, epoch)
        items = pickle.loads(payload)
        cond = fit.turn()
        async with cond:
            await cond.wait_for(lambda: fit.next_seq >= seq)
            if fit.next_seq != seq:
                raise RuntimeError(f"dask_strads: push {seq} of fit {fit_id} arrived twice")
            try:
                if fit.push_seconds < INLINE_SECONDS:
                    result = fit.push_items(items)
                else:
                    loop = asyncio.get_running_loop()
                    result = await loop.run_in_executor(worker.executor, fit.push_items, items)
            finally:
                fit.advance(seq, in_loop=True)  # wakes a task waiting for its turn
                cond.notify_all()
        partials, _, elapsed = result
        return pickle.dumps((partials, elapsed), protocol=5)

    return strads_push


def _make_reply_handler(worker):
    async def strads_reply(fit_id: str, seq: int, epoch: int = 0) -> bytes | None:
        """Answer with push task ``seq``'s partials as soon as it has run (None: the fit's
        blocks here were released before it ran)."""
        fit = store_of(worker).fit(fit_id)
        fit.check_epoch(fit_id, epoch)
        reply = await fit.wait_reply(seq)
        if reply is None:
            return None
        kind, value = reply
        if kind == "error":
            raise value
        return value

    return strads_reply


# ---------------------------------------------------------------- task entry points
def init_block_task(fit_id: str, program: Any, block_id: Hashable, shard: Any,
                    restore: tuple | None = None, owner: str | None = None,
                    epoch: int = 0) -> Any:
    """Build (or restore) one resident block on this worker; return its summary."""
    store = store_of(get_worker())
    fit = store.fits.get(fit_id)
    if fit is not None and fit.epoch > epoch:
        raise RuntimeError(f"dask_strads: stale placement of fit {fit_id} (epoch {epoch}, "
                           f"the blocks here are of epoch {fit.epoch})")
    if fit is None or fit.epoch < epoch:  # a new placement rebuilds every block
        if fit is not None:
            fit.close()
        worker = get_worker()
        fit = store.fits[fit_id] = FitStore(program, owner, epoch)
        fit.loop = worker.loop
    if restore is None:
        block = program.init_block(block_id, shard)
    else:
        state_arrays, block_arrays = restore
        block = program.restore_block(block_id, shard, state_arrays, block_arrays)
    fit.blocks[block_id] = block
    return program.block_summary(block_id, block)


def push_task(fit_id: str, seq: int, items, epoch: int = 0, reply: bool = True) -> dict:
    """One round's pushes of one worker, as a task.

    Pushes queued on a worker normally run in submission order; should a later one
    start first (several threads, or a dependency that arrived early), it leaves the
    worker's thread pool and waits for its turn, so a block's pushes stay in round order
    without a scheduler round trip between them. With ``reply`` the partials (or the
    error) also go straight to the client through ``strads_reply``.
    """
    fit = store_of(get_worker()).fit(fit_id)
    fit.check_epoch(fit_id, epoch)  # no reply: the seq may be taken in the new epoch
    try:
        turn = fit.task_turn
        seceded = False
        with turn:
            if fit.next_seq != seq:
                secede()
                seceded = True
                if not turn.wait_for(lambda: fit.next_seq >= seq, timeout=3600):
                    raise RuntimeError(f"dask_strads: push {seq} of fit {fit_id} waited an "
                                       f"hour for push {fit.next_seq}")
        try:
            partials, carried, elapsed = fit.push_items(items)
        finally:
            fit.advance(seq)
    except BaseException as exc:
        if reply:
            fit.post_reply(seq, "error", exc)
        raise
    if reply:
        fit.post_reply(seq, "ok", pickle.dumps((partials, elapsed), protocol=5))
    if seceded:
        rejoin()
    return {"partials": partials, "carried": carried, "elapsed": elapsed}


def pick(result: dict, field: str, key: Hashable | None = None) -> Any:
    """Split a push task's result on its worker: a carried block (it moves on from
    there), or the partials for a client that cannot use the reply handler."""
    value = result[field]
    if field == "partials":
        return {"partials": value, "elapsed": result["elapsed"]}
    return value[key]


def snapshot_task(fit_id: str, block_ids: list) -> dict:
    """Checkpoint arrays of the resident blocks on this worker."""
    fit = store_of(get_worker()).fit(fit_id)
    out = {}
    for b in block_ids:
        arrays = fit.program.block_arrays(fit.blocks[b])
        # copies: the next pushes mutate the block (a threads-only cluster would
        # otherwise hand the client the live arrays)
        out[b] = None if arrays is None else {k: np.array(v, copy=True)
                                              for k, v in arrays.items()}
    return out


def result_task(fit_id: str, block_ids: list) -> dict:
    """Final per-block results of the resident blocks on this worker."""
    fit = store_of(get_worker()).fit(fit_id)
    return {b: fit.program.block_result(b, fit.blocks[b]) for b in block_ids}


def release_fit(fit_id: str, dask_worker=None) -> int:
    """Drop a fit's worker-local state (run on every worker with ``client.run``)."""
    store = dask_worker.extensions.get(EXTENSION) if dask_worker is not None else None
    if store is None:
        return 0
    fit = store.fits.pop(fit_id, None)
    if fit is None:
        return 0
    fit.close()
    return len(fit.blocks)


def release_orphans(live_clients: list, dask_worker=None) -> list:
    """Drop fits whose client is gone (its process died mid-fit): nobody will release
    them otherwise. Run on every worker when a new fit starts."""
    store = dask_worker.extensions.get(EXTENSION)
    if store is None:
        return []
    live = set(live_clients)
    orphans = [f for f, fit in store.fits.items() if fit.owner is not None
               and fit.owner not in live]
    for f in orphans:
        store.fits.pop(f).close()
    return orphans


def client_ids(dask_scheduler=None) -> list:
    """Ids of the clients connected to the scheduler."""
    return list(dask_scheduler.clients)


def fit_ids_here(dask_worker=None) -> list:
    """Fit ids that hold state on this worker (for tests and diagnostics)."""
    store = dask_worker.extensions.get(EXTENSION)
    return [] if store is None else sorted(store.fits)
