"""The exchange between the pushes of one round (``Plan.exchange``).

:func:`exchange`, called inside a push, sends a value to the round's other pushes through
their workers' ``strads_exchange`` handler and returns every push's value: an all-gather
among the pushes, worker to worker, that never goes through the client. Both it and the
collectives of :mod:`dask_strads.engine.all_reduce` are made of steps in which each push
sends values to some pushes and waits for those of some others (``swap``). The values
wait in the fit's :class:`Mailbox` on each worker until the push there takes them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from dask_strads.engine.peers import peer
from dask_strads.engine.wire import pack

if TYPE_CHECKING:
    from dask_strads.engine.store import FitStore

logger = logging.getLogger("dask_strads")

# How long a push waits for the other pushes of its round in an exchange, at most.
EXCHANGE_TIMEOUT = 600.0

_current = threading.local()


class ExchangeAbandoned(RuntimeError):
    """A push gave up its exchange because another push of the round failed."""


def exchange(value: Any) -> dict:
    """Inside the push of a plan with ``exchange=True``: send ``value`` to the round's
    other pushes and return every push's value, ``{block_id: value}`` in the order of
    the plan's parts (this push's own value included, as it is).

    A collective: every push of the round must call it the same number of times, in
    the same order. Values travel worker to worker (the client never sees them), as a
    handler message (see :func:`~dask_strads.engine.wire.pack`). Raises RuntimeError
    when another push of the round failed, when the fit's blocks here are released (a
    lost worker, an ended fit), or after EXCHANGE_TIMEOUT seconds."""
    ex = getattr(_current, "exchange", None)
    if ex is None:
        raise RuntimeError("dask_strads: exchange() works only inside the push of a plan "
                           "with exchange=True")
    return ex(value)


class Mailbox:
    """The values of a fit's exchange rounds that reached this worker, ``(round, step,
    block) -> value``, until the push here takes them; ``(round, "failed")``: why another
    push of the round gave up. Written by the ``strads_exchange`` handler and by the push
    itself, read by the push."""

    def __init__(self):
        self.values: dict[tuple, Any] = {}
        self.cond = threading.Condition()
        self.closed = False

    def deliver(self, key: tuple, value: Any) -> None:
        with self.cond:
            if not self.closed:
                self.values[key] = value
            self.cond.notify_all()

    def forget_before(self, round: int) -> None:
        """Drop what earlier rounds (which failed) left behind."""
        with self.cond:
            for key in [k for k in self.values if k[0] < round]:
                del self.values[key]

    def close(self) -> None:
        """The fit's blocks here were released: the pushes waiting here fail."""
        with self.cond:
            self.closed = True
            self.values.clear()
            self.cond.notify_all()


class _Exchange:
    """The push of exchange round ``round`` on this worker. ``peers``: every pushing
    block of the round and its worker's address, in the plan's order."""

    def __init__(self, worker, fit: FitStore, fit_id: str, epoch: int, round: int,
                 peers: dict, loop: asyncio.AbstractEventLoop):
        self.worker = worker
        self.fit = fit
        self.fit_id = fit_id
        self.epoch = epoch
        self.round = round
        self.peers = peers
        self.loop = loop
        self.block = None
        self.step = 0

    def run(self, block_id: Hashable, push, *args):
        """Run ``push(*args)`` for ``block_id``; should it fail, tell the other pushes."""
        self.block = block_id
        self.fit.mail.forget_before(self.round)
        _current.exchange = self
        try:
            return push(*args)
        except BaseException as exc:
            self._broadcast(pack((block_id, "failed", f"{type(exc).__name__}: {exc}")))
            raise
        finally:
            _current.exchange = None

    @property
    def order(self) -> list:
        """The round's pushing blocks, in the plan's order."""
        return list(self.peers)

    def __call__(self, value: Any) -> dict:
        return self.swap(dict.fromkeys(self.peers, value), self.order)

    def swap(self, sends: dict, expect: list) -> dict:
        """One step: send ``sends[b]`` to the push of each block ``b``, then wait for the
        values that the pushes of ``expect`` send this one in the same step."""
        step = self.step
        self.step += 1
        box = self.fit.mail
        packed: dict = {}  # one value sent to several pushes is pickled once
        for b, value in sends.items():
            if b == self.block:
                box.deliver((self.round, step, b), value)
            else:
                if id(value) not in packed:
                    packed[id(value)] = pack((self.block, step, value))
                self._send_soon(self.peers[b], packed[id(value)])
        keys = [(self.round, step, b) for b in expect]
        failed = (self.round, "failed")
        deadline = time.monotonic() + EXCHANGE_TIMEOUT
        with box.cond:
            while True:
                if box.closed:
                    raise RuntimeError(f"dask_strads: fit {self.fit_id}'s blocks here were "
                                       "released during an exchange")
                if failed in box.values:
                    raise ExchangeAbandoned(f"dask_strads: exchange of round {self.round} "
                                            f"abandoned: the push of block "
                                            f"{box.values[failed]}")
                if all(k in box.values for k in keys):
                    return {k[2]: box.values.pop(k) for k in keys}
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [k[2] for k in keys if k not in box.values]
                    raise RuntimeError(f"dask_strads: exchange of round {self.round} waited "
                                       f"{EXCHANGE_TIMEOUT:.0f} s for blocks {missing}")
                box.cond.wait(left)

    def _broadcast(self, payload) -> None:
        """Send ``payload`` to the other pushes' workers, from any thread."""
        for addr in dict.fromkeys(a for b, a in self.peers.items() if b != self.block):
            self._send_soon(addr, payload)

    def _send_soon(self, addr: str, payload) -> None:
        asyncio.run_coroutine_threadsafe(self._send(addr, payload), self.loop)

    async def _send(self, addr: str, payload) -> None:
        try:
            # no reply: the push that sends does not wait on its peer's handler
            await (await peer(self.worker, addr)).strads_exchange(
                fit_id=self.fit_id, epoch=self.epoch, round=self.round, payload=payload,
                reply=False)
        except Exception as exc:  # this push cannot go on without the round's values
            # (debug: the round's failure reaches the client, which says what happened)
            logger.debug("dask_strads: exchange of round %s could not reach %s: %s",
                         self.round, addr, exc)
            self.fit.mail.deliver((self.round, "failed"), f"{self.block!r} (could not reach "
                             f"{addr}: {exc})")
