"""Snapshots of a fit: when one is due, and taking one (the client state's arrays, every
block's arrays, the carried blocks), kept in memory for recovery and written to the
checkpoint directory when there is one."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import numpy as np

from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine.carried import _opened, open_carried
from dask_strads.engine.program import Program
from dask_strads.engine.tasks import snapshot_task
from dask_strads.engine.util import _token
from dask_strads.engine.wire import pack, unpack


class _Snapshots:
    """The runner's snapshots (a part of :class:`dask_strads.engine.loop._Runner`)."""

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
        snap = ckpt.Snapshot(round=number, state=state_arrays, blocks=blocks, carried=carried,
                             elapsed=self.elapsed())
        if self.checkpoint_dir is not None:
            await asyncio.get_running_loop().run_in_executor(None, _save, self.checkpoint_dir,
                                                             snap)
        self.last_snapshot_at = time.perf_counter()
        self.last_snapshot_round = number
        self.snapshot_cost = self.last_snapshot_at - t0
        return snap

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
