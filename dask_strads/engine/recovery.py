"""Lost workers: hearing of them, giving up the wait in progress at once, and
recovering the fit from its last snapshot on the workers that are left."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from distributed import Future
from distributed.client import _wait as _wait_futures  # await futures without their data

from dask_strads.engine.carried import Replayed
from dask_strads.engine.exchanges import ExchangeAbandoned
from dask_strads.engine.placement import replace_lost
from dask_strads.engine.util import _retrieve, _short

logger = logging.getLogger("dask_strads")


class WorkerLost(RuntimeError):
    """A worker holding blocks of the fit left the cluster."""


class SnapshotLost(WorkerLost):
    """Every worker with a copy of some block of the snapshot kept on the cluster is
    gone (see :mod:`~dask_strads.engine.kept`): the fit starts again."""


class _Recovery:
    """The runner's watch for lost workers and its recovery (a part of
    :class:`dask_strads.engine.loop._Runner`)."""

    def _on_event(self, event):
        _, msg = event
        if isinstance(msg, dict) and msg.get("action") == "add-worker":
            self.joined = True  # see _Blocks._spread_to_joined
            return
        if not isinstance(msg, dict) or msg.get("action") != "remove-worker":
            return
        addr = msg.get("worker")
        logger.debug("dask_strads: fit %s heard that %s left at %.2f s", self.fit_id, addr,
                     self.elapsed())
        self.gone.add(addr)
        holders = set(self.placement.values())
        for name, a in list(self.addresses.items()):
            if a == addr and name in holders:
                if msg.get("expected"):  # retired: it waits for the fit (handover.py)
                    if self._hands_over(name):
                        self._leaving(name)
                        continue
                    # no handover now: it need not wait
                    asyncio.ensure_future(self._let_go(name)).add_done_callback(_retrieve)
                self.lost_workers.add(name)
                self.lost.set()

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

        job = await self._unless_lost(gather(), awaitables)
        try:
            return job.result()
        except OSError as exc:  # direct channel to a dead worker
            await self._confirm_loss(exc)
            raise

    async def _wait_done(self, futures: list) -> None:
        """Wait until ``futures`` are done, leaving their data on the cluster; give up at
        once when a block's worker is lost."""
        (await self._unless_lost(_wait_futures(futures), futures)).result()

    async def _unless_lost(self, coro, awaitables) -> asyncio.Future:
        """``coro``, waiting on ``awaitables``, run to its end (returned done), unless a
        block's worker is lost first: then what it waits on is cancelled and
        ``WorkerLost`` raised."""
        job = asyncio.ensure_future(coro)
        lost = asyncio.ensure_future(self.lost.wait())
        try:
            done, _ = await asyncio.wait({job, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if job in done:
            return job
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
        watcher = self._lost_watcher
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

    async def _no_replays(self, carried_values: list) -> None:
        """Carried values gathered from the cluster: one the scheduler recomputed from an
        earlier round (see carried.Replayed) means its worker was lost."""
        if any(isinstance(v, Replayed) for v in carried_values):
            await self._lost("dask_strads: a carried block was lost with its worker")

    async def _lost(self, message: str):
        """Fail with ``message``: as ``WorkerLost`` if a worker of the fit is gone (what
        it usually means), else as it is."""
        exc = RuntimeError(message)
        await self._confirm_loss(exc)
        raise exc

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
        self.lost_workers |= self.leaving  # a recovery places every block again
        self.leaving.clear()
        if self.snapshot is None and not self.snapshot_ok:
            raise WorkerLost(
                f"fit {self.fit_id}: workers {lost} were lost and program "
                f"{type(self.program).__name__} keeps no checkpoint to recover from") from None
        await self._release_blocks(before_epoch=self.epoch + 1)
        self._release_carried()
        gone = await self._replace_lost()  # off the lost workers before placing anything
        lost = sorted(set(lost) | set(map(str, gone)))
        source = "start" if self.snapshot is None else self.snapshot_source
        if self.snapshot is not None:
            try:
                await self._init_resilient(self.snapshot)
                state = self.program.load_state(self.snapshot.state)
                number = self.snapshot.round
            except SnapshotLost as exc:
                logger.warning("dask_strads: fit %s: %s; starting again from its first round",
                               self.fit_id, exc)
                self.snapshot, source = None, "start"
                await self._release_blocks(before_epoch=self.epoch + 1)
        if self.snapshot is None:  # lost before the first snapshot (or all its copies)
            state = self.program.init_state(await self._init_resilient())
            number = 0
        seconds = time.perf_counter() - t0
        moved = {b: self.placement[b] for b, w in before.items() if str(w) in lost}
        event = {"event": "recovered", "fit_id": self.fit_id, "lost": lost, "round": number,
                 "seconds": seconds, "moved": moved, "from": source}
        self.recoveries.append({"round": number, "lost": lost, "seconds": seconds,
                                "from": source})
        how = {"client": "", "cluster": " (from copies kept on the workers)",
               "start": " (no snapshot to restart from)"}[source]
        logger.warning("dask_strads: fit %s lost workers %s; blocks %s moved to %s; "
                       "restarted from round %d%s in %.2f s", self.fit_id, lost,
                       _short(list(moved)), _short(sorted(set(map(str, moved.values())))),
                       number, how, seconds, extra={"strads": event})
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


async def _root_cause(exc: BaseException, others: set, timeout: float = 5.0) -> BaseException:
    """The first error among ``others`` that is not an abandoned exchange, else
    ``exc``."""
    done, _ = await asyncio.wait(others, timeout=timeout)
    for t in done:
        err = None if t.cancelled() else t.exception()
        if err is not None and not isinstance(err, ExchangeAbandoned):
            return err
    return exc
