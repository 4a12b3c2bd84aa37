"""The worker-local store of every fit's blocks, and the order its pushes run in.

A :class:`WorkerStore` (a worker extension) holds one :class:`FitStore` per fit: its
program, its resident blocks (memory Dask does not manage, released when the fit ends),
and the machinery that keeps a block's pushes in round order whichever way they
arrive: a push runs when its sequence number is due and no other push of the fit runs;
one that arrives early either waits in its own thread (``claim_wait``) or queues for
the fit's runner thread (``queue``), which starts it the moment the previous push ends,
with no hop from the event loop to an executor and back between two pushes.

A FitStore also holds the fit's mailboxes on this worker: the outcomes of its push
tasks (:mod:`~dask_strads.engine.replies`), the values of its exchange rounds
(:mod:`~dask_strads.engine.exchanges`) and, on the direct transport, the carried blocks
its pushes made (:mod:`~dask_strads.engine.held`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from dask_strads.engine import allocator
from dask_strads.engine.carried import Carried, open_carried
from dask_strads.engine.exchanges import Mailbox
from dask_strads.engine.held import Held, HeldHere
from dask_strads.engine.replies import Replies
from dask_strads.engine.shared_carried import CarriedFiles
from dask_strads.engine.wire import realign

try:  # get_worker() inside a push that does not run as a task (the direct transport)
    from distributed.worker import _worker_cvar
except ImportError:  # pragma: no cover - a distributed without it: get_worker() fails there
    _worker_cvar = None

if TYPE_CHECKING:
    from dask_strads.engine.exchanges import _Exchange

logger = logging.getLogger("dask_strads")

EXTENSION = "dask_strads"


class _Job:
    """A push queued for the runner thread. ``finish(result, exc)`` hands its outcome
    back (to the event loop that awaits a direct push, or to the task thread that
    waits); ``context``: the task's context variables, for ``get_worker()`` in the
    push; ``exchange``, ``made``: as for :meth:`FitStore.push_items`."""

    __slots__ = ("seq", "items", "finish", "context", "exchange", "made")

    def __init__(self, seq: int, items, finish, context: contextvars.Context | None = None,
                 exchange: _Exchange | None = None, made: int | None = None):
        self.seq = seq
        self.items = items
        self.finish = finish
        self.context = context
        self.exchange = exchange
        self.made = made


def _loop_job(seq: int, items, loop: asyncio.AbstractEventLoop,
              exchange: _Exchange | None = None,
              made: int | None = None) -> tuple[_Job, asyncio.Future]:
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
                exchange=exchange, made=made), future


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

    def __init__(self, program: Any, owner: str | None = None, epoch: int = 0, loop=None,
                 worker=None):
        self.program = program
        self.worker = worker  # what get_worker() answers inside a push
        self.owner = owner  # id of the client that runs the fit
        self.epoch = epoch  # placement epoch of the fit these blocks belong to
        self.blocks: dict[Hashable, Any] = {}
        # the program's worker-local memory for carried blocks (see carried.Carried)
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
        self.closed = False
        # pushes arrive over the direct channel: if the worker retires, the fit can still
        # reach it to take its blocks (see handover.py)
        self.direct = False
        # ``loop``: the worker's event loop, where push task outcomes are delivered
        self.replies = Replies(loop)
        self.mail = Mailbox()  # values of the other pushes of exchange rounds
        self.held = Held(loop)  # carried blocks made here (direct transport)
        self._carried_files: CarriedFiles | None = None

    def carried_files(self, fit_id: str) -> CarriedFiles:
        """This worker's shared files of the fit's carried blocks."""
        if self._carried_files is None:
            self._carried_files = CarriedFiles(fit_id, self.epoch)
        return self._carried_files

    def push_items(self, items, exchange: _Exchange | None = None,
                   made: int | None = None) -> tuple[dict, dict, float]:
        """Run the pushes of one round for the blocks listed in ``items`` (with
        ``exchange``: the one block of an exchange round here). ``made``: the round's
        number when its carried blocks stay here (direct transport) rather than being
        returned."""
        t0 = time.perf_counter()
        token = None
        if _worker_cvar is not None and self.worker is not None:
            token = _worker_cvar.set(self.worker)
        try:
            partials, carried_out = self._push_items(items, exchange, made)
        finally:
            if token is not None:
                _worker_cvar.reset(token)
        elapsed = time.perf_counter() - t0
        self.push_seconds = 0.7 * self.push_seconds + 0.3 * elapsed
        return partials, carried_out, elapsed

    def _push_items(self, items, exchange, made) -> tuple[dict, dict]:
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
                    if isinstance(carried, HeldHere):
                        carried = self.held.take_here(carried_id, carried.made)
                    carried = realign(open_carried(carried, self.scratch))
                partial, new_value = self.program.push(block, part, carried)
                partials[block_id] = partial
                value = Carried.wrap(self.program, carried_id, new_value, self.scratch)
                if made is None:
                    carried_out[carried_id] = value
                else:  # before the push's turn ends: the next push here may take it
                    self.held.put(carried_id, made, value)
        return partials, carried_out

    def check_epoch(self, fit_id: str, epoch: int) -> None:
        """Refuse a push of an earlier placement: after a recovery the scheduler may rerun
        a lost push task (a carried block's history), and a late direct call may arrive;
        either would replay an old round on the rebuilt blocks."""
        if epoch != self.epoch:
            raise RuntimeError(f"dask_strads: stale push of fit {fit_id} (placement epoch "
                               f"{epoch}; the blocks here are of epoch {self.epoch})")

    def ran(self, seq: int) -> bool:
        """Push ``seq`` ran, runs (only the due push runs) or waits in the queue."""
        with self.turn:
            return self._duplicate(seq)

    def _duplicate(self, seq: int) -> bool:
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
                    result = self.push_items(job.items, job.exchange, job.made)
                else:
                    result = job.context.run(self.push_items, job.items, job.exchange,
                                             job.made)
            except BaseException as exc:  # the caller gets it
                error = exc
            self._release(job.seq)
            _finish(job, result, error)
        for job in jobs:
            _finish(job, None, RuntimeError(f"dask_strads: push {job.seq} never ran: the "
                                            "fit's blocks here were released"))

    def close(self) -> None:
        """The fit was released or re-placed: fail what waits for it."""
        with self.turn:
            self.closed = True
            self.turn.notify_all()  # the runner fails its queued pushes and stops
        self.mail.close()  # pushes waiting in an exchange fail
        self.held.close()  # workers waiting for a carried block made here hear None
        self.replies.close()  # handlers waiting for a push task's outcome answer None
        self.scratch.clear()
        self.scratch["closed"] = True
        if self._carried_files is not None:
            self._carried_files.close()


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
