"""The sum of an array over the pushes of an exchange round, worker to worker.

Recursive doubling: with ``P`` the largest power of two not above the number of pushes
``N``, the pushes beyond the first ``P`` first hand their arrays to a partner among
them; those ``P`` then, for ``d = 1, 2, 4, ...``, swap their partial sums with the push
``d`` away (by the bits of their index) and add; the partners of the first step get the
result back. Each push sends about ``log2 N`` messages, not ``N - 1`` as an all-gather
would, and every push ends with the same bits: each addition adds the same two arrays
on both sides, and adding two floats gives the same result in either order.
"""

from __future__ import annotations

import numpy as np

from dask_strads.engine import exchanges


def all_reduce(array: np.ndarray) -> np.ndarray:
    """Inside the push of a plan with ``exchange=True``: the sum of ``array`` (same shape
    and dtype on every push) over the round's pushes, identical on each of them.

    A collective, counted with :func:`~dask_strads.engine.exchange`: every push makes
    the same sequence of calls. ``array`` itself is left as it is."""
    ex = getattr(exchanges._current, "exchange", None)
    if ex is None:
        raise RuntimeError("dask_strads: all_reduce() works only inside the push of a plan "
                           "with exchange=True")
    order = ex.order
    n, me = len(order), order.index(ex.block)
    p = 1 << (n.bit_length() - 1)
    total = np.array(array, copy=True)
    # every push takes part in every step, sending nothing in some: the steps count.
    # What a push sends it never changes afterwards (a large value is pickled later, on
    # the event loop).
    folded = me >= p
    partner = order[me - p] if folded else (order[me + p] if me + p < n else None)
    if folded:
        ex.swap({partner: total}, [])
    elif partner is not None:
        total += ex.swap({}, [partner])[partner]
    else:
        ex.swap({}, [])
    d = 1
    while d < p:
        if folded:
            ex.swap({}, [])
        else:
            peer = order[me ^ d]
            total = total + ex.swap({peer: total}, [peer])[peer]
        d <<= 1
    if folded:
        return np.array(ex.swap({}, [partner])[partner], copy=True)
    ex.swap({partner: total.copy()} if partner is not None else {}, [])
    return total
