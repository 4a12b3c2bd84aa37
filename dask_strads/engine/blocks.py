"""The fit's blocks on the cluster: the worker plugin, the shards sent to their
workers, the blocks built there (or rebuilt from a snapshot, in a new placement epoch),
and released when the fit ends."""

from __future__ import annotations

import asyncio
import collections
import copy
import logging
import time

from dask.sizeof import sizeof
from distributed import Future
from distributed.protocol.serialize import ToPickle

from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine import shared
from dask_strads.engine.carried import Carried, _opened, open_carried
from dask_strads.engine.held import HeldAt
from dask_strads.engine.kept import Kept, block_key, carried_key
from dask_strads.engine.placement import balance, sort_names
from dask_strads.engine.placement import spread as spread_over
from dask_strads.engine.plugin import PLUGIN_NAME, StradsPlugin, install_handlers
from dask_strads.engine.process import _worker_tuning
from dask_strads.engine.recovery import SnapshotLost
from dask_strads.engine.tasks import (
    client_ids,
    held_task,
    init_block_task,
    release_fit,
    release_orphans,
)
from dask_strads.engine.util import _retrieve, _short, _token
from dask_strads.engine.wire import pack, unpack

logger = logging.getLogger("dask_strads")

# Releasing a fit's blocks (a broadcast through the scheduler) is waited for this long at
# most (see _Runner._release_blocks).
RELEASE_SECONDS = 2.0


def _most_per_worker(placement: dict) -> int:
    return max(collections.Counter(placement.values()).values(), default=0)


class _Blocks:
    """Placing, building and releasing the fit's blocks (a part of
    :class:`dask_strads.engine.loop._Runner`)."""

    async def _ensure_plugin(self):
        # Fits whose client died mid-fit left their blocks behind: they are freed while
        # this one sets up (and waited for before it returns; a worker need not have the
        # plugin to free them)
        self.orphans_freed = asyncio.ensure_future(self._free_orphans())
        self.orphans_freed.add_done_callback(_retrieve)
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

    async def _free_orphans(self) -> None:
        try:
            live = await self.client.run_on_scheduler(client_ids, asynchronous=True)
            dropped = await self.client.run(release_orphans, live, asynchronous=True,
                                            on_error="ignore")
        except Exception as exc:  # housekeeping: the next fit tries again
            logger.debug("dask_strads: freeing the fits of dead clients failed: %r", exc)
            return
        orphans = sorted({f for ids in dropped.values() if isinstance(ids, list) for f in ids})
        if orphans:
            logger.warning("dask_strads: freed the blocks of fits %s, whose client is gone",
                           orphans)

    # -------------------------------------------------------------- placement
    async def _place(self):
        self.addresses = await self._workers()
        if not self.addresses:
            # an adaptive or queued cluster starts empty: wait, but say why nothing moves
            logger.warning("dask_strads: the cluster has no workers yet; the fit starts "
                           "when one joins")
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

    async def _spread_to_joined(self, state, pulled: int):
        """Workers joined since the blocks were placed: right after a snapshot of round
        ``pulled`` (so no round runs again), place the blocks again over every worker
        when that lowers the most blocks one worker holds. Returns the state to go on
        from (the snapshot's, as a recovery would)."""
        self.joined = False
        snap = self.snapshot
        if self.user_placement is not None or snap is None or snap.round != pulled:
            return state
        alive = await self._workers()
        spread = spread_over(self.placement, alive)
        if _most_per_worker(spread) >= _most_per_worker(self.placement):
            return state
        t0 = time.perf_counter()
        before = set(self.placement.values())
        await self._release_blocks(before_epoch=self.epoch + 1)
        self._release_carried()
        self.addresses, self.placement = alive, spread
        await self._init_resilient(snap)
        taken = sorted(map(str, set(spread.values()) - before))
        seconds = time.perf_counter() - t0
        self.spreads.append({"round": pulled, "workers": taken, "seconds": seconds})
        logger.info("dask_strads: fit %s placed its blocks again at round %d, over %d "
                    "workers (%s joined) in %.2f s", self.fit_id, pulled,
                    len(set(spread.values())), _short(taken), seconds,
                    extra={"strads": {"event": "spread", "fit_id": self.fit_id,
                                      "round": pulled, "workers": taken,
                                      "seconds": seconds}})
        return self.program.load_state(snap.state)

    async def _shard_futures(self) -> dict:
        """Block -> what its init takes: futures pass through; a local shard goes as the
        handle of its copy in shared memory, or itself, with the direct transport (in
        the init's call to the worker), else scattered to the block's worker."""
        out = {}
        for b, shard in self.data.items():
            if isinstance(shard, Future):
                out[b] = shard
        out.update(await self._shared_shards([b for b in self.data if b not in out]))
        local = [b for b in self.data if b not in out]
        if self.transport == "direct":
            return {**out, **{b: self.data[b] for b in local}}

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

    async def _shared_shards(self, blocks: list) -> dict:
        """Block -> the handle of its shard in shared memory, for those of ``blocks``
        whose shards are large (``shared_above``) and whose workers see the client's
        ``/dev/shm`` (on its machine, in another process). Each shard is written once
        per fit; later placements reuse it."""
        if self.shared_above is None or not blocks or not shared.available():
            return {}
        for path in shared.remove_orphans():
            logger.info("dask_strads: removed %s, left by a process killed mid-fit", path)
        big = [b for b in blocks
               if b in self.shared or sizeof(self.data[b]) >= self.shared_above]
        addrs = sorted({self.addresses[self.placement[b]] for b in big} -
                       {a for a in self.addresses.values() if a.startswith("inproc://")})
        if not addrs:
            return {}
        probe = shared.new_path("dask-strads-probe")
        open(probe, "wb").close()
        try:
            seen = await self.client.run(shared.sees, probe, workers=addrs,
                                         on_error="return", asynchronous=True)
        finally:
            shared.remove([probe])
        near = {a for a, ok in seen.items() if ok is True}
        handles = {}
        big = [b for b in big if self.addresses[self.placement[b]] in near]
        new = [b for b in big if b not in self.shared]
        paths = [shared.new_path(f"dask-strads-{self.fit_id}") for _ in new]
        self.shared_paths.extend(paths)
        # copies of the shards' bytes: off the event loop, all at once
        made = await asyncio.gather(*(asyncio.to_thread(shared.share, self.data[b], path)
                                      for b, path in zip(new, paths, strict=True)))
        self.shared.update(zip(new, made, strict=True))
        for b in big:
            if self.shared[b] is not None:
                handles[b] = self.shared[b]
        return handles

    def _reaches_workers(self) -> bool:
        """Whether data may go to the workers straight from the client: with the direct
        transport the client calls them anyway. Through the scheduler, every shard is
        received and sent again by its process."""
        return self.transport_mode == "direct"

    async def _init_blocks(self, restore: ckpt.Snapshot | None = None) -> dict:
        self.epoch += 1  # every (re)placement of the blocks starts a new epoch
        if restore is not None:
            await self._stage_kept(restore)
        shards = await self._shard_futures()
        logger.debug("dask_strads: fit %s: shards of epoch %d arrived at %.2f s", self.fit_id,
                     self.epoch, self.elapsed())
        futs = {}
        for b in self.data:
            args = None
            if restore is not None:
                args = (restore.state, restore.blocks.get(b))
            call = (self.fit_id, self.program, b, shards[b], args, self.client.id, self.epoch,
                    _worker_tuning(self.process))
            if self.transport == "direct" and not isinstance(shards[b], Future):
                # straight to the worker: a task's trip through the scheduler costs more
                futs[b] = asyncio.ensure_future(self.client.rpc(
                    self.addresses[self.placement[b]]).strads_init(payload=ToPickle(call)))
            else:
                futs[b] = self.client.submit(
                    init_block_task, *call, key=self._key("init", _token(b)),
                    workers=[self._pin(self.placement[b])], allow_other_workers=False,
                    pure=False)
        values = [unpack(v) if isinstance(f, asyncio.Future) else v for f, v in
                  zip(futs.values(), await self._wait(list(futs.values())), strict=True)]
        logger.debug("dask_strads: fit %s placed its blocks (epoch %d) on workers %s",
                     self.fit_id, self.epoch, _short(sort_names(set(self.placement.values()))))
        # a new placement: the transports start again (see _Runner.__init__)
        self.seq = {w: 0 for w in set(self.placement.values())}
        self.carried = {}
        self.retiring = []
        self.reply_channel = self.use_reply_channel
        self.replied = set()
        if restore is not None:
            for cid, value in restore.carried.items():
                # Placed on the worker that receives it next; it moves on from there.
                holder = self._next_holder(cid)
                if not isinstance(value, Carried):  # a packed one is only ever read
                    [value] = self._private([value])
                if self.transport == "direct":
                    await self.client.rpc(self.addresses[holder]).strads_carried_put(
                        fit_id=self.fit_id, epoch=self.epoch,
                        payload=pack((cid, restore.round, value)))
                    self.carried[cid] = HeldAt(holder, restore.round)
                else:
                    [f] = await self.client.scatter([value], workers=[self.addresses[holder]],
                                                    hash=False)
                    self.carried[cid] = f
        return dict(zip(futs, values, strict=True))

    async def _stage_kept(self, restore: ckpt.Snapshot) -> None:
        """Have each block's new worker (and each carried block's next holder) fetch
        the copies of a snapshot kept on the cluster from the live workers that hold
        them; ``SnapshotLost`` if some copy is on none."""
        alive = set(self.addresses.values())
        wanted: dict = {}
        entries = [(self.placement[b], block_key(b), restore.blocks, b) for b in restore.blocks]
        entries += [(self._next_holder(c), carried_key(c), restore.carried, c)
                    for c in restore.carried]
        number = None
        for w, key, table, name in entries:
            value = table[name]
            if isinstance(value, Kept):
                number = value.number  # one snapshot's: the same for all
                wanted.setdefault(w, {})[key] = [a for a in value.holders if a in alive]
                # the new holder keeps a copy too: one more for the next loss
                holders = tuple(a for a in value.holders if a != self.addresses[w])
                table[name] = Kept(value.number, holders + (self.addresses[w],))
        if not wanted:
            return
        calls = [asyncio.ensure_future(self.client.rpc(self.addresses[w]).strads_kept_stage(
            fit_id=self.fit_id, owner=self.client.id, number=number, wanted=pack(keys)))
            for w, keys in wanted.items()]
        missing = [k for reply in await self._wait(calls) for k in unpack(reply)]
        if missing:
            raise SnapshotLost(f"no worker left holds the copies of {_short(missing)} of "
                               f"the snapshot of round {restore.round}")

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

    async def _init_resilient(self, restore: ckpt.Snapshot | None = None, attempts: int = 5):
        """Initialise blocks; when a worker dies meanwhile, re-place and try again."""
        for attempt in range(attempts):
            self.in_rounds = False
            try:
                placed = await self._init_blocks(restore=restore)
                self.in_rounds = True
                return placed
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
        waits on a worker that died but is still listed, and a recovery must not wait
        with it; the release goes on in the background."""
        if before_epoch is None and await self._released_where_placed():
            return
        job = asyncio.ensure_future(self.client.run(
            release_fit, self.fit_id, before_epoch, asynchronous=True, on_error="ignore"))
        job.add_done_callback(_retrieve)
        await asyncio.wait({job}, timeout=RELEASE_SECONDS)

    async def _released_where_placed(self) -> bool:
        """The end of a fit placed once that kept no snapshot on the cluster: its state
        is on its blocks' workers alone, released by a call to each (with the direct
        transport the client reaches them) instead of a broadcast through the scheduler
        to every worker. False (nothing else is sure to be released) unless all answered."""
        if self.transport != "direct" or self.epoch != 0 or self.kept_number:
            return False
        calls = [asyncio.wait_for(self.client.rpc(address).strads_let_go(
                     fit_id=self.fit_id, epoch=self.epoch, whole=True), RELEASE_SECONDS)
                 for address in sorted({self.addresses[w] for w in self.placement.values()})]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        return not any(isinstance(a, BaseException) for a in answers)

    async def _final_carried(self) -> dict:
        if not self.carried:
            return {}
        cids = list(self.carried)
        if not self.gather_carried:
            if self._held(cids):  # taken out of their workers' stores before the release
                taken = {c: self.client.submit(
                    held_task, self.fit_id, c, self.carried[c].made,
                    key=self._key("held", _token(c)),
                    workers=[self._pin(self.carried[c].worker)], allow_other_workers=False,
                    pure=False) for c in cids}
                await self._wait_done(list(taken.values()))
                self.carried = taken
            # the values, opened where they are (no packing, no transfer)
            return {c: self.client.submit(open_carried, self.carried[c], None,
                                          key=self._key("carried", _token(c)), pure=False)
                    for c in cids}
        return dict(zip(cids, _opened(await self._carried_values(cids)), strict=True))

    def _held(self, cids) -> bool:
        """Whether the carried blocks stay on the workers (direct transport)."""
        return any(isinstance(self.carried[c], HeldAt) for c in cids)

    async def _carried_values(self, cids: list, keep: bool = False) -> list:
        """The carried blocks' values, as they arrive (packed, or as they are in
        process); ``keep``: copies for a snapshot, the blocks stay where they are."""
        if not self._held(cids):
            values = await self._wait([self.carried[c] for c in cids])
            await self._no_replays(values)
            return values
        calls = []
        for c in cids:
            held = self.carried[c]
            calls.append(asyncio.ensure_future(
                self.client.rpc(self.addresses[held.worker]).strads_carried(
                    fit_id=self.fit_id, epoch=self.epoch, key=pack((c, held.made)), keep=keep)))
        replies = await self._wait(calls)
        if any(r is None for r in replies):
            await self._lost("dask_strads: a carried block was gone from its worker")
        return [unpack(r) for r in replies]

    def _release_carried(self) -> None:
        """Let go of the carried blocks that are futures (tasks transport)."""
        for f in self.carried.values():
            if isinstance(f, Future):
                f.release()
