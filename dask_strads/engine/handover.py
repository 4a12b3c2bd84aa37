"""Retired workers hand their blocks over.

A worker retired gracefully (``client.retire_workers``, ``--lifetime``, a cluster that
adapts down) leaves the scheduler before it closes. While it closes, the plugin holds the
close, for at most ``dask-strads.engine.handover-timeout``, for the fits that push to it
directly: they still reach it. The fit's runner, told by the scheduler that the worker
left as expected, lets the rounds in flight end, takes a snapshot (over the direct
channel, as every direct fit does), lets the worker go and places the blocks again over
the workers left. No round runs again. A worker that dies, one retired while the fit's
rounds go through the scheduler, or a handover that fails is recovered from the last
snapshot as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from dask_strads.engine.arguments import handover_timeout
from dask_strads.engine.recovery import WorkerLost
from dask_strads.engine.store import store_of
from dask_strads.engine.tasks import release_fit
from dask_strads.engine.util import _retrieve, _short

logger = logging.getLogger("dask_strads")

# a leaving worker not handed over this long after its hold ends is treated as lost
OVERDUE_SECONDS = 10.0


# ---------------------------------------------------------------------- worker side
async def hold_while_handing_over(worker) -> None:
    """Hold a retired worker's close until the fits that push to it directly have taken
    their blocks, or the timeout. A worker closed without retiring (still known to the
    scheduler) is not held: its fits hear of a lost worker once it is gone."""
    store = store_of(worker)

    def pending():
        return [fit_id for fit_id, f in store.fits.items() if f.direct and not f.closed]

    if not pending():
        return
    try:
        timeout = handover_timeout()
    except ValueError as exc:
        logger.warning("dask_strads: worker %s does not hold its close: %s", worker.address,
                       exc)
        return
    if timeout == 0:
        return
    try:
        info = await asyncio.wait_for(worker.scheduler.identity(), 5)
    except Exception:
        return  # no scheduler to ask: nobody will take the blocks either
    if worker.address in info.get("workers", {}):
        return
    logger.info("dask_strads: retired worker %s holds its close for fits %s to take their "
                "blocks", worker.address, _short(pending()))
    deadline = time.monotonic() + timeout
    while pending() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _make_let_go_handler(worker):
    async def strads_let_go(fit_id: str, epoch: int, whole: bool = False) -> int:
        """Release the fit's blocks here, those of placements up to ``epoch`` (the worker
        left the scheduler, which no longer reaches it: its close goes on), or with
        ``whole`` everything of the fit (it has ended). The number of blocks released."""
        return release_fit(fit_id, before_epoch=None if whole else epoch + 1,
                           dask_worker=worker)

    return strads_let_go


# ---------------------------------------------------------------------- client side
class _Handover:
    """The runner's handovers (a part of :class:`dask_strads.engine.loop._Runner`)."""

    def _hands_over(self, name) -> bool:
        """Whether worker ``name``, retired now, can hand its blocks over: only between
        rounds, where every call to it goes over the direct channel. Not while blocks are
        placed or the fit's results read (tasks), nor if a push of a round in flight went
        to it as a task (a round sampled for the dashboard): the scheduler will not run
        those now."""
        return (self.transport == "direct" and self.snapshot_ok and self.handover_timeout > 0
                and self.in_rounds
                and not any(r.transport == "tasks" and name in r.pending
                            for r in self.inflight))

    def _leaving(self, name) -> None:
        """Worker ``name`` left the scheduler as expected: take its blocks at the next
        round boundary."""
        self.leaving.add(name)
        asyncio.get_running_loop().call_later(
            self.handover_timeout + OVERDUE_SECONDS, self._overdue, name)

    def _overdue(self, name) -> None:
        if name in self.leaving:  # e.g. a round that waits on it never ended
            self.leaving.discard(name)
            self.lost_workers.add(name)
            self.lost.set()
            asyncio.ensure_future(self._let_go(name)).add_done_callback(_retrieve)

    async def _hand_over(self, state, pulled: int):
        """No round in flight: snapshot round ``pulled``, let the leaving workers go,
        place the blocks again over the workers left. Returns the state to go on from
        (the snapshot's)."""
        t0 = time.perf_counter()
        leaving = set(self.leaving)
        self.leaving.clear()
        before = dict(self.placement)
        try:
            snap = await self._take_snapshot(pulled, state, leaving=frozenset(leaving))
        except Exception as exc:
            self.lost_workers |= leaving
            self.lost.set()
            if isinstance(exc, WorkerLost):
                raise
            raise WorkerLost(f"fit {self.fit_id}: the handover of workers "
                             f"{sorted(map(str, leaving))} failed: {exc!r}") from exc
        self.snapshot = snap
        await asyncio.gather(*(self._let_go(w) for w in leaving))
        await self._release_blocks(before_epoch=self.epoch + 1)
        self._release_carried()
        await self._replace_lost()  # the leaving workers are no longer the scheduler's
        await self._init_resilient(snap)
        seconds = time.perf_counter() - t0
        names = sorted(map(str, leaving))
        moved = {b: self.placement[b] for b, w in before.items() if w in leaving}
        self.handovers.append({"round": pulled, "workers": names, "seconds": seconds,
                               "from": self.snapshot_source})
        logger.info("dask_strads: fit %s took blocks %s of retired workers %s at round %d, "
                    "now on %s, in %.2f s", self.fit_id, _short(list(moved)), names, pulled,
                    _short(sorted(set(map(str, moved.values())))), seconds,
                    extra={"strads": {"event": "handover", "fit_id": self.fit_id,
                                      "round": pulled, "workers": names, "moved": moved,
                                      "seconds": seconds}})
        return self.program.load_state(snap.state)

    async def _let_go(self, name) -> None:
        # a worker that did not wait (its hold timed out) is gone already
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.rpc(self.addresses[name]).strads_let_go(
                fit_id=self.fit_id, epoch=self.epoch), 5)
