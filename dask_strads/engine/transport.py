"""The two ways a round's pushes travel, behind one submit / collect face.

``tasks``: one ``push_task`` per worker and round, which the dashboard shows; its
partials come back through the worker's ``strads_reply`` handler, and carried blocks
travel as task results. ``direct``: the client calls each worker's ``strads_push``
handler, with no scheduler on the way, and carried blocks stay on the workers, moving
worker to worker (:mod:`~dask_strads.engine.held`). ``auto`` starts on tasks and moves to
direct once the latest pushes are short, unless a round has carried a block; a direct
fit still sends a sampled round without carried blocks as tasks now and then, for the
dashboard. A direct round to more than ``relay_above`` workers goes through relays:
about sqrt(N) of its workers each forward the pushes of their group and answer for it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import time
from dataclasses import dataclass

from distributed.client import _wait as _wait_futures  # await futures without their data

from dask_strads.engine.held import CarriedLost, HeldAt
from dask_strads.engine.program import Plan
from dask_strads.engine.tasks import block_result_task, pick, push_task, result_task
from dask_strads.engine.util import _retrieve, _token
from dask_strads.engine.wire import pack, unpack

logger = logging.getLogger("dask_strads")

TRANSPORTS = ("auto", "tasks", "direct")
_NO_REPLY = object()  # the reply handler could not be reached


@dataclass
class _Round:
    number: int
    plan: Plan
    transport: str
    started: float
    schedule_s: float
    pending: dict  # worker name -> asyncio.Task giving the worker's partials
    futures: list  # the round's push tasks (tasks transport)


class _Transports:
    """Submitting a round's pushes and collecting their partials (a part of
    :class:`dask_strads.engine.loop._Runner`)."""

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
                now - self.last_task_round >= self.dashboard_interval and not plan.carry \
                and by_worker:  # a round of no pushes (a wait) has nothing to show
            transport = "tasks"  # a sampled round the dashboard can show
            sampled = self._dashboard_sample(by_worker)
        if transport == "tasks":
            self.last_task_round = now
        if plan.carry:
            self.carry_seen = True
        pending, futures = {}, []
        relayed = transport == "direct" and self.relay_above is not None and \
            len(by_worker) > self.relay_above
        calls: dict = {}  # relayed rounds: relay -> [(address, seq, payload)]
        groups = self._relay_groups(by_worker) if relayed else {}
        for w, items in by_worker.items():
            seq = self.seq[w]
            self.seq[w] = seq + 1
            if transport == "tasks" and (sampled is None or w in sampled):
                pending[w] = self._submit_task(number, w, seq, items, futures)
                continue
            payload = pack([(b, part, cid, self._carried_from(cid)) for b, part, cid in items])
            for _, _, cid in items:
                if cid is not None:  # it stays on w, made by this round
                    self.carried[cid] = HeldAt(w, number)
            if relayed:
                calls.setdefault(groups[w], []).append((self.addresses[w], seq, payload))
            else:
                pending[w] = asyncio.ensure_future(self._direct(w, seq, payload, peers, number))
        for relay, group in calls.items():
            pending[relay] = asyncio.ensure_future(self._relayed(relay, group, peers, number))
        return _Round(number, plan, transport, time.perf_counter(), schedule_s, pending,
                      futures)

    def _relay_groups(self, by_worker: dict) -> dict:
        """worker -> the worker that relays its push: about sqrt(N) groups, so that the
        client and each relay send and receive about sqrt(N) messages a round rather
        than the client N."""
        workers = sorted(by_worker, key=str)
        n_groups = math.isqrt(len(workers) - 1) + 1  # ceil(sqrt(N))
        return {w: workers[i % n_groups] for i, w in enumerate(workers)}

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
                # a closing worker (retired, or shut down) releases its blocks before it
                # leaves the scheduler: that is a lost worker, which recovery handles
                await self._lost(f"dask_strads: push {seq} of fit {self.fit_id} on worker "
                                 f"{w!r} never ran: its blocks were released")
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

    def _carried_from(self, cid):
        """Where a direct push finds carried block ``cid``: (address, round that made
        it), or None for its first value."""
        if cid is None or cid not in self.carried:
            return None
        held = self.carried[cid]
        return (self.addresses[held.worker], held.made)

    async def _direct(self, w, seq, payload, peers=None, number=None):
        addr = self.addresses[w]
        try:
            response = await self.client.rpc(addr).strads_push(
                fit_id=self.fit_id, seq=seq, payload=payload, epoch=self.epoch,
                sync=self.staleness == 0, peers=peers, round=number)
        except CarriedLost as exc:  # the worker that held it is gone, or going
            await self._lost(str(exc))
        partials, elapsed = unpack(response)
        return {"partials": partials, "elapsed": elapsed}

    async def _relayed(self, relay, calls: list, peers=None, number=None):
        """The pushes ``calls`` through worker ``relay`` (see ``strads_relay``), their
        partials merged. ``peers``, ``number``: of an exchange round, as for ``_direct``."""
        try:
            answers = await self.client.rpc(self.addresses[relay]).strads_relay(
                fit_id=self.fit_id, calls=calls, epoch=self.epoch, sync=self.staleness == 0,
                peers=peers, round=number)
        except CarriedLost as exc:  # a push behind the relay could not fetch its block
            await self._lost(str(exc))
        partials, elapsed = {}, 0.0
        for answer in answers:
            part, seconds = unpack(answer)
            partials.update(part)
            elapsed = max(elapsed, seconds)
        return {"partials": partials, "elapsed": elapsed}

    async def _collect(self, rnd: _Round):
        workers = list(rnd.pending)
        t0 = time.perf_counter()
        results = await self._wait([rnd.pending[w] for w in workers])
        wait_s = time.perf_counter() - t0
        # The reply beats the scheduler's news of the task's end: keep the futures until
        # it knows (a task released while "processing" would vanish from the task stream).
        self.retiring = [f for f in self.retiring if f.status == "pending"] + rnd.futures
        arrived = {}
        push_s = 0.0
        for res in results:
            arrived.update(res["partials"])
            push_s = max(push_s, res["elapsed"])
        # in the plan's order, however they travelled: the pull's sums are then the same
        partials = {b: arrived.pop(b) for b in rnd.plan.parts if b in arrived}
        partials.update(arrived)
        return partials, push_s, wait_s

    def _probing(self) -> bool:
        return self.transport_mode == "auto" and self.transport == "tasks" and \
            not self.carry_seen and len(self.probe_push) < self.auto_probe_rounds

    def _maybe_switch_transport(self, push_s: float):
        if self.transport_mode != "auto" or self.transport != "tasks" or self.carry_seen:
            return
        # the latest pushes, not the first: a fit's first pushes load kernels and warm
        # caches, and a busy moment slows a few
        self.probe_push.append(push_s)
        if len(self.probe_push) == self.auto_probe_rounds and \
                statistics.median(self.probe_push) < self.auto_direct_below:
            self.transport = "direct"

    async def _block_results(self) -> dict:
        if not self.gather_results:  # the caller owns the futures, computed before release
            futs = {b: self.client.submit(block_result_task, self.fit_id, b,
                                          key=self._key("result", _token(b)),
                                          workers=[self._pin(w)], allow_other_workers=False,
                                          pure=False)
                    for b, w in self.placement.items()}
            await self._wait_done(list(futs.values()))
            return futs
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
