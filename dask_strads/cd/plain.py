"""The paper's plain schedules, for comparison with the priority schedule.

Every round each block updates ``per_round`` of its coordinates, chosen round robin or
uniformly at random (``"shotgun"``: at random, every one from the same residual, as
Shotgun's parallel updates), against its residual; the client relays each block's
residual change to the others with their next push, so blocks see each other's changes
a round late (and later with staleness). No dependency check, no working sets. The
duality gap is measured after every pass over the features.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dask_strads.cd import kernels
from dask_strads.cd.block import ColumnBlock, compact, relay, take_pending
from dask_strads.cd.coefficients import SparseCoef
from dask_strads.cd.datafits import Quadratic
from dask_strads.cd.gap import measure_gap
from dask_strads.cd.messages import GapOrder
from dask_strads.cd.phase import Penalty
from dask_strads.engine.program import Plan, Program, RoundContext

SCHEDULES = ("round_robin", "random", "shotgun")
# An objective this many times its starting value (or not finite) is a diverged fit.
DIVERGED = 10.0


@dataclass
class PlainOrder:
    coords: np.ndarray  # local ids to update
    correction: object = None


@dataclass
class PlainState:
    coef: SparseCoef
    pending: list
    rng: np.random.Generator
    position: list  # round robin: the next coordinate per block
    updates: int = 0
    since_gap: int = 0
    gap: float = np.inf
    primal: float = np.inf
    start_primal: float = np.nan  # at the first gap round
    fresh: bool = False
    gap_waiting: bool = False
    stop: str | None = None
    converged: bool = False
    in_flight: int = 0
    extra: dict = field(default_factory=dict)


class PlainProgram(Program):
    """Plain coordinate descent rounds (see the module docstring); parameters as
    :class:`~dask_strads.cd.program.CDProgram`, plus ``schedule`` and ``per_round``."""

    name = "lasso"
    transport = "direct"

    def __init__(self, y, starts, l1, l2, tol_abs, *, schedule="round_robin", per_round=64,
                 fit_intercept=True, positive=False, max_updates=10**9, coef_init=None,
                 random_state=0):
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {SCHEDULES}, got {schedule!r}")
        self.datafit = Quadratic(y)
        self.y = self.datafit.y
        self.n = self.y.shape[0]
        self.starts = np.asarray(starts, dtype=np.int64)
        self.n_blocks = self.starts.shape[0] - 1
        self.p = int(self.starts[-1])
        self.penalty = Penalty(l1, l2, positive)
        self.tol_abs = float(tol_abs)
        self.kind = schedule
        self.per_round = int(per_round)
        self.fit_intercept = bool(fit_intercept)
        self.max_updates = int(max_updates)
        self.coef_init = None if coef_init is None else np.asarray(coef_init, dtype=np.float64)
        self.random_state = random_state

    # ================================================================= worker
    def init_block(self, block_id: Hashable, shard: Any) -> ColumnBlock:
        kernels.warm_up()
        b0, b1 = self.starts[block_id], self.starts[block_id + 1]
        coef = None if self.coef_init is None else self.coef_init[b0:b1]
        return ColumnBlock(block_id, b0, shard, self.y, self.fit_intercept, coef)

    def block_summary(self, block_id: Hashable, block: ColumnBlock) -> dict:
        return {"delta": compact(block.residual - self.y) if np.any(block.coef) else None}

    def push(self, block: ColumnBlock, part: Any, carried: Any = None):
        if isinstance(part, GapOrder):
            return measure_gap(block, part, self.penalty, self.datafit)
        block.apply(part.correction)
        coords = part.coords[block.alive[part.coords]]
        if coords.shape[0] == 0:
            return {"delta": None, "moved": coords, "values": np.zeros(0)}
        before = block.residual.copy()
        cols = block.columns(coords)
        pen = self.penalty
        if self.kind == "shotgun":
            self._jacobi(cols, block)
        else:
            _, block.r_sum = cols.epoch(block.residual, block.r_sum, pen.l1, pen.l2,
                                        pen.positive)
        changed = cols.coef != block.coef[coords]
        block.coef[coords] = cols.coef
        block.resum()
        return {"delta": compact(block.residual - before), "moved": coords[changed],
                "values": cols.coef[changed]}

    def _jacobi(self, cols, block: ColumnBlock) -> None:
        """Every coordinate updated from the same residual."""
        pen = self.penalty
        r = block.residual
        if cols.dense is not None:
            g = cols.compact().dense.T @ r  # no copy of a set that is copied already
        else:
            g = np.empty(cols.size)
            kernels.xtr_sparse(cols.data, cols.indices, cols.indptr, cols.mu, r, block.r_sum,
                               np.arange(cols.size), g)
        tmp = g + cols.coef * cols.col_sq
        new = np.sign(tmp) * np.maximum(np.abs(tmp) - pen.l1, 0.0)
        if pen.positive:
            new = np.maximum(new, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            new = np.where(cols.col_sq > 0, new / (cols.col_sq + pen.l2), cols.coef)
        cols.subtract(new - cols.coef, r)
        cols.coef[:] = new

    # ================================================================= client
    def init_state(self, summaries: Mapping[Hashable, Any]) -> PlainState:
        coef = SparseCoef(self.p) if self.coef_init is None else \
            SparseCoef.from_dense(self.coef_init)
        state = PlainState(coef=coef, pending=[None] * self.n_blocks,
                           rng=np.random.default_rng(self.random_state),
                           position=[0] * self.n_blocks)
        for b, summary in summaries.items():
            relay(state.pending, b, summary["delta"], self.n)
        return state

    def schedule(self, state: PlainState, ctx: RoundContext) -> Plan | None:
        if state.stop is not None:
            return None
        if state.updates >= self.max_updates:
            state.since_gap = max(state.since_gap, self.p)  # a last gap round, then stop
        if state.gap_waiting or (state.since_gap >= self.p and state.in_flight):
            return Plan(parts={})  # the gap needs every change pulled first
        state.in_flight += 1
        if state.since_gap >= self.p or ctx.round == 0:
            state.gap_waiting = True
            state.since_gap = 0
            return Plan(parts={b: GapOrder(correction=take_pending(state.pending, b))
                               for b in range(self.n_blocks)}, info={"gap": True})
        parts = {}
        for b in range(self.n_blocks):
            size = int(self.starts[b + 1] - self.starts[b])
            k = min(self.per_round, size)
            if self.kind == "round_robin":
                coords = (state.position[b] + np.arange(k)) % size
                state.position[b] = (state.position[b] + k) % size
                coords = np.unique(coords)
            else:
                coords = state.rng.choice(size, k, replace=False)  # swept in this order
            parts[b] = PlainOrder(coords=coords.astype(np.int64),
                                  correction=take_pending(state.pending, b))
            state.since_gap += k
        return Plan(parts=parts, info={"gap": False})

    def pull(self, state: PlainState, partials: Mapping[Hashable, Any], plan: Plan):
        if not plan.parts:
            return state
        state.in_flight -= 1
        state.fresh = False
        if plan.info["gap"]:
            pen = self.penalty
            state.gap, state.primal, _ = self.datafit.duality_gap(
                pen.l1, pen.l2, [partials[b] for b in range(self.n_blocks)])
            state.fresh = True
            state.gap_waiting = False
            if np.isnan(state.start_primal):
                state.start_primal = state.primal
            # descent never rises above where it started; blocks that update dependent
            # coordinates at once can, and then grow without bound
            if not state.primal <= DIVERGED * state.start_primal:
                state.stop = "diverged"
            elif state.gap <= self.tol_abs:
                state.converged = True
                state.stop = "converged"
            elif state.updates >= self.max_updates:
                state.stop = "max_iter"
            return state
        for b, out in partials.items():
            s0 = self.starts[b]
            state.coef.set(out["moved"] + s0, out["values"])
            state.updates += plan.parts[b].coords.shape[0]
            relay(state.pending, b, out["delta"], self.n)
        return state

    def objective(self, state: PlainState) -> float | None:
        return state.primal / self.n if state.fresh else None

    def converged(self, state: PlainState) -> bool:
        return state.stop is not None

    def why_stopped(self, state: PlainState) -> str | None:
        return None if state.stop == "converged" else state.stop

    def metrics(self, state: PlainState) -> Mapping[str, float]:
        return {"gap": state.gap / self.n if state.fresh else float("nan"),
                "updates": state.updates}

    def block_result(self, block_id: Hashable, block: ColumnBlock) -> dict:
        return {"mu": block.means if self.fit_intercept else None}
