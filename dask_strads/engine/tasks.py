"""What the client runs on the workers (and the scheduler) as tasks or ``client.run``.

``init_block_task`` builds a fit's blocks, ``push_task`` runs one round's pushes of a
worker (the tasks transport), ``snapshot_task``, ``result_task`` and
``block_result_task`` read the blocks, ``held_task`` takes out a carried block held
there, ``release_fit`` and ``release_orphans`` free them.
"""

from __future__ import annotations

import contextvars
from collections.abc import Hashable
from typing import Any

import numpy as np
from distributed import get_worker, rejoin, secede

from dask_strads.engine.carried import REPLAYED
from dask_strads.engine.kept import Kept, block_key, kept_of
from dask_strads.engine.shared import attach
from dask_strads.engine.store import EXTENSION, FitStore, _Job, _TaskWait, store_of
from dask_strads.engine.wire import pack, realign


def init_block_task(fit_id: str, program: Any, block_id: Hashable, shard: Any,
                    restore: tuple | None = None, owner: str | None = None,
                    epoch: int = 0, tuning: tuple[bool, bool] = (True, True)) -> Any:
    """Build (or restore) one resident block on this worker; return its summary.
    ``tuning``: what the fit lets this process change while it holds blocks (see
    :meth:`~dask_strads.engine.store.WorkerStore.add`)."""
    return init_block_on(get_worker(), fit_id, program, block_id, shard, restore, owner,
                         epoch, tuning)


def init_block_on(worker, fit_id: str, program: Any, block_id: Hashable, shard: Any,
                  restore: tuple | None = None, owner: str | None = None, epoch: int = 0,
                  tuning: tuple[bool, bool] = (True, True)) -> Any:
    """:func:`init_block_task` on ``worker``, as a task or from a handler's thread."""
    store = store_of(worker)
    fit = store.fits.get(fit_id)
    if fit is not None and fit.epoch > epoch:
        raise RuntimeError(f"dask_strads: stale placement of fit {fit_id} (epoch {epoch}, "
                           f"the blocks here are of epoch {fit.epoch})")
    if fit is None or fit.epoch < epoch:  # a new placement rebuilds every block
        if fit is not None:
            fit.close()
        fit = store.add(fit_id, FitStore(program, owner, epoch, worker.loop, worker), tuning)
    shard = realign(attach(shard))
    if restore is None:
        block = program.init_block(block_id, shard)
    else:
        state_arrays, block_arrays = restore
        if isinstance(block_arrays, Kept):  # staged on this worker (see kept.py)
            block_arrays = kept_of(get_worker()).value(fit_id, block_arrays.number,
                                                       block_key(block_id))
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
    fit = store_of(get_worker()).fits.get(fit_id)
    stale = ("the worker holds no blocks of the fit" if fit is None else
             "its blocks here are of another placement" if fit.epoch != epoch else
             "it ran before" if fit.ran(seq) else None)
    if stale:
        # the scheduler running it again for a lost carried block (see Replayed); no
        # reply either: the seq may be taken in the new epoch
        return {"partials": None, "carried": {}, "elapsed": None, "replayed": stale}
    if detach and not (queue and reply):
        raise ValueError("push_task: detach needs queue and reply")
    if queue:
        waiter = None if detach else _TaskWait()  # a detached task does not wait

        def finish(result, exc):
            try:
                if reply:  # from the runner thread: the client hears at once
                    if exc is None:
                        fit.replies.post(seq, "ok", pack((result[0], result[2])))
                    else:
                        fit.replies.post(seq, "error", exc)
            except Exception as failure:  # say, partials that cannot be pickled
                fit.replies.post(seq, "error", failure)
                exc = exc or failure
            finally:
                if waiter is not None:
                    waiter.finish(result, exc)

        try:
            fit.queue(fit_id, _Job(seq, items, finish, contextvars.copy_context()))
        except BaseException as exc:
            if reply:
                fit.replies.post(seq, "error", exc)
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
            fit.replies.post(seq, "error", exc)
        raise
    if reply:
        fit.replies.post(seq, "ok", pack((partials, elapsed)))
    if seceded:
        rejoin()
    return {"partials": partials, "carried": carried, "elapsed": elapsed}


def pick(result: dict, field: str, key: Hashable | None = None) -> Any:
    """Split a push task's result on its worker: a carried block (it moves on from
    there), or the partials for a client that cannot use the reply handler."""
    if result.get("detached") and field == "partials":
        raise RuntimeError("dask_strads: the partials of a detached push travel only "
                           "through the reply handler")
    if result.get("replayed"):
        if field == "carried":
            return REPLAYED
        raise RuntimeError(f"dask_strads: a push task did nothing: {result['replayed']}")
    value = result[field]
    if field == "partials":
        return {"partials": value, "elapsed": result["elapsed"]}
    return value[key]


def snapshot_task(fit_id: str, block_ids: list) -> dict | None:
    """Checkpoint arrays of the resident blocks on this worker; None if they are gone
    from it (released by a recovery under way): the client then looks for the lost
    worker, and no failed task is logged here."""
    fit = store_of(get_worker()).fits.get(fit_id)
    return None if fit is None else block_snapshots(fit, block_ids)


def block_snapshots(fit, block_ids: list) -> dict | None:
    """Checkpoint arrays of blocks ``block_ids`` of ``fit`` (a FitStore); None if some
    are not here."""
    if any(b not in fit.blocks for b in block_ids):
        return None
    out = {}
    for b in block_ids:
        arrays = fit.program.block_arrays(fit.blocks[b])
        # copies: the next pushes mutate the block (a threads-only cluster would
        # otherwise hand the client the live arrays)
        out[b] = None if arrays is None else {k: np.array(v, copy=True)
                                              for k, v in arrays.items()}
    return out


def held_task(fit_id: str, carried_id: Hashable, made: int) -> Any:
    """A carried block held on this worker (direct transport), taken out as a task
    result: the fit ends and its caller keeps the model on the cluster."""
    return store_of(get_worker()).fit(fit_id).held.take_here(carried_id, made)


def result_task(fit_id: str, block_ids: list) -> dict:
    """Final per-block results of the resident blocks on this worker."""
    return _block_results(store_of(get_worker()).fit(fit_id), block_ids)


def block_result_task(fit_id: str, block_id: Hashable) -> Any:
    """One block's final result, kept on its worker as this task's result."""
    return _block_results(store_of(get_worker()).fit(fit_id), [block_id])[block_id]


def _block_results(fit, block_ids) -> dict:
    return {b: fit.program.block_result(b, fit.blocks[b]) for b in block_ids}


def release_fit(fit_id: str, before_epoch: int | None = None, dask_worker=None) -> int:
    """Drop a fit's worker-local state (run on every worker with ``client.run``); with
    ``before_epoch``, only blocks of an earlier placement (a release that arrives after
    the next placement's blocks must leave them alone)."""
    if dask_worker is None:
        return 0
    if before_epoch is None:  # the fit is over: its snapshot's copies go too
        kept_of(dask_worker).drop(fit_id)
    store = dask_worker.extensions.get(EXTENSION)
    if store is None:
        return 0
    fit = store.fits.get(fit_id)
    if fit is None or before_epoch is not None and fit.epoch >= before_epoch:
        return 0
    store.pop(fit_id)
    fit.close()
    return len(fit.blocks)


def release_every_fit(dask_worker) -> None:
    """Drop every fit's state here: the worker is closing. Its process may outlive it
    (an in-process cluster runs workers in the client's process), and the fits'
    changes to the allocator and numpy must go back with them."""
    store = dask_worker.extensions.get(EXTENSION)
    for fit_id in set(kept_of(dask_worker).fits) | set(store.fits if store else ()):
        release_fit(fit_id, dask_worker=dask_worker)


def release_orphans(live_clients: list, dask_worker=None) -> list:
    """Drop fits whose client is gone (its process died mid-fit): nobody will release
    them otherwise. Run on every worker when a new fit starts."""
    live = set(live_clients)
    kept = kept_of(dask_worker)
    orphans = set(kept.orphans(live))
    for f in orphans:
        kept.drop(f)
    store = dask_worker.extensions.get(EXTENSION)
    if store is None:
        return sorted(orphans)
    gone = [f for f, fit in store.fits.items() if fit.owner is not None
            and fit.owner not in live]
    for f in gone:
        store.pop(f).close()
    return sorted(orphans | set(gone))


def client_ids(dask_scheduler=None) -> list:
    """Ids of the clients connected to the scheduler."""
    return list(dask_scheduler.clients)


def fit_ids_here(dask_worker=None) -> list:
    """Fit ids that hold state on this worker (for tests and diagnostics)."""
    store = dask_worker.extensions.get(EXTENSION)
    return [] if store is None else sorted(store.fits)
