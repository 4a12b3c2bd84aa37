"""The outcomes of a fit's push tasks on one worker, until the client takes them.

A push task posts its outcome from the thread that ran the push; the worker's
``strads_reply`` handler, which the client calls when it submits the task, waits for it
on the worker's event loop and answers the moment it arrives: sooner than the
scheduler's report of the task and a gather of its result.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Replies:
    """Push task outcomes by sequence number: ``("ok", packed partials)`` or
    ``("error", exception)``."""

    def __init__(self, loop=None):
        self.loop = loop  # the worker's event loop, where outcomes are delivered
        self.outcomes: dict[int, tuple[str, Any]] = {}
        self.closed = False
        self._cond: asyncio.Condition | None = None  # made on the event loop, when used

    def post(self, seq: int, kind: str, value: Any) -> None:
        """Hand push task ``seq``'s outcome to the event loop (from any thread)."""
        self.loop.add_callback(self._deliver, seq, (kind, value))

    def close(self) -> None:
        """The fit was released or re-placed: wake the handlers waiting for outcomes."""
        self.closed = True
        if self.loop is not None:
            self.loop.add_callback(self._deliver, None, None)

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def _deliver(self, seq, outcome) -> None:
        cond = self._condition()
        async with cond:
            if seq is not None and not self.closed:
                self.outcomes[seq] = outcome
            cond.notify_all()

    async def wait(self, seq: int) -> tuple[str, Any] | None:
        """Push task ``seq``'s outcome, or None when the fit's blocks here were released or
        re-placed first (the client has given the round up by then)."""
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: seq in self.outcomes or self.closed)
            return self.outcomes.pop(seq, None)
