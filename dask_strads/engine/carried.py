"""Carried blocks on the wire: packed only when they leave their worker.

A push's new value of a carried block becomes a :class:`Carried` task result. Consumed
on the same worker it is handed over as it is; leaving the worker it travels in the
program's packed form and is unpacked into the fit's worker-local memory, and a value
that left unopened may have its memory recycled by the program.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Hashable
from typing import Any

from dask.sizeof import sizeof

from dask_strads.engine.shared_carried import mapped

logger = logging.getLogger("dask_strads")


class Carried:
    """A carried block's value as a task result: packed only when it leaves the worker.

    A push's new value of a carried block is wrapped in one of these. Consumed by a push
    on the same worker, it hands the value over as it is. Pickled (Dask moving it to
    another worker or to the client, or spilling it), it travels in the form
    :meth:`Program.pack_carried` makes (packed once, however often it is pickled), and
    the receiver unpacks it into memory the program keeps for that (``scratch``). When the
    wrapper dies without its value having been handed to a local push (the block went
    elsewhere), the program may recycle the value's memory
    (:meth:`Program.recycle_carried`): a block of LDA counts at K = 1000 is 100 MB, and
    fresh memory costs a page fault per 4 KB page on every arrival.
    """

    __slots__ = ("value", "packed", "_pack", "_cell", "__weakref__")

    def __init__(self, value: Any = None, packed: Any = None) -> None:
        self.value = value
        self.packed = packed
        self._pack = None
        self._cell = None

    @classmethod
    def wrap(cls, program: Any, carried_id: Hashable, value: Any, scratch: dict) -> Carried:
        """A push's new value on its worker (recycled when it leaves unopened)."""
        out = cls(value)
        out._pack = (program, carried_id)
        out._cell = [value, None]  # [value unless opened here, packed form once made]
        weakref.finalize(out, _recycle, program, carried_id, out._cell, scratch).atexit = False
        return out

    def _packed(self) -> Any:
        if self.packed is None and self._pack is not None and self.value is not None:
            program, carried_id = self._pack
            self.packed = program.pack_carried(carried_id, self.value)
            if self._cell is not None:
                self._cell[1] = self.packed
        return self.packed

    def __reduce__(self):
        packed = self._packed()
        if packed is not None:
            return (Carried, (None, packed))
        return (Carried, (self.value, None))

    def leaving(self) -> Carried:
        """Itself, handed to a message after its holder let it go (direct transport): a
        value that travels unpacked is in the message's frames until they are sent, so
        its memory must not be recycled meanwhile."""
        if self._packed() is None and self._cell is not None:
            self._cell[0] = None
        return self

    def open(self, scratch: dict | None) -> Any:
        """The value, for the push that consumes it (``scratch``: that worker's), or for
        the client (None). A local value is handed over as it is, and never recycled."""
        if self.value is not None:
            if self._cell is not None:
                self._cell[0] = None
            return self.value
        return self.packed.unpack(scratch)


def _recycle(program, carried_id, cell, scratch) -> None:
    value, packed = cell
    # a value in shared memory may be another worker's block by now
    if value is not None and not scratch.get("closed") and not mapped(value):
        try:
            program.recycle_carried(carried_id, value, packed, scratch)
        except Exception:  # a finalizer must not raise; the memory is simply not reused
            logger.exception("dask_strads: recycling carried block %r failed", carried_id)


class Replayed:
    """What a push task returns, and a carried block it made holds, when the scheduler
    runs the task again: it does so to recompute a carried block lost with a worker, from
    the chain of pushes that made it. The engine rebuilds lost blocks from its snapshot
    instead, so such a run does nothing, quietly; only a push that would use its value
    fails (:func:`open_carried`)."""

    __slots__ = ()

    def __reduce__(self):
        return (_replayed, ())


REPLAYED = Replayed()


def _replayed() -> Replayed:
    return REPLAYED


def open_carried(value: Any, scratch: dict | None) -> Any:
    """A carried block's value from what Dask handed over (a scattered restore value
    arrives as it is)."""
    if isinstance(value, Replayed):
        raise RuntimeError("dask_strads: a carried block was lost with its worker (the "
                           "scheduler recomputed it from an earlier round)")
    return value.open(scratch) if isinstance(value, Carried) else value


@sizeof.register(Carried)
def _sizeof_carried(obj: Carried) -> int:
    return sizeof(obj.value) if obj.value is not None else sizeof(obj.packed)


def _opened(values: list) -> list:
    """Carried values gathered to the client, unpacked (on a TCP cluster they arrive
    packed; in process, as the live values)."""
    return [open_carried(v, None) for v in values]
