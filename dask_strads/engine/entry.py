"""The engine's public faces: :func:`run` for scripts and notebooks (it drives the
runner's coroutine on the client's event loop and turns Ctrl-C into a clean stop that
returns the state reached so far) and :func:`run_async`, the core, for asynchronous
clients."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping

from distributed import Client

from dask_strads.engine.arguments import _check_args
from dask_strads.engine.cluster import cluster_client, embedded_client
from dask_strads.engine.loop import RunResult, _Runner
from dask_strads.engine.process import _stop_on_sigint
from dask_strads.engine.program import Program

__all__ = ["run", "run_async"]

# The calling thread polls for the end of a fit (it sleeps rather than waits on a lock,
# so that Ctrl-C gets through): short enough not to delay the result noticeably.
POLL_SECONDS = 0.002


async def run_async(program: Program, data: Mapping, client: Client | None = None, *,
                    max_rounds: int = 1000, staleness: int = 0,
                    time_limit: float | None = None, progress: bool = True,
                    transport: str | None = None, placement: Mapping | None = None,
                    checkpoint=None, checkpoint_every: int | None = None, resume=None,
                    n_workers: int | None = None, desc: str | None = None,
                    gather_carried: bool = True, gather_results: bool = True,
                    stop_event: threading.Event | None = None,
                    fit_id: str | None = None) -> RunResult:
    """Asynchronous core of :func:`run` (``client`` must be asynchronous, or None)."""
    mode = _check_args(program, data, max_rounds, staleness, time_limit, transport,
                       checkpoint, checkpoint_every, resume)
    kwargs = dict(max_rounds=max_rounds, staleness=staleness, time_limit=time_limit,
                  progress=progress, transport=mode, placement=placement, checkpoint=checkpoint,
                  checkpoint_every=checkpoint_every, resume=resume, desc=desc,
                  gather_carried=gather_carried, gather_results=gather_results,
                  stop_event=stop_event, fit_id=fit_id)
    if client is not None:
        return await _Runner(client, program, data, **kwargs).run()
    async with embedded_client(n_workers) as c:
        return await _Runner(c, program, data, **kwargs).run()


def run(program: Program, data: Mapping, client: Client | None = None, *,
        max_rounds: int = 1000, staleness: int = 0, time_limit: float | None = None,
        progress: bool = True, transport: str | None = None,
        placement: Mapping | None = None, checkpoint=None, checkpoint_every: int | None = None,
        resume=None, n_workers: int | None = None, desc: str | None = None,
        gather_carried: bool = True, gather_results: bool = True,
        fit_id: str | None = None) -> RunResult:
    """Run a schedule / push / pull program on a Dask cluster.

    Parameters
    ----------
    program : Program
        The algorithm (see :class:`dask_strads.engine.Program`).
    data : dict
        ``block_id -> shard``: one entry per resident block. A shard is any picklable
        object (scattered to the block's worker: straight from the client with the
        ``"direct"`` transport, through the scheduler otherwise) or a
        ``distributed.Future`` already on the cluster (placement then prefers the
        worker holding it).
    client : distributed.Client, optional
        Defaults to the current default client; without one, an embedded
        ``LocalCluster`` on 127.0.0.1 is started for this call and closed after it.
    max_rounds : int
        Stop after this many rounds.
    staleness : int
        Rounds allowed in flight beyond the one being pulled (0 = fully synchronous):
        more hides latency, at the price of schedules made on older state.
    time_limit : float, optional
        Stop (cleanly, after pulling what is in flight) after this many seconds.
    progress : bool
        Show a tqdm progress bar (on by default).
    transport : {"auto", "tasks", "direct"}, optional
        Override ``program.transport``.
    placement : dict, optional
        ``block_id -> worker name``; by default balanced over the workers.
    checkpoint : path, optional
        Directory for atomic checkpoints (``checkpoint.npz``, loadable without pickle).
    checkpoint_every : int, optional
        Rounds between snapshots (default: about every
        ``dask-strads.engine.snapshot-interval``, 20 s). Snapshots are kept in
        memory for recovery from lost workers, and written to ``checkpoint`` when given.
    resume : path, optional
        Directory of a checkpoint to continue from.
    n_workers : int, optional
        Workers of the embedded cluster when no client is available.
    desc : str, optional
        Progress-bar label and ``distributed.span`` name.
    gather_carried : bool
        Gather carried blocks to the client at the end (else return their futures).
    gather_results : bool
        Gather the blocks' ``block_result`` to the client at the end (else return one
        future per block, its data on the block's worker: for models larger than the
        client should hold).

    Returns
    -------
    RunResult

    Notes
    -----
    Ctrl-C (KeyboardInterrupt) stops the fit cleanly: rounds in flight are pulled and
    the result so far is returned with ``stop_reason="interrupted"``.
    """
    mode = _check_args(program, data, max_rounds, staleness, time_limit, transport,
                       checkpoint, checkpoint_every, resume)
    if client is not None and not isinstance(client, Client):
        raise TypeError(f"client: expected a distributed.Client or None, got "
                        f"{type(client).__name__}")
    settings = dict(max_rounds=max_rounds, staleness=staleness, time_limit=time_limit,
                    progress=progress, placement=placement, checkpoint=checkpoint,
                    checkpoint_every=checkpoint_every, resume=resume, desc=desc,
                    gather_carried=gather_carried, gather_results=gather_results,
                    fit_id=fit_id)
    with cluster_client(client, n_workers) as client:
        if client.asynchronous:
            return run_async(program, data, client, transport=transport, **settings)
        stop = threading.Event()
        runner = _Runner(client, program, data, transport=mode, stop_event=stop, **settings)
        restore = _stop_on_sigint(stop)
        try:
            future = asyncio.run_coroutine_threadsafe(runner.run(), client.loop.asyncio_loop)
            # Poll with sleep rather than block in Future.result(): a KeyboardInterrupt
            # that lands inside Condition.wait can leave its lock unrecoverable.
            pause = 0.0005
            while not future.done():
                try:
                    time.sleep(pause)
                except KeyboardInterrupt:
                    # Finish the rounds in flight and return what was reached.
                    stop.set()
                pause = min(pause * 2, POLL_SECONDS)
            return future.result()
        finally:
            restore()
