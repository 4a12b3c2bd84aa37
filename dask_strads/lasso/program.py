"""The Lasso / ElasticNet program: priority-scheduled, model-parallel coordinate descent.

Resident blocks are contiguous column blocks of ``X`` with their coefficients and a
local copy of the residual ``r = y - X b`` (``y`` and ``X`` centered for an intercept).
Inside a block the scheduled coordinates are updated one after another (exact
Gauss-Seidel coordinate descent); blocks update in parallel.

One round:

``schedule`` (client)
    for every block, the coordinates to update and the sum of the other blocks'
    residual changes since its last push (the "automatic sync");
``push`` (worker)
    apply the pending residual change, run coordinate descent over the scheduled
    coordinates and return their changes and this block's residual change; on
    gap rounds only compute ``X_b' r`` for the duality gap and fresh priorities;
``pull`` (client)
    commit coefficients, set priorities ``|delta b_j|``, queue the residual changes
    for the other blocks, and evaluate the duality gap on gap rounds.

With the ``"priority"`` schedule the candidates are a *working set*: in every gap
round each block samples ``L'`` coordinates with probability proportional to their
priority (the step an update would take now) plus a floor, among those whose priority
is not zero, and keeps its support (on the worker, where the priorities are: the
client gets the working set); every
round the dependency check removes correlated pairs across blocks (visiting candidates
in random priority order, so that a pair takes turns). Until the next gap round every
push sweeps its working set (``inner_epochs`` sweeps, 1 by default: on coupled problems
more sweeps against a stale residual were measured to cost more updates than they
save), and the pull commits each block's update scaled by its own step length in
``[0, 1]``, chosen to minimise the objective exactly (convex in the steps): blocks
solved against each other's old residual overshoot together, or undo part of each
other's work (near the optimum, where a round's change is of the size of its
rounding, the steps come from the Gram matrix of the blocks' residual changes alone).
A shortened step reaches the worker as coefficient and residual corrections with its
next push.
When the engine allows it (every block on a worker of its own) and no dependency check
drops candidates, all rounds on a working set run as one *peer phase*: one engine round
whose pushes send each other their residual changes and the line search's numbers after
every sweep (:func:`dask_strads.engine.exchange`, worker to worker) and each compute the
same steps the pull would (see :meth:`LassoProgram._peer_phase`). This is a deliberate
exception to "the pull reduces on the client": a round through the client cost Lasso
problems (b) and (c) of the benchmark 5-9 ms besides the sweep, an exchange about 2 ms.
With two blocks whose working sets are small (:data:`SOLO_MAX_NNZ`), one push runs the
whole phase instead (a *solo phase*, :meth:`LassoProgram._solo_phase`): the other sends
it its working set's columns, and it sweeps both working sets one after the other, with
no exchange per round. This is a deliberate exception to "a block's columns stay on its
worker": it is a copy of the working set's columns, for one phase. On Lasso problems (b)
and (c) a phase's round otherwise cost each block 3-4.5 ms of exchange besides its
sweep, and Jacobi rounds between the blocks needed a fifth more rounds than
Gauss-Seidel sweeps over both (66 against 52 on (b), 57 against 45 on (c)).
The other schedules do one sweep over fresh candidates per round, as in the paper.
A sparse block sweeps a working set from its own compact copy of those columns (see
:meth:`LassoProgram._sub_block`), and once Gap Safe screening has dropped most of its
columns its gap rounds read only the others: the gap is then the one of the problem
over the columns left, which has the same optimum (screened coefficients are zero at
every optimum).

All internal quantities use scikit-learn's ``cd_fast`` scale: ``1/2 ||r||^2 +
l1 ||b||_1 + l2/2 ||b||^2`` with ``l1 = n alpha l1_ratio``, ``l2 = n alpha (1 -
l1_ratio)``; the stopping rule is scikit-learn's ``gap <= tol * ||y_c||^2``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from dask_strads.engine.program import Plan, Program
from dask_strads.lasso import kernels

__all__ = ["LassoProgram", "CorrelationIndex", "SCHEDULES", "dependency_filter"]

SCHEDULES = ("priority", "round_robin", "random", "shotgun")
# A residual change is sent as (index, value) pairs when it touches fewer rows than this.
SPARSE_DELTA_FRACTION = 0.25
# A push's block-local solve stops once a sweep changes coefficients by less than this
# share of its first sweep's largest change; a working set is left for the next gap
# round once a round's largest change is below WS_GAIN times its first round's. Rounds
# to 1e-6 suboptimality, in process, WS_GAIN 0.01 -> 0.2: Lasso benchmark problem (b)
# 120 -> 92 and 122 -> 93 (two seeds), (c) 131 -> 91; the quick (a) (dense, AR(1) 0.7)
# 4388 / 4928 / 4335 -> 4421 / 4662 / 4850 (three seeds: its noise).
INNER_GAIN = 1e-3
WS_GAIN = 0.2
STEP_SWEEPS = 10
# A peer phase ends when its blocks' interference (see LassoProgram._adapt) passes this,
# and the client's step control takes over (fewer coordinates per round). Below it the
# phase goes on with the steps its line search shortens: besides its sweep, a phase's
# round costs about 2 ms, a round through the client 5-9 ms. At 0.25 (the client's own
# threshold) Lasso problems (b) and (c) of the benchmark took 25 rounds (64 and 60 in
# phases), at 1.0 19 rounds (66 and 57), in one process.
PHASE_INTERFERENCE = 1.0
# A peer phase of two sparse blocks runs on one worker (a solo phase, see
# LassoProgram._solo_phase) while their working sets hold at most this many non-zeros
# in all (the client decides, from the sizes their gap round reports). A solo round
# sweeps both working sets (about 4.4 ns per non-zero on Lasso problem (b)); a peer
# round sweeps one and pays an exchange (3-4.5 ms there), and needs about 1.25x the
# rounds: solo wins while a block's sweep is below about 1.7 exchanges, about 1.5 M
# non-zeros a block.
SOLO_MAX_NNZ = 3_000_000
# a working set holds WS_GROWTH x the support, or WS_FAST x while the support fills
# at least WS_FULL of the last working set
WS_GROWTH = 2.0
WS_FAST = 4.0
WS_FULL = 0.75
# a cold start's first working set (see ``cold_start``) holds at most this share of a
# block's coordinates
COLD_START_SHARE = 0.25
WHOLE = 2**62  # "the whole working set" per round
# a working set's sweeps run over a copy of its columns while they hold at most this
# share of the block's non-zeros (see LassoProgram._sub_block)
SUB_BLOCK_SHARE = 0.25
# a sparse block's gap rounds read only its columns not screened out once they are at
# most this share of it
LIVE_SHARE = 0.5
# a gap round whose bounds would leave it more than this share of the columns to read
# (judged from about BOUND_PROBE of them) reads them all and sets a new reference (see
# LassoProgram._bounded_xtr): the pass over every column's bound costs about half a
# full pass (on Lasso problem (c) a round that read 7% of the columns took 21 ms
# against 45 ms; on (b) one that read 24% took as long as a full one). The bounds
# stay BOUND_MARGIN below l1 (relative), beyond the rounding of the reference's values.
BOUND_SHARE = 0.2
BOUND_PROBE = 2048
BOUND_MARGIN = 1e-9
# the relative rounding of one floating-point operation, with a margin
ROUNDING = 4.0 * np.finfo(np.float64).eps
_EMPTY = np.zeros(0, dtype=np.int64)


# ---------------------------------------------------------------------- helpers
def compact(delta: np.ndarray, nz: np.ndarray | None = None):
    """A residual change as a dense array or, when mostly zero, ``(index, value)``
    (``nz``: its non-zero indices, when known)."""
    # counted before listed: a dense change (the common case on the client) then costs
    # no index list (flatnonzero 167 us, count_nonzero 24 us for 50 000 rows)
    count = np.count_nonzero(delta) if nz is None else nz.shape[0]
    if count == 0:
        return None
    if count >= SPARSE_DELTA_FRACTION * delta.shape[0]:
        return delta
    if nz is None:
        nz = np.flatnonzero(delta)
    return (nz.astype(np.int32), delta[nz])


def add_delta(target: np.ndarray, delta, scale: float = 1.0) -> None:
    """``target += scale * delta`` for a change made by :func:`compact`."""
    if delta is None:
        return
    if isinstance(delta, tuple):
        idx, val = delta
        target[idx] += val if scale == 1.0 else scale * val  # indices are unique
    elif scale == 1.0:
        target += delta
    else:
        target += scale * delta


def _dense(delta, n: int) -> np.ndarray | None:
    """A change made by :func:`compact` as a dense array (itself when it is one)."""
    if delta is None or not isinstance(delta, tuple):
        return delta
    out = np.zeros(n)
    add_delta(out, delta)
    return out


def _as_block(shard) -> Any:
    """A shard (dense, scipy.sparse or pydata sparse) as float64 Fortran / CSC."""
    if hasattr(shard, "to_scipy_sparse"):  # pydata sparse
        shard = shard.to_scipy_sparse()
    if sp.issparse(shard):
        X = _csc_sharing(shard)
        if X is None:
            X = sp.csc_matrix(shard, dtype=np.float64)
        if not X.has_canonical_format:
            # never sort a Dask-held object in place
            X = X.copy()
            X.sum_duplicates()
            X.sort_indices()
        return X
    return np.asfortranarray(shard, dtype=np.float64)


def _csc_sharing(shard) -> sp.csc_matrix | None:
    """A float64 CSC ``shard`` as a ``csc_matrix`` sharing its arrays, or None for any
    other shard.

    scipy's constructor copies ("prunes") index and data arrays that are views of a
    buffer at least twice their size, and every shard that reaches a worker through
    Dask is one: a view of the message it arrived in. On Lasso benchmark problem (c)
    that copy took 0.06-0.24 s per block at every fit, and the block then held X twice
    (the copy, and the array Dask keeps for a persisted input). The shard's arrays are
    never written to (a non-canonical one is copied before it is sorted).
    """
    if shard.format != "csc" or shard.dtype != np.float64 or \
            shard.indices.dtype != shard.indptr.dtype:
        return None
    if isinstance(shard, sp.csc_matrix):
        return copy.copy(shard)  # shallow: an object of our own, the same arrays
    X = sp.csc_matrix(shard.shape, dtype=np.float64)  # a csc_array: same arrays, as a matrix
    X.indptr, X.indices, X.data = shard.indptr, shard.indices, shard.data
    return X


def gap_formulation(l1, l2, w_l1, w_l2sq, r_norm2, r_y, dual_norm, xtr_sq=0.0):
    """scikit-learn's duality gap and primal, on the ``cd_fast`` scale.

    Formulation A for ``l1 > 0``; for ``l1 == 0`` formulation B (ridge) or, without
    any penalty, the squared gradient norm, as ``cd_fast.gap_enet`` does.
    """
    primal = 0.5 * (r_norm2 + l2 * w_l2sq) + l1 * w_l1
    if l1 == 0.0:
        if l2 == 0.0:
            return xtr_sq, primal
        return r_norm2 + 0.5 * l2 * w_l2sq - r_y + xtr_sq / (2.0 * l2), primal
    scale = l1 / dual_norm if dual_norm > l1 else 1.0
    dual = -0.5 * scale**2 * (r_norm2 + l2 * w_l2sq) + scale * r_y
    return primal - dual, primal


@dataclass
class SubBlock:
    """A working set's copy of its block's live columns (see ``LassoProgram._sub_block``),
    cut for the coordinates ``coords`` while the block's screening was at ``version``:
    ``live = coords[in_coords]`` (increasing) are its columns ``at`` (all of them), in
    CSC arrays of their own; ``coef`` is scratch for their coefficients."""

    coords: np.ndarray
    version: int
    live: np.ndarray
    at: np.ndarray
    in_coords: np.ndarray
    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    mu: np.ndarray
    col_sq: np.ndarray
    coef: np.ndarray


# ---------------------------------------------------------------------- dependency check
class CorrelationIndex:
    """Exact Pearson correlations between *tracked* columns that live on different blocks.

    Columns are tracked when they are in the support at a duality-gap round (their
    block sends them standardized with its gap statistics) while the support is at
    most ``max_tracked`` columns; pairs whose ``|corr| >= rho`` are kept as conflicts.
    Untracked coordinates are outside the support: like STRADS'
    ``CORRELATION_OPTIMIZATION`` (a zero-weight coordinate is taken as independent),
    pairs involving one are not checked. The cost is O(n T^2) flops for T tracked
    columns, which is why the support, not every candidate, is tracked.
    """

    def __init__(self, n_samples: int, rho: float, block_of: np.ndarray):
        self.n = n_samples
        self.rho = rho
        self.block_of = block_of
        self.conflicts: dict[int, set[int]] = {}
        self.n_tracked = 0
        self._csr = None
        self._conflicted = None
        self._ids: dict[int, list[np.ndarray]] = {}
        self._cols: dict[int, list] = {}

    def add(self, ids: np.ndarray, cols) -> None:
        """Track columns ``ids`` (global) of one block and record their conflicts."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.shape[0] == 0:
            return
        block = int(self.block_of[ids[0]])
        for other, chunks in self._cols.items():
            if other == block or not chunks:
                continue
            old_ids = np.concatenate(self._ids[other])
            if cols[0] == "dense":
                old_Z = chunks[0] if len(chunks) == 1 else np.hstack(chunks)
                self._cols[other] = [old_Z]
                C = cols[1].T @ old_Z
            else:
                old_X = chunks[0][0] if len(chunks) == 1 else sp.hstack(
                    [c[0] for c in chunks], format="csc")
                old_mu = np.concatenate([c[1] for c in chunks])
                old_nrm = np.concatenate([c[2] for c in chunks])
                self._cols[other] = [(old_X, old_mu, old_nrm)]
                _, Xs, mu, nrm = cols
                raw = (Xs.T @ old_X).toarray()
                C = (raw - self.n * np.outer(mu, old_mu)) / np.outer(nrm, old_nrm)
            self._ids[other] = [old_ids]
            self._record(ids, old_ids, C)
        self._ids.setdefault(block, []).append(ids)
        self._cols.setdefault(block, []).append(cols[1] if cols[0] == "dense" else cols[1:])
        self.n_tracked += ids.shape[0]

    def adjacency(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The conflicts as CSR lists over all columns (``ptr``, ``neighbours``) and
        a boolean scratch array, for :func:`kernels.greedy_keep`."""
        if self._csr is None:
            p = self.block_of.shape[0]
            counts = np.zeros(p + 1, dtype=np.int64)
            for j, ks in self.conflicts.items():
                counts[j + 1] = len(ks)
            ptr = np.cumsum(counts)
            nbr = np.empty(ptr[-1], dtype=np.int64)
            for j, ks in self.conflicts.items():
                nbr[ptr[j]:ptr[j + 1]] = sorted(ks)
            self._csr = (ptr, nbr, np.zeros(p, dtype=np.bool_))
        return self._csr

    def conflicted(self) -> np.ndarray:
        """The columns with at least one conflict, sorted."""
        if self._conflicted is None:
            self._conflicted = np.array(sorted(self.conflicts), dtype=np.int64)
        return self._conflicted

    def _record(self, ids, other_ids, C) -> None:
        rows, cols = np.nonzero(np.abs(C) >= self.rho)
        if rows.shape[0]:
            self._csr = None
            self._conflicted = None
        for a, b in zip(ids[rows].tolist(), other_ids[cols].tolist(), strict=True):
            self.conflicts.setdefault(a, set()).add(b)
            self.conflicts.setdefault(b, set()).add(a)


def dependency_filter(candidates: np.ndarray, conflicts: Mapping[int, set]) -> np.ndarray:
    """Greedy dependency check: keep candidates (in the given order) that conflict with
    no candidate already kept. ``conflicts[j]`` lists the columns (on other blocks)
    with ``|corr| >= rho``; candidates without an entry conflict with nobody.

    Returns a boolean mask over ``candidates``.
    """
    keep = np.ones(candidates.shape[0], dtype=bool)
    if not conflicts:
        return keep
    kept: set[int] = set()
    for i, j in enumerate(candidates.tolist()):
        c = conflicts.get(j)
        if c is None:
            continue
        if c & kept:
            keep[i] = False
        else:
            kept.add(j)
    return keep


# ---------------------------------------------------------------------- state
@dataclass
class LassoState:
    """Client state of a fit (small: coefficients, priorities, queued residual changes)."""

    coef: np.ndarray
    weight: np.ndarray
    active: list
    position: list
    n_active: list
    pending: list
    pending_dirty: list
    rng: np.random.Generator
    corr: CorrelationIndex | None
    rr_pos: list
    marks: list
    updates: int = 0
    updates_since_gap: int = 0
    round_d_max: float = np.inf
    # max |b| over the coordinates the last working-set round swept, as its pushes
    # reported it (None: not known, look at the coefficients)
    ws_w_max: float | None = None
    scheduled: int = 0  # rounds with pushes scheduled / pulled (drain rounds excluded)
    pulled: int = 0
    gap: float = np.inf
    primal: float = np.inf
    objective_fresh: bool = False
    converged: bool = False
    gap_rounds: int = 0
    rejected: int = 0
    rejected_total: int = 0
    n_round: int = 0  # coordinates sampled per block and round (adapted)
    alive: list = field(default_factory=list)  # per block: coordinates not screened out
    alive_mask: list = field(default_factory=list)  # ... as a boolean mask
    n_alive: list = field(default_factory=list)
    screen: tuple | None = None  # (dual scale, radius) to send with the next round
    screened: int = 0
    round_updates: int = -1
    interference: float = 0.0
    peer_rounds: int = 0  # working-set rounds run inside peer phases
    solo_phases: int = 0  # peer phases run by one block (see LassoProgram._solo_phase)
    peer_wait_s: float = 0.0  # the longest wait of a block in their exchanges, summed
    stop: bool = False
    # working-set rounds (schedule "priority"): the coordinates each block solves over
    # until the next gap round, the pending coefficient corrections after a shortened
    # step, rounds since the last gap round, and the last step length
    ws: list | None = None
    # per block: the working set its last gap round drew, for the next round to adopt
    ws_next: dict | None = None
    pending_coef: list = field(default_factory=list)
    pending_coef_dirty: list = field(default_factory=list)
    # per block: the index arrays where pending_coef was written since it was last
    # sent (None: not known, as after a restore: look at the whole block)
    pending_coef_touched: list = field(default_factory=list)
    rounds_since_gap: int = 0
    ws_first: float = np.inf
    epochs: int = 1
    step: float = 1.0
    # per block: the coordinates its last push was sent (a working set is sent once,
    # not every round: the worker keeps it)
    sent: list = field(default_factory=list)
    ws_size: list = field(default_factory=list)
    # per block: the non-zeros of the working set it drew last / of the current one
    # (None: dense, or not known)
    ws_nnz_next: list | None = None
    ws_nnz: list | None = None
    # (adjacency, candidates, the ones with a conflict) of the working sets
    ws_conflicted: tuple | None = None
    # non-zero coefficients, kept up to date by the pulls (-1: count them)
    nnz: int = -1
    # residual changes of the pull in progress, (source block, change, step), queued
    # for the other blocks together when the pull ends (see LassoProgram._flush)
    queued: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------------- the program
class LassoProgram(Program):
    """Model-parallel coordinate descent for Lasso / ElasticNet (see module docstring).

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Target, already centered when ``fit_intercept``.
    starts : ndarray of int
        ``starts[b]:starts[b + 1]`` are the global columns of block ``b``.
    l1, l2 : float
        Penalties on the ``cd_fast`` scale.
    tol_abs : float
        Stop when the duality gap (``cd_fast`` scale) is at most this.
    fit_intercept, positive : bool
    schedule : str
        One of :data:`SCHEDULES`.
    n_candidates : int
        Coordinates sampled per block and round (L').
    rho : float
        Dependency threshold on |corr| (``priority`` only; >= 1 disables the check).
    max_updates : int
        Stop after this many coordinate updates (``max_iter`` passes over the features).
    coef_init : ndarray, optional
        Warm start.
    warmup_passes : float
        Passes over the features sampled uniformly before priorities are used.
    gap_every : float
        Evaluate the gap at least every ``gap_every`` passes worth of updates.
    gap_trigger : float
        ... and earlier, once a round's largest change relative to max |b| is below it
        (scikit-learn's trigger with its ``tol``),
    gap_min : float
        ... but not before ``gap_min`` passes worth of updates since the last gap.
    adaptive : bool
        Adapt the coordinates per round (up to ``n_candidates``) to the measured
        interference between blocks (see :meth:`_adapt`).
    screening : bool
        Gap Safe screening after every gap round (as scikit-learn does).
    max_tracked : int
        Track columns for the dependency check only while the support is at most
        this large (the check costs O(n T^2) for T tracked columns).
    random_state : int
    inner_epochs : int
        At most this many sweeps over the working set per push (``"priority"`` only;
        with ``adaptive`` fewer while blocks interfere); a push stops earlier once a
        sweep's largest change is below the gap trigger times max ``|b|`` or
        :data:`INNER_GAIN` times its first sweep's.
    max_ws_rounds : int
        Rounds on one working set before the next gap round (``"priority"`` only).
    peer_phases : bool
        Run the rounds on a working set as one peer phase when the engine allows it
        (:attr:`Program.can_exchange`): the blocks reduce their rounds among
        themselves, worker to worker (see :meth:`_peer_phase`).
    solo_phases : bool
        Run a peer phase of two blocks on one of them while their working sets'
        column copies are small (see :meth:`_solo_phase`).
    cold_start : int
        Coordinates per block in the first working set of a fit that starts from zero
        (``"priority"`` only; at most :data:`COLD_START_SHARE` of the block; the
        estimators pass ``n / (2 B)``). The working sets grow from their first one by
        at most ``WS_FAST x`` per gap round: a first one of ``L'`` coordinates took
        five gap rounds to hold the support of Lasso problem (c).
    """

    name = "lasso"
    transport = "direct"

    def __init__(self, y, starts, l1, l2, tol_abs, *, fit_intercept=True, positive=False,
                 schedule="priority", n_candidates=256, rho=0.1, max_updates=10**9,
                 coef_init=None, warmup_passes=0.0, gap_every=1.0, gap_trigger=1e-4,
                 gap_min=0.05, max_tracked=1000, adaptive=True, screening=True,
                 random_state=0, staleness=0, inner_epochs=1, max_ws_rounds=10,
                 cold_start=0, peer_phases=True, solo_phases=True):
        self.y = np.ascontiguousarray(y, dtype=np.float64)
        self.n = self.y.shape[0]
        self.starts = np.asarray(starts, dtype=np.int64)
        self.n_blocks = self.starts.shape[0] - 1
        self.p = int(self.starts[-1])
        self.l1 = float(l1)
        self.l2 = float(l2)
        self.tol_abs = float(tol_abs)
        self.fit_intercept = bool(fit_intercept)
        self.positive = bool(positive)
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {SCHEDULES}, got {schedule!r}")
        self.schedule_kind = schedule
        self.n_candidates = int(n_candidates)
        self.rho = float(rho)
        self.track = schedule == "priority" and self.rho < 1.0
        self.max_updates = int(max_updates)
        self.coef_init = None if coef_init is None else np.asarray(coef_init, dtype=np.float64)
        self.warmup_passes = float(warmup_passes)
        self.gap_every = float(gap_every)
        self.gap_trigger = float(gap_trigger)
        self.gap_min = float(gap_min)
        self.max_tracked = int(max_tracked)
        self.adaptive = bool(adaptive)
        self.screening = bool(screening)
        self.random_state = random_state
        self.staleness = int(staleness)
        self.working_sets = schedule == "priority"
        self.inner_epochs = int(inner_epochs)
        self.max_ws_rounds = int(max_ws_rounds)
        # at 0, a peer phase of no rounds came back again and again: the fit hung
        for name, value in (("inner_epochs", self.inner_epochs),
                            ("max_ws_rounds", self.max_ws_rounds)):
            if value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value}")
        if self.staleness < 0:
            raise ValueError(f"staleness: expected an integer >= 0, got {self.staleness}")
        self.cold_start = int(cold_start)
        self.peer_phases = bool(peer_phases)
        self.solo_phases = bool(solo_phases)

    # ================================================================= worker
    def init_block(self, block_id: Hashable, shard: Any) -> dict:
        kernels.warm_up()
        X = _as_block(shard)
        n = self.n
        if X.shape[0] != n:
            raise ValueError(f"block {block_id}: {X.shape[0]} rows, expected {n}")
        b0, b1 = self.starts[block_id], self.starts[block_id + 1]
        if X.shape[1] != b1 - b0:
            raise ValueError(f"block {block_id}: {X.shape[1]} columns, expected {b1 - b0}")
        block: dict[str, Any] = {"id": block_id, "n": n}
        if sp.issparse(X):
            sums, sq, abs_sums = kernels.column_sums(X.data, X.indptr)
            mu = sums / n
            centered_sq = np.maximum(sq - n * mu**2, 0.0)
            block.update(sparse=True, data=X.data, indices=X.indices, indptr=X.indptr,
                         X=X, mu=mu, abs_sum=abs_sums, center=self.fit_intercept,
                         col_sq=centered_sq if self.fit_intercept else sq,
                         corr_norm=np.sqrt(centered_sq))
        else:
            mu = X.mean(axis=0)
            if self.fit_intercept:
                X = np.asfortranarray(X - mu)  # a private copy: the shard is Dask's
            col_sq = np.einsum("ij,ij->j", X, X)
            centered_sq = col_sq if self.fit_intercept else np.maximum(col_sq - n * mu**2, 0.0)
            block.update(sparse=False, X=X, mu=mu, col_sq=col_sq,
                         corr_norm=np.sqrt(centered_sq))
        p_b = X.shape[1]
        coef = np.zeros(p_b) if self.coef_init is None else self.coef_init[b0:b1].copy()
        residual = self.y.copy()
        if np.any(coef):
            residual -= self._matvec(block, coef)
        block.update(coef=coef, residual=residual, tracked=np.zeros(p_b, dtype=bool),
                     alive=block["col_sq"] > 0.0, alive_version=0,
                     init_delta=residual - self.y)
        return block

    def _matvec(self, block, v):
        return np.asarray(block["X"] @ v).ravel()

    def block_summary(self, block_id: Hashable, block: dict) -> dict:
        delta = block.pop("init_delta", None)  # None for a block restored from a snapshot
        return {"delta": None if delta is None else compact(delta)}

    def _columns(self, block, local_ids):
        """Standardized columns ``local_ids`` for the client's correlation index."""
        nrm = block["corr_norm"][local_ids]
        safe = np.where(nrm > 0, nrm, 1.0)
        if block["sparse"]:
            Xs = block["X"][:, local_ids]
            return ("sparse", Xs, block["mu"][local_ids], safe)
        Z = block["X"][:, local_ids]
        if not self.fit_intercept:
            Z = Z - block["mu"][local_ids]
        return ("dense", np.asarray(Z / safe, dtype=np.float32, order="F"))

    def push(self, block: dict, part: Any, carried: Any = None) -> dict:
        coords, delta, want_gap, jacobi, track, screen, coef_fix, epochs, span = part[:9]
        phase = part[9] if len(part) > 9 else None
        sample = None
        if isinstance(span, tuple):  # ("sample", seed, previous size): see _sample_ws
            sample, span = span[1:], None
        elif span is not None:
            block["span"] = span
        drop_pos = None
        if isinstance(coords, tuple):  # ("drop", ids): the span without those
            coords, drop_pos = self._span_without(block, coords[1])
        again = coords is None
        if again:  # the same coordinates as this block's last push
            coords = block.get("coords")
            if coords is None:
                raise RuntimeError(f"block {block['id']}: a push without coordinates, but "
                                   "the block was never sent any")
        else:
            block["coords"] = coords
        r = block["residual"]
        add_delta(r, delta)
        coef = block["coef"]
        if coef_fix is not None:  # a shortened step of an earlier round
            coef[coef_fix[0]] += coef_fix[1]
        out: dict[str, Any] = {"gap": None, "new_cols": None, "screened": None,
                               "screen_delta": None, "delta": None, "d_max": 0.0,
                               "decrease": 0.0, "rd": 0.0, "rd_err": 0.0, "epochs": 0}
        if want_gap:
            out["gap"] = gap = self._gap_stats(block)
            if track:
                new = np.flatnonzero((coef != 0.0) & ~block["tracked"])
                if new.shape[0]:
                    block["tracked"][new] = True
                    block["tracked_idx"] = np.flatnonzero(block["tracked"])
                    out["new_cols"] = (new, self._columns(block, new))
            # the priorities: the step an exact update of each coordinate would take now
            step_idx, step = gap.pop("step_idx"), gap.pop("step")  # views of buffers
            # the client's dependency check reads the priorities of tracked columns only
            tracked = block.get("tracked_idx", _EMPTY)
            weight = (self._step_weights(block, step_idx, step)
                      if sample is not None or tracked.shape[0] else None)
            gap["step_idx"] = tracked
            gap["step"] = weight[tracked] if weight is not None else np.zeros(0)
            if sample is not None:
                out["ws"] = block["span"] = self._sample_ws(block, weight, step_idx, *sample)
                block["span_new"] = True
                if block["sparse"]:  # the client's choice of solo phases reads it
                    ptr = block["indptr"]
                    out["ws_nnz"] = int((ptr[out["ws"] + 1] - ptr[out["ws"]]).sum())
        if screen is not None:
            before = r.copy()
            out["screened"] = self._screen(block, *screen)
            if out["screened"].shape[0]:
                out["screen_delta"] = compact(r - before)
        if span is None and not want_gap and block.pop("span_new", False):
            span = block["span"]  # drawn by the gap round: cut for it after screening
        # the block that sends its columns to a solo phase's solver sweeps nothing
        sends = phase is not None and phase[3] is not None and phase[3] != block["id"]
        if sends:
            block["sub_block"] = None
        # the working set's own copy of its columns (sparse blocks): a sweep streams
        # through it instead of reaching into the block column by column
        found = (self._sub_block(block, coords, again, span, drop_pos)
                 if block["sparse"] and not jacobi and not sends else None)
        if found is not None:
            sub, at, in_coords = found
            live = None  # the live coordinates are coords[in_coords], columns at of sub
            n_live = at.shape[0]
        else:
            live = coords[block["alive"][coords]] if coords.shape[0] else coords
            n_live = live.shape[0]
        if phase is not None:
            return self._peer_phase(block, coords, found, live, epochs, phase, out)
        # the pull that commits working-set rounds needs only the coordinates that moved
        only_changed = self.working_sets and self.staleness == 0
        if only_changed and found is None:
            start = coef[coords]
        n_moved = 0
        if n_live:
            before = r.copy()
            if found is not None:
                sub_nnz = kernels.load_sub_coef(coef, coords, in_coords, at, sub.coef,
                                                sub.indptr)
                n_epochs, d_max = self._sweep(block, sub.coef, at, sub, epochs)
                moved_pos = np.empty(n_live, dtype=np.int32)
                moved_val = np.empty(n_live)
                n_moved = kernels.store_sub_coef(coef, coords, in_coords, at, sub.coef,
                                                 moved_pos, moved_val)
            elif block["sparse"]:
                if jacobi:
                    mu = block["mu"] if block["center"] else self._zeros_mu(block)
                    d_max = kernels.jacobi_sparse(
                        block["data"], block["indices"], block["indptr"], mu, block["col_sq"],
                        coef, r, live, self.l1, self.l2, self.positive,
                        np.empty(live.shape[0]))
                    n_epochs = 1
                else:
                    n_epochs, d_max = self._sweep(block, coef, live, None, epochs)
            elif jacobi:
                d_max = kernels.jacobi_dense(block["X"], block["col_sq"], coef, r, live,
                                             self.l1, self.l2, self.positive,
                                             np.empty(live.shape[0]))
                n_epochs = 1
            else:
                n_epochs, d_max = self._sweep(block, coef, live, None, epochs)
            dr, nz, count, rd, dd, s0, sd, bt = kernels.residual_change(before, r)
            # r0' dr and the decrease of 1/2 ||r||^2 from this block's own updates (the
            # true residual of a sparse centered block is r_raw - mean(r_raw))
            if block["sparse"] and block["center"]:
                rd -= s0 * sd / self.n
                dd -= sd * sd / self.n
            decrease = -rd - 0.5 * dd
            out.update(delta=compact(dr, nz[:count]), d_max=d_max, decrease=decrease, rd=rd,
                       epochs=n_epochs)
            if only_changed:  # for the working-set pull's steps
                # dr carries the rounding of the residual's updates, about eps |r_k|
                # each with a random sign (a random walk over a row's updates and over
                # the rows): the size of the error of rd
                if found is not None:
                    per_row = n_epochs * float(sub_nnz) / max(count, 1)
                elif block["sparse"]:
                    ptr = block["indptr"]
                    per_row = n_epochs * float((ptr[live + 1] - ptr[live]).sum()) / max(count, 1)
                else:
                    per_row = n_epochs * live.shape[0]
                out["rd_err"] = ROUNDING * np.sqrt(per_row * bt)
        if only_changed:  # the scale of the client's gap trigger (see _gap_due)
            out["w_max"] = (kernels.coef_max(sub.coef, at) if found is not None
                            else kernels.coef_max(coef, coords))
        if found is not None and only_changed:
            out["values"] = None
            out["changed"] = ((moved_pos[:n_moved], moved_val[:n_moved]) if n_moved
                              else (_EMPTY.astype(np.int32), np.zeros(0)))
            return out
        values = coef[coords]
        if only_changed:
            moved = np.flatnonzero(values != start).astype(np.int32)
            out["values"] = None
            out["changed"] = (moved, values[moved])
        else:
            out["values"] = values
        return out

    def _sweep(self, block: dict, vec: np.ndarray, idx: np.ndarray, sub, epochs: int):
        """Sweeps over ``vec[idx]``: the working set's copy ``sub`` (``idx`` its
        columns) or, without one, the block itself. Returns epochs and largest change."""
        r = block["residual"]
        if sub is not None:
            return kernels.solve_sparse(
                sub.data, sub.indices, sub.indptr, sub.mu, block["center"], sub.col_sq, vec,
                r, idx, self.l1, self.l2, self.positive, epochs, self.gap_trigger, INNER_GAIN)
        if block["sparse"]:
            return kernels.solve_sparse(
                block["data"], block["indices"], block["indptr"], block["mu"],
                block["center"], block["col_sq"], vec, r, idx, self.l1, self.l2,
                self.positive, epochs, self.gap_trigger, INNER_GAIN)
        return kernels.solve_dense(block["X"], block["col_sq"], vec, r, idx, self.l1, self.l2,
                                   self.positive, epochs, self.gap_trigger, INNER_GAIN)

    def _peer_phase(self, block: dict, coords: np.ndarray, found, live, epochs: int,
                    phase: tuple, out: dict) -> dict:
        """Working-set rounds reduced among the pushes themselves (a peer phase).

        Each round: sweep, send this block's residual change and the numbers of the
        step line search (see :meth:`_steps`) to the other blocks through
        :func:`dask_strads.engine.exchange`, then compute the steps from every
        block's numbers, as the client's pull would, and apply them: this block's
        coefficients at its own step, the residual with every block's change at its
        step. Every push does the same arithmetic on the same numbers, so the blocks
        keep one residual and take the same decisions. The phase ends on the client's
        rule for a gap round (:meth:`_gap_due`), after ``rounds`` rounds, once
        ``budget`` updates were made, or when the blocks interfere (the client then
        adapts the rounds). The client gets the coordinates that moved over the whole
        phase and the last round's numbers, not one residual change.

        ``phase``: ``(rounds, ws_first, budget, solver)``; with a ``solver`` (a block
        id), the phase is a solo phase (see :meth:`_solo_phase`).
        """
        from dask_strads.engine import exchange

        rounds, ws_first, budget, solver = phase
        coef, r = block["coef"], block["residual"]
        # this block's screening (the gap round's rule, before the sweeps) goes to the
        # others with the first round
        screen_delta, out["screen_delta"] = out["screen_delta"], None
        if found is not None:
            sub, at, in_coords = found
            kernels.load_sub_coef(coef, coords, in_coords, at, sub.coef, sub.indptr)
            vec, idx, nnz_of = sub.coef, at, sub.indptr
            start = None
        else:
            sub, vec, idx = None, coef, live
            start = coef[coords]
            nnz_of = block.get("indptr")
        if solver is not None:
            return self._solo_phase(block, coords, found, vec, idx, start, phase, epochs,
                                    screen_delta, out)
        if block["sparse"]:
            swept_nnz = float((nnz_of[idx + 1] - nnz_of[idx]).sum())
        else:
            swept_nnz = float(idx.shape[0]) * self.n
        before = np.empty_like(r)
        own = block["id"]
        n_rounds = n_updates = 0
        d_max = w_max = interference = wait_s = 0.0
        step_min = 1.0
        for _ in range(rounds):
            prev = vec[idx]
            before[:] = r
            n_epochs, d_own = self._sweep(block, vec, idx, sub, epochs)
            dr, nz, count, rd, dd, s0, sd, bt = kernels.residual_change(before, r)
            if block["sparse"] and block["center"]:
                rd -= s0 * sd / self.n
                dd -= sd * sd / self.n
            w_own, mv, b_m, d_m, keep, lin, quad, size = kernels.sweep_moves(
                vec, idx, prev, self.l1, self.l2)
            per_row = n_epochs * swept_nnz / max(count, 1)
            msg = {"delta": compact(dr, nz[:count]), "rd": rd,
                   "rd_err": ROUNDING * np.sqrt(per_row * bt), "decrease": -rd - 0.5 * dd,
                   "d_max": d_own, "w_max": w_own, "updates": n_epochs * idx.shape[0],
                   "folded": (b_m[keep], d_m[keep], lin, quad),
                   "noise": self._penalty_noise(size), "screen": screen_delta}
            screen_delta = None
            t0 = time.perf_counter()
            values = exchange(msg)
            wait_s += time.perf_counter() - t0
            order = list(values)
            n = len(order)
            rows = [_dense(values[b]["delta"], self.n) for b in order]
            G = np.zeros((n, n))
            for i in range(n):
                for j in range(i, n):
                    if rows[i] is not None and rows[j] is not None:
                        G[i, j] = G[j, i] = self._cdot(rows[i], rows[j])
            c = np.array([values[b]["rd"] for b in order])
            t = self._steps(G, c, [values[b]["folded"] for b in order],
                            sum(values[b]["rd_err"] for b in order),
                            sum(values[b]["noise"] for b in order))
            for i, b in enumerate(order):
                step = float(t[i]) - (1.0 if b == own else 0.0)
                if step != 0.0:
                    add_delta(r, values[b]["delta"], step)
                if b != own:
                    add_delta(r, values[b]["screen"])
                if b == own and t[i] != 1.0 and mv.shape[0]:
                    vec[idx[mv]] = b_m + t[i] * d_m
            decrease = sum(values[b]["decrease"] for b in order)
            cross = float(np.triu(G, 1).sum())
            interference = cross / decrease if decrease > 0 else 0.0
            d_max = max(values[b]["d_max"] for b in order)
            w_max = max(values[b]["w_max"] for b in order)
            updates = sum(values[b]["updates"] for b in order)
            step_min = float(t.min())
            n_rounds += 1
            n_updates += updates
            if ws_first is None:
                ws_first = d_max
            # the client's rule for the next gap round (see _gap_due), and its step
            # control's for fewer coordinates per round (see _adapt)
            if (self._phase_done(updates, n_updates, budget, d_max, w_max, ws_first)
                    or (self.adaptive and interference > PHASE_INTERFERENCE)):
                break
        if sub is not None:
            changed = self._store_sub(coef, coords, in_coords, at, sub.coef)
        else:
            values_now = coef[coords]
            pos = np.flatnonzero(values_now != start).astype(np.int32)
            changed = (pos, values_now[pos])
        out.update(values=None, changed=changed, w_max=w_max, d_max=d_max,
                   epochs=epochs, phase={"rounds": n_rounds, "updates": n_updates,
                                         "interference": interference, "step": step_min,
                                         "wait_s": wait_s, "ws_first": ws_first})
        return out

    def _solo_phase(self, block: dict, coords: np.ndarray, found, vec: np.ndarray,
                    idx: np.ndarray, start: np.ndarray | None, phase: tuple, epochs: int,
                    screen_delta, out: dict) -> dict:
        """A peer phase of two blocks run by one of them, the solver (chosen by the
        client, see :meth:`_solo_solver`): the other sends it a copy of its working
        set's columns, and the solver sweeps both working sets one after the other
        against its residual (Gauss-Seidel over their union: no exchange and no line
        search per round), then sends back the residual change and the other block's
        new values.

        After a first sweep over both working sets, the sweeps visit only their
        non-zero coefficients until these meet the phase's end rule; a sweep over both
        working sets then ends the phase if it meets the rule too (else the sweeps go
        on over the non-zero ones). This is glmnet's active-set strategy: the zero
        coefficients of a working set are a large share of it, and most stay zero.
        To 1e-6, 2 workers took 0.55 s on Lasso problem (b) of the benchmark against
        0.59 s with every sweep over both working sets, 1.33 s against 1.44 s on (c)
        (medians of 7 and 4 interleaved fits).

        On Lasso problem (b) a peer phase's round cost each block its sweep (2.3-2.9
        ms) plus 3-4.5 ms of exchange, and the rounds were Jacobi between the blocks.
        Solo, a phase sweeps both working sets in about 6.5 ms a round; the fit took
        52 working-set rounds instead of 66 (45 instead of 57 on (c)), and 0.85-0.92 s
        instead of 0.92-1.04 s to 1e-6 (2.07-2.32 s instead of 2.26-2.82 s on (c)).

        Both blocks make two exchanges: the columns (the solver sends None), the
        results (the other sends None).
        """
        from dask_strads.engine import exchange as _exchange
        from dask_strads.engine.worker import realign

        waited = [0.0]

        def exchange(value):
            t0 = time.perf_counter()
            try:
                return _exchange(value)
            finally:
                waited[0] += time.perf_counter() - t0

        rounds, ws_first, budget, solver = phase
        own, r, coef = block["id"], block["residual"], block["coef"]
        if own != solver:
            # the push cut this block no copy (see push): vec is coef, idx the live coords
            data, indices, ptr = kernels.take_columns(block["data"], block["indices"],
                                                      block["indptr"], idx)
            exchange(((data, indices, ptr, block["mu"][idx], block["col_sq"][idx],
                       coef[idx]), screen_delta))
            res = exchange(None)[solver]
            add_delta(r, res["screen"])
            add_delta(r, res["delta"])
            coef[idx] = res["values"]
            stats = res["stats"]
        else:
            msgs = exchange(None)
            (other,) = [b for b in msgs if b != own]
            arrays, screen = msgs[other]
            data, indices, indptr, mu, col_sq, o_vec = (
                a if a.flags.writeable else a.copy() for a in realign(arrays))
            o_idx = np.arange(o_vec.shape[0])
            sub = None if found is None else found[0]
            add_delta(r, screen)
            before = r.copy()
            n_rounds = n_updates = 0
            d_max = w_max = 0.0
            a_own, a_other = idx, o_idx  # the coordinates the next sweep visits
            full = True
            for _ in range(rounds):
                e_own, d_own = self._sweep(block, vec, a_own, sub, epochs)
                e_other, d_other = kernels.solve_sparse(
                    data, indices, indptr, mu, block["center"], col_sq, o_vec, r, a_other,
                    self.l1, self.l2, self.positive, epochs, self.gap_trigger, INNER_GAIN)
                d_max = max(d_own, d_other)
                w_max = max(kernels.coef_max(vec, idx), kernels.coef_max(o_vec, o_idx))
                updates = e_own * a_own.shape[0] + e_other * a_other.shape[0]
                n_rounds += 1
                n_updates += updates
                if ws_first is None:
                    ws_first = d_max
                if self._phase_done(updates, n_updates, budget, d_max, w_max, ws_first):
                    if full:
                        break
                    a_own, a_other, full = idx, o_idx, True
                elif full:
                    a_own = idx[vec[idx] != 0.0]
                    a_other = o_idx[o_vec != 0.0]
                    full = False
            stats = {"rounds": n_rounds, "updates": n_updates, "w_max": w_max,
                     "d_max": d_max, "ws_first": ws_first}
            exchange({"delta": compact(r - before), "values": o_vec, "screen": screen_delta,
                      "stats": stats})
        if found is not None:
            changed = self._store_sub(coef, coords, found[2], idx, vec)
        else:
            now = coef[coords]
            moved = np.flatnonzero(now != start).astype(np.int32)
            changed = (moved, now[moved])
        out.update(values=None, changed=changed, w_max=stats["w_max"], d_max=stats["d_max"],
                   epochs=epochs,
                   phase={"rounds": stats["rounds"], "updates": stats["updates"],
                          "interference": 0.0, "step": 1.0, "wait_s": waited[0],
                          "ws_first": stats["ws_first"], "solo": True})
        return out

    def _phase_done(self, updates: int, n_updates: int, budget: int, d_max: float,
                    w_max: float, ws_first: float) -> bool:
        """A phase's round (peer or solo) was its last: the client's rule for the next
        gap round (see :meth:`_gap_due`), or the phase's budget of updates is spent."""
        return (updates == 0 or w_max == 0.0 or n_updates >= budget
                or d_max <= max(self.gap_trigger * w_max, WS_GAIN * ws_first))

    @staticmethod
    def _store_sub(coef, coords, in_coords, at, sub_coef) -> tuple[np.ndarray, np.ndarray]:
        """Write a working set's copy's values ``sub_coef[at]`` back to the block's
        ``coef``; returns the positions in ``coords`` that moved, and their values."""
        moved_pos = np.empty(at.shape[0], dtype=np.int32)
        moved_val = np.empty(at.shape[0])
        m = kernels.store_sub_coef(coef, coords, in_coords, at, sub_coef, moved_pos,
                                   moved_val)
        return moved_pos[:m], moved_val[:m]

    @staticmethod
    def _span_without(block: dict, dropped: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The block's span without the coordinates ``dropped``, and their positions in
        the span."""
        span = block.get("span")
        if span is None:
            raise RuntimeError(f"block {block['id']}: coordinates relative to a working "
                               "set, but the block was never sent one")
        if dropped.shape[0] == 0:
            return span, _EMPTY
        pos = np.searchsorted(span, dropped)
        return np.delete(span, pos), pos

    def _sub_block(self, block: dict, coords: np.ndarray, again: bool,
                   span: np.ndarray | None = None, drop_pos: np.ndarray | None = None):
        """A compact copy of a sparse block's live columns for a working set's sweeps:
        ``(sub, at, in_coords)`` where the live coordinates ``coords[in_coords]`` are
        columns ``at`` of ``sub``; None when a copy would not pay.

        Sweeps over a working set that is a small share of the block reach into the
        block's arrays column by column, a cache miss or more per column: on Lasso
        problem (c) a sweep over 47 000 of 1 000 000 columns took 13 ms from the
        block and 4-5 ms from a copy, which costs less than one sweep to build. So
        the copy is cut for the working-set schedule (its coordinates are swept
        round after round) or for coordinates sent again; it serves every later
        push whose coordinates it holds (the dependency check drops a few each round,
        in turns), until screening drops a column. It is not made when it would
        hold more than :data:`SUB_BLOCK_SHARE` of the block's non-zeros.

        ``span``: the whole working set, sent with its first push: the copy is cut for
        it, not for that push's coordinates. A coordinate the dependency check dropped
        from the first push and let through later is then in the copy; cut for the
        first push's coordinates, the copy was cut again for it (on Lasso problem (b),
        a 7 ms cut in one block or the other in every second round of a working set,
        against sweeps of 3-4 ms).

        ``drop_pos``: ``coords`` is the span without these positions (see
        :meth:`_locate`).
        """
        if coords.shape[0] == 0 and span is None:
            return None
        sub = block.get("sub_block")
        if span is None and sub is not None and sub.version == block["alive_version"]:
            if sub.coords is coords:
                return sub, sub.at, sub.in_coords
            found = self._locate(block, sub, coords, drop_pos)
            if found is not None:
                return (sub, *found)
        block["sub_block"] = None
        if not (again or self.working_sets):
            return None
        cut = coords if span is None else span
        in_cut = np.flatnonzero(block["alive"][cut])
        live = cut[in_cut]
        indptr = block["indptr"]
        nnz = int(np.sum(indptr[live + 1] - indptr[live]))
        if live.shape[0] == 0 or nnz > SUB_BLOCK_SHARE * block["data"].shape[0]:
            return None
        data, indices, ptr = kernels.take_columns(block["data"], block["indices"], indptr, live)
        at = np.arange(live.shape[0], dtype=np.int64)
        sub = block["sub_block"] = SubBlock(
            coords=cut, version=block["alive_version"], live=live, at=at,
            in_coords=in_cut, data=data, indices=indices, indptr=ptr,
            mu=block["mu"][live], col_sq=block["col_sq"][live], coef=np.empty(live.shape[0]))
        if cut is coords:
            return sub, at, in_cut
        found = self._locate(block, sub, coords, drop_pos)
        return None if found is None else (sub, *found)

    @staticmethod
    def _locate(block: dict, sub: SubBlock, coords: np.ndarray,
                drop_pos: np.ndarray | None = None):
        """``(at, in_coords)``: the live ``coords[in_coords]`` are the copy's columns
        ``at``; None when the copy lacks a live one.

        With ``drop_pos`` (``coords`` is the span without those positions) and a copy
        cut for the span, in one pass over the span's positions: the search of each
        coordinate in the copy took 0.55 of a 4.4 ms push on Lasso problem (b)."""
        if drop_pos is not None and sub.coords is block.get("span"):
            at = np.empty(coords.shape[0], dtype=np.int64)
            in_coords = np.empty(coords.shape[0], dtype=np.int64)
            m = kernels.locate_without(sub.coords.shape[0], drop_pos, sub.in_coords, at,
                                       in_coords)
            return at[:m], in_coords[:m]
        at = np.searchsorted(sub.live, coords)
        np.minimum(at, max(sub.live.shape[0] - 1, 0), out=at)
        held = sub.live[at] == coords if sub.live.shape[0] else np.zeros(coords.shape, bool)
        # the others must be screened out (the copy holds every live one it was cut for)
        if held.all() or not block["alive"][coords[~held]].any():
            in_coords = np.flatnonzero(held)
            return at[in_coords], in_coords
        return None

    def _screen(self, block: dict, dual_scale: float, radius: float) -> np.ndarray:
        """Gap Safe screening (Ndiaye et al. 2017, as in scikit-learn's cd_fast): columns
        with ``(1 - |x_j' theta|) / sqrt(||x_j||^2 + l2) > sqrt(2 gap) / l1`` are zero at
        the optimum; zero them and never update them again in this fit."""
        xta = block.pop("xta_gap", None)
        if xta is None:
            return np.zeros(0, dtype=np.int64)
        buf = block["gap_buffers"][2]  # step_idx: its values were sent with the gap
        inv_norm = block.get("inv_norm")
        if inv_norm is None:
            with np.errstate(divide="ignore"):
                inv_norm = block["inv_norm"] = 1.0 / np.sqrt(block["col_sq"] + self.l2)
        count = kernels.screen_out(xta, inv_norm, dual_scale, radius, block["alive"], buf)
        new = buf[:count].copy()
        if new.shape[0] == 0:
            return new
        coef = block["coef"]
        moved = new[coef[new] != 0.0]
        if moved.shape[0]:
            block["residual"] += self._matvec_cols(block, moved, coef[moved])
            coef[moved] = 0.0
        block["alive"][new] = False
        block["alive_version"] += 1
        return new

    def _matvec_cols(self, block, idx, values):
        return np.asarray(block["X"][:, idx] @ values).ravel()

    @staticmethod
    def _live_columns(block: dict) -> np.ndarray | None:
        """The block's columns not screened out, once screening has dropped most
        (None before: a pass over all columns streams faster than a list of them)."""
        cached = block.get("live_columns")
        if cached is not None and cached[0] == block["alive_version"]:
            return cached[1]
        live = None
        if block["alive_version"] > 0:
            idx = np.flatnonzero(block["alive"])
            if idx.shape[0] <= LIVE_SHARE * block["alive"].shape[0]:
                live = idx
        block["live_columns"] = (block["alive_version"], live)
        return live

    @staticmethod
    def _zeros_mu(block: dict) -> np.ndarray:
        """Zero column means for a block fitted without an intercept (kept: a fresh
        array per gap round costs page faults)."""
        z = block.get("zeros_mu")
        if z is None:
            z = block["zeros_mu"] = np.zeros_like(block["mu"])
        return z

    def _gap_stats(self, block: dict) -> dict:
        r = block["residual"]
        coef = block["coef"]
        p_b = coef.shape[0]
        buf = block.get("gap_buffers")
        if buf is None:  # kept: fresh 8 p_b-byte arrays each gap round cost page faults
            buf = block["gap_buffers"] = (np.empty(p_b), np.empty(p_b),
                                          np.empty(p_b, dtype=np.int64), np.empty(p_b))
        xtr, xta, step_idx, step_val = buf
        if block["sparse"]:
            mu = block["mu"] if block["center"] else self._zeros_mu(block)
            live = self._live_columns(block)
            if live is not None:
                # screened columns are zero at every optimum: the gap is the one of the
                # problem over the others (the same optimum), as Gap Safe screening
                # measures it; a screened column counts as x_j' r = 0
                xtr.fill(0.0)
            ref = block.get("gap_ref")
            r_sum = None if ref is None else self._bounded_xtr(block, mu, live, ref, xtr)
            if r_sum is None:
                if live is None:
                    r_sum = kernels.xtr_sparse(block["data"], block["indices"],
                                               block["indptr"], mu, r, xtr)
                else:
                    r_sum = kernels.xtr_sparse_at(block["data"], block["indices"],
                                                  block["indptr"], mu, r, live, xtr)
                if self.l1 > 0.0:  # the reference of the next gap rounds
                    block["gap_ref"] = self._reference(block, xtr)
        else:
            np.dot(block["X"].T, r, out=xtr)
            r_sum = float(r.sum())
        dual_norm, w_l1, w_l2sq, xtr_sq, n_steps = kernels.gap_summary(
            xtr, coef, block["col_sq"], self.l1, self.l2, self.positive, xta, step_idx,
            step_val)
        block["xta_gap"] = xta  # for screening with the next push
        r_norm2 = kernels.dot(r, r)
        if block.get("center") and block["sparse"]:
            r_norm2 -= r_sum**2 / self.n  # the true residual is r_raw - mean(r_raw)
        return {"dual_norm": float(dual_norm), "w_l1": w_l1, "w_l2sq": w_l2sq,
                "r_norm2": r_norm2, "r_y": kernels.dot(r, self.y), "xtr_sq": xtr_sq,
                "step_idx": step_idx[:n_steps], "step": step_val[:n_steps]}  # (buffers)

    @staticmethod
    def _reference(block: dict, xtr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(r, |X_b' r|)`` after a gap round that read every live column, in the
        buffers of the last reference."""
        old = block.get("gap_ref_buffers")
        if old is None:
            old = block["gap_ref_buffers"] = (np.empty_like(block["residual"]),
                                              np.empty_like(xtr))
        np.copyto(old[0], block["residual"])
        np.abs(xtr, out=old[1])
        return old

    def _bounded_xtr(self, block: dict, mu: np.ndarray, live: np.ndarray | None, ref,
                     xtr: np.ndarray) -> float | None:
        """``X_b' r`` where a gap round needs it (see :func:`kernels.xtr_sparse_bounded`),
        or None (nothing written) when the bounds would spare too few columns.

        A column whose coefficient is zero and whose ``|x_j' r|`` is provably below
        ``l1`` (from its value at the reference residual of the last gap round that
        read every column, and how far ``r`` moved since, row by row) changes nothing
        in the gap round: not the dual norm's scale (which only a value above ``l1``
        sets), nor its step (0). It gets that bound in place of its value, which
        screening reads as a larger ``|x_j' theta|`` (safe). Near the optimum the
        residual moves little between gap rounds: on Lasso problem (c) the last two
        gap rounds read 7-8% of the columns (21 ms instead of 45). The bounds of a sample
        of the columns tell beforehand whether a round would read more than
        :data:`BOUND_SHARE` of them; such a round reads them all and sets a new
        reference.
        """
        r = block["residual"]
        ref_r, ref_abs = ref
        shift, sum_shift = kernels.shift_from(r, ref_r)
        if not block["center"]:
            sum_shift = 0.0
        thresh = self.l1 * (1.0 - BOUND_MARGIN)
        n_cols = xtr.shape[0] if live is None else live.shape[0]
        probe = np.arange(0, n_cols, max(1, n_cols // BOUND_PROBE))
        if live is not None:
            probe = live[probe]
        bound = ref_abs[probe] + block["abs_sum"][probe] * shift + np.abs(mu[probe]) * sum_shift
        read = (bound >= thresh) | (block["coef"][probe] != 0.0)
        if read.mean() > BOUND_SHARE:
            return None
        r_sum, _ = kernels.xtr_sparse_bounded(
            block["data"], block["indices"], block["indptr"], mu, r, _EMPTY if live is None
            else live, live is None, block["coef"], ref_abs, block["abs_sum"], shift,
            sum_shift, thresh, xtr)
        return r_sum

    @staticmethod
    def _step_weights(block: dict, step_idx: np.ndarray, step: np.ndarray) -> np.ndarray:
        """A gap round's steps as a dense array over the block (kept between rounds)."""
        weight = block.get("weight")
        if weight is None:
            weight = block["weight"] = np.zeros(block["coef"].shape[0])
        else:
            weight.fill(0.0)
        weight[step_idx] = step
        return weight

    def _sample_ws(self, block: dict, weight: np.ndarray, active: np.ndarray, seed: int,
                   previous: int) -> np.ndarray:
        """The block's next working set, drawn where its priorities are: its support
        plus coordinates with a non-zero priority sampled without replacement with
        probability proportional to priority + floor (the floor is 1% of the mean
        non-zero priority, as in STRADS), ``max(L', 2 |support|)`` in all, or ``4
        |support|`` while the support still fills most of the last working set
        (``previous`` coordinates: it is growing, and a cold start reaches a large
        support in half the gap rounds); a first working set from zero coefficients
        holds ``cold_start`` coordinates. Fewer when fewer have a non-zero priority
        (the step of an exact update now: the others would not move, see
        :func:`kernels.working_set`). Sampling without replacement is an exponential
        race, as Efraimidis-Spirakis keys, seeded by the client (``seed``).

        Drawn on the client, this cost Lasso problem (c) 10-30 ms per gap round while
        the workers waited, after shipping it the steps of up to 580 000 columns per
        block; here it runs in parallel over the blocks and only the working set
        travels (the dependency check runs on it every round, see :meth:`schedule`).
        """
        cold = 0 if previous else min(
            self.cold_start, int(COLD_START_SHARE * np.count_nonzero(block["alive"])))

        def size(n_support):
            growth = WS_FAST if n_support >= WS_FULL * previous > 0 else WS_GROWTH
            if n_support == 0:
                return max(self.n_candidates, cold)
            return max(self.n_candidates, int(growth * n_support))

        # the support stays; the rest is sampled (sorted: column order for locality)
        return kernels.working_set(weight, block["coef"], block["alive"], active, size,
                                   np.random.default_rng(seed))

    def block_result(self, block_id: Hashable, block: dict) -> dict:
        # the column means, for the intercept (the client holds the coefficients): a
        # block of Lasso problem (c) sent 16 MB back, mean and coefficients, in 60 ms
        return {"mu": block["mu"] if self.fit_intercept else None}

    def block_arrays(self, block: dict) -> Mapping[str, Any]:
        return {"coef": block["coef"], "residual": block["residual"], "tracked": block["tracked"],
                "alive": block["alive"]}

    def restore_block(self, block_id, shard, state_arrays, block_arrays):
        # Coefficients and residual come back exactly (a snapshot is taken with no round
        # in flight, so residual + queued changes is this block's view of y - X b).
        # Screening and the correlation index restart empty on both sides: screening is
        # redone at the next gap round, and columns are offered for tracking again.
        block = self.init_block(block_id, shard)
        block.pop("init_delta", None)
        if block_arrays is not None:
            block["coef"][:] = block_arrays["coef"]
            block["residual"][:] = block_arrays["residual"]
        return block

    def state_arrays(self, state: LassoState) -> Mapping[str, Any]:
        return {"coef": state.coef, "weight": state.weight, "pending": np.stack(state.pending),
                "updates": state.updates, "gap": state.gap, "primal": state.primal,
                "n_round": state.n_round, "scheduled": state.scheduled,
                "pulled": state.pulled, "gap_rounds": state.gap_rounds,
                "epochs": state.epochs,
                "pending_coef": np.concatenate(state.pending_coef) if self.p else np.zeros(0)}

    def load_state(self, arrays: Mapping[str, Any]) -> LassoState:
        state = self.init_state({})
        state.coef[:] = arrays["coef"]
        state.weight[:] = arrays["weight"]
        for b in range(self.n_blocks):
            state.pending[b][:] = arrays["pending"][b]
            state.pending_dirty[b] = bool(np.any(state.pending[b]))
        state.updates = int(arrays["updates"])
        state.gap = float(arrays["gap"])
        state.primal = float(arrays["primal"])
        state.n_round = int(arrays["n_round"])
        state.scheduled = int(arrays["scheduled"])
        state.pulled = int(arrays["pulled"])
        state.gap_rounds = int(arrays["gap_rounds"])
        state.epochs = int(arrays.get("epochs", state.epochs))
        for b in range(self.n_blocks):
            s0, s1 = self.starts[b], self.starts[b + 1]
            if "pending_coef" in arrays:
                state.pending_coef[b][:] = arrays["pending_coef"][s0:s1]
                state.pending_coef_dirty[b] = bool(np.any(state.pending_coef[b]))
                state.pending_coef_touched[b] = None
            w = state.weight[s0:s1]
            nz = np.flatnonzero(w)
            state.n_active[b] = kernels.update_priority(
                w, state.active[b], state.position[b], 0, nz, w[nz].copy())
        return state

    # ================================================================= client
    def block_size(self, b: int) -> int:
        return int(self.starts[b + 1] - self.starts[b])

    def init_state(self, summaries: Mapping[Hashable, Any]) -> LassoState:
        kernels.warm_up_schedule()
        B = self.n_blocks
        p = self.p
        coef = np.zeros(p) if self.coef_init is None else self.coef_init.copy()
        weight = np.zeros(p)
        block_of = np.repeat(np.arange(B), np.diff(self.starts))
        state = LassoState(
            coef=coef, weight=weight,
            active=[np.zeros(self.block_size(b), dtype=np.int64) for b in range(B)],
            position=[np.full(self.block_size(b), -1, dtype=np.int64) for b in range(B)],
            n_active=[0] * B,
            pending=[np.zeros(self.n) for _ in range(B)], pending_dirty=[False] * B,
            rng=np.random.default_rng(self.random_state),
            corr=CorrelationIndex(self.n, self.rho, block_of) if self.track else None,
            rr_pos=[0] * B,
            marks=[np.zeros(self.block_size(b), dtype=np.bool_) for b in range(B)],
        )
        state.alive = [np.arange(self.block_size(b), dtype=np.int64) for b in range(B)]
        state.alive_mask = [np.ones(self.block_size(b), dtype=bool) for b in range(B)]
        state.pending_coef = [np.zeros(self.block_size(b)) for b in range(B)]
        state.pending_coef_dirty = [False] * B
        state.pending_coef_touched = [[] for _ in range(B)]
        state.n_alive = [self.block_size(b) for b in range(B)]
        state.sent = [None] * B
        state.ws_size = [0] * B
        state.n_round = self.n_candidates if not self.adaptive else min(
            self.n_candidates, max(8, self.n // (4 * self.n_blocks)))
        if self.working_sets:
            state.n_round = WHOLE
            state.epochs = self.inner_epochs
        for b, s in summaries.items():
            self._queue(state, b, s["delta"])
        self._flush(state)
        return state

    def _queue(self, state: LassoState, source: int, delta, step: float = 1.0) -> None:
        """Queue ``step`` times a residual change of block ``source`` for the other
        blocks and, for a shortened step, ``step - 1`` times it for ``source`` itself.
        The changes reach the blocks' pending residuals when the pull ends."""
        if delta is not None:
            state.queued.append((source, delta, step))

    def _flush(self, state: LassoState) -> None:
        """Add the queued changes to the blocks' pending residuals.

        Every block gets the others' changes: added one by one, that is B - 1
        vector additions per change, B (B - 1) per round when every block changed
        the residual, a cost that grows as the square of the blocks. When two or
        more changes are dense, their sum is formed once, added to every block, and
        each source takes its own change back: about 2 B + len(queue) additions.
        Sparse changes keep the one-by-one way (it costs their non-zeros only)."""
        queued, state.queued = state.queued, []
        dense = [q for q in queued if not isinstance(q[1], tuple)]
        if len(dense) < 2 or self.n_blocks < 3:
            dense = []
        for source, delta, step in queued if not dense else \
                [q for q in queued if isinstance(q[1], tuple)]:
            for o in range(self.n_blocks):
                if o != source:
                    add_delta(state.pending[o], delta, step)
                    state.pending_dirty[o] = True
                elif step != 1.0:
                    add_delta(state.pending[o], delta, step - 1.0)
                    state.pending_dirty[o] = True
        if dense:
            total = np.zeros(self.n)
            for _, delta, step in dense:
                add_delta(total, delta, step)
            for o in range(self.n_blocks):
                state.pending[o] += total
                state.pending_dirty[o] = True
            for source, delta, _ in dense:
                state.pending[source] -= delta

    def _take_coef_fix(self, state: LassoState, b: int):
        if not state.pending_coef_dirty[b]:
            return None
        pc = state.pending_coef[b]
        touched = state.pending_coef_touched[b]
        if not touched:  # None (not known) or nothing recorded
            idx = np.flatnonzero(pc)
        else:  # the same sorted non-zero indices, without a pass over the block
            idx = np.unique(np.concatenate(touched)) if len(touched) > 1 else touched[0]
            idx = idx[pc[idx] != 0.0]
        out = (idx, pc[idx])
        pc[idx] = 0.0
        state.pending_coef_dirty[b] = False
        state.pending_coef_touched[b] = []
        return out

    def _take_pending(self, state: LassoState, b: int):
        if not state.pending_dirty[b]:
            return None
        out = compact(state.pending[b])
        if isinstance(out, np.ndarray):
            out = out.copy()
        state.pending[b][:] = 0.0
        state.pending_dirty[b] = False
        return out

    def _gap_due(self, state: LassoState, round: int) -> bool:
        if round == 0:
            return True
        if self.working_sets:
            if state.ws is None:
                # a gap round was just pulled: solve on the working sets it drew (none
                # after a restore: draw them)
                return state.ws_next is None
            if state.round_updates == 0 or state.rounds_since_gap >= self.max_ws_rounds:
                return True
            # the support is inside the working sets and nothing else moves until the
            # next gap round: max |b| over them is max |b|. The pushes of the last
            # round report it over what they swept (at their full steps); looking it
            # up here took 0.6 ms of the client's 1.5 ms per round on Lasso problem
            # (c), while the workers waited.
            w_max = state.ws_w_max
            if w_max is None:
                w_max = max((kernels.coef_max(state.coef[self.starts[b]:self.starts[b + 1]], c)
                             for b, c in state.ws.items()), default=0.0)
            # the working set is solved (scikit-learn's trigger), or rounds on it have
            # stopped gaining: measure the gap and choose a new one
            return bool(w_max == 0.0 or state.round_d_max <= max(
                self.gap_trigger * w_max, WS_GAIN * state.ws_first))
        if state.updates_since_gap >= self.gap_every * self.p:
            return True
        if state.round_updates == 0:
            return True  # nothing left to update (all screened or sampled nothing)
        if state.updates_since_gap < self.gap_min * self.p:
            return False  # a gap costs a pass over X: amortise it over enough updates
        w_max = np.abs(state.coef).max() if state.coef.size else 0.0
        return bool(w_max == 0.0 or state.round_d_max <= self.gap_trigger * w_max)

    def _candidates(self, state: LassoState, b: int) -> np.ndarray:
        p_b = self.block_size(b)
        L = min(state.n_round, p_b)
        kind = self.schedule_kind
        if kind == "round_robin":
            n_alive = state.n_alive[b]
            if n_alive == 0:
                return np.zeros(0, dtype=np.int64)
            L = min(L, n_alive)
            start = state.rr_pos[b] % n_alive
            idx = state.alive[b][(start + np.arange(L)) % n_alive]
            state.rr_pos[b] = (start + L) % n_alive
            return idx
        uniforms = state.rng.random(L)
        alive, n_alive = state.alive[b], state.n_alive[b]
        if kind in ("random", "shotgun") or state.updates < self.warmup_passes * self.p:
            return kernels.sample_block(state.weight[self.starts[b]:self.starts[b + 1]],
                                        state.active[b], 0, 1.0, uniforms, state.marks[b],
                                        alive, n_alive)
        w = state.weight[self.starts[b]:self.starts[b + 1]]
        n_act = state.n_active[b]
        if n_act:
            # draws beyond a few per active coordinate only repeat them (taken once) or
            # land on the floor: cap them so a round's cost follows its useful work
            uniforms = uniforms[:min(L, 2 * n_act + 256)]
        if n_act:
            eta = 0.01 * w[state.active[b][:n_act]].mean()
        else:
            eta = 1.0
        return kernels.sample_block(w, state.active[b], n_act, eta, uniforms, state.marks[b],
                                    alive, n_alive)

    def schedule(self, state: LassoState, round: int) -> Plan | None:
        if state.stop:
            return None
        gap = self._gap_due(state, round)
        if gap and state.scheduled > state.pulled:
            # the gap needs every earlier round's changes: let the pipeline drain first
            # (empty rounds cost no push; with staleness=0 this never happens)
            return Plan(parts={}, info={"drain": True})
        state.scheduled += 1
        jacobi = self.schedule_kind == "shotgun"
        if gap:
            # a gap round only measures: the returned coefficients are then exactly the
            # ones whose gap was certified (as in scikit-learn), and the fresh
            # priorities steer the next round
            empty = np.zeros(0, dtype=np.int64)
            state.updates_since_gap = 0
            track = bool(self.track and state.corr.n_tracked < 2 * self.max_tracked
                         and np.count_nonzero(state.coef) <= self.max_tracked)
            state.ws = state.ws_next = state.ws_w_max = None
            state.rounds_since_gap = 0
            # with working sets, each block draws its next one from the fresh priorities
            sample = {b: ("sample", int(state.rng.integers(2**63)), state.ws_size[b])
                      if self.working_sets else None for b in range(self.n_blocks)}
            parts = {b: (self._send(state, b, empty), self._take_pending(state, b), True, jacobi,
                         track, None, self._take_coef_fix(state, b), 0, sample[b])
                     for b in range(self.n_blocks)}
            return Plan(parts=parts, info={"drain": False, "gap": True, "rejected": 0,
                                           "coords": {b: empty for b in range(self.n_blocks)}})
        rejected = 0
        new_ws = None
        if self.working_sets:
            if state.ws is None:
                # the ones the gap round drew: each block holds its own (its span) and
                # cuts its copy of the columns for it with this round
                state.ws = new_ws = state.ws_next
                state.ws_next = None
                state.ws_nnz, state.ws_nnz_next = state.ws_nnz_next, None
                state.ws_size = [new_ws[b].shape[0] for b in range(self.n_blocks)]
                state.ws_conflicted = None
            cands = dict(state.ws)
            whole = True
            if state.n_round < WHOLE:
                for b, c in cands.items():
                    if c.shape[0] > state.n_round:
                        cands[b] = np.sort(state.rng.choice(c, state.n_round, replace=False))
                        whole = False
            # correlated pairs take turns (random order, priority-weighted)
            dropped = {}
            cands, rejected = self._dependency_check(state, cands, randomize=True,
                                                     whole_ws=whole, dropped=dropped)
            epochs = state.epochs
        else:
            cands = {b: self._candidates(state, b) for b in range(self.n_blocks)}
            cands, rejected = self._dependency_check(state, cands)
            epochs = 1
            dropped, whole = {}, False
        screen, state.screen = state.screen, None
        # a push over its block's whole working set but a few (the dependency check's)
        # is sent as ("drop", those few) of the span the block holds (the working set
        # its gap round drew): 30 000 coordinates of Lasso problem (b) (240 KB) went
        # out with almost every round, for 2-3 dropped
        drops = dropped if whole else {}
        # the rest of the rounds on this working set as one peer phase, when every block
        # updates its whole working set (no conflicts, no shrunk rounds)
        phase = ()
        if (self.peer_phases and self.can_exchange and self.working_sets and self.n_blocks > 1
                and self.staleness == 0 and whole and rejected == 0):
            phase = ((self.max_ws_rounds - state.rounds_since_gap,
                      None if new_ws is not None else state.ws_first,
                      self.max_updates - state.updates, self._solo_solver(state)),)
        parts = {b: (self._send(state, b, cands[b], drops.get(b)), self._take_pending(state, b),
                     False, jacobi, False, screen, self._take_coef_fix(state, b), epochs,
                     None, *phase)
                 for b in range(self.n_blocks)}
        return Plan(parts=parts, exchange=bool(phase),
                    info={"drain": False, "gap": False, "rejected": rejected,
                          "coords": cands, "ws": new_ws, "phase": bool(phase)})

    def _solo_solver(self, state: LassoState) -> int | None:
        """The block to run a peer phase of two sparse blocks alone (a solo phase, see
        :meth:`_solo_phase`): the one whose working set holds more non-zeros (the other
        sends its columns); None, for a peer phase, when they hold more than
        :data:`SOLO_MAX_NNZ` in all."""
        nnz = state.ws_nnz
        if (not self.solo_phases or self.n_blocks != 2 or nnz is None or None in nnz
                or sum(nnz) > SOLO_MAX_NNZ):
            return None
        return int(np.argmax(nnz))

    @staticmethod
    def _send(state: LassoState, b: int, coords: np.ndarray, dropped: np.ndarray | None = None):
        """``coords`` for block ``b``'s push, or None when its last push had the same
        (pushes reach a block in round order; a restored block starts from a fresh
        state, which sends them again), or ``("drop", dropped)`` when they are the
        span the block holds without ``dropped`` and those are fewer."""
        last = state.sent[b]
        if last is not None and (last is coords or np.array_equal(last, coords)):
            return None
        state.sent[b] = coords
        if dropped is not None and dropped.shape[0] < coords.shape[0]:
            return ("drop", dropped)
        return coords

    def _dependency_check(self, state: LassoState, cands: dict, randomize: bool = False,
                          whole_ws: bool = False,
                          dropped: dict | None = None) -> tuple[dict, int]:
        """Drop candidates correlated (|corr| >= rho) with a higher-priority candidate
        of another block; returns the kept candidates and how many were dropped.

        ``randomize``: visit the candidates in an order sampled with probability
        proportional to priority (+ a floor) instead of by decreasing priority, so
        that a working set's correlated pairs take turns from round to round.
        ``whole_ws``: the candidates are the working sets, whose candidates with a
        conflict are found once per working set and set of conflicts (new conflicts
        come with gap rounds and make new adjacency arrays).
        ``dropped``: filled with each block's dropped candidates.
        """
        if dropped is not None:
            dropped.update({b: _EMPTY for b in cands})
        if state.corr is None or not state.corr.conflicts:
            return cands, 0
        ptr, nbr, scratch = state.corr.adjacency()
        cached = state.ws_conflicted
        if whole_ws and cached is not None and cached[0] is ptr:
            _, merged, sub = cached
        else:
            merged = np.concatenate([cands[b] + self.starts[b] for b in range(self.n_blocks)])
            # only candidates with a conflict can be dropped: order just those
            sub = np.flatnonzero(ptr[merged + 1] > ptr[merged])
            if whole_ws:
                state.ws_conflicted = (ptr, merged, sub)
        keep = np.ones(merged.shape[0], dtype=bool)
        if sub.shape[0] > 1:
            w = state.weight[merged[sub]]
            if randomize:
                positive = w > 0.0
                eta = 0.01 * float(w[positive].mean()) if positive.any() else 1.0
                order = np.argsort(np.log(state.rng.random(w.shape[0])) / (w + eta))[::-1]
            else:
                order = np.argsort(-w, kind="stable")
            sub = sub[order]
            keep[sub] = kernels.greedy_keep(merged[sub], ptr, nbr, scratch)
        rejected = int((~keep).sum())
        if rejected:
            offset = 0
            for b in range(self.n_blocks):
                m = cands[b].shape[0]
                kept = keep[offset:offset + m]
                if dropped is not None:
                    dropped[b] = cands[b][~kept]
                cands[b] = cands[b][kept]
                offset += m
        return cands, rejected

    def pull(self, state: LassoState, partials: Mapping[Hashable, Any], plan: Plan) -> LassoState:
        state = self._pull(state, partials, plan)
        self._flush(state)
        return state

    def _pull(self, state: LassoState, partials: Mapping[Hashable, Any],
              plan: Plan) -> LassoState:
        state.objective_fresh = False
        if plan.info["drain"]:
            return state
        state.pulled += 1
        state.rejected = plan.info["rejected"]
        state.rejected_total += state.rejected
        if plan.info["gap"]:
            self._pull_gap(state, partials)
            for b, out in partials.items():
                self._queue(state, b, out["delta"])
                if out["new_cols"] is not None:
                    local, cols = out["new_cols"]
                    state.corr.add(local + self.starts[b], cols)
            return state
        coords = plan.info["coords"]
        if plan.info.get("phase"):
            return self._pull_phase(state, partials, coords)
        if self.working_sets and self.staleness == 0:
            return self._pull_steps(state, partials, coords)
        d_max = 0.0
        n_updates = 0
        for b, out in partials.items():
            s0 = self.starts[b]
            c = coords[b]
            g = c + s0
            old = state.coef[g]
            state.coef[g] = out["values"]
            if state.nnz >= 0:
                state.nnz += int(np.count_nonzero(out["values"])) - int(np.count_nonzero(old))
            if self.schedule_kind == "priority":
                w = state.weight[s0:self.starts[b + 1]]
                state.n_active[b] = kernels.update_priority(
                    w, state.active[b], state.position[b], state.n_active[b], c,
                    np.abs(state.coef[g] - old))
            if out["screened"] is not None and out["screened"].shape[0]:
                self._drop_screened(state, b, out["screened"])
            d_max = max(d_max, out["d_max"])
            n_updates += c.shape[0] * out["epochs"]
            self._queue(state, b, out["screen_delta"])
            self._queue(state, b, out["delta"])
        if self.n_blocks > 1:
            self._adapt(state, partials)
        self._count(state, n_updates, d_max)
        return state

    def _count(self, state: LassoState, n_updates: int, d_max: float) -> None:
        if self.working_sets:
            state.rounds_since_gap += 1
            if state.rounds_since_gap == 1:
                state.ws_first = d_max
        state.updates += n_updates
        state.updates_since_gap += n_updates
        state.round_updates = n_updates
        state.round_d_max = d_max
        if state.updates >= self.max_updates:
            state.stop = True

    def _cdot(self, u: np.ndarray, v: np.ndarray) -> float:
        """``u' v`` of two residual changes, centered when an intercept is fitted
        (sparse blocks keep raw residuals; dense blocks' changes already sum to 0)."""
        out = kernels.dot(u, v)
        if self.fit_intercept:
            out -= float(u.sum()) * float(v.sum()) / self.n
        return out

    def _pull_steps(self, state: LassoState, partials: Mapping[Hashable, Any],
                    coords: Mapping[Hashable, np.ndarray]) -> LassoState:
        """Commit a working-set round with one step length per block.

        Blocks solve against each other's old residual, so their updates overshoot
        together or, when their columns are coupled through the residual, undo part
        of each other's work. The committed point is ``b + sum_b t_b d_b`` with
        ``t`` in ``[0, 1]^B`` minimising the objective exactly: it is convex in
        ``t`` and separable in its non-smooth part, so cyclic exact one-dimensional
        minimisation converges. All it needs is small: the Gram matrix of the
        blocks' residual changes and ``r0' D_b`` from the workers. A shortened step
        reaches the workers as coefficient and residual corrections with their next
        push.
        """
        n_updates = 0
        d_max = 0.0
        for b, out in partials.items():
            if out["screened"] is not None and out["screened"].shape[0]:
                self._drop_screened(state, b, out["screened"])
            self._queue(state, b, out["screen_delta"])
            d_max = max(d_max, out["d_max"])
            n_updates += coords[b].shape[0] * out["epochs"]
        state.ws_w_max = max((out.get("w_max", 0.0) for out in partials.values()),
                             default=0.0)
        # per block, the coordinates that moved (block-local), their new values and
        # their coefficients before the round (after the screened ones were dropped);
        # coordinates that did not move change nothing below but their priority
        moved_of, new_of, base_of, d_of, folded_of = {}, {}, {}, {}, {}
        for b, out in partials.items():
            pos, new = out["changed"]
            moved_of[b], base_of[b], d_of[b], *folded_of[b] = kernels.gather_fold(
                state.coef[self.starts[b]:self.starts[b + 1]], coords[b], pos, new, self.l1,
                self.l2)
            new_of[b] = new
        blocks = [b for b, out in partials.items() if out["delta"] is not None]
        t = np.ones(len(blocks))
        if len(blocks) > 1:
            D = np.zeros((len(blocks), self.n))
            for i, b in enumerate(blocks):
                add_delta(D[i], partials[b]["delta"])
            G = np.empty((len(blocks), len(blocks)))
            for i in range(len(blocks)):
                for j in range(i, len(blocks)):
                    G[i, j] = G[j, i] = self._cdot(D[i], D[j])
        if self.n_blocks > 1:
            # the blocks' cross terms are G's off-diagonal: no second pass over the deltas
            cross = float(np.triu(G, 1).sum()) if len(blocks) > 1 else 0.0
            self._adapt(state, partials, cross)
        if len(blocks) > 1:
            c = np.array([partials[b]["rd"] for b in blocks])
            err = sum(partials[b]["rd_err"] for b in blocks)
            noise = sum(self._penalty_noise(np.abs(base_of[b]).sum() + np.abs(d_of[b]).sum())
                        for b in blocks)
            t = self._steps(G, c, [folded_of[b] for b in blocks], err, noise)
        state.step = float(t.min()) if t.size else 1.0
        steps = dict(zip(blocks, t.tolist(), strict=True))
        nnz = self._nnz(state)
        for b, out in partials.items():
            s0, s1 = self.starts[b], self.starts[b + 1]
            c_b = coords[b]
            step = steps.get(b, 1.0)
            # at step 1 the worker's own values, bit-identical
            moved = moved_of[b]
            change, d_nnz = kernels.commit_block(state.coef[s0:s1], moved, new_of[b],
                                                 base_of[b], step, state.pending_coef[b])
            nnz += d_nnz
            if step != 1.0 and moved.shape[0]:
                state.pending_coef_dirty[b] = True
                if state.pending_coef_touched[b] is not None:
                    state.pending_coef_touched[b].append(moved)
            self._reprioritise(state, b, c_b, out["changed"][0], change)
            self._queue(state, b, out["delta"], step)
        state.nnz = nnz
        self._count(state, n_updates, d_max)
        return state

    def _pull_phase(self, state: LassoState, partials: Mapping[Hashable, Any],
                    coords: Mapping[Hashable, np.ndarray]) -> LassoState:
        """Commit a peer phase (see :meth:`_peer_phase`): the coordinates that moved
        over its rounds take the blocks' values; the blocks already hold one residual,
        so nothing is queued for them. Its last round's numbers stand for a round's in
        the gap trigger and the step control."""
        stats = next(iter(partials.values()))["phase"]
        for b, out in partials.items():
            if out["screened"] is not None and out["screened"].shape[0]:
                self._drop_screened(state, b, out["screened"])
        nnz = self._nnz(state)
        for b, out in partials.items():
            s0, s1 = self.starts[b], self.starts[b + 1]
            pos, new = out["changed"]
            moved, base, *_ = kernels.gather_fold(state.coef[s0:s1], coords[b], pos, new,
                                                  self.l1, self.l2)
            change, d_nnz = kernels.commit_block(state.coef[s0:s1], moved, new, base, 1.0,
                                                 state.pending_coef[b])
            nnz += d_nnz
            self._reprioritise(state, b, coords[b], pos, change)
        state.nnz = nnz
        state.ws_w_max = max(out["w_max"] for out in partials.values())
        state.step = stats["step"]
        state.interference = stats["interference"]
        state.peer_rounds += stats["rounds"]
        state.solo_phases += int(stats.get("solo", False))
        state.peer_wait_s += max(out["phase"]["wait_s"] for out in partials.values())
        if self.adaptive:
            self._adapt_rounds(state)
        self._count(state, stats["updates"], max(out["d_max"] for out in partials.values()))
        state.rounds_since_gap += stats["rounds"] - 1
        state.ws_first = stats["ws_first"]
        return state

    def _reprioritise(self, state: LassoState, b: int, coords: np.ndarray, pos: np.ndarray,
                      change: np.ndarray) -> None:
        """Priorities after a working-set round over ``coords`` (increasing) of block
        ``b``, of which ``coords[pos]`` moved by ``change``: those get ``change``, the
        others 0, *for the columns with a conflict only*. Until the next gap round,
        which sets every priority afresh, only the dependency check reads priorities,
        and only of those columns; updating every coordinate of the round took 1.2 ms
        of a 6 ms pull on Lasso problem (c) (a cache miss per coordinate)."""
        if state.corr is None or not state.corr.conflicts:
            return
        s0, s1 = self.starts[b], self.starts[b + 1]
        conflicted = state.corr.conflicted()
        lo, hi = np.searchsorted(conflicted, (s0, s1))
        local = conflicted[lo:hi] - s0
        if local.shape[0] == 0 or coords.shape[0] == 0:
            return
        at = np.minimum(np.searchsorted(coords, local), coords.shape[0] - 1)
        scheduled = coords[at] == local
        local, at = local[scheduled], at[scheduled]
        values = np.zeros(local.shape[0])
        if pos.shape[0]:
            k = np.minimum(np.searchsorted(pos, at), pos.shape[0] - 1)
            hit = pos[k] == at
            values[hit] = change[k[hit]]
        state.n_active[b] = kernels.update_priority(
            state.weight[s0:s1], state.active[b], state.position[b], state.n_active[b], local,
            values)

    @staticmethod
    def _coupled_steps(G: np.ndarray) -> np.ndarray:
        """Steps from the Gram matrix of the blocks' residual changes alone, for rounds
        whose first-order terms are rounding: if every block's update solved its own
        subproblem, the objective along the steps would be ``1/2 t'Gt - diag(G)'t``
        (zero slope at ``t_b = 1`` with the others at 0); minimised over the box
        ``[1/B, 1]^B`` (at ``1/B`` each, the mean of the blocks' updates: never an
        increase, by convexity, and no block's update undone)."""
        B = G.shape[0]
        t = np.ones(B)
        diag = np.diag(G)
        for _ in range(STEP_SWEEPS):
            moved = 0.0
            for i in range(B):
                if diag[i] <= 0.0:
                    continue
                new = min(1.0, max(1.0 / B, (diag[i] - G[i] @ t + diag[i] * t[i]) / diag[i]))
                moved = max(moved, abs(new - t[i]))
                t[i] = new
            if moved < 1e-3:
                break
        return t

    def _steps(self, G: np.ndarray, c: np.ndarray, folded: list, err: float,
               noise: float) -> np.ndarray:
        """The blocks' step lengths in ``[0, 1]``: cyclic exact line searches on the
        objective along ``sum_b t_b d_b`` (see :meth:`_pull_steps`), then
        :meth:`_step_verdict`. ``folded``: each block's :func:`kernels.fold_linear`
        split of its update; ``err`` and ``noise``: the rounding of ``c`` and of the
        penalty's change (:meth:`_penalty_noise`). The client's pull and every push of
        a peer phase run this on the same numbers, so they agree bit for bit."""
        t = np.ones(G.shape[0])
        # only coordinates whose sign can change along the step need the exact slope;
        # the others' share of it is linear in t (see kernels.fold_linear)
        for _ in range(STEP_SWEEPS):
            moved = 0.0
            for i in range(G.shape[0]):
                if G[i, i] <= 0.0:
                    continue
                lin = c[i] + G[i] @ t - G[i, i] * t[i]
                b_i, d_i, lin_extra, quad_extra = folded[i]
                new = float(kernels.line_search(b_i, d_i, lin + lin_extra,
                                                G[i, i] + quad_extra, self.l1, self.l2,
                                                0.0, 1.0))
                moved = max(moved, abs(new - t[i]))
                t[i] = new
            if moved < 1e-3:
                break
        verdict = self._step_verdict(t, G, c, folded, err + noise)
        if verdict == "full":
            t[:] = 1.0
        elif verdict == "noise":
            t = self._coupled_steps(G)
        return t

    def _penalty_noise(self, size: float) -> float:
        """The rounding of a block's penalty change from coordinates ``b`` moved by
        ``d``: terms of the size of ``l1 (|b| + |d|)``; ``size = sum |b| + |d|``."""
        return ROUNDING * self.l1 * float(size)

    def _step_verdict(self, t, G, c, folded, noise: float) -> str:
        """Whether the steps ``t`` beat the plain sum of the blocks' updates:
        ``"shorten"`` when by a margin, ``"full"`` when by little, ``"noise"`` when the
        round's whole change is of the size of its rounding. Near the optimum the
        objective's changes are differences of nearly equal terms, and an "exact" step
        there could be 0 and undo a block's update round after round. ``noise``: the
        size of the rounding of ``c`` (the blocks' ``rd_err``) and of the penalty's
        change. The penalty's change along a block's step is, by ``folded`` (see
        :func:`kernels.fold_linear`), linear plus quadratic in its step for the
        coordinates whose sign cannot change, exact for the others."""
        def change(steps):
            out = float(c @ steps + 0.5 * steps @ G @ steps)
            for i, s_i in enumerate(steps):
                b_i, d_i, lin_extra, quad_extra = folded[i]
                s_i = float(s_i)
                out += (lin_extra * s_i + 0.5 * quad_extra * s_i * s_i
                        + kernels.penalty_change(b_i, d_i, s_i, self.l1, self.l2))
            return out

        full = change(np.ones_like(t))
        best = change(t)
        if full - best > max(0.1 * -best, noise):
            return "shorten"
        # a round whose whole change is of the size of its rounding cannot tell
        return "full" if full - best > noise or max(-best, abs(full)) > 10.0 * noise else "noise"

    def _drop_screened(self, state: LassoState, b: int, local: np.ndarray) -> None:
        s0 = self.starts[b]
        if state.nnz >= 0:
            state.nnz -= int(np.count_nonzero(state.coef[local + s0]))
        state.coef[local + s0] = 0.0
        w = state.weight[s0:self.starts[b + 1]]
        state.n_active[b] = kernels.update_priority(
            w, state.active[b], state.position[b], state.n_active[b], local,
            np.zeros(local.shape[0]))
        keep = state.alive_mask[b]
        keep[local] = False
        alive = state.alive[b][:state.n_alive[b]]
        alive = alive[keep[alive]]
        state.alive[b][:alive.shape[0]] = alive
        state.n_alive[b] = alive.shape[0]
        state.screened += local.shape[0]

    def _adapt(self, state: LassoState, partials: Mapping[Hashable, Any],
               cross: float | None = None) -> None:
        """Step control: blocks update from residuals without each other's changes of
        this round, so the squared loss gains the cross terms ``sum_{a<b} dr_a' dr_b``
        on top of the blocks' own decreases. Grow the round while that interference
        is a small share of the decrease; shrink it when it eats the progress.
        ``cross``: those terms, when the caller has them."""
        decrease = 0.0
        for out in partials.values():
            if out["delta"] is not None:
                decrease += out["decrease"]
        if cross is None:
            total = np.zeros(self.n)
            sq = 0.0
            for out in partials.values():
                delta = out["delta"]
                if delta is None:
                    continue
                add_delta(total, delta)
                v = delta[1] if isinstance(delta, tuple) else delta
                sq += kernels.dot(v, v)
            cross = 0.5 * (kernels.dot(total, total) - sq)
        state.interference = cross / decrease if decrease > 0 else 0.0
        if self.adaptive:
            self._adapt_rounds(state)

    def _adapt_rounds(self, state: LassoState) -> None:
        """Grow or shrink the rounds by the interference just measured (see
        :meth:`_adapt`)."""
        if self.working_sets:
            # working sets: first fewer sweeps per round, then fewer coordinates (a
            # random share of each working set); grow back in the reverse order
            if state.interference > 0.25:
                if state.epochs > 1:
                    state.epochs = max(1, state.epochs // 4)
                else:
                    largest = max(c.shape[0] for c in state.ws.values())
                    state.n_round = max(8, min(state.n_round, largest) // 2)
            elif state.interference < 0.05:
                if state.n_round < WHOLE:
                    largest = max(c.shape[0] for c in state.ws.values())
                    state.n_round = int(state.n_round * 1.5) + 1
                    if state.n_round >= largest:
                        state.n_round = WHOLE
                else:
                    state.epochs = min(self.inner_epochs, state.epochs * 2)
            return
        if state.interference > 0.25:
            state.n_round = max(8, state.n_round // 2)
        elif state.interference < 0.05:
            state.n_round = min(self.n_candidates, int(state.n_round * 1.5) + 1)

    def _pull_gap(self, state: LassoState, partials: Mapping[Hashable, Any]) -> None:
        stats = [partials[b]["gap"] for b in sorted(partials)]
        dual_norm = max(s["dual_norm"] for s in stats)
        w_l1 = sum(s["w_l1"] for s in stats)
        w_l2sq = sum(s["w_l2sq"] for s in stats)
        gap, primal = gap_formulation(self.l1, self.l2, w_l1, w_l2sq, stats[0]["r_norm2"],
                                      stats[0]["r_y"], dual_norm,
                                      sum(s["xtr_sq"] for s in stats))
        state.gap = gap
        state.primal = primal
        state.objective_fresh = True
        state.nnz = -1  # recounted once per gap round: bounds any bookkeeping slip
        state.gap_rounds += 1
        if gap <= self.tol_abs:
            state.converged = True
            state.stop = True
        elif self.l1 > 0.0 and self.screening:
            state.screen = (max(self.l1, dual_norm), np.sqrt(2.0 * max(gap, 0.0)) / self.l1)
        if self.working_sets:
            # each block drew its next working set from its fresh priorities; the
            # dependency check reads those of the tracked columns (the others stay 0)
            state.ws_next = {b: partials[b]["ws"] for b in sorted(partials)}
            state.ws_nnz_next = [partials[b].get("ws_nnz") for b in sorted(partials)]
            for b in sorted(partials):
                s0, s1 = self.starts[b], self.starts[b + 1]
                state.n_active[b] = kernels.update_priority(
                    state.weight[s0:s1], state.active[b], state.position[b], state.n_active[b],
                    partials[b]["gap"]["step_idx"].astype(np.int64), partials[b]["gap"]["step"])

    def objective(self, state: LassoState) -> float | None:
        return state.primal / self.n if state.objective_fresh else None

    def converged(self, state: LassoState) -> bool:
        return state.stop

    def progress(self, state: LassoState) -> tuple[int, int, str]:
        # passes over the features (scikit-learn's max_iter), not rounds: a round
        # updates anything from a few coordinates to a whole working set
        p = max(self.p, 1)
        return state.updates // p, max(self.max_updates // p, 1), "pass"

    def metrics(self, state: LassoState) -> Mapping[str, float]:
        return {"gap": state.gap / self.n if state.objective_fresh else float("nan"),
                "updates": state.updates, "rejected": state.rejected,
                "per_block": state.n_round, "interference": state.interference,
                "step": state.step, "epochs": state.epochs,
                "screened": state.screened, "peer_rounds": state.peer_rounds,
                "peer_wait_s": state.peer_wait_s, "solo_phases": state.solo_phases,
                "nnz": self._nnz(state)}

    @staticmethod
    def _nnz(state: LassoState) -> int:
        if state.nnz < 0:
            state.nnz = int(np.count_nonzero(state.coef))
        return state.nnz
