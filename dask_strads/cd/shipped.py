"""Working-set columns shipped to another block's solver: sent once, while wanted.

A phase with exchange sends each solver copies of the working-set columns it solves from
the other blocks. The working set changes little from one phase to the next, so both
ends remember the last shipment between them: the sender (:class:`Outbox`) which of its
columns the solver holds, the solver (:class:`Inbox`) the columns themselves. A later
shipment carries only the columns the solver lacks, and the current coefficients of
all. Both memories are the columns of the last shipment exactly, so the two agree
without a word, and both live on their blocks: they start empty together whenever the
blocks are rebuilt (a recovery re-places every block).
"""

from __future__ import annotations

import numpy as np

from dask_strads.cd.columns import ColumnSet


class Outbox:
    """A block's record of which of its columns each solver holds."""

    def __init__(self, n_columns: int):
        self.n_columns = n_columns
        self.held: dict = {}  # solver block -> bool per local column

    def parcel(self, block, local: np.ndarray, solver) -> dict:
        """What ``solver`` needs to solve columns ``local`` of ``block``: their ids and
        coefficients, and copies of those it does not hold."""
        held = self.held.setdefault(solver, np.zeros(self.n_columns, dtype=bool))
        new = local[~held[local]]
        held[:] = False
        held[local] = True
        return {"ids": local + block.start, "coef": block.coef[local].copy(),
                "new": block.columns(new) if new.shape[0] else None}


class Inbox:
    """A solver's copies of the columns each other block shipped it last."""

    def __init__(self):
        self.held: dict = {}  # sender block -> ColumnSet

    def receive(self, sender, parcel: dict) -> ColumnSet:
        """The columns of ``parcel`` (held ones and new ones), in its order, with its
        coefficients."""
        have = [s for s in (self.held.get(sender), parcel["new"]) if s is not None]
        pool = ColumnSet.concat(have) if len(have) > 1 else have[0]
        order = np.argsort(pool.ids, kind="stable")
        at = order[np.searchsorted(pool.ids, parcel["ids"], sorter=order)]
        cols = pool.take(at)
        cols.coef = np.array(parcel["coef"], dtype=np.float64)
        self.held[sender] = cols
        return cols
