"""Placement: which worker (by *name*) holds each resident block.

Blocks are placed by worker name, the name users pass as ``placement`` and that a
worker keeps across a nanny restart; the engine pins each task to the name's current
address when it submits it (see ``_Runner._pin`` in :mod:`dask_strads.engine.loop`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

__all__ = ["balance", "replace_lost", "sort_names"]


def sort_names(names: Iterable) -> list:
    """Worker names in a stable order (numeric names numerically, then the rest)."""
    return sorted(names, key=lambda n: (0, int(n), "") if _is_int(n) else (1, 0, str(n)))


def _is_int(n) -> bool:
    try:
        int(n)
    except (TypeError, ValueError):
        return False
    return True


def balance(
    block_ids: Iterable[Hashable],
    workers: Iterable,
    *,
    weights: Mapping[Hashable, float] | None = None,
    preferred: Mapping[Hashable, object] | None = None,
) -> dict[Hashable, object]:
    """Assign blocks to workers, balancing total weight.

    Parameters
    ----------
    block_ids : iterable
        Resident block ids, in the order the program lists them.
    workers : iterable
        Worker names.
    weights : mapping, optional
        Relative cost of each block (default 1).
    preferred : mapping, optional
        ``block_id -> worker name`` where the block's data already lives; honoured
        while that worker's load stays within one block of the mean.

    Returns
    -------
    dict
        ``block_id -> worker name``.
    """
    names = sort_names(workers)
    if not names:
        raise ValueError("workers: no worker is available to place blocks on")
    blocks = list(block_ids)
    weights = dict(weights or {})
    load = {n: 0.0 for n in names}
    mean = sum(weights.get(b, 1.0) for b in blocks) / len(names)
    out: dict[Hashable, object] = {}
    pending = []
    for b in blocks:
        w = weights.get(b, 1.0)
        p = (preferred or {}).get(b)
        if p in load and load[p] + w <= mean + max(weights.values(), default=1.0):
            out[b] = p
            load[p] += w
        else:
            pending.append(b)
    # Without weights, keep the program's order: block i goes to worker i mod P, which
    # is what rotation schedules expect; with weights, greedy largest-first.
    if not weights and not preferred:
        for i, b in enumerate(pending):
            out[b] = names[i % len(names)]
        return out
    for b in sorted(pending, key=lambda b: -weights.get(b, 1.0)):
        n = min(names, key=lambda n: (load[n], names.index(n)))
        out[b] = n
        load[n] += weights.get(b, 1.0)
    return out


def replace_lost(
    placement: Mapping[Hashable, object], alive: Iterable, *, new: Iterable = ()
) -> dict[Hashable, object]:
    """Move the blocks of workers that are gone to the least-loaded survivors.

    Workers in ``new`` (replacements that joined) are filled first.
    """
    alive = sort_names(alive)
    if not alive:
        raise RuntimeError("all workers holding the fit's blocks were lost; no worker is left")
    load = {n: 0 for n in alive}
    for n in placement.values():
        if n in load:
            load[n] += 1
    fresh = [n for n in sort_names(new) if n in load]
    out = {}
    for b, n in placement.items():
        if n in load:
            out[b] = n
            continue
        target = fresh.pop(0) if fresh else min(alive, key=lambda w: (load[w], alive.index(w)))
        out[b] = target
        load[target] += 1
    return out


def spread(placement: Mapping[Hashable, object], workers: Iterable) -> dict[Hashable, object]:
    """The blocks of ``placement`` over ``workers`` (those holding blocks and those that
    joined), moving as few as possible: a block stays on its worker while that worker
    holds at most ``ceil(blocks / workers)``; the others go to the least loaded."""
    names = sort_names(workers)
    if not names:
        raise ValueError("workers: no worker is available to place blocks on")
    cap = -(-len(placement) // len(names))
    load = dict.fromkeys(names, 0)
    out: dict[Hashable, object] = {}
    moving = []
    for b, w in placement.items():
        if w in load and load[w] < cap:
            out[b] = w
            load[w] += 1
        else:
            moving.append(b)
    for b in moving:
        w = min(names, key=lambda n: (load[n], names.index(n)))
        out[b] = w
        load[w] += 1
    return out
