"""Carried blocks that stay on the workers between pushes (the direct transport).

Over the direct channel a push's new value of a carried block is not a task result: it
stays in the :class:`Held` store of the worker that made it, tagged with the round that
made it, until the block's next holder takes it. A next holder on the same worker takes
it when its push runs (pushes of a worker run in round order, so it is there by then);
one on another worker asks for it through the ``strads_carried`` handler, which answers
as soon as the round that makes it has run. So a carried block moves once per
sub-round, worker to worker, and neither the client nor the scheduler sees it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from typing import Any, NamedTuple


class HeldAt(NamedTuple):
    """The client's record of a carried block that stays on the workers: the worker
    holding it and the round that made it."""

    worker: Hashable
    made: int


class Held:
    """``carried id -> (round that made it, value)`` on one worker, for one fit.

    Written from the thread that ran the push, read there (a local next holder) or on
    the worker's event loop (the handler that hands it to another worker)."""

    def __init__(self, loop=None):
        self.loop = loop  # the worker's event loop, where remote takers wait
        self.values: dict[Hashable, tuple[int, Any]] = {}
        self.lock = threading.Lock()
        self.closed = False
        self._cond: asyncio.Condition | None = None  # made on the event loop, when used

    def put(self, cid: Hashable, made: int, value: Any) -> None:
        """Keep ``value`` of ``cid`` made by round ``made`` (from any thread)."""
        with self.lock:
            if self.closed:
                return
            self.values[cid] = (made, value)
        if self.loop is not None:
            self.loop.add_callback(self._notify)

    def take_here(self, cid: Hashable, made: int) -> Any:
        """The value for a push on this worker (its maker ran before it, here)."""
        with self.lock:
            return self._pop(cid, made, self.values.get(cid))

    async def take(self, cid: Hashable, made: int, keep: bool = False) -> Any:
        """The value of ``cid`` made by round ``made``, once that round ran here; None if
        the fit's blocks here are released first. ``keep``: leave it here (a snapshot)."""
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: self.closed or self._ready(cid, made))
            with self.lock:
                if self.closed:
                    return None
                if keep:
                    return self.values[cid][1]
                return self._pop(cid, made, self.values[cid])

    def close(self) -> None:
        """The fit was released or re-placed: drop the values, wake the takers."""
        with self.lock:
            self.closed = True
            self.values.clear()
        if self.loop is not None:
            self.loop.add_callback(self._notify)

    def _ready(self, cid, made) -> bool:
        with self.lock:
            entry = self.values.get(cid)
        if entry is not None and entry[0] > made:
            raise RuntimeError(f"dask_strads: carried block {cid!r} of round {made} was "
                               f"asked for after round {entry[0]} replaced it")
        return entry is not None and entry[0] == made

    def _pop(self, cid, made, entry) -> Any:
        if entry is None or entry[0] != made:
            have = "nothing" if entry is None else f"round {entry[0]}'s"
            raise RuntimeError(f"dask_strads: carried block {cid!r} of round {made} is not "
                               f"on this worker (it holds {have})")
        del self.values[cid]
        return entry[1]

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()


class HeldHere:
    """In a push's items: its carried block is the one round ``made`` left on this
    worker (taken when the push runs)."""

    __slots__ = ("made",)

    def __init__(self, made: int):
        self.made = made


class CarriedLost(RuntimeError):
    """A push could not get its carried block from the worker holding it (gone, or its
    blocks released): the client treats it as the lost worker it usually is."""
