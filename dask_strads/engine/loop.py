"""The scheduler coroutine: rounds of schedule -> push -> pull on dask.distributed.

``run_async`` is the core; ``run`` is its synchronous face for scripts and notebooks
(it drives the coroutine on the client's event loop and turns Ctrl-C into a clean stop
that returns the state reached so far).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import gc
import logging
import os
import signal
import statistics
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from distributed import Client, Future, default_client
from distributed.client import _wait as _wait_futures  # await futures without their data

from dask_strads import config
from dask_strads.engine import allocator
from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine.placement import balance, replace_lost, sort_names
from dask_strads.engine.program import Plan, Program, RoundContext
from dask_strads.engine.worker import (
    PLUGIN_NAME,
    Carried,
    ExchangeAbandoned,
    StradsPlugin,
    client_ids,
    init_block_task,
    install_handlers,
    open_carried,
    pack,
    pick,
    push_task,
    release_fit,
    release_orphans,
    result_task,
    snapshot_task,
    unpack,
)

__all__ = ["RunResult", "WorkerLost", "run", "run_async"]

logger = logging.getLogger("dask_strads")

TRANSPORTS = ("auto", "tasks", "direct")
# hooks without a useful default: run() refuses a program without them, before any work
REQUIRED_HOOKS = ("push", "schedule", "pull")
# The calling thread polls for the end of a fit (it sleeps rather than waits on a lock,
# so that Ctrl-C gets through): short enough not to delay the result noticeably.
POLL_SECONDS = 0.002
_SUBMIT_INTERVALS: dict[int, list] = {}  # id(client) -> [fits running, original interval]
# Releasing a fit's blocks (a broadcast through the scheduler) is waited for this long at
# most (see _Runner._release_blocks).
RELEASE_SECONDS = 2.0


class WorkerLost(RuntimeError):
    """A worker holding blocks of the fit left the cluster."""


@dataclass
class RunResult:
    """What :func:`run` returns.

    Attributes
    ----------
    state : object
        The client state after the last pull.
    history : pandas.DataFrame
        One row per round: ``round``, ``time`` (seconds since the start), ``objective``,
        ``schedule_s``, ``push_s`` (slowest worker's compute), ``pull_s``, ``wait_s``
        (client waiting on workers), ``round_s``, ``transport``, and the program's metrics.
    n_rounds : int
        Rounds pulled.
    stop_reason : str
        ``"converged"``, ``"done"`` (schedule returned None), ``"max_rounds"``,
        ``"time_limit"`` or ``"interrupted"``.
    placement : dict
        ``block_id -> worker name`` at the end.
    block_results : dict
        ``block_id -> Program.block_result(...)``.
    carried : dict
        ``carried_id -> final value`` of each carried block (gathered), or futures when
        ``gather_carried=False``.
    transport : str
        The transport used last (``"tasks"`` or ``"direct"``).
    recoveries : list of dict
        One entry per recovery from a lost worker (round, lost workers, seconds).
    scheduler_address : str
        Address of the scheduler the fit ran on.
    """

    state: Any
    history: pd.DataFrame
    n_rounds: int
    stop_reason: str
    placement: dict
    block_results: dict
    carried: dict
    transport: str
    fit_id: str
    elapsed: float
    recoveries: list = field(default_factory=list)
    scheduler_address: str | None = None


@dataclass
class _Round:
    number: int
    plan: Plan
    transport: str
    started: float
    schedule_s: float
    pending: dict  # worker name -> asyncio.Task giving the worker's partials
    futures: list  # the round's push tasks (tasks transport)


# ------------------------------------------------------------------------- validation
def _check_args(program, data, max_rounds, staleness, time_limit, transport,
                checkpoint, checkpoint_every, resume):
    if not isinstance(program, Program):
        raise TypeError(f"program: expected a dask_strads.Program, got {type(program).__name__}")
    missing = [hook for hook in REQUIRED_HOOKS
               if getattr(type(program), hook) is getattr(Program, hook)]
    if missing:
        raise TypeError(f"program: {type(program).__name__} does not define "
                        f"{', '.join(missing)} (every program must)")
    if checkpoint is not None or resume is not None:
        missing = [hook for hook in ("state_arrays", "load_state")
                   if getattr(type(program), hook) is getattr(Program, hook)]
        if missing:
            raise TypeError(f"program: {type(program).__name__} does not define "
                            f"{', '.join(missing)}, which checkpoints need")
    if not isinstance(data, Mapping) or not data:
        raise ValueError("data: expected a non-empty dict block_id -> shard, "
                         f"got {type(data).__name__}{'' if data else ' (empty)'}")
    if not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 1:
        raise ValueError(f"max_rounds: expected an integer >= 1, got {max_rounds!r}")
    if not isinstance(staleness, int) or isinstance(staleness, bool) or staleness < 0:
        raise ValueError(f"staleness: expected an integer >= 0, got {staleness!r}")
    if time_limit is not None and not (time_limit > 0):
        raise ValueError(f"time_limit: expected seconds > 0 or None, got {time_limit!r}")
    t = transport if transport is not None else program.transport
    if t not in TRANSPORTS:
        raise ValueError(f"transport: expected one of {TRANSPORTS}, got {t!r}")
    if checkpoint_every is not None and (not isinstance(checkpoint_every, int)
                                         or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every: expected an integer >= 1 or None, got "
                         f"{checkpoint_every!r}")
    if resume is not None and not os.path.exists(os.path.join(os.fspath(resume), ckpt.FILENAME)):
        raise FileNotFoundError(f"resume: no checkpoint found in {os.fspath(resume)!r}")
    _engine_settings()
    return t


def _engine_settings() -> dict:
    """``dask-strads.engine.*``, checked (see dask_strads.yaml)."""
    budget = float(config.get("engine.snapshot-budget"))
    if not 0 < budget <= 1:
        raise ValueError(f"dask-strads.engine.snapshot-budget: expected a share of the fit's "
                         f"time in (0, 1], got {budget!r}")
    probe = config.get("engine.auto-probe-rounds")
    if not isinstance(probe, int) or isinstance(probe, bool) or probe < 1:
        raise ValueError(f"dask-strads.engine.auto-probe-rounds: expected an integer >= 1, "
                         f"got {probe!r}")
    return {
        "snapshot_interval": config.seconds("engine.snapshot-interval") or 0.0,
        "snapshot_budget": budget,
        "dashboard_interval": config.seconds("engine.dashboard-interval"),
        "dashboard_workers": int(config.get("engine.dashboard-workers")),
        "auto_probe_rounds": probe,
        "auto_direct_below": config.seconds("engine.auto-direct-below") or 0.0,
        "reply_channel": bool(config.get("engine.reply-channel")),
    }


# ------------------------------------------------------------------------- the runner
class _Runner:
    def __init__(self, client: Client, program: Program, data: Mapping, *, max_rounds: int,
                 staleness: int, time_limit: float | None, progress: bool, transport: str,
                 placement: Mapping | None, checkpoint, checkpoint_every, resume, desc,
                 gather_carried: bool, stop_event: threading.Event | None, fit_id: str | None):
        self.client = client
        self.program = program
        self.data = dict(data)
        self.max_rounds = max_rounds
        self.staleness = staleness
        self.time_limit = time_limit
        self.progress = progress
        self.transport_mode = transport
        self.transport = "tasks" if transport in ("auto", "tasks") else "direct"
        self.user_placement = dict(placement) if placement else None
        self.checkpoint_dir = None if checkpoint is None else os.fspath(checkpoint)
        self.checkpoint_every = checkpoint_every
        self.resume = resume
        self.desc = desc or f"dask_strads.{program.name}"
        self.gather_carried = gather_carried
        self.stop_event = stop_event or threading.Event()
        self.fit_id = fit_id or uuid.uuid4().hex[:12]
        self.name = program.name
        self.history: list[dict] = []
        self.recoveries: list[dict] = []
        self.lost = asyncio.Event()
        self.lost_workers: set = set()
        self.gone: set = set()  # addresses of the workers that left since the fit started
        self.snapshot: ckpt.Snapshot | None = None
        self.snapshot_ok = True
        self.last_snapshot_at = 0.0
        self.last_snapshot_round = 0
        self.snapshot_cost = 0.0
        self.carry_seen = False
        self.probe_push: list[float] = []
        self.last_task_round = time.perf_counter()
        self.dashboard_turn = 0  # the next worker a sampled round sends as a task
        self.epoch = -1  # placements of the blocks so far, minus one (see _key)
        # dask-strads.engine.* and .process.*, read once per fit (see dask_strads.yaml)
        settings = _engine_settings()
        self.snapshot_interval = settings["snapshot_interval"]
        self.snapshot_budget = settings["snapshot_budget"]
        self.dashboard_interval = settings["dashboard_interval"]  # None: never
        self.dashboard_workers = settings["dashboard_workers"]
        self.auto_probe_rounds = settings["auto_probe_rounds"]
        self.auto_direct_below = settings["auto_direct_below"]
        self.use_reply_channel = settings["reply_channel"]
        self.reply_channel = self.use_reply_channel  # False once a worker's handler failed
        self.process = _process_settings()

    # -------------------------------------------------------------- cluster facts
    async def _workers(self) -> dict:
        """Current workers: name -> address. Without those the scheduler has announced
        gone meanwhile: its answer may predate their removal, whose event arrived while
        the answer was on its way (blocks placed on such a worker waited for it)."""
        info = await self.client.scheduler.identity()
        return {w["name"]: addr for addr, w in info["workers"].items()
                if addr not in self.gone}

    def _pin(self, name) -> str:
        """The address to pin a task of worker ``name`` to. Never the name itself: a
        task pinned to the name of a worker that just died fails its whole submission on
        the scheduler (a name it cannot resolve), which leaves a half-made task behind
        that a later cancel trips over, dropping this client's connection and every key
        it holds; one pinned to the address waits, unrunnable, until the lost-worker path
        cancels it. Nor does a nanny-restarted worker (same name, new address, no blocks)
        pick up a task meant for its predecessor."""
        return self.addresses[name]

    def _on_event(self, event):
        _, msg = event
        if not isinstance(msg, dict) or msg.get("action") != "remove-worker":
            return
        addr = msg.get("worker")
        logger.debug("dask_strads: fit %s heard that %s left at %.2f s", self.fit_id, addr,
                     self.elapsed() if hasattr(self, "t_start") else -1)
        self.gone.add(addr)
        holders = set(getattr(self, "placement", {}).values())
        for name, a in list(getattr(self, "addresses", {}).items()):
            if a == addr and name in holders:
                self.lost_workers.add(name)
                self.lost.set()

    async def _ensure_plugin(self):
        for attempt in range(3):
            try:
                await self.client.register_plugin(StradsPlugin(), name=PLUGIN_NAME)
                break
            except OSError as exc:
                # A worker died while the scheduler sent the plugin around: the scheduler
                # holds it for the workers that join (registering again is a no-op), but
                # the broadcast gave up, maybe before reaching all the others.
                logger.debug("dask_strads: registering the worker plugin failed (%s); the "
                             "workers get its handlers directly", repr(exc))
                if attempt == 2:
                    raise
        if attempt:
            await self.client.run(install_handlers, asynchronous=True, on_error="ignore")
        # Fits whose client died mid-fit left their blocks behind: free them now.
        live = await self.client.run_on_scheduler(client_ids, asynchronous=True)
        dropped = await self.client.run(release_orphans, live, asynchronous=True,
                                        on_error="ignore")
        orphans = sorted({f for ids in dropped.values() if isinstance(ids, list) for f in ids})
        if orphans:
            logger.warning("dask_strads: freed the blocks of fits %s, whose client is gone",
                           orphans)

    # -------------------------------------------------------------- placement
    async def _place(self):
        self.addresses = await self._workers()
        if not self.addresses:
            await self.client.wait_for_workers(1)
            self.addresses = await self._workers()
        names = sort_names(self.addresses)
        if self.user_placement is not None:
            missing = set(self.data) - set(self.user_placement)
            if missing:
                raise ValueError(
                    f"placement: no worker given for blocks {sorted(map(str, missing))}")
            unknown = {w for w in self.user_placement.values() if w not in self.addresses}
            if unknown:
                raise ValueError(f"placement: unknown worker names {sorted(map(str, unknown))}; "
                                 f"workers are {names}")
            self.placement = {b: self.user_placement[b] for b in self.data}
            return
        preferred = {}
        futs = {b: s for b, s in self.data.items() if isinstance(s, Future)}
        if futs:
            who = await self.client.scheduler.who_has(keys=[f.key for f in futs.values()])
            by_addr = {a: n for n, a in self.addresses.items()}
            for b, f in futs.items():
                holders = who.get(f.key) or []
                if holders and holders[0] in by_addr:
                    preferred[b] = by_addr[holders[0]]
        self.placement = balance(list(self.data), names, preferred=preferred or None)

    async def _shard_futures(self) -> dict:
        """Local shards are scattered to their block's worker; futures pass through."""
        out = {}
        for b, shard in self.data.items():
            if isinstance(shard, Future):
                out[b] = shard
        local = [b for b in self.data if b not in out]

        async def scatter(b):
            addr = self.addresses[self.placement[b]]
            [f] = await self.client.scatter([self.data[b]], workers=[addr], hash=False,
                                            direct=self._reaches_workers())
            return f

        # All at once: the workers receive (and allocate) their shards concurrently. Watched
        # for lost workers like any wait: a scatter to a worker that died retries its
        # connection for distributed's whole connect timeout before it fails.
        # A scatter given up is left to end by itself (shielded): cancelled, it would
        # orphan distributed's inner send to the worker, whose failure asyncio then
        # reports as "Task exception was never retrieved".
        scatters = [asyncio.ensure_future(scatter(b)) for b in local]
        for t in scatters:
            t.add_done_callback(_retrieve)
        waits = [asyncio.shield(t) for t in scatters]
        for b, f in zip(local, await self._wait(waits) if waits else [], strict=True):
            out[b] = f
        return out

    def _reaches_workers(self) -> bool:
        """Whether data may go to the workers straight from the client: with the direct
        transport the client calls them anyway. Through the scheduler, every shard is
        received and sent again by its process."""
        return self.transport_mode == "direct"

    def _key(self, kind: str, *parts: str) -> str:
        """A task key of this fit. Keys carry the placement epoch: rounds replayed after a
        recovery must not reuse the keys of their cancelled first run, which the scheduler
        may still know (it warns of a different run_spec and can deadlock)."""
        epoch = f"-e{self.epoch}" if self.epoch else ""
        return "-".join((f"strads-{self.name}-{kind}-{self.fit_id}{epoch}", *parts))

    async def _init_blocks(self, restore: ckpt.Snapshot | None = None) -> dict:
        self.epoch += 1  # every (re)placement of the blocks starts a new epoch
        shards = await self._shard_futures()
        logger.debug("dask_strads: fit %s: shards of epoch %d arrived at %.2f s", self.fit_id,
                     self.epoch, self.elapsed())
        futs = {}
        for b in self.data:
            args = None
            if restore is not None:
                args = (restore.state, restore.blocks.get(b))
            futs[b] = self.client.submit(
                init_block_task, self.fit_id, self.program, b, shards[b], args, self.client.id,
                self.epoch, tuning=_worker_tuning(self.process),
                key=self._key("init", _token(b)),
                workers=[self._pin(self.placement[b])], allow_other_workers=False, pure=False,
            )
        values = await self._wait(list(futs.values()))
        logger.debug("dask_strads: fit %s placed its blocks (epoch %d) on workers %s",
                     self.fit_id, self.epoch, _short(sort_names(set(self.placement.values()))))
        self.seq = {w: 0 for w in set(self.placement.values())}
        self.carried: dict[Hashable, Future] = {}
        self.retiring: list[Future] = []  # collected push tasks the scheduler has not seen end
        self.reply_channel = self.use_reply_channel  # task partials via the reply handler
        self.replied: set = set()  # workers whose reply handler answered, this placement
        if restore is not None:
            for cid, value in restore.carried.items():
                # Placed on the worker that receives it next; it moves from there by task.
                holder = self._next_holder(cid)
                if not isinstance(value, Carried):  # a packed one is only ever read
                    [value] = self._private([value])
                [f] = await self.client.scatter([value], workers=[self.addresses[holder]],
                                                hash=False)
                self.carried[cid] = f
        return dict(zip(futs, values, strict=True))

    def _private(self, values: list) -> list:
        """Carried values the client keeps or hands out, made its own: pushes may update
        carried blocks in place, and an in-process cluster (``inproc://``) passes objects
        between client and workers without copying them. Over TCP they are copies already."""
        if not self._in_process():
            return list(values)
        return [copy.deepcopy(v) for v in values]

    def _in_process(self) -> bool:
        return str(self.client.scheduler.address).startswith("inproc://")

    def _next_holder(self, carried_id):
        names = sort_names(set(self.placement.values()))
        return names[hash(carried_id) % len(names)] if not isinstance(carried_id, int) \
            else names[carried_id % len(names)]

    # -------------------------------------------------------------- waiting
    async def _wait(self, awaitables):
        """Await futures/tasks, but give up at once when a block's worker is lost."""
        if awaitables and not any(isinstance(a, Future) for a in awaitables):
            return await self._wait_direct(awaitables)

        async def gather():
            futs = [a for a in awaitables if isinstance(a, Future)]
            tasks = [a for a in awaitables if not isinstance(a, Future)]
            fut_values = await self.client.gather(futs, asynchronous=True) if futs else []
            task_values = await asyncio.gather(*tasks) if tasks else []
            fi, ti = iter(fut_values), iter(task_values)
            return [next(fi) if isinstance(a, Future) else next(ti) for a in awaitables]

        job = asyncio.ensure_future(gather())
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            done, _ = await asyncio.wait({job, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if job in done:
            try:
                return job.result()
            except OSError as exc:  # direct channel to a dead worker
                await self._confirm_loss(exc)
                raise
        # Never cancel a task inside Client.gather: concurrent gathers share one pending
        # request (client._gather_future), and a task cancelled just as it created that
        # request cancels it before it can clear itself, so every later gather on this
        # client fails with CancelledError. Cancel what it waits on instead; it then ends.
        job.add_done_callback(_retrieve)
        await self._cancel(awaitables)
        raise WorkerLost(f"lost workers {sorted(map(str, self.lost_workers))}")

    async def _cancel(self, awaitables) -> None:
        """Cancel futures (on the scheduler: inside the client's loop ``Future.cancel()``
        only returns a coroutine) and direct-channel calls."""
        futs = [a for a in awaitables if isinstance(a, Future)]
        for a in awaitables:
            if not isinstance(a, Future):
                a.cancel()
        if futs:
            await self.client.cancel(futs, asynchronous=True)

    async def _wait_direct(self, tasks):
        """The direct channel's hot path: wait on the calls themselves, with one
        long-lived watcher of the lost-worker event (no extra tasks per round)."""
        watcher = getattr(self, "_lost_watcher", None)
        if watcher is None or watcher.done() and not self.lost.is_set():
            watcher = self._lost_watcher = asyncio.ensure_future(self.lost.wait())
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending | {watcher},
                                               return_when=asyncio.FIRST_COMPLETED)
            pending.discard(watcher)
            # a push's own error before the exchanges it made others abandon, when
            # both arrive in one wake-up
            failed = [t.exception() for t in done if t is not watcher and t.exception()]
            if failed:
                exc = min(failed, key=lambda e: isinstance(e, ExchangeAbandoned))
                if isinstance(exc, ExchangeAbandoned) and pending:
                    # the push that failed first says why: its error is on its way
                    exc = await _root_cause(exc, pending)
                for p in pending:
                    p.cancel()
                if isinstance(exc, OSError):  # the call to a dead worker failed
                    await self._confirm_loss(exc)
                raise exc
            if watcher in done:
                for p in pending:
                    p.cancel()
                raise WorkerLost(f"lost workers {sorted(map(str, self.lost_workers))}")
        return [t.result() for t in tasks]

    async def _confirm_loss(self, exc):
        """A direct call failed: find out (for a few seconds) whether its worker is gone."""
        deadline = time.perf_counter() + 10
        while True:
            alive = await self._workers()
            gone = {n for n in set(self.placement.values()) if n not in alive
                    or alive[n] != self.addresses.get(n)} | self.lost_workers
            if gone:
                self.lost_workers |= gone
                self.lost.set()
                raise WorkerLost(f"lost workers {sorted(map(str, gone))}") from exc
            if time.perf_counter() > deadline:
                return
            await asyncio.sleep(0.1)

    # -------------------------------------------------------------- one round
    def _group(self, plan: Plan) -> dict:
        by_worker: dict = {}
        for b, part in plan.parts.items():
            if b not in self.placement:
                raise KeyError(f"schedule: plan names block {b!r}, which is not in `data`")
            by_worker.setdefault(self.placement[b], []).append((b, part, plan.carry.get(b)))
        return by_worker

    def _exchange_ok(self) -> bool:
        """Whether a plan may ask for ``exchange``: its pushes wait for each other, so
        no two blocks may share a worker, and they need the direct channel."""
        holders = [self.placement[b] for b in self.data]
        return self.transport == "direct" and len(set(holders)) == len(holders)

    def _submit(self, number: int, plan: Plan, schedule_s: float) -> _Round:
        by_worker = self._group(plan)
        transport = self.transport
        now = time.perf_counter()
        peers = None
        sampled = None  # in a sampled round: the workers whose pushes go as tasks
        if plan.exchange:
            if plan.carry or not self._exchange_ok():
                raise ValueError("schedule: a plan asked for exchange while the program's "
                                 "ctx.can_exchange was False" if not plan.carry else
                                 "schedule: a plan cannot both exchange and carry blocks")
            peers = pack({b: self.addresses[self.placement[b]] for b in plan.parts})
        elif transport == "direct" and self.dashboard_interval is not None and \
                now - self.last_task_round >= self.dashboard_interval:
            transport = "tasks"  # a sampled round the dashboard can show
            sampled = self._dashboard_sample(by_worker)
        if transport == "tasks":
            self.last_task_round = now
        if plan.carry:
            self.carry_seen = True
            if transport == "direct":
                raise ValueError("transport: carried blocks need the 'tasks' transport, "
                                 "but 'direct' was requested")
        pending, futures = {}, []
        for w, items in by_worker.items():
            seq = self.seq[w]
            self.seq[w] = seq + 1
            if transport == "tasks" and (sampled is None or w in sampled):
                pending[w] = self._submit_task(number, w, seq, items, futures)
            else:
                payload = pack([(b, part, None, None) for b, part, _ in items])
                pending[w] = asyncio.ensure_future(self._direct(w, seq, payload, peers, number))
        return _Round(number, plan, transport, time.perf_counter(), schedule_s, pending,
                      futures)

    def _dashboard_sample(self, by_worker: dict) -> set:
        """The workers of a sampled round whose pushes go as tasks: a few of them, in
        turn, so that the task stream shows every worker over time (every task costs
        the scheduler and the client CPU, which would grow with the workers)."""
        workers = sorted(by_worker, key=str)
        k = max(1, min(self.dashboard_workers, len(workers)))
        start = self.dashboard_turn % len(workers)
        self.dashboard_turn = start + k
        return {workers[(start + i) % len(workers)] for i in range(k)}

    def _submit_task(self, number, w, seq, items, futures: list):
        wkey = _token(w)
        task_items = [(b, part, cid, None if cid is None else self.carried.get(cid))
                      for b, part, cid in items]
        key = self._key("push", f"r{number}", wkey)
        queue = self.staleness > 0  # pipelined: queue for the runner thread
        # The task may end once its push is queued when the reply handler is known to
        # reach this client and no carried block needs the task's result.
        detach = (queue and self.reply_channel and w in self.replied
                  and all(cid is None for _, _, cid in items))
        fut = self.client.submit(
            push_task, self.fit_id, seq, task_items, self.epoch, self.reply_channel,
            queue, detach, key=key,
            workers=[self._pin(w)], allow_other_workers=False, pure=False,
        )
        futures.append(fut)
        for _, _, cid in items:
            if cid is not None:  # carried blocks stay on the cluster, moving on from here
                self.carried[cid] = self.client.submit(
                    pick, fut, "carried", cid,
                    key=self._key("carry", f"r{number}", _token(cid)),
                    workers=[self._pin(w)], allow_other_workers=False, pure=False,
                )
        return asyncio.ensure_future(self._task_reply(number, w, seq, fut, detach))

    async def _task_reply(self, number, w, seq, fut, detached=False):
        """The partials of a push task, straight from its worker's reply handler (asked
        for at submission; it answers when the push ends). The task's own state is
        watched too, for errors that happen before the push runs (say, unpickling).
        A client that cannot reach the workers directly falls back to the scheduler's
        way for the rest of the fit: wait for the task, gather its partials."""
        if self.reply_channel:
            poll = asyncio.ensure_future(self.client.rpc(self.addresses[w]).strads_reply(
                fit_id=self.fit_id, seq=seq, epoch=self.epoch))
            watch = asyncio.ensure_future(_wait_futures([fut]))
            try:
                await asyncio.wait({poll, watch}, return_when=asyncio.FIRST_COMPLETED)
                if not poll.done() and fut.status == "error":
                    await fut  # raises the task's exception
                if not poll.done() and fut.status == "cancelled":  # no reply will come
                    raise RuntimeError(f"dask_strads: push task {fut.key} was cancelled on "
                                       "the scheduler")
                try:
                    response = await poll  # the task ended well: its reply is on its way
                except OSError as exc:
                    for pause in (0.0, 0.5):  # a closing worker may still be listed
                        await asyncio.sleep(pause)
                        if (await self._workers()).get(w) != self.addresses.get(w):
                            raise  # the worker is gone: the lost-worker path takes over
                    if detached:
                        raise RuntimeError(
                            f"dask_strads: the reply of push {seq} of fit {self.fit_id} "
                            f"from worker {w!r} was lost ({exc}), and the task kept no "
                            "copy of it") from exc
                    if self.reply_channel:
                        logger.warning("dask_strads: fit %s cannot reach worker %r directly "
                                       "(%s); push results go through the scheduler from "
                                       "now on", self.fit_id, w, exc)
                    self.reply_channel = False
                    response = _NO_REPLY
            finally:
                for t in (poll, watch):
                    if not t.done():
                        t.cancel()
                    else:
                        _retrieve(t)
            if response is None:
                released = RuntimeError(f"dask_strads: push {seq} of fit {self.fit_id} on "
                                        f"worker {w!r} never ran: its blocks were released")
                # a closing worker (retired, or shut down) releases its blocks before it
                # leaves the scheduler: that is a lost worker, which recovery handles
                await self._confirm_loss(released)
                raise released
            if response is not _NO_REPLY:
                partials, elapsed = unpack(response)
                self.replied.add(w)
                return {"partials": partials, "elapsed": elapsed}
        # not pinned: should the worker retire, its results move and the pick follows them
        part = self.client.submit(pick, fut, "partials",
                                  key=self._key("partials", f"r{number}", _token(w)),
                                  pure=False)
        [value] = await self.client.gather([part], asynchronous=True)
        return value

    async def _direct(self, w, seq, payload, peers=None, number=None):
        addr = self.addresses[w]
        extra = {} if peers is None else {"peers": peers, "round": number}
        response = await self.client.rpc(addr).strads_push(
            fit_id=self.fit_id, seq=seq, payload=payload, epoch=self.epoch,
            sync=self.staleness == 0, **extra)
        partials, elapsed = unpack(response)
        return {"partials": partials, "elapsed": elapsed}

    async def _collect(self, rnd: _Round):
        workers = list(rnd.pending)
        t0 = time.perf_counter()
        results = await self._wait([rnd.pending[w] for w in workers])
        wait_s = time.perf_counter() - t0
        # The reply beats the scheduler's news of the task's end: keep the futures until
        # it knows (a task released while "processing" would vanish from the task stream).
        self.retiring = [f for f in self.retiring if f.status == "pending"] + rnd.futures
        partials = {}
        push_s = 0.0
        for res in results:
            partials.update(res["partials"])
            push_s = max(push_s, res["elapsed"])
        return partials, push_s, wait_s

    # -------------------------------------------------------------- snapshots
    async def _take_snapshot(self, number: int, state) -> ckpt.Snapshot | None:
        if not self.snapshot_ok:
            return None
        try:
            # copies: the program goes on mutating its state after the snapshot
            state_arrays = {k: np.array(v, copy=True)
                            for k, v in self.program.state_arrays(state).items()}
        except NotImplementedError:
            self.snapshot_ok = False
            if self.checkpoint_dir is not None:
                raise ValueError(f"checkpoint: program {type(self.program).__name__} does not "
                                 "implement state_arrays/load_state") from None
            return None
        t0 = time.perf_counter()
        by_worker: dict = {}
        for b, w in self.placement.items():
            by_worker.setdefault(w, []).append(b)
        futs = [self.client.submit(snapshot_task, self.fit_id, blocks,
                                   key=self._key("snapshot", f"r{number}", _token(w)),
                                   workers=[self._pin(w)], allow_other_workers=False, pure=False)
                for w, blocks in by_worker.items()]
        blocks = {}
        for part in await self._wait(futs):
            blocks.update(part)
        carried = {}
        if self.carried:
            cids = list(self.carried)
            values = await self._wait([self.carried[c] for c in cids])
            if self._in_process():
                values = self._private(_opened(values))
            # else kept as they arrived (packed, if the program packs them: unpacked only
            # to be saved, or on the worker a recovery sends them to)
            carried = dict(zip(cids, values, strict=True))
        snap = ckpt.Snapshot(round=number, state=state_arrays, blocks=blocks, carried=carried,
                             elapsed=self.elapsed())
        if self.checkpoint_dir is not None:
            await asyncio.get_running_loop().run_in_executor(None, _save, self.checkpoint_dir,
                                                             snap)
        self.last_snapshot_at = time.perf_counter()
        self.last_snapshot_round = number
        self.snapshot_cost = self.last_snapshot_at - t0
        return snap

    def _no_snapshot_yet(self) -> None:
        """Start a fresh fit without a snapshot (none on disk is wanted): a worker lost
        before the first one restarts the fit, whose blocks at round 0 are just what
        ``init_block`` makes of the shards; copying them back to the client would cost
        a transfer of every block before the first round. Only notes whether the program
        can snapshot at all."""
        if type(self.program).state_arrays is Program.state_arrays:
            self.snapshot_ok = False
        self.last_snapshot_at = time.perf_counter()
        self.last_snapshot_round = 0

    def _snapshot_due(self, number: int) -> bool:
        if not self.snapshot_ok:
            return False
        if self.snapshot is None and self.checkpoint_dir is not None:
            return True  # a fit that writes checkpoints starts with one
        if self.checkpoint_every is not None:
            return number - self.last_snapshot_round >= self.checkpoint_every
        interval = max(self.snapshot_interval, self.snapshot_cost / self.snapshot_budget)
        return time.perf_counter() - self.last_snapshot_at >= interval

    # -------------------------------------------------------------- recovery
    async def _recover(self, inflight: deque):
        """Rebuild every block from the last snapshot on the workers that are left."""
        t0 = time.perf_counter()
        lost = sorted(map(str, self.lost_workers))
        logger.debug("dask_strads: fit %s lost workers %s; recovering", self.fit_id, lost)
        before = dict(self.placement)
        for rnd in inflight:
            await self._cancel(list(rnd.pending.values()) + rnd.futures)
        inflight.clear()
        if self.snapshot is None and not self.snapshot_ok:
            raise WorkerLost(
                f"fit {self.fit_id}: workers {lost} were lost and program "
                f"{type(self.program).__name__} keeps no checkpoint to recover from") from None
        await self._release_blocks(before_epoch=self.epoch + 1)
        for f in self.carried.values():
            f.release()
        gone = await self._replace_lost()  # off the lost workers before placing anything
        lost = sorted(set(lost) | set(map(str, gone)))
        if self.snapshot is None:  # lost before the first snapshot: start again
            state = self.program.init_state(await self._init_resilient())
            number = 0
        else:
            await self._init_resilient(self.snapshot)
            state = self.program.load_state(self.snapshot.state)
            number = self.snapshot.round
        seconds = time.perf_counter() - t0
        moved = {b: self.placement[b] for b, w in before.items() if str(w) in lost}
        event = {"event": "recovered", "fit_id": self.fit_id, "lost": lost, "round": number,
                 "seconds": seconds, "moved": moved}
        self.recoveries.append({"round": number, "lost": lost, "seconds": seconds})
        logger.warning("dask_strads: fit %s lost workers %s; blocks %s moved to %s; "
                       "restarted from round %d%s in %.2f s", self.fit_id, lost,
                       _short(list(moved)), _short(sorted(set(map(str, moved.values())))),
                       number, "" if self.snapshot is not None else " (no snapshot yet)",
                       seconds, extra={"strads": event})
        return state, number

    async def _replace_lost(self) -> set:
        """Re-read the workers; move blocks off workers that are gone. Returns lost names."""
        deadline = time.perf_counter() + 60
        while True:
            alive = await self._workers()
            if alive:
                break
            if time.perf_counter() > deadline:
                raise WorkerLost(f"fit {self.fit_id}: no worker left")
            await asyncio.sleep(0.2)
        lost = {n for n in set(self.placement.values())
                if n not in alive or alive[n] != self.addresses.get(n)} | self.lost_workers
        new = [n for n in alive if n not in self.addresses or n in lost]
        self.addresses = alive
        # A nanny-restarted worker keeps its name (with empty memory): it may take blocks
        # again, since every block is rebuilt from the snapshot anyway.
        self.placement = replace_lost(self.placement, alive=list(alive), new=new)
        self.lost.clear()
        self.lost_workers.clear()
        return lost

    async def _init_resilient(self, restore: ckpt.Snapshot | None = None, attempts: int = 5):
        """Initialise blocks; when a worker dies meanwhile, re-place and try again."""
        for attempt in range(attempts):
            try:
                return await self._init_blocks(restore=restore)
            except Exception as exc:
                # (the text: a record that kept the exception would keep its frames'
                # futures, and so the shards, alive)
                logger.debug("dask_strads: fit %s: placing its blocks failed at %.2f s: %s",
                             self.fit_id, self.elapsed(), repr(exc))
                lost = await self._replace_lost()
                logger.debug("dask_strads: fit %s: placement %s at %.2f s", self.fit_id,
                             self.placement, self.elapsed())
                if not lost or attempt == attempts - 1:
                    raise
                names = sorted(map(str, lost))
                logger.warning("dask_strads: fit %s lost workers %s while placing blocks; "
                               "placing again", self.fit_id, names,
                               extra={"strads": {"event": "placing again",
                                                 "fit_id": self.fit_id, "lost": names}})
                await self._release_blocks(before_epoch=self.epoch + 1)

    async def _release_blocks(self, before_epoch: int | None = None):
        """Release the fit's blocks on every worker (with ``before_epoch``: those of the
        placements so far). Waited for RELEASE_SECONDS at most: the scheduler's broadcast
        waits on a worker that died but is still listed (seen: 7 s), and a recovery must
        not wait with it; the release goes on in the background."""
        job = asyncio.ensure_future(self.client.run(
            release_fit, self.fit_id, before_epoch, asynchronous=True, on_error="ignore"))
        job.add_done_callback(_retrieve)
        await asyncio.wait({job}, timeout=RELEASE_SECONDS)

    # -------------------------------------------------------------- main loop
    def elapsed(self) -> float:
        return self.base_elapsed + time.perf_counter() - self.t_start

    async def run(self) -> RunResult:
        self.t_start = time.perf_counter()
        self.base_elapsed = 0.0
        await self._ensure_plugin()
        # Listen before placing: tasks are pinned to worker addresses, so a worker lost
        # between reading the workers and the first submission must be heard of, or its
        # tasks would wait for it forever.
        self.client.subscribe_topic("all", self._on_event)
        try:
            await self._place()
        except BaseException:
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic("all")
            raise
        try:
            tuning = self.process
            with _span(self.desc), \
                    _prompt_submissions(self.client, tuning["submit_interval"]), \
                    _gc_frozen(tuning["gc_freeze"]), \
                    _no_hugepage_advice(tuning["hugepage_advice_off"]):
                return await self._run_loop()
        finally:
            watcher = getattr(self, "_lost_watcher", None)
            if watcher is not None:
                watcher.cancel()
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic("all")
            with contextlib.suppress(Exception):
                await self._release_blocks()
            if self.gather_carried:  # else the caller owns the futures in result.carried
                for f in getattr(self, "carried", {}).values():
                    with contextlib.suppress(Exception):
                        f.release()

    async def _run_loop(self) -> RunResult:
        program = self.program
        start_round = 0
        if self.resume is not None:
            snap = await asyncio.get_running_loop().run_in_executor(None, ckpt.load, self.resume)
            await self._init_resilient(restore=snap)
            state = program.load_state(snap.state)
            start_round = snap.round
            self.base_elapsed = snap.elapsed
            self.snapshot = snap
            self.last_snapshot_at = time.perf_counter()
            self.last_snapshot_round = snap.round
        else:
            summaries = await self._init_resilient()
            state = program.init_state(summaries)
            if self.checkpoint_dir is None:
                self._no_snapshot_yet()
            # else the loop takes the snapshot of round 0 first (where a lost worker is
            # recovered from)

        own = program.progress(state)  # the program's units, or rounds
        bar = (_progress_bar(self.progress, own[1], self.desc, own[0], own[2]) if own
               else _progress_bar(self.progress, self.max_rounds, self.desc, start_round))
        self.last_task_round = time.perf_counter()
        inflight: deque[_Round] = deque()
        next_round = start_round
        pulled = start_round
        stop_reason = None
        scheduling_done = False
        try:
            while True:
                try:
                    # Fill the pipeline: up to staleness + 1 rounds in flight.
                    # A snapshot needs a consistent state: when one is due, let the
                    # pipeline drain, take it, then fill again.
                    due = stop_reason is None and self._snapshot_due(pulled)
                    if due and not inflight:
                        self.snapshot = await self._take_snapshot(pulled, state) or self.snapshot
                        due = False
                    depth = 0 if due else 1 if self._probing() else self.staleness + 1
                    while (not scheduling_done and stop_reason is None
                           and len(inflight) < depth and next_round < self.max_rounds):
                        t0 = time.perf_counter()
                        ctx = RoundContext(next_round, self._exchange_ok(), self.staleness)
                        plan = program.schedule(state, ctx)
                        schedule_s = time.perf_counter() - t0
                        if plan is None:
                            scheduling_done = True
                            break
                        if not isinstance(plan, Plan):
                            raise TypeError(f"schedule: expected a Plan or None, got "
                                            f"{type(plan).__name__}")
                        inflight.append(self._submit(next_round, plan, schedule_s))
                        next_round += 1
                    if not inflight:
                        if stop_reason is None:
                            stop_reason = "done" if scheduling_done else "max_rounds"
                        # The end of the fit reads the blocks too: a worker lost now is
                        # recovered like one lost in a round (the rounds since the last
                        # snapshot run again, to the same end).
                        block_results, carried = await self._finish(pulled, state)
                        break
                    rnd = inflight.popleft()
                    partials, push_s, wait_s = await self._collect(rnd)
                    t0 = time.perf_counter()
                    state = program.pull(state, partials, rnd.plan)
                    pull_s = time.perf_counter() - t0
                    pulled = rnd.number + 1
                    self._record(rnd, state, push_s, wait_s, pull_s)
                    self._update_bar(bar, state, own is not None)
                    self._maybe_switch_transport(push_s, rnd)
                    if stop_reason is None:
                        if program.converged(state):
                            stop_reason = "converged"
                        elif self.time_limit is not None and self.elapsed() >= self.time_limit:
                            stop_reason = "time_limit"
                        elif self.stop_event.is_set():
                            stop_reason = "interrupted"
                except WorkerLost:
                    state, pulled = await self._recover(inflight)
                    next_round = pulled
                    scheduling_done = False
                    stop_reason = None
        finally:
            _finish_bar(bar, stop_reason, lambda: program.objective(state))
            # A fit that fails leaves the rounds still in flight: their calls must not
            # outlive it unretrieved ("Task exception was never retrieved" once the
            # client is closed).
            for rnd in inflight:
                for t in rnd.pending.values():
                    t.add_done_callback(_retrieve)
                    t.cancel()
        history = pd.DataFrame(self.history)
        return RunResult(
            state=state, history=history, n_rounds=pulled, stop_reason=stop_reason,
            placement=dict(self.placement), block_results=block_results, carried=carried,
            transport=self.transport, fit_id=self.fit_id, elapsed=self.elapsed(),
            recoveries=self.recoveries, scheduler_address=self.client.scheduler.address,
        )

    async def _finish(self, pulled: int, state) -> tuple[dict, dict]:
        """The last checkpoint, the blocks' results and the carried blocks."""
        if self.checkpoint_dir is not None and self.snapshot_ok:
            await self._take_snapshot(pulled, state)
        if self.retiring:  # let the last push tasks reach the task stream
            with contextlib.suppress(Exception):
                await _wait_futures(self.retiring, timeout=2)
            self.retiring = []
        return await self._block_results(), await self._final_carried()

    def _probing(self) -> bool:
        return self.transport_mode == "auto" and self.transport == "tasks" and \
            not self.carry_seen and len(self.probe_push) < self.auto_probe_rounds

    def _maybe_switch_transport(self, push_s: float, rnd: _Round):
        if self.transport_mode != "auto" or self.transport != "tasks" or self.carry_seen:
            return
        if len(self.probe_push) < self.auto_probe_rounds:
            self.probe_push.append(push_s)
            if len(self.probe_push) == self.auto_probe_rounds and \
                    statistics.median(self.probe_push) < self.auto_direct_below:
                self.transport = "direct"

    def _record(self, rnd: _Round, state, push_s, wait_s, pull_s):
        now = time.perf_counter()
        row = {
            "round": rnd.number,
            "time": self.elapsed(),
            "objective": _float_or_nan(self.program.objective(state)),
            "schedule_s": rnd.schedule_s,
            "push_s": push_s,
            "pull_s": pull_s,
            "wait_s": wait_s,
            "round_s": now - rnd.started,
            "transport": rnd.transport,
        }
        extra = self.program.metrics(state)
        if extra:
            row.update(extra)
        self.history.append(row)

    def _update_bar(self, bar, state, own_units: bool = False):
        if bar.disable:
            return
        if own_units:
            done, total, _ = self.program.progress(state)
            if total != bar.total:  # a program may learn its total as it goes
                bar.total = total
            bar.update(done - bar.n)
        else:
            bar.update(1)
        obj = self.program.objective(state)
        now = time.perf_counter()
        if obj is not None and now - getattr(self, "_bar_t", 0.0) > 0.25:
            self._bar_t = now
            bar.set_postfix(objective=f"{obj:.6g}", refresh=False)

    async def _block_results(self) -> dict:
        by_worker: dict = {}
        for b, w in self.placement.items():
            by_worker.setdefault(w, []).append(b)
        if self.transport == "direct" and not self.carry_seen:
            calls = [asyncio.ensure_future(self.client.rpc(self.addresses[w]).strads_results(
                fit_id=self.fit_id, blocks=pack(blocks), epoch=self.epoch))
                for w, blocks in by_worker.items()]
            out = {}
            for part in await self._wait(calls):
                out.update(unpack(part))
            return out
        futs = [self.client.submit(result_task, self.fit_id, blocks,
                                   key=self._key("result", _token(w)),
                                   workers=[self._pin(w)], allow_other_workers=False, pure=False)
                for w, blocks in by_worker.items()]
        out = {}
        for part in await self._wait(futs):
            out.update(part)
        return out

    async def _final_carried(self) -> dict:
        if not self.carried:
            return {}
        cids = list(self.carried)
        if not self.gather_carried:
            # the values, opened where they are (no packing, no transfer)
            return {c: self.client.submit(open_carried, self.carried[c], None,
                                          key=self._key("carried", _token(c)), pure=False)
                    for c in cids}
        values = await self._wait([self.carried[c] for c in cids])
        return dict(zip(cids, _opened(values), strict=True))


# ------------------------------------------------------------------------- helpers
async def _root_cause(exc: BaseException, others: set, timeout: float = 5.0) -> BaseException:
    """The first error among ``others`` that is not an abandoned exchange, else
    ``exc``."""
    done, _ = await asyncio.wait(others, timeout=timeout)
    for t in done:
        err = None if t.cancelled() else t.exception()
        if err is not None and not isinstance(err, ExchangeAbandoned):
            return err
    return exc


def _save(directory: str, snap: ckpt.Snapshot) -> None:
    """Write a snapshot, its carried blocks unpacked (the file holds plain arrays)."""
    carried = {c: open_carried(v, None) for c, v in snap.carried.items()}
    ckpt.save(directory, dataclasses.replace(snap, carried=carried))


def _opened(values: list) -> list:
    """Carried values gathered to the client, unpacked (on a TCP cluster they arrive
    packed; in process, as the live values)."""
    return [open_carried(v, None) for v in values]


_NO_REPLY = object()  # the reply handler could not be reached


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


def _retrieve(task: asyncio.Future) -> None:
    """Done-callback of an abandoned task: consume its outcome (no "never retrieved" log)."""
    if not task.cancelled():
        task.exception()


def _short(items: list, n: int = 8) -> str:
    """A list for a log line: at most ``n`` items, then how many more."""
    head = ", ".join(map(str, items[:n]))
    return f"[{head}{f', ... ({len(items) - n} more)' if len(items) > n else ''}]"


def _token(x) -> str:
    s = str(x)
    return "".join(c if c.isalnum() else "_" for c in s)[:40] or "_"


def _float_or_nan(x) -> float:
    return float("nan") if x is None else float(x)


@contextlib.contextmanager
def _span(name: str):
    try:
        from distributed import span
    except ImportError:  # pragma: no cover - older distributed
        yield
        return
    with span(name):
        yield


def _finish_bar(bar, stop_reason: str | None, objective: Callable[[], Any]) -> None:
    """Close the bar with the final objective and why the fit ended: a fit that converged
    after 3 of at most 1000 passes reads "3/3 ... converged", not "3/1000" as if it had
    stopped early (the objective shown during the fit is refreshed at most every 0.25 s)."""
    if not bar.disable and stop_reason is not None:
        # a converged fit never aimed at the bound; "done" keeps its count, since the
        # program's own measure of progress may say what was left undone
        if stop_reason == "converged":
            bar.total = bar.n
        obj = None
        with contextlib.suppress(Exception):
            obj = objective()
        postfix = (f"objective={obj:.6g}, " if isinstance(obj, int | float | np.floating)
                   else f"{bar.postfix}, " if bar.postfix else "")
        bar.set_postfix_str(postfix + stop_reason, refresh=True)
    bar.close()


def _progress_bar(progress: bool, total: int, desc: str, initial: int, unit: str = "round"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, initial=initial, disable=not progress, leave=True,
                unit=unit, dynamic_ncols=True)


# ------------------------------------------------------------------------- public faces
async def run_async(program: Program, data: Mapping, client: Client | None = None, *,
                    max_rounds: int = 1000, staleness: int = 0,
                    time_limit: float | None = None, progress: bool = True,
                    transport: str | None = None, placement: Mapping | None = None,
                    checkpoint=None, checkpoint_every: int | None = None, resume=None,
                    n_workers: int | None = None, desc: str | None = None,
                    gather_carried: bool = True, stop_event: threading.Event | None = None,
                    fit_id: str | None = None) -> RunResult:
    """Asynchronous core of :func:`run` (``client`` must be asynchronous, or None)."""
    mode = _check_args(program, data, max_rounds, staleness, time_limit, transport,
                       checkpoint, checkpoint_every, resume)
    kwargs = dict(max_rounds=max_rounds, staleness=staleness, time_limit=time_limit,
                  progress=progress, transport=mode, placement=placement, checkpoint=checkpoint,
                  checkpoint_every=checkpoint_every, resume=resume, desc=desc,
                  gather_carried=gather_carried, stop_event=stop_event, fit_id=fit_id)
    if client is not None:
        return await _Runner(client, program, data, **kwargs).run()
    from distributed import LocalCluster

    async with LocalCluster(**_embedded_cluster_kwargs(n_workers), asynchronous=True) as cluster:
        async with Client(cluster, asynchronous=True, set_as_default=False) as c:
            return await _Runner(c, program, data, **kwargs).run()


@contextlib.contextmanager
def cluster_client(client: Client | None = None, n_workers: int | None = None):
    """The client a fit runs on: the given one, else the default one, else an embedded
    LocalCluster (closed on exit). Estimators use it to hold one client across the data
    preparation and the engine run."""
    if client is not None:
        yield client
        return
    try:
        yield default_client()
        return
    except ValueError:
        pass
    from distributed import LocalCluster

    with LocalCluster(**_embedded_cluster_kwargs(n_workers)) as cluster, \
            Client(cluster, set_as_default=False) as c:
        yield c


def _embedded_cluster_kwargs(n_workers: int | None) -> dict:
    n = n_workers or min(os.cpu_count() or 2, 4)
    # Listen on the loopback interface only: an embedded cluster is private to this call.
    return dict(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address="127.0.0.1:0")


def run(program: Program, data: Mapping, client: Client | None = None, *,
        max_rounds: int = 1000, staleness: int = 0, time_limit: float | None = None,
        progress: bool = True, transport: str | None = None,
        placement: Mapping | None = None, checkpoint=None, checkpoint_every: int | None = None,
        resume=None, n_workers: int | None = None, desc: str | None = None,
        gather_carried: bool = True, fit_id: str | None = None) -> RunResult:
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
    if client is None:
        try:
            client = default_client()
        except ValueError:
            client = None
    elif not isinstance(client, Client):
        raise TypeError(f"client: expected a distributed.Client or None, got "
                        f"{type(client).__name__}")
    if client is not None and client.asynchronous:
        return run_async(program, data, client, max_rounds=max_rounds, staleness=staleness,
                         time_limit=time_limit, progress=progress, transport=transport,
                         placement=placement, checkpoint=checkpoint,
                         checkpoint_every=checkpoint_every, resume=resume, desc=desc,
                         gather_carried=gather_carried, fit_id=fit_id)
    owned = None
    if client is None:
        from distributed import LocalCluster

        cluster = LocalCluster(**_embedded_cluster_kwargs(n_workers))
        owned = (cluster, Client(cluster, set_as_default=False))
        client = owned[1]
    stop = threading.Event()
    runner = _Runner(client, program, data, max_rounds=max_rounds, staleness=staleness,
                     time_limit=time_limit, progress=progress, transport=mode,
                     placement=placement, checkpoint=checkpoint,
                     checkpoint_every=checkpoint_every, resume=resume, desc=desc,
                     gather_carried=gather_carried, stop_event=stop, fit_id=fit_id)
    restore = _stop_on_sigint(stop)
    try:
        future = asyncio.run_coroutine_threadsafe(runner.run(), client.loop.asyncio_loop)
        # Poll with sleep rather than block in Future.result(): a KeyboardInterrupt that
        # lands inside Condition.wait can leave its lock unrecoverable.
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
        if owned is not None:
            owned[1].close()
            owned[0].close()
