"""The client's state of a coordinate-descent fit: small (the non-zero coefficients and
bookkeeping)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dask_strads.cd.coefficients import SparseCoef
from dask_strads.cd.messages import ScreenRule
from dask_strads.cd.parallelism import Costs


@dataclass
class CDState:
    coef: SparseCoef
    # per block: residual change to send with its next order (relayed changes)
    pending: list
    costs: Costs
    intercept: float = 0.0  # fitted by the datafit (not by centring)
    next: str = "gap"  # the kind of the next round: "gap" or "phase"
    waiting: bool = False  # a round is in flight whose pull the next one needs
    stop: str | None = None  # "converged", "max_iter", "stalled"
    converged: bool = False
    # the last gap round
    gap: float = np.inf
    primal: float = np.inf
    first_gap: float | None = None
    fresh: bool = False  # the last pull was a gap round's
    max_score: float = 0.0
    support: list = field(default_factory=list)  # per block: local ids of the non-zeros
    candidates: list = field(default_factory=list)  # per block: (local ids, scores)
    column_nnz: list = field(default_factory=list)  # per block: (local ids, stored entries)
    entry_bytes: int = 12
    # per block: where solvers read its columns in place, and the /dev/shm it sees
    column_sources: list = field(default_factory=list)
    shms: list = field(default_factory=list)
    gram_ids: list = field(default_factory=list)  # per block: what its Gram matrix holds
    screen: ScreenRule | None = None  # for the next phase
    ws_target: int = 0
    ws: list = field(default_factory=list)  # per block: the current working set
    # blocks taking turns in a phase (when they cannot exchange)
    turns: list = field(default_factory=list)
    turn_orders: dict = field(default_factory=dict)
    turn_screen: ScreenRule | None = None
    cycle_settled: bool = True
    # counters
    updates: int = 0
    gap_rounds: int = 0
    phases: int = 0
    epochs: int = 0
    screened: int = 0
    shipped_bytes: int = 0  # columns sent to the solvers of solo phases
    mode_counts: dict = field(default_factory=dict)
    gram_phases: int = 0  # phases (or turns) swept on a Gram matrix
    last_mode: str = ""

    def reads_in_place(self, block: int, solver: int) -> bool:
        """Whether ``solver`` reads ``block``'s columns where they lie (last gap round)."""
        sources = self.column_sources
        return block < len(sources) and sources[block] is not None \
            and sources[block] == self.shms[solver]
