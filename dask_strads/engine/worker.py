"""Worker side of the engine: the block store and the push entry points.

A :class:`StradsPlugin` registered on every worker owns a store of worker-local, mutable
block state keyed by fit id and block id (memory Dask does not manage: it is released
when the fit ends). Pushes reach the store two ways:

* ``push_task`` runs as a Dask task pinned to the block's worker (the ``tasks``
  transport; carried blocks arrive as task dependencies, moved worker to worker by Dask).
  Its partials come back through the ``strads_reply`` handler, which the client calls
  when it submits the task and which answers the moment the push ends, sooner than the
  scheduler's report of the task and a gather of its result;
* the ``strads_push`` comm handler, called from the client's connection pool (the
  ``direct`` transport, no scheduler on the way), for programs made of many tiny rounds.

Both run the same :meth:`FitStore.push_items` and keep a block's pushes in round order.

A direct push that arrives while the previous one still runs (staleness >= 1) waits in a
queue served by one runner thread per fit, which starts it the moment the previous push
ends, with no hop from the event loop to an executor and back between two pushes.

The pushes of a round whose plan asks for it (``Plan.exchange``) may also talk to each
other while they run: :func:`exchange` sends a value to the round's other pushes through
the ``strads_exchange`` handler, worker to worker, and returns all of theirs (see
:class:`_Exchange`).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import logging
import pickle
import threading
import time
import weakref
from collections.abc import Hashable
from typing import Any

import numpy as np
from dask.sizeof import sizeof
from distributed import get_worker, rejoin, secede
from distributed.core import error_message
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import ToPickle

from dask_strads.engine import allocator

logger = logging.getLogger("dask_strads")

PLUGIN_NAME = "dask_strads"
EXTENSION = "dask_strads"
# Direct pushes shorter than this run inline on the worker's event loop when due (cheaper
# than a thread hop); longer ones go to the fit's runner thread so comms and heartbeats
# stay responsive.
INLINE_SECONDS = 0.002
# How long a push waits for the other pushes of its round in an exchange, at most.
EXCHANGE_TIMEOUT = 600.0
# With one round in flight (staleness 0) the worker has nothing else to do for the fit:
# pushes up to this long run inline too, sparing the hop to the runner thread and back.
# Longer ones would hold up heartbeats and comms.
SYNC_INLINE_SECONDS = 0.05


# Payloads of the direct channel and of replies: pickled in-band into one bytes object
# when small (the cheapest message); from this size on, pickled with their buffers (numpy
# arrays) out of band as separate frames, which skips copying them into and out of the
# message (the copies outweigh the extra frames from about this size).
FRAMES_BYTES = 256 * 1024


def pack(obj) -> Any:
    """``obj`` ready for a handler message (see FRAMES_BYTES); ``unpack`` reverses it.

    Its size is measured by a pickle that leaves the buffers (numpy arrays) out of band,
    which copies none of them; only an object small enough for one bytes object is then
    pickled in-band (cheap, being small), and one without buffers only once: measuring
    with an in-band pickle would copy every large payload once for nothing, every round."""
    buffers: list = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    size = len(data) + sum(memoryview(b).nbytes for b in buffers)
    if size >= FRAMES_BYTES:
        return ToPickle(obj)
    return pickle.dumps(obj, protocol=5) if buffers else data


def unpack(msg) -> Any:
    """The object ``pack`` made ``msg`` from (frames arrive deserialized; an in-process
    comm hands the wrapper over as it is)."""
    if isinstance(msg, bytes | bytearray | memoryview):
        return pickle.loads(msg)
    return msg.data if isinstance(msg, ToPickle) else msg


class _Job:
    """A push queued for the runner thread. ``finish(result, exc)`` hands its outcome
    back (to the event loop that awaits a direct push, or to the task thread that
    waits); ``context``: the task's context variables, for ``get_worker()`` in the
    push."""

    __slots__ = ("seq", "items", "finish", "context", "exchange")

    def __init__(self, seq: int, items, finish, context: contextvars.Context | None = None,
                 exchange: _Exchange | None = None):
        self.seq = seq
        self.items = items
        self.finish = finish
        self.context = context
        self.exchange = exchange


def _loop_job(seq: int, items, loop: asyncio.AbstractEventLoop,
              exchange: _Exchange | None = None) -> tuple[_Job, asyncio.Future]:
    """A job whose outcome resolves an asyncio future of ``loop``."""
    future = loop.create_future()

    def resolve(result, exc):
        if future.done():
            return
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)

    return _Job(seq, items, lambda r, e: loop.call_soon_threadsafe(resolve, r, e),
                exchange=exchange), future


def _finish(job: _Job, result, exc) -> None:
    """Hand a job's outcome back; a failure to do so must not stop the runner thread."""
    try:
        job.finish(result, exc)
    except Exception:
        logger.exception("dask_strads: could not hand push %s's outcome back", job.seq)


class _TaskWait:
    """A push task's wait for its queued push."""

    def __init__(self):
        self.event = threading.Event()
        self.outcome: tuple = (None, None)

    def finish(self, result, exc) -> None:
        self.outcome = (result, exc)
        self.event.set()

    def wait(self):
        self.event.wait()
        result, exc = self.outcome
        if exc is not None:
            raise exc
        return result


class FitStore:
    """Worker-local state of one fit: its program and the blocks placed here."""

    def __init__(self, program: Any, owner: str | None = None, epoch: int = 0):
        self.program = program
        self.owner = owner  # id of the client that runs the fit
        self.epoch = epoch  # placement epoch of the fit these blocks belong to
        self.blocks: dict[Hashable, Any] = {}
        # the program's worker-local memory for carried blocks (see Carried)
        self.scratch: dict[str, Any] = {}
        # Round order: push ``seq`` runs once ``next_seq == seq`` and no push is running
        # (``busy``); whoever runs it calls ``_release``. Direct pushes that cannot run at
        # once queue in ``jobs`` for the runner thread, which takes the next one the
        # moment the previous ends (no event-loop or executor hop between pushes).
        self.turn = threading.Condition()
        self.next_seq = 0
        self.busy = False
        self.jobs: dict[int, _Job] = {}
        self._runner: threading.Thread | None = None
        self.push_seconds = 0.0  # moving average, decides inline vs runner thread
        # replies of push tasks, seq -> ("ok", pickled partials) | ("error", exception),
        # handed to the client by the strads_reply handler
        self.replies: dict[int, tuple[str, Any]] = {}
        self._reply_cond: asyncio.Condition | None = None
        self.closed = False
        self.loop = None  # the worker's event loop, where replies are delivered
        # values of the other pushes of exchange rounds, (round, step, block) -> value
        self.mail: dict[tuple, Any] = {}
        self.mail_cond = threading.Condition()

    def push_items(self, items, exchange: _Exchange | None = None) -> tuple[dict, dict, float]:
        """Run the pushes of one round for the blocks listed in ``items`` (with
        ``exchange``: the one block of an exchange round here)."""
        t0 = time.perf_counter()
        partials, carried_out = {}, {}
        for block_id, part, carried_id, carried in items:
            block = self.blocks[block_id]
            if exchange is not None:
                partials[block_id] = exchange.run(block_id, self.program.push, block, part)
            elif carried_id is None:
                partials[block_id] = self.program.push(block, part)
            else:
                if carried is None:
                    carried = self.program.init_carried(carried_id)
                else:  # possibly moved from another worker
                    carried = realign(open_carried(carried, self.scratch))
                partial, new_value = self.program.push(block, part, carried)
                partials[block_id] = partial
                carried_out[carried_id] = Carried.wrap(self.program, carried_id, new_value,
                                                       self.scratch)
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

    def _duplicate(self, seq: int) -> bool:
        """Push ``seq`` ran, runs (only the due push runs) or waits in the queue."""
        return (seq < self.next_seq or seq in self.jobs
                or (self.busy and seq == self.next_seq))

    def _release(self, seq: int) -> None:
        """Push ``seq`` is over (done or failed): let the next one go, whichever way it
        came."""
        with self.turn:
            self.next_seq = seq + 1
            self.busy = False
            self.turn.notify_all()

    def claim_now(self, fit_id: str, seq: int) -> bool:
        """Take the turn for push ``seq`` if it is due and nothing runs (the caller then
        runs it and calls ``_release``)."""
        with self.turn:
            if self._duplicate(seq):
                raise RuntimeError(f"dask_strads: push {seq} of fit {fit_id} arrived twice")
            if self.busy or self.next_seq != seq:
                return False
            self.busy = True
            return True

    def claim_wait(self, fit_id: str, seq: int, timeout: float = 3600.0) -> None:
        """Block this thread until push ``seq``'s turn, then take it."""
        with self.turn:
            if self._duplicate(seq):
                raise RuntimeError(f"dask_strads: push {seq} of fit {fit_id} arrived twice")
            if not self.turn.wait_for(
                    lambda: self.closed or self.next_seq > seq
                    or (not self.busy and self.next_seq == seq), timeout=timeout):
                raise RuntimeError(f"dask_strads: push {seq} of fit {fit_id} waited "
                                   f"{timeout:.0f} s for push {self.next_seq}")
            if self.next_seq > seq:
                raise RuntimeError(f"dask_strads: push {seq} of fit {fit_id} arrived twice")
            if self.closed:
                raise RuntimeError(f"dask_strads: push {seq} of fit {fit_id} never ran: "
                                   "the fit's blocks here were released")
            self.busy = True

    def queue(self, fit_id: str, job: _Job) -> None:
        """Hand a push to the runner thread, which runs it in its turn."""
        with self.turn:
            if self.closed:
                raise RuntimeError(f"dask_strads: fit {fit_id}'s blocks here were released")
            if self._duplicate(job.seq):
                raise RuntimeError(f"dask_strads: push {job.seq} of fit {fit_id} arrived "
                                   "twice")
            self.jobs[job.seq] = job
            if self._runner is None:
                self._runner = threading.Thread(target=self._run_jobs, daemon=True,
                                                name=f"dask-strads-pushes-{id(self):x}")
                self._runner.start()
            self.turn.notify_all()

    def _run_jobs(self) -> None:
        while True:
            with self.turn:
                self.turn.wait_for(lambda: self.closed or (not self.busy
                                                           and self.next_seq in self.jobs))
                if self.closed:
                    jobs, self.jobs = list(self.jobs.values()), {}
                    break
                job = self.jobs.pop(self.next_seq)
                self.busy = True
            result, error = None, None
            try:
                if job.context is None:
                    result = self.push_items(job.items, job.exchange)
                else:
                    result = job.context.run(self.push_items, job.items, job.exchange)
            except BaseException as exc:  # the caller gets it
                error = exc
            self._release(job.seq)
            _finish(job, result, error)
        for job in jobs:
            _finish(job, None, RuntimeError(f"dask_strads: push {job.seq} never ran: the "
                                            "fit's blocks here were released"))

    def reply_cond(self) -> asyncio.Condition:
        if self._reply_cond is None:
            self._reply_cond = asyncio.Condition()
        return self._reply_cond

    def post_reply(self, seq: int, kind: str, value: Any) -> None:
        """Hand a push task's outcome to the event loop (called from the task's thread)."""
        self.loop.add_callback(self._deliver, seq, (kind, value))

    def deliver(self, key: tuple, value: Any) -> None:
        """A value of another push of an exchange round (``key``: round, step, block)."""
        with self.mail_cond:
            if not self.closed:
                self.mail[key] = value
            self.mail_cond.notify_all()

    def close(self) -> None:
        """The fit was released or re-placed: wake the handlers waiting for replies."""
        with self.turn:
            self.closed = True
            self.turn.notify_all()  # the runner fails its queued pushes and stops
        with self.mail_cond:
            self.mail.clear()
            self.mail_cond.notify_all()  # and pushes waiting in an exchange fail
        self.scratch.clear()
        self.scratch["closed"] = True
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


_current = threading.local()


class ExchangeAbandoned(RuntimeError):
    """A push gave up its exchange because another push of the round failed."""


def exchange(value: Any) -> dict:
    """Inside the push of a plan with ``exchange=True``: send ``value`` to the round's
    other pushes and return every push's value, ``{block_id: value}`` in the order of
    the plan's parts (this push's own value included, as it is).

    A collective: every push of the round must call it the same number of times, in
    the same order. Values travel worker to worker (the client never sees them), as a
    handler message (see :func:`pack`). Raises RuntimeError when another push of the
    round failed, when the fit's blocks here are released (a lost worker, an ended
    fit), or after EXCHANGE_TIMEOUT seconds."""
    ex = getattr(_current, "exchange", None)
    if ex is None:
        raise RuntimeError("dask_strads: exchange() works only inside the push of a plan "
                           "with exchange=True")
    return ex(value)


class _Exchange:
    """The push of exchange round ``round`` on this worker. ``peers``: every pushing
    block of the round and its worker's address, in the plan's order."""

    def __init__(self, worker, fit: FitStore, fit_id: str, epoch: int, round: int,
                 peers: dict, loop: asyncio.AbstractEventLoop):
        self.worker = worker
        self.fit = fit
        self.fit_id = fit_id
        self.epoch = epoch
        self.round = round
        self.peers = peers
        self.loop = loop
        self.block = None
        self.step = 0

    def run(self, block_id: Hashable, push, *args):
        """Run ``push(*args)`` for ``block_id``; should it fail, tell the other pushes."""
        self.block = block_id
        with self.fit.mail_cond:  # what an earlier, failed round left behind
            for key in [k for k in self.fit.mail if k[0] < self.round]:
                del self.fit.mail[key]
        _current.exchange = self
        try:
            return push(*args)
        except BaseException as exc:
            self._broadcast(pack((block_id, "failed", f"{type(exc).__name__}: {exc}")))
            raise
        finally:
            _current.exchange = None

    def __call__(self, value: Any) -> dict:
        step = self.step
        self.step += 1
        fit = self.fit
        if len(self.peers) > 1:
            self._broadcast(pack((self.block, step, value)))
        fit.deliver((self.round, step, self.block), value)
        keys = [(self.round, step, b) for b in self.peers]
        failed = (self.round, "failed")
        deadline = time.monotonic() + EXCHANGE_TIMEOUT
        with fit.mail_cond:
            while True:
                if fit.closed:
                    raise RuntimeError(f"dask_strads: fit {self.fit_id}'s blocks here were "
                                       "released during an exchange")
                if failed in fit.mail:
                    raise ExchangeAbandoned(f"dask_strads: exchange of round {self.round} "
                                            f"abandoned: the push of block "
                                            f"{fit.mail[failed]}")
                if all(k in fit.mail for k in keys):
                    return {k[2]: fit.mail.pop(k) for k in keys}
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [k[2] for k in keys if k not in fit.mail]
                    raise RuntimeError(f"dask_strads: exchange of round {self.round} waited "
                                       f"{EXCHANGE_TIMEOUT:.0f} s for blocks {missing}")
                fit.mail_cond.wait(left)

    def _broadcast(self, payload) -> None:
        """Send ``payload`` to the other pushes' workers, from any thread."""
        for addr in dict.fromkeys(a for b, a in self.peers.items() if b != self.block):
            asyncio.run_coroutine_threadsafe(self._send(addr, payload), self.loop)

    async def _send(self, addr: str, payload) -> None:
        try:
            # no reply: the push that sends does not wait on its peer's handler
            await self.worker.rpc(addr).strads_exchange(
                fit_id=self.fit_id, epoch=self.epoch, round=self.round, payload=payload,
                reply=False)
        except Exception as exc:  # this push cannot go on without the round's values
            # (debug: the round's failure reaches the client, which says what happened)
            logger.debug("dask_strads: exchange of round %s could not reach %s: %s",
                         self.round, addr, exc)
            self.fit.deliver((self.round, "failed"), f"{self.block!r} (could not reach "
                             f"{addr}: {exc})")


class WorkerStore:
    """All fits' state on one worker. While it holds a fit that allows it, the process's
    allocator reuses freed memory and numpy does not ask for huge pages (see
    :mod:`dask_strads.engine.allocator`); both come back when the last such fit goes."""

    def __init__(self):
        self.fits: dict[str, FitStore] = {}
        self.tuning: dict[str, tuple[bool, bool]] = {}  # fit_id -> what it changed here
        self.allocator_tuned = False

    def add(self, fit_id: str, fit: FitStore,
            tuning: tuple[bool, bool] = (True, True)) -> FitStore:
        """``tuning``: (glibc heap reuse, numpy's huge-page advice off) allowed."""
        tuning = (bool(tuning[0]), bool(tuning[1]))
        if tuning[1]:
            allocator.hold_hugepage_off()
        replaced = self.tuning.get(fit_id)  # a new placement of the same fit
        self.fits[fit_id] = fit
        self.tuning[fit_id] = tuning
        if replaced is not None and replaced[1]:
            allocator.release_hugepage_off()
        self._settle_allocator()
        return fit

    def pop(self, fit_id: str) -> FitStore | None:
        fit = self.fits.pop(fit_id, None)
        tuning = self.tuning.pop(fit_id, None)
        if tuning is not None and tuning[1]:
            allocator.release_hugepage_off()
        self._settle_allocator()
        return fit

    def _settle_allocator(self) -> None:
        """Heap reuse while some fit here allows it; the environment's settings after."""
        wanted = any(malloc_reuse for malloc_reuse, _ in self.tuning.values())
        if wanted and not self.allocator_tuned:
            self.allocator_tuned = allocator.tune()
        elif not wanted and self.allocator_tuned:
            allocator.restore()
            self.allocator_tuned = False

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


def realign(obj: Any, depth: int = 0) -> Any:
    """``obj`` with its floating-point numpy arrays aligned for their element type.

    Arrays that reach a worker through Dask (a scattered shard, a task argument, a
    carried block moved from another worker) are often views at an arbitrary offset of
    the received message (seen: a float64 array at offset 33, int32 indices at 13).
    numpy then cannot hand them to BLAS and falls back to a loop several times slower.
    A misaligned float or complex
    array is copied; scipy.sparse and pydata sparse arrays come back as shallow copies
    with aligned copies of such buffers (the object passed in is never changed); dicts,
    lists and tuples are walked a few levels deep, and copied only when something in
    them was. Anything else is returned as it is.

    Integer arrays stay where they are: numba kernels read them misaligned at no
    measurable cost on x86 (Lasso on sparse X: no gain from realigning them), and
    copying a large index array or count block would cost time and fresh memory every
    time one arrives (LDA's carried count blocks arrive every sub-round).
    """
    if isinstance(obj, np.ndarray):
        if obj.flags.aligned or not np.issubdtype(obj.dtype, np.inexact):
            return obj
        out = np.empty_like(obj, order="K")
        out[...] = obj
        if not obj.flags.writeable:
            out.flags.writeable = False
        return out
    if depth > 3:
        return obj
    kind = type(obj)
    if kind is dict:
        out = {k: realign(v, depth + 1) for k, v in obj.items()}
        return obj if all(out[k] is v for k, v in obj.items()) else out
    if kind is tuple or kind is list:
        items = [realign(v, depth + 1) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else kind(items)
    if kind.__module__.split(".")[0] not in ("scipy", "sparse"):
        return obj
    for attrs in (("data", "indices", "indptr"), ("row", "col", "data"), ("coords", "data")):
        arrays = [getattr(obj, a, None) for a in attrs]
        if all(isinstance(a, np.ndarray) for a in arrays):
            fixed = [realign(a) for a in arrays]
            if any(f is not a for f, a in zip(fixed, arrays, strict=True)):
                obj = copy.copy(obj)  # never change an object Dask (or the user) holds
                for name, f in zip(attrs, fixed, strict=True):
                    setattr(obj, name, f)
            break
    return obj


class StradsPlugin(WorkerPlugin):
    """Registers the block store and the ``strads_push`` handler on each worker."""

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker):
        store_of(worker)
        worker.handlers["strads_push"] = _answers_errors(_make_handler(worker))
        worker.handlers["strads_reply"] = _answers_errors(_make_reply_handler(worker))
        worker.handlers["strads_exchange"] = _answers_errors(_make_exchange_handler(worker))
        worker.handlers["strads_results"] = _answers_errors(_make_results_handler(worker))

    def teardown(self, worker):
        # Keep the store: a re-registration must not wipe the blocks of running fits.
        if getattr(worker.status, "name", "") in ("closing", "closing_gracefully", "closed"):
            # The worker is leaving (retired, say): its handlers stay until it is gone, or
            # the other pushes' exchange messages still on their way get "No handler
            # strads_exchange found" with a traceback instead of a quiet answer.
            return
        worker.handlers.pop("strads_push", None)
        worker.handlers.pop("strads_reply", None)
        worker.handlers.pop("strads_exchange", None)
        worker.handlers.pop("strads_results", None)


def install_handlers(dask_worker=None) -> bool:
    """Set up :class:`StradsPlugin` on this worker unless it is (run with ``client.run``
    when the scheduler's broadcast of the plugin failed part way). True if it was not."""
    if "strads_push" in dask_worker.handlers:
        return False
    StradsPlugin().setup(dask_worker)
    return True


def _answers_errors(handler):
    """``handler`` answering its errors instead of raising them.

    The caller's ``rpc`` raises an answered error just as it raises one the handler
    raised (both arrive as distributed's "uncaught-error" message). Raised, distributed
    also logs it on the worker with its traceback, and when the caller has hung up
    meanwhile (a client that gave up a round after losing a worker, or one whose exchange
    was abandoned) the error escapes the connection's task, which asyncio reports as
    "Task exception was never retrieved": three or four tracebacks per recovery, for
    errors the client handles."""

    @functools.wraps(handler)
    async def answered(**kwargs):
        try:
            return await handler(**kwargs)
        except Exception as exc:
            return error_message(exc, status="uncaught-error")

    return answered


def _make_handler(worker):
    async def strads_push(fit_id: str, seq: int, payload: bytes, epoch: int = 0,
                          sync: bool = False, peers: bytes | None = None,
                          round: int | None = None) -> bytes:
        """Run push ``seq`` and answer with its partials. ``sync``: the client keeps one
        round in flight, so no later push can arrive meanwhile and a push of up to
        SYNC_INLINE_SECONDS runs on the event loop itself. ``peers`` (packed): the
        pushing blocks of exchange round ``round`` and their workers."""
        fit = store_of(worker).fit(fit_id)
        fit.check_epoch(fit_id, epoch)
        items = unpack(payload)
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
                result = fit.push_items(items)
            finally:
                fit._release(seq)
        else:
            job, future = _loop_job(seq, items, asyncio.get_running_loop())
            fit.queue(fit_id, job)
            result = await future
        partials, _, elapsed = result
        return pack((partials, elapsed))

    return strads_push


def _make_exchange_handler(worker):
    async def strads_exchange(fit_id: str, epoch: int, round: int, payload: bytes) -> bool:
        """A value of another push of exchange round ``round``, for the push here."""
        fit = store_of(worker).fits.get(fit_id)
        if fit is None or fit.epoch != epoch:
            return False  # of a fit or placement that is gone: nobody waits for it
        block, step, value = unpack(payload)
        if step == "failed":
            fit.deliver((round, "failed"), f"{block!r} failed ({value})")
        else:
            fit.deliver((round, step, block), value)
        return True

    return strads_exchange


def _make_results_handler(worker):
    async def strads_results(fit_id: str, blocks: bytes, epoch: int = 0) -> bytes:
        """:func:`result_task` over the direct channel, for programs whose blocks'
        results are small (a task's trip through the scheduler would cost more)."""
        fit = store_of(worker).fit(fit_id)
        fit.check_epoch(fit_id, epoch)
        return pack(_block_results(fit, unpack(blocks)))

    return strads_results


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
                    epoch: int = 0, tuning: tuple[bool, bool] = (True, True)) -> Any:
    """Build (or restore) one resident block on this worker; return its summary.
    ``tuning``: what the fit lets this process change while it holds blocks (see
    :meth:`WorkerStore.add`)."""
    store = store_of(get_worker())
    fit = store.fits.get(fit_id)
    if fit is not None and fit.epoch > epoch:
        raise RuntimeError(f"dask_strads: stale placement of fit {fit_id} (epoch {epoch}, "
                           f"the blocks here are of epoch {fit.epoch})")
    if fit is None or fit.epoch < epoch:  # a new placement rebuilds every block
        if fit is not None:
            fit.close()
        worker = get_worker()
        fit = store.add(fit_id, FitStore(program, owner, epoch), tuning)
        fit.loop = worker.loop
    shard = realign(shard)
    if restore is None:
        block = program.init_block(block_id, shard)
    else:
        state_arrays, block_arrays = restore
        block = program.restore_block(block_id, shard, state_arrays, block_arrays)
    fit.blocks[block_id] = block
    return program.block_summary(block_id, block)


def push_task(fit_id: str, seq: int, items, epoch: int = 0, reply: bool = True,
              queue: bool = False, detach: bool = False) -> dict:
    """One round's pushes of one worker, as a task.

    Pushes queued on a worker normally run in submission order; should a later one
    start first (several threads, or a dependency that arrived early), it leaves the
    worker's thread pool and waits for its turn, so a block's pushes stay in round order
    without a scheduler round trip between them. With ``reply`` the partials (or the
    error) also go straight to the client through ``strads_reply``.

    ``queue`` (rounds pipelined, staleness >= 1): the push goes to the fit's runner
    thread and the task leaves the thread pool while it waits, so the next round's task
    can start and queue its push meanwhile; the runner then starts it the moment this
    one ends (run in the task's own thread, a push would keep the worker's only thread
    until it ended, and the next task would start only then).

    ``detach`` (with ``queue`` and ``reply``, and no carried blocks, whose values are the
    task's result): the task ends as soon as its push is queued. The reply carries the
    outcome; the task result is empty. This spares each round the secession (a message
    to the scheduler), a thread kept waiting, and the partials held as a task result.
    """
    fit = store_of(get_worker()).fit(fit_id)
    fit.check_epoch(fit_id, epoch)  # no reply: the seq may be taken in the new epoch
    if detach and not (queue and reply):
        raise ValueError("push_task: detach needs queue and reply")
    if queue:
        waiter = None if detach else _TaskWait()  # a detached task does not wait

        def finish(result, exc):
            try:
                if reply:  # from the runner thread: the client hears at once
                    if exc is None:
                        fit.post_reply(seq, "ok", pack((result[0], result[2])))
                    else:
                        fit.post_reply(seq, "error", exc)
            except Exception as failure:  # say, partials that cannot be pickled
                fit.post_reply(seq, "error", failure)
                exc = exc or failure
            finally:
                if waiter is not None:
                    waiter.finish(result, exc)

        try:
            fit.queue(fit_id, _Job(seq, items, finish, contextvars.copy_context()))
        except BaseException as exc:
            if reply:
                fit.post_reply(seq, "error", exc)
            raise
        if detach:
            return {"partials": None, "carried": {}, "elapsed": None, "detached": True}
        secede()  # the wait must not hold a thread of the worker's pool
        partials, carried, elapsed = waiter.wait()
        return {"partials": partials, "carried": carried, "elapsed": elapsed}
    try:
        seceded = False
        if not fit.claim_now(fit_id, seq):
            secede()  # let the worker start the pushes that come before this one
            seceded = True
            fit.claim_wait(fit_id, seq)
        try:
            partials, carried, elapsed = fit.push_items(items)
        finally:
            fit._release(seq)
    except BaseException as exc:
        if reply:
            fit.post_reply(seq, "error", exc)
        raise
    if reply:
        fit.post_reply(seq, "ok", pack((partials, elapsed)))
    if seceded:
        rejoin()
    return {"partials": partials, "carried": carried, "elapsed": elapsed}


class Carried:
    """A carried block's value as a task result: packed only when it leaves the worker.

    A push's new value of a carried block is wrapped in one of these. Consumed by a push
    on the same worker, it hands the value over as it is. Pickled (Dask moving it to
    another worker or to the client, or spilling it), it travels in the form
    :meth:`Program.pack_carried` makes (packed once, however often it is pickled), and
    the receiver unpacks it into memory the program keeps for that (``scratch``). When the
    wrapper dies without its value having been handed to a local push (the block went
    elsewhere), the program may recycle the value's memory
    (:meth:`Program.recycle_carried`): a block of LDA counts at K = 1000 is 100 MB, and
    fresh memory costs a page fault per 4 KB page on every arrival.
    """

    __slots__ = ("value", "packed", "_pack", "_cell", "__weakref__")

    def __init__(self, value: Any = None, packed: Any = None) -> None:
        self.value = value
        self.packed = packed
        self._pack = None
        self._cell = None

    @classmethod
    def wrap(cls, program: Any, carried_id: Hashable, value: Any, scratch: dict) -> Carried:
        """A push's new value on its worker (recycled when it leaves unopened)."""
        out = cls(value)
        out._pack = (program, carried_id)
        out._cell = [value, None]  # [value unless opened here, packed form once made]
        weakref.finalize(out, _recycle, program, carried_id, out._cell, scratch).atexit = False
        return out

    def _packed(self) -> Any:
        if self.packed is None and self._pack is not None and self.value is not None:
            program, carried_id = self._pack
            self.packed = program.pack_carried(carried_id, self.value)
            if self._cell is not None:
                self._cell[1] = self.packed
        return self.packed

    def __reduce__(self):
        packed = self._packed()
        if packed is not None:
            return (Carried, (None, packed))
        return (Carried, (self.value, None))

    def open(self, scratch: dict | None) -> Any:
        """The value, for the push that consumes it (``scratch``: that worker's), or for
        the client (None). A local value is handed over as it is, and never recycled."""
        if self.value is not None:
            if self._cell is not None:
                self._cell[0] = None
            return self.value
        return self.packed.unpack(scratch)


def _recycle(program, carried_id, cell, scratch) -> None:
    value, packed = cell
    if value is not None and not scratch.get("closed"):
        try:
            program.recycle_carried(carried_id, value, packed, scratch)
        except Exception:  # a finalizer must not raise; the memory is simply not reused
            logger.exception("dask_strads: recycling carried block %r failed", carried_id)


def open_carried(value: Any, scratch: dict | None) -> Any:
    """A carried block's value from what Dask handed over (a scattered restore value
    arrives as it is)."""
    return value.open(scratch) if isinstance(value, Carried) else value


@sizeof.register(Carried)
def _sizeof_carried(obj: Carried) -> int:
    return sizeof(obj.value) if obj.value is not None else sizeof(obj.packed)


def pick(result: dict, field: str, key: Hashable | None = None) -> Any:
    """Split a push task's result on its worker: a carried block (it moves on from
    there), or the partials for a client that cannot use the reply handler."""
    if result.get("detached") and field == "partials":
        raise RuntimeError("dask_strads: the partials of a detached push travel only "
                           "through the reply handler")
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
    return _block_results(store_of(get_worker()).fit(fit_id), block_ids)


def _block_results(fit, block_ids) -> dict:
    return {b: fit.program.block_result(b, fit.blocks[b]) for b in block_ids}


def release_fit(fit_id: str, before_epoch: int | None = None, dask_worker=None) -> int:
    """Drop a fit's worker-local state (run on every worker with ``client.run``); with
    ``before_epoch``, only blocks of an earlier placement (a release that arrives after
    the next placement's blocks must leave them alone)."""
    store = dask_worker.extensions.get(EXTENSION) if dask_worker is not None else None
    if store is None:
        return 0
    fit = store.fits.get(fit_id)
    if fit is None or before_epoch is not None and fit.epoch >= before_epoch:
        return 0
    store.pop(fit_id)
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
        store.pop(f).close()
    return orphans


def client_ids(dask_scheduler=None) -> list:
    """Ids of the clients connected to the scheduler."""
    return list(dask_scheduler.clients)


def fit_ids_here(dask_worker=None) -> list:
    """Fit ids that hold state on this worker (for tests and diagnostics)."""
    store = dask_worker.extensions.get(EXTENSION)
    return [] if store is None else sorted(store.fits)
