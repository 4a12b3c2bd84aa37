"""Recovery snapshots kept on the cluster instead of the client.

Without a checkpoint directory, a snapshot exists only to rebuild the fit after a lost
worker. Sent to the client, it would put the whole model through the client's link and
into its memory (LDA's table at scale does not fit there). Instead, each worker that
holds blocks keeps a copy of its blocks' checkpoint arrays and of the carried blocks it
holds, and sends one more copy to its buddy, another worker (on another host when there
is one): any one worker lost, every block still has a copy. The client keeps its own
state and, per block, a :class:`Kept` naming the snapshot and the workers with a copy.
Snapshots are numbered in the order the fit takes them (not by round: a fit that
starts again reaches its rounds again, and a copy of the earlier pass must not pass
for one of the later).

A recovery first has each block's new worker fetch the copies it needs (``stage``)
from the holders still alive; only then are the blocks rebuilt, from the copies on
their own worker. If both copies of a block are gone (two workers lost at once), the
fit starts again from its first round, which reaches the same result.

Copies are pickled bytes: each use unpickles fresh arrays, so a program that restores
a block in place cannot change the copy a second recovery would need.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Hashable
from dataclasses import dataclass

from dask_strads.engine.peers import peer
from dask_strads.engine.recovery import SnapshotLost
from dask_strads.engine.store import store_of
from dask_strads.engine.wire import pack, unpack

EXTENSION = "dask_strads_kept"


@dataclass(frozen=True)
class Kept:
    """In a client's snapshot: the copy of a block (or carried block) in the fit's
    snapshot ``number`` is on the workers at ``holders``."""

    number: int
    holders: tuple


class KeptStore:
    """A worker's copies: ``fit id -> snapshot number -> key -> pickled bytes``, where a key is
    ``("block", id)`` or ``("carried", id)``; and each fit's client (for orphans)."""

    def __init__(self):
        self.fits: dict[str, dict[int, dict]] = {}
        self.owners: dict[str, str | None] = {}
        self.lock = threading.Lock()

    def put(self, fit_id: str, owner: str | None, number: int, items: dict) -> None:
        with self.lock:
            self.fits.setdefault(fit_id, {}).setdefault(number, {}).update(items)
            self.owners[fit_id] = owner

    def get(self, fit_id: str, number: int, key: tuple) -> bytes | None:
        with self.lock:
            return self.fits.get(fit_id, {}).get(number, {}).get(key)

    def value(self, fit_id: str, number: int, key: tuple):
        """The object kept under ``key``, unpickled afresh."""
        data = self.get(fit_id, number, key)
        if data is None:
            raise SnapshotLost(f"dask_strads: no copy of {key} of snapshot {number} of fit "
                               f"{fit_id} on this worker")
        return pickle.loads(data)

    def commit(self, fit_id: str, number: int) -> None:
        """The client's snapshot is number ``number`` now: older copies go."""
        with self.lock:
            kept = self.fits.get(fit_id, {})
            for n in [n for n in kept if n < number]:
                del kept[n]

    def drop(self, fit_id: str) -> None:
        with self.lock:
            self.fits.pop(fit_id, None)
            self.owners.pop(fit_id, None)

    def orphans(self, live_clients: set) -> list:
        with self.lock:
            return [f for f, owner in self.owners.items()
                    if owner is not None and owner not in live_clients]


def kept_of(worker) -> KeptStore:
    """``worker``'s copies (a worker extension of their own: they outlive the fit's
    blocks here, which a recovery releases before it rebuilds them)."""
    kept = worker.extensions.get(EXTENSION)
    if kept is None:
        kept = worker.extensions[EXTENSION] = KeptStore()
    return kept


def buddies(holders: list, addresses: dict, avoid=frozenset()) -> dict:
    """Worker name -> the worker that keeps a second copy of its snapshot: the next one
    in ``holders``' order on another host, else the next one (None for a lone worker);
    never one of ``avoid`` (workers about to leave)."""
    out = {}
    for i, w in enumerate(holders):
        others = [o for o in holders[i + 1:] + holders[:i] if o not in avoid]
        host = _host(addresses[w])
        away = [o for o in others if _host(addresses[o]) != host]
        out[w] = (away or others or [None])[0]
    return out


def spans_hosts(addresses) -> bool:
    """Whether ``addresses`` are on two or more hosts."""
    return len({_host(a) for a in addresses}) >= 2


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0]


# ------------------------------------------------------------------ worker handlers
def _make_keep_handler(worker):
    async def strads_keep(fit_id: str, epoch: int, number: int, blocks: bytes,
                          carried: bytes, buddy: str | None = None) -> bool:
        """Keep a copy, as snapshot ``number``, of the blocks and carried blocks ((id,
        round that made it) pairs) held here, and send one to ``buddy``. False when the fit's
        blocks here are gone or of another placement."""
        fit = store_of(worker).fits.get(fit_id)
        if fit is None or fit.epoch != epoch:
            return False
        values = {}
        for cid, made in unpack(carried):
            value = await fit.held.take(cid, made, keep=True)
            if value is None:
                return False
            values[cid] = value
        block_ids = unpack(blocks)
        if any(b not in fit.blocks for b in block_ids):
            return False

        def copies():  # off the event loop: whole blocks are pickled
            items = {block_key(b): pickle.dumps(fit.program.block_arrays(fit.blocks[b]),
                                                protocol=5) for b in block_ids}
            items.update({carried_key(c): pickle.dumps(v, protocol=5)
                          for c, v in values.items()})
            return items

        items = await asyncio.get_running_loop().run_in_executor(None, copies)
        kept_of(worker).put(fit_id, fit.owner, number, items)
        if buddy is not None:
            rpc = await peer(worker, buddy)
            await rpc.strads_kept_put(fit_id=fit_id, owner=fit.owner, number=number,
                                      payload=pack(items))
        return True

    return strads_keep


def _make_kept_put_handler(worker):
    async def strads_kept_put(fit_id: str, owner: str | None, number: int,
                              payload) -> bool:
        """Keep another worker's copies in snapshot ``number``."""
        kept_of(worker).put(fit_id, owner, number, unpack(payload))
        return True

    return strads_kept_put


def _make_kept_get_handler(worker):
    async def strads_kept_get(fit_id: str, number: int, keys: bytes):
        """The copies of ``keys`` in snapshot ``number`` kept here (those there are)."""
        kept = kept_of(worker)
        found = {k: kept.get(fit_id, number, k) for k in unpack(keys)}
        return pack({k: v for k, v in found.items() if v is not None})

    return strads_kept_get


def _make_kept_stage_handler(worker):
    async def strads_kept_stage(fit_id: str, owner: str | None, number: int,
                                wanted: bytes) -> bytes:
        """Fetch the copies this worker's new blocks will be rebuilt from: ``wanted``
        maps each key to the live workers with a copy, tried in turn. Answers the keys
        no worker had."""
        kept = kept_of(worker)
        need = {k: list(h) for k, h in unpack(wanted).items()
                if kept.get(fit_id, number, k) is None}
        while any(need.values()):
            source = next(h[0] for h in need.values() if h)
            keys = [k for k, h in need.items() if h and h[0] == source]
            try:
                rpc = await peer(worker, source)
                got = unpack(await rpc.strads_kept_get(fit_id=fit_id, number=number,
                                                       keys=pack(keys)))
            except OSError:
                got = {}
            kept.put(fit_id, owner, number, got)
            for k in keys:
                if k in got:
                    del need[k]
                else:
                    need[k].pop(0)
        return pack([k for k in need])

    return strads_kept_stage


def _make_kept_commit_handler(worker):
    async def strads_kept_commit(fit_id: str, number: int) -> bool:
        kept_of(worker).commit(fit_id, number)
        return True

    return strads_kept_commit


def carried_key(cid: Hashable) -> tuple:
    return ("carried", cid)


def block_key(block_id: Hashable) -> tuple:
    return ("block", block_id)
