"""The scheduler coroutine: rounds of schedule -> push -> pull on dask.distributed.

:class:`_Runner` holds one fit; its round loop is here, the rest of what it does lives
in the modules of its parts: placing and building the blocks
(:mod:`~dask_strads.engine.blocks`), the transports (:mod:`~dask_strads.engine.transport`),
snapshots (:mod:`~dask_strads.engine.snapshots`), lost workers
(:mod:`~dask_strads.engine.recovery`) and handovers (:mod:`~dask_strads.engine.handover`).
:mod:`~dask_strads.engine.entry` starts it (``run``, ``run_async``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from distributed import Client, Future
from distributed.client import _wait as _wait_futures  # await futures without their data

from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine import shared, shared_carried
from dask_strads.engine.arguments import _engine_settings
from dask_strads.engine.blocks import _Blocks
from dask_strads.engine.handover import _Handover
from dask_strads.engine.process import (
    _gc_frozen,
    _no_hugepage_advice,
    _process_settings,
    _prompt_submissions,
)
from dask_strads.engine.program import Plan, Program, RoundContext
from dask_strads.engine.progress import RoundsBar
from dask_strads.engine.recovery import WorkerLost, _Recovery
from dask_strads.engine.snapshots import _Snapshots
from dask_strads.engine.transport import _Round, _Transports
from dask_strads.engine.util import _retrieve

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RunResult", "WorkerLost"]


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
        ``block_id -> Program.block_result(...)``, or futures of them, on the blocks'
        workers, when ``gather_results=False``.
    carried : dict
        ``carried_id -> final value`` of each carried block (gathered), or futures when
        ``gather_carried=False``.
    transport : str
        The transport used last (``"tasks"`` or ``"direct"``).
    recoveries : list of dict
        One entry per recovery from a lost worker (round, lost workers, seconds).
    spreads : list of dict
        One entry per placement of the blocks again over workers that joined (round,
        the workers that took blocks, seconds).
    handovers : list of dict
        One entry per handover of retired workers' blocks (round, the retired workers,
        seconds).
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
    spreads: list = field(default_factory=list)
    handovers: list = field(default_factory=list)
    scheduler_address: str | None = None


class _Runner(_Blocks, _Transports, _Snapshots, _Recovery, _Handover):
    """One fit: its settings, its view of the cluster and its round loop."""

    def __init__(self, client: Client, program: Program, data: Mapping, *, max_rounds: int,
                 staleness: int, time_limit: float | None, progress: bool, transport: str,
                 placement: Mapping | None, checkpoint, checkpoint_every, resume, desc,
                 gather_carried: bool, gather_results: bool,
                 stop_event: threading.Event | None, fit_id: str | None):
        # the fit as asked for
        self.client = client
        self.program = program
        self.data = dict(data)
        self.max_rounds = max_rounds
        self.staleness = staleness
        self.time_limit = time_limit
        self.progress = progress
        self.user_placement = dict(placement) if placement else None
        self.checkpoint_dir = None if checkpoint is None else os.fspath(checkpoint)
        self.checkpoint_every = checkpoint_every
        self.resume = resume
        self.desc = desc or f"dask_strads.{program.name}"
        self.gather_carried = gather_carried
        self.gather_results = gather_results
        self.stop_event = stop_event or threading.Event()
        self.fit_id = fit_id or uuid.uuid4().hex[:12]
        self.name = program.name
        self.history: list[dict] = []
        self.t_start = time.perf_counter()  # run() starts the clock again
        self.base_elapsed = 0.0  # seconds of the fit before a resumed checkpoint
        # dask-strads.engine.* and .process.*, read once per fit (see dask_strads.yaml)
        settings = _engine_settings()
        self.process = _process_settings()

        # the cluster: workers, where the blocks are (blocks.py)
        self.addresses: dict = {}  # worker name -> address
        self.placement: dict = {}  # block id -> worker name
        self.epoch = -1  # placements of the blocks so far, minus one (see _key)
        self.carried: dict = {}  # carried id -> its value on the cluster (Future or HeldAt)

        # the transports (transport.py)
        self.transport_mode = transport
        self.transport = "tasks" if transport in ("auto", "tasks") else "direct"
        self.seq: dict = {}  # worker name -> sequence number of its next push
        self.retiring: list[Future] = []  # collected push tasks the scheduler has not seen end
        self.use_reply_channel = settings["reply_channel"]
        self.reply_channel = self.use_reply_channel  # False once a worker's handler failed
        self.replied: set = set()  # workers whose reply handler answered, this placement
        self.carry_seen = False
        self.auto_probe_rounds = settings["auto_probe_rounds"]
        self.auto_direct_below = settings["auto_direct_below"]
        # the last pushes' compute times, while an auto fit's rounds go as tasks
        self.probe_push: collections.deque = collections.deque(maxlen=self.auto_probe_rounds)
        self.dashboard_interval = settings["dashboard_interval"]  # None: never
        self.dashboard_workers = settings["dashboard_workers"]
        self.relay_above = settings["relay_above"]
        self.shared_above = settings["shared_memory_above"]  # bytes, or None: never
        self.shared: dict = {}  # block -> its shard's handle in shared memory (or None)
        self.shared_paths: list = []  # the files written, removed when the fit ends
        self.orphans_freed = None  # the release of dead clients' fits (_ensure_plugin)
        self.last_task_round = time.perf_counter()
        self.dashboard_turn = 0  # the next worker a sampled round sends as a task

        # snapshots (snapshots.py)
        self.snapshot: ckpt.Snapshot | None = None
        self.snapshot_ok = True
        self.last_snapshot_at = 0.0
        self.last_snapshot_round = 0
        self.snapshot_cost = 0.0
        self.snapshot_interval = settings["snapshot_interval"]
        self.snapshot_budget = settings["snapshot_budget"]
        self.keep_on_cluster = settings["snapshots_on_cluster"]  # True, False or "auto"
        self.snapshot_source = "client"  # where self.snapshot's blocks are: see kept.py
        self.kept_number = 0  # snapshots kept on the cluster so far

        # lost workers (recovery.py)
        self.recoveries: list[dict] = []
        self.lost = asyncio.Event()
        self.lost_workers: set = set()
        self.gone: set = set()  # addresses of the workers that left since the fit started
        self.joined = False  # a worker joined since the blocks were last placed
        self.spreads: list[dict] = []  # placements again over workers that joined

        # retired workers (handover.py)
        self.handover_timeout = settings["handover_timeout"]
        self.leaving: set = set()  # retired workers whose blocks are still to be taken
        self.handovers: list[dict] = []
        self.inflight: deque = deque()  # the rounds submitted and not yet pulled
        self.in_rounds = False  # the blocks are placed and the fit is not ending
        self._lost_watcher: asyncio.Future | None = None  # see _wait_direct

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

    def _key(self, kind: str, *parts: str) -> str:
        """A task key of this fit. Keys carry the placement epoch: rounds replayed after a
        recovery must not reuse the keys of their cancelled first run, which the scheduler
        may still know (it warns of a different run_spec and can deadlock)."""
        epoch = f"-e{self.epoch}" if self.epoch else ""
        return "-".join((f"strads-{self.name}-{kind}-{self.fit_id}{epoch}", *parts))

    def elapsed(self) -> float:
        return self.base_elapsed + time.perf_counter() - self.t_start

    async def run(self) -> RunResult:
        self.t_start = time.perf_counter()
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
            shared.remove(self.shared_paths)
            raise
        try:
            tuning = self.process
            with _span(self.desc), \
                    _prompt_submissions(self.client, tuning["submit_interval"]), \
                    _gc_frozen(tuning["gc_freeze"]), \
                    _no_hugepage_advice(tuning["hugepage_advice_off"]):
                return await self._run_loop()
        finally:
            if self._lost_watcher is not None:
                self._lost_watcher.cancel()
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic("all")
            with contextlib.suppress(Exception):
                await self._release_blocks()
            if self.orphans_freed is not None:
                with contextlib.suppress(Exception):
                    await self.orphans_freed
            shared.remove(self.shared_paths)  # workers keep what they mapped
            shared_carried.remove_all(self.fit_id)
            if self.gather_carried:  # else the caller owns the futures in result.carried
                with contextlib.suppress(Exception):
                    self._release_carried()

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

        bar = RoundsBar(program, state, show=self.progress, max_rounds=self.max_rounds,
                        desc=self.desc, start_round=start_round)
        self.last_task_round = time.perf_counter()
        inflight: deque[_Round] = self.inflight
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
                        if self.joined:
                            state = await self._spread_to_joined(state, pulled)
                    if self.leaving and not inflight:
                        state = await self._hand_over(state, pulled)
                    depth = (0 if due or self.leaving else 1 if self._probing()
                             else self.staleness + 1)
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
                        self.in_rounds = False
                        block_results, carried = await self._finish(pulled, state)
                        break
                    rnd = inflight.popleft()
                    partials, push_s, wait_s = await self._collect(rnd)
                    t0 = time.perf_counter()
                    state = program.pull(state, partials, rnd.plan)
                    pull_s = time.perf_counter() - t0
                    pulled = rnd.number + 1
                    self._record(rnd, state, push_s, wait_s, pull_s)
                    bar.update(state)
                    self._maybe_switch_transport(push_s)
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
            shown = stop_reason
            if stop_reason == "converged":  # the program's word for a stop short of it
                shown = program.why_stopped(state) or stop_reason
            bar.finish(shown, lambda: program.objective(state))
            # A fit that fails leaves the rounds still in flight: their calls must not
            # outlive it unretrieved ("Task exception was never retrieved" once the
            # client is closed).
            for rnd in inflight:
                for t in rnd.pending.values():
                    t.add_done_callback(_retrieve)
                    t.cancel()
        import pandas as pd  # here, not at import: workers import this module and never need it

        history = pd.DataFrame(self.history)
        return RunResult(
            state=state, history=history, n_rounds=pulled, stop_reason=stop_reason,
            placement=dict(self.placement), block_results=block_results, carried=carried,
            transport=self.transport, fit_id=self.fit_id, elapsed=self.elapsed(),
            recoveries=self.recoveries, spreads=self.spreads, handovers=self.handovers,
            scheduler_address=self.client.scheduler.address,
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
