"""What a push of the coordinate-descent program is told, and what it answers.

A fit alternates two kinds of rounds: a *gap round* (every block computes its share of
the duality gap and proposes working-set candidates) and a *phase* (the working set is
solved, on one worker or on several; see :mod:`dask_strads.cd.phase`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ScreenRule:
    """Gap Safe screening from the last gap round: drop the columns with
    ``(1 - |x_j'r - l2 b_j| / dual_scale) / sqrt(||x_j||^2 + l2) > radius``."""

    dual_scale: float
    radius: float


@dataclass
class GapOrder:
    """Measure the duality gap. ``correction``: residual change to apply first (other
    blocks' changes the client relays); ``n_candidates``: how many coordinates outside
    the support to propose for the next working set."""

    correction: object = None
    n_candidates: int = 0
    dual_vector: bool = False  # report the datafit's dual vector (one block does)


@dataclass
class GapReport:
    dual_norm: float
    w_l1: float
    w_l2sq: float
    xtr_sq: float
    terms: tuple  # the datafit's share of the gap (see dask_strads.cd.datafits)
    max_score: float
    support: np.ndarray  # local ids of the non-zero coefficients
    candidates: np.ndarray  # local ids outside the support, best first
    scores: np.ndarray  # their scores
    support_nnz: np.ndarray  # stored entries of each support column
    candidate_nnz: np.ndarray  # ... and of each candidate's
    entry_bytes: int  # bytes a stored entry takes on the wire (8 dense, 12 sparse)
    intercept_delta: float = 0.0  # the intercept's change (datafits that fit it here)
    shm: str = ""  # the /dev/shm the block's process sees (engine.shared.shm_id)
    # the /dev/shm where solvers read this block's columns in place (None: they are sent)
    column_source: str | None = None
    # the columns (global ids) whose Gram matrix the block keeps (None: its columns have
    # none, being sparse or beyond single precision's range, see dask_strads.cd.gram)
    gram_ids: np.ndarray | None = None


@dataclass
class PhaseOrder:
    """Solve the working set.

    ``ws``: this block's coordinates in it (local, increasing); ``solver_of``: the block
    that solves each of them; ``solvers``: every solving block, in the order all blocks
    reduce in. Without ``exchange`` the block solves its own coordinates alone (others
    wait for their turn) and, with ``relay``, reports its residual change for the client
    to pass on. ``tol``: stop once a sweep changes no coefficient by more;
    ``max_epochs``: at most this many sweeps; ``anderson``: extrapolate every this many
    sweeps (0: never)."""

    ws: np.ndarray
    solver_of: np.ndarray
    solvers: tuple
    exchange: bool
    tol: float
    max_epochs: int
    anderson: int = 0
    gram: bool = False  # sweep the Gram matrix of the working set (see dask_strads.cd.gram)
    relay: bool = False
    screen: ScreenRule | None = None
    correction: object = None
    # measure the gap right after the phase, in the same round (saves a round trip)
    then_gap: GapOrder | None = None


@dataclass
class PhaseReport:
    moved: np.ndarray  # local ids of this block's coordinates that changed
    values: np.ndarray  # their new values
    screened: np.ndarray  # local ids dropped by screening
    epochs: int = 0
    updates: int = 0  # coordinate updates made by this block
    d_max: float = 0.0  # largest change of the last sweep
    sweep_s: float = 0.0  # seconds sweeping
    swept_nnz: int = 0  # stored entries swept, over all epochs
    gram: bool = False  # swept on the working set's Gram matrix (not on its columns)
    gram_build_s: float = 0.0  # seconds forming its missing rows
    gram_madds: int = 0  # n x new rows x working set: the forming's multiply-adds
    gram_sweep_s: float = 0.0  # seconds of the sweeps on it
    gram_entries: int = 0  # its entries the sweeps read (epochs x its size)
    wait_s: float = 0.0  # seconds waiting in exchanges
    shipped_bytes: int = 0  # column copies sent to other solvers
    delta: object = None  # residual change, when the client must relay it
    intercept_delta: float = 0.0
    gap: GapReport | None = None  # the order's then_gap, measured after the phase
    extra: dict = field(default_factory=dict)
