"""Small helpers the client side of the engine shares: names for task keys, lists for
log lines, and abandoned asyncio tasks."""

from __future__ import annotations

import asyncio


def _retrieve(task: asyncio.Future) -> None:
    """Done-callback of an abandoned task: consume its outcome (no "never retrieved" log)."""
    if not task.cancelled():
        task.exception()


def _short(items: list, n: int = 8) -> str:
    """A list for a log line: at most ``n`` items, then how many more."""
    head = ", ".join(map(str, items[:n]))
    return f"[{head}{f', ... ({len(items) - n} more)' if len(items) > n else ''}]"


def _token(x) -> str:
    s = str(x)
    return "".join(c if c.isalnum() else "_" for c in s)[:40] or "_"
