"""Snapshots of a fit: when one is due, and taking one (the client state's arrays, every
block's arrays, the carried blocks), kept in memory for recovery and written to the
checkpoint directory when there is one. Without a checkpoint directory the blocks'
copies stay on the cluster (:mod:`~dask_strads.engine.kept`) where they can."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np

from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine.carried import _opened, open_carried
from dask_strads.engine.held import HeldAt
from dask_strads.engine.kept import Kept, buddies, spans_hosts
from dask_strads.engine.placement import sort_names
from dask_strads.engine.program import Program
from dask_strads.engine.tasks import snapshot_task
from dask_strads.engine.util import _retrieve, _token
from dask_strads.engine.wire import pack, unpack


class _Snapshots:
    """The runner's snapshots (a part of :class:`dask_strads.engine.loop._Runner`)."""

    async def _take_snapshot(self, number: int, state,
                             leaving: frozenset = frozenset()) -> ckpt.Snapshot | None:
        """``leaving``: workers about to go (a handover), which keep no copy of another
        worker's blocks."""
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
        if self._keeps_on_cluster(leaving):
            blocks, carried = await self._keep_on_cluster(number, leaving)
            self.snapshot_source = "cluster"
        else:
            blocks, carried = await self._gather_snapshot(number)
            self.snapshot_source = "client"
        snap = ckpt.Snapshot(round=number, state=state_arrays, blocks=blocks, carried=carried,
                             elapsed=self.elapsed())
        if self.checkpoint_dir is not None:
            await asyncio.get_running_loop().run_in_executor(None, _save, self.checkpoint_dir,
                                                             snap)
        self.last_snapshot_at = time.perf_counter()
        self.last_snapshot_round = number
        self.snapshot_cost = self.last_snapshot_at - t0
        return snap

    def _keeps_on_cluster(self, leaving: frozenset) -> bool:
        """Whether a snapshot's copies stay on the workers: for recovery only (no
        checkpoint file), on the direct channel, with carried blocks that stay on the
        workers too, and with a second worker that stays to keep a copy of each
        worker's; with the setting "auto", only when the workers span hosts (on one
        host a failure of the machine takes every copy, and two workers lost at once
        may take both copies of a block, which the client's copy survives)."""
        holders = set(self.placement.values())
        if not (self.keep_on_cluster and self.checkpoint_dir is None
                and self.transport == "direct"
                and all(isinstance(h, HeldAt) for h in self.carried.values())
                and len(holders) >= 2 and holders - leaving):
            return False
        return self.keep_on_cluster is True or spans_hosts(
            [self.addresses[w] for w in holders])

    async def _keep_on_cluster(self, number: int, leaving: frozenset) -> tuple[dict, dict]:
        """Each worker keeps a copy of its blocks and carried blocks, and sends one to
        its buddy (one that stays); the client keeps where they are."""
        holders = sort_names(set(self.placement.values()))
        buddy = buddies(holders, self.addresses, avoid=leaving)
        blocks_of: dict = {w: [] for w in holders}
        carried_of: dict = {w: [] for w in holders}
        for b, w in self.placement.items():
            blocks_of[w].append(b)
        for c, held in self.carried.items():
            carried_of[held.worker].append((c, held.made))
        self.kept_number += 1
        kept = self.kept_number
        calls = [asyncio.ensure_future(self.client.rpc(self.addresses[w]).strads_keep(
            fit_id=self.fit_id, epoch=self.epoch, number=kept, blocks=pack(blocks_of[w]),
            carried=pack(carried_of[w]), buddy=self.addresses[buddy[w]])) for w in holders]
        if not all(await self._wait(calls)):
            await self._lost("dask_strads: a snapshot found a worker without the fit's blocks")
        where = {w: (self.addresses[w], self.addresses[buddy[w]]) for w in holders}
        # complete now: the older copies can go
        for address in set(self.addresses.values()):
            asyncio.ensure_future(self.client.rpc(address).strads_kept_commit(
                fit_id=self.fit_id, number=kept)).add_done_callback(_retrieve)
        return ({b: Kept(kept, where[w]) for b, w in self.placement.items()},
                {c: Kept(kept, where[h.worker]) for c, h in self.carried.items()})

    async def _gather_snapshot(self, number: int) -> tuple[dict, dict]:
        """The blocks' and carried blocks' copies, sent to the client."""
        by_worker: dict = {}
        for b, w in self.placement.items():
            by_worker.setdefault(w, []).append(b)
        # direct fits ask the workers themselves: a retired worker, which the scheduler
        # gives no tasks, answers too until its blocks are taken (see handover.py)
        direct = self.transport == "direct"
        futs = [asyncio.ensure_future(self._snapshot_direct(w, blocks)) if direct
                else self.client.submit(snapshot_task, self.fit_id, blocks,
                                        key=self._key("snapshot", f"r{number}", _token(w)),
                                        workers=[self._pin(w)], allow_other_workers=False,
                                        pure=False)
                for w, blocks in by_worker.items()]
        parts = await self._wait(futs)
        if any(part is None for part in parts):
            await self._lost("dask_strads: a snapshot found a worker without the fit's blocks")
        blocks = {}
        for part in parts:
            blocks.update(part)
        carried = {}
        if self.carried:
            cids = list(self.carried)
            values = await self._carried_values(cids, keep=True)
            if self._in_process():
                values = self._private(_opened(values))
            # else kept as they arrived (packed, if the program packs them: unpacked only
            # to be saved, or on the worker a recovery sends them to)
            carried = dict(zip(cids, values, strict=True))
        return blocks, carried

    async def _snapshot_direct(self, name, blocks: list) -> dict | None:
        reply = await self.client.rpc(self.addresses[name]).strads_snapshot(
            fit_id=self.fit_id, epoch=self.epoch, blocks=pack(blocks))
        return None if reply is None else unpack(reply)

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


def _save(directory: str, snap: ckpt.Snapshot) -> None:
    """Write a snapshot, its carried blocks unpacked (the file holds plain arrays)."""
    carried = {c: open_carried(v, None) for c, v in snap.carried.items()}
    ckpt.save(directory, dataclasses.replace(snap, carried=carried))
