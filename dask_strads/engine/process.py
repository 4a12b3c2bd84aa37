"""What a fit may change in its processes while it runs, each change undone when the
last fit that made it ends and each switched by ``dask-strads.process.*``: the client's
garbage collector and batching interval, numpy's huge-page advice (and, on the workers,
glibc's heap reuse; see :mod:`dask_strads.engine.allocator`). Also Ctrl-C, which stops a
fit run from the main thread cleanly instead of raising in the middle of it.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading

from distributed import Client

from dask_strads import config
from dask_strads.engine import allocator

_SUBMIT_INTERVALS: dict[int, list] = {}  # id(client) -> [fits running, original interval]


def _worker_tuning(process: dict) -> tuple[bool, bool]:
    """What a worker holding blocks of the fit may change in its process: (glibc heap
    reuse, numpy's huge-page advice off)."""
    return process["malloc_reuse"], process["hugepage_advice_off"]


def _process_settings() -> dict:
    """The process tuning a fit may do, from ``dask-strads.process.*`` (each one undone
    when the fit ends)."""
    return {
        "gc_freeze": bool(config.get("process.gc-freeze")),
        "submit_interval": config.seconds("process.submit-interval"),
        "hugepage_advice_off": bool(config.get("process.hugepage-advice-off")),
        "malloc_reuse": bool(config.get("process.malloc-reuse")),
    }


@contextlib.contextmanager
def _prompt_submissions(client: Client, target: float | None):
    """Lower the client's batching interval to ``target`` seconds while fits run on it
    (fits share a client's event loop, so the count needs no lock). Distributed batches
    a client's messages to the scheduler every 10 ms, which would hold back pipelined
    task rounds of about that length; None leaves the client alone."""
    comm = getattr(client, "scheduler_comm", None)
    interval = getattr(comm, "interval", None)
    entry = _SUBMIT_INTERVALS.get(id(client))
    if target is None or (entry is None and (not isinstance(interval, (int, float))
                                             or interval <= target)):
        yield
        return
    entry = _SUBMIT_INTERVALS.setdefault(id(client), [0, interval])
    entry[0] += 1
    comm.interval = min(target, comm.interval)
    try:
        yield
    finally:
        entry[0] -= 1
        if entry[0] == 0:
            comm.interval = entry[1]
            del _SUBMIT_INTERVALS[id(client)]


_GC_FREEZES = [0]  # fits of this process inside _gc_frozen
_GC_LOCK = threading.Lock()


@contextlib.contextmanager
def _gc_frozen(enabled: bool = True):
    """While fits run, the objects the client process held before the first of them
    started are out of the cyclic garbage collector's reach (``gc.freeze``).

    Rounds allocate containers (plans, partials, history rows), which now and then
    triggers a full collection that walks every object the process holds and stalls
    the rounds. Frozen objects are skipped, and are handed back (``gc.unfreeze``) when
    the last fit ends; cycles among them wait until then. A process that froze objects
    itself keeps its own arrangement."""
    if not enabled:
        yield
        return
    with _GC_LOCK:
        ours = _GC_FREEZES[0] > 0 or gc.get_freeze_count() == 0
        if ours:
            if _GC_FREEZES[0] == 0:
                gc.freeze()
            _GC_FREEZES[0] += 1
    try:
        yield
    finally:
        if ours:
            with _GC_LOCK:
                _GC_FREEZES[0] -= 1
                if _GC_FREEZES[0] == 0:
                    gc.unfreeze()


@contextlib.contextmanager
def _no_hugepage_advice(enabled: bool = True):
    """numpy's huge-page advice off in the client process while a fit runs (see
    :mod:`dask_strads.engine.allocator`)."""
    if not enabled:
        yield
        return
    allocator.hold_hugepage_off()
    try:
        yield
    finally:
        allocator.release_hugepage_off()


def _stop_on_sigint(stop: threading.Event):
    """While a fit runs in the main thread, Ctrl-C (SIGINT) sets ``stop`` instead of
    raising. A KeyboardInterrupt can land anywhere in the main thread: outside the polling
    loop's ``try`` it would leave ``run`` with the fit still going in the background, and
    inside a finalizer that the garbage collector runs there Python only prints it.
    Returns the undo function."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return lambda: None  # someone else handles SIGINT: the except clause covers us

    def on_sigint(signum, frame):
        stop.set()  # the rounds in flight finish; the fit returns what it reached

    signal.signal(signal.SIGINT, on_sigint)

    def restore():
        if signal.getsignal(signal.SIGINT) is on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return restore
