"""Model-parallel coordinate descent with working sets: the program the engine runs.

Column blocks of ``X`` live on the workers with their coefficients and a copy of the
vector ``r`` the datafit keeps (the residual ``r = y - X b`` for the quadratic, minus the
margins for the logistic: :mod:`dask_strads.cd.datafits`). A fit alternates two kinds of
rounds:

``gap round``
    every block computes ``X_b' r``, its share of the duality gap, and each live
    coordinate's *priority* (the step an exact update would take now); it proposes its
    best coordinates outside the support. The client sums the gap (the stopping rule,
    as scikit-learn's), derives the Gap Safe screening rule and chooses the next
    working set (:mod:`dask_strads.cd.working_set`);
``phase``
    the working set is solved to a tolerance relative to the largest priority, on one
    worker or several (:mod:`dask_strads.cd.phase`, chosen by
    :mod:`dask_strads.cd.parallelism`); the blocks apply the screening first. The
    client commits the coefficients that moved.

A phase after which every block holds the same residual (one block, or blocks that
exchange) measures the next gap in the same push, so a working set costs one round
trip; blocks taking turns on a shared worker still need a gap round of their own.

All quantities are sums over samples, not means: for the quadratic, scikit-learn's
``cd_fast`` scale ``1/2 ||r||^2 + l1 ||b||_1 + l2/2 ||b||^2`` with ``l1 = n alpha
l1_ratio``, ``l2 = n alpha (1 - l1_ratio)``; the fit stops when the gap is at most
``tol_abs``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from dask_strads.cd import gram, kernels, working_set
from dask_strads.cd.block import ColumnBlock, compact, relay, take_pending
from dask_strads.cd.coefficients import SparseCoef
from dask_strads.cd.datafits import Quadratic
from dask_strads.cd.gap import measure_gap, screen_rule
from dask_strads.cd.messages import GapOrder, GapReport, PhaseOrder, PhaseReport
from dask_strads.cd.parallelism import Costs, phase_solvers, setting
from dask_strads.cd.phase import Penalty, run_phase
from dask_strads.cd.state import CDState
from dask_strads.engine.program import Plan, Program, RoundContext

__all__ = ["CDProgram"]


def warm_up_kernels(datafit_type) -> None:
    """Compile (or load from numba's cache) the kernels a fit with ``datafit_type`` runs."""
    kernels.warm_up()
    datafit_type.warm_up()


class CDProgram(Program):
    """Working-set coordinate descent (see the module docstring).

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        Target, centred when ``fit_intercept`` (the quadratic datafit's; ignored when
        ``datafit`` is given).
    starts : ndarray of int
        ``starts[b]:starts[b + 1]`` are the global columns of block ``b``.
    l1, l2 : float
        Penalties on the ``cd_fast`` scale.
    tol_abs : float
        Stop once the duality gap is at most this.
    fit_intercept, positive : bool
    max_updates : int
        Stop after this many coordinate updates (``max_iter`` passes over the features),
        after a last gap round.
    coef_init : ndarray, optional
        Warm start.
    col_sq, xty : ndarray, optional
        The squared norms of X's columns and ``X' g``, ``g`` the datafit's negative
        gradient at ``b = 0``, when the client has them: the blocks then need not read
        their columns for them at the start. Ignored when the fit centres X (and
        ``xty`` with a warm start).
    ws_min_size : int, optional
        Coordinates of the smallest working set (the ``ws-min-size`` setting when None).
    screening : bool
        Gap Safe screening after every gap round.
    datafit : optional
        A datafit of :mod:`dask_strads.cd.datafits` (default: the quadratic on ``y``).
    """

    name = "lasso"
    transport = "direct"

    def __init__(self, y, starts, l1, l2, tol_abs, *, fit_intercept=True, positive=False,
                 max_updates=10**9, coef_init=None, col_sq=None, xty=None,
                 ws_min_size=None, screening=True, datafit=None):
        self.datafit = Quadratic(y) if datafit is None else datafit
        self.y = self.datafit.offset()  # every block's r at b = 0
        self.n = self.y.shape[0]
        self.starts = np.asarray(starts, dtype=np.int64)
        self.n_blocks = self.starts.shape[0] - 1
        self.p = int(self.starts[-1])
        self.penalty = Penalty(l1, l2, positive)
        self.tol_abs = float(tol_abs)
        self.fit_intercept = bool(fit_intercept)
        self.max_updates = int(max_updates)
        self.coef_init = None if coef_init is None else np.asarray(coef_init, dtype=np.float64)
        self.col_sq = None if col_sq is None else np.asarray(col_sq, dtype=np.float64)
        self.xty = None if xty is None else np.asarray(xty, dtype=np.float64)
        self.ws_min_size = int(setting("ws-min-size") if ws_min_size is None else ws_min_size)
        self.ws_growth = float(setting("ws-growth"))
        self.inner_tol = float(setting("inner-tol"))
        self.anderson = int(setting("anderson"))
        self.max_epochs = int(setting("max-epochs"))
        self.screening = bool(screening)
        self.costs = Costs.from_settings()

    # ================================================================= worker
    def init_block(self, block_id: Hashable, shard: Any) -> ColumnBlock:
        self._warm_up()
        b0, b1 = self.starts[block_id], self.starts[block_id + 1]
        coef = None if self.coef_init is None else self.coef_init[b0:b1]
        centre = self.fit_intercept and self.datafit.centres
        col_sq = None if self.col_sq is None or centre else self.col_sq[b0:b1]
        xty = None if self.xty is None or centre or coef is not None else self.xty[b0:b1]
        block = ColumnBlock(block_id, b0, shard, self.y, centre, coef,
                            curvature_scale=1.0 / self.datafit.dual_curvature, col_sq=col_sq,
                            first_xtr=xty)
        if block.size != b1 - b0:
            raise ValueError(f"block {block_id}: {block.size} columns, expected {b1 - b0}")
        return block

    def block_summary(self, block_id: Hashable, block: ColumnBlock) -> dict:
        # what this block's warm start takes off the residual, for the other blocks
        return {"delta": compact(block.residual - self.y) if np.any(block.coef) else None}

    def push(self, block: ColumnBlock, part: Any, carried: Any = None):
        if isinstance(part, GapOrder):
            return measure_gap(block, part, self.penalty, self.datafit)
        exchange = None
        if part.exchange:
            from dask_strads.engine import exchange
        report = run_phase(block, part, self.penalty, self.datafit, exchange)
        if part.then_gap is not None:
            report.gap = measure_gap(block, part.then_gap, self.penalty, self.datafit)
        return report

    def block_result(self, block_id: Hashable, block: ColumnBlock) -> dict:
        # the column means, for the intercept (the client holds the coefficients)
        return {"mu": block.means if self.fit_intercept and self.datafit.centres else None}

    def block_arrays(self, block: ColumnBlock) -> Mapping[str, Any]:
        return block.copy_state()

    def restore_block(self, block_id, shard, state_arrays, block_arrays):
        block = self.init_block(block_id, shard)
        if block_arrays is not None:
            block.restore_state(block_arrays)
        return block

    # ================================================================= client
    def _warm_up(self) -> None:
        warm_up_kernels(type(self.datafit))

    def init_state(self, summaries: Mapping[Hashable, Any]) -> CDState:
        self._warm_up()
        coef = SparseCoef(self.p) if self.coef_init is None else \
            SparseCoef.from_dense(self.coef_init)
        state = CDState(coef=coef, pending=[None] * self.n_blocks, costs=self.costs,
                        intercept=getattr(self.datafit, "intercept", 0.0))
        for b, summary in summaries.items():
            relay(state.pending, b, summary["delta"], self.n)
        return state

    def schedule(self, state: CDState, ctx: RoundContext) -> Plan | None:
        if state.stop is not None:
            return None
        if state.waiting:
            return Plan(parts={})  # a phase needs the gap round's pull first (staleness)
        state.waiting = True
        if state.next == "gap":
            return self._plan_gap(state)
        return self._plan_phase(state, ctx.can_exchange)

    def _ws_target(self, n_support: int) -> int:
        return working_set.target_size(n_support, self.p, self.ws_min_size, self.ws_growth)

    def _plan_gap(self, state: CDState) -> Plan:
        n_support = state.coef.nnz
        parts = {b: GapOrder(correction=take_pending(state.pending, b),
                             n_candidates=self._ws_target(n_support) - n_support,
                             dual_vector=b == 0)
                 for b in range(self.n_blocks)}
        return Plan(parts=parts, info={"kind": "gap"})

    def _then_gap(self, b: int, ws_size: int) -> GapOrder:
        """Block ``b``'s gap order to run right after a phase over ``ws_size``
        coordinates. The support after it lies in the working set, so the next working
        set needs at most ``_ws_target(ws_size)`` candidates from any block."""
        return GapOrder(n_candidates=self._ws_target(ws_size), dual_vector=b == 0)

    def _plan_phase(self, state: CDState, can_exchange: bool) -> Plan:
        B = self.n_blocks
        if state.turns:  # blocks solving one after another: the next one's turn
            return self._plan_turn(state)
        ws = working_set.choose(state.support, state.candidates, state.ws_target)
        state.ws = ws
        tol = self.inner_tol * state.max_score
        budget = self.max_updates - state.updates
        size = max(sum(w.shape[0] for w in ws), 1)
        max_epochs = int(max(1, min(self.max_epochs, math.ceil(budget / size))))
        common = dict(tol=tol, max_epochs=max_epochs, anderson=self.anderson)
        screen, state.screen = state.screen, None
        ids = np.concatenate([w + self.starts[b] for b, w in enumerate(ws)])
        if B == 1:
            order = PhaseOrder(ws=ws[0], solver_of=np.zeros(ws[0].shape[0], np.int64),
                               solvers=(0,), exchange=False, screen=screen,
                               correction=take_pending(state.pending, 0),
                               then_gap=self._then_gap(0, size),
                               **self._with_gram(state, ids, 0, common))
            return Plan(parts={0: order}, info={"kind": "phase", "mode": "alone",
                                                "then_gap": True})
        if not can_exchange:
            # blocks share a worker: they solve their shares in turn (block Gauss-Seidel),
            # cycle after cycle until a cycle moves no block by more than the tolerance
            state.turns = list(range(B))
            state.turn_orders = common
            state.turn_screen = screen
            state.cycle_settled = True
            return self._plan_turn(state)
        ws_nnz = [self._nnz_of(state, b, ws[b]) for b in range(B)]
        choice = phase_solvers(ws_nnz, state.entry_bytes, state.costs, state.reads_in_place,
                               lambda s, epochs, rent: self._gram_seconds(state, ids, s,
                                                                          epochs, rent))
        solvers = choice.solvers
        if not solvers:
            solvers = (0,)
        elif len(solvers) > 1 and not self.datafit.peers:
            solvers = (max(solvers, key=lambda b: ws_nnz[b]),)
        # peers each solve their own block's coordinates; a solo solver all of them
        solver_of = [np.full(w.shape[0], solvers[0] if len(solvers) == 1 else b, np.int64)
                     for b, w in enumerate(ws)]
        if choice.gram:
            common = self._on_gram(common, ids.shape[0])
        parts = {}
        for b in range(B):
            # every block ends an exchange phase with the same residual: the gap follows
            parts[b] = PhaseOrder(ws=ws[b], solver_of=solver_of[b], solvers=solvers,
                                  exchange=True, screen=screen,
                                  correction=take_pending(state.pending, b),
                                  then_gap=self._then_gap(b, size), **common)
        mode = "solo" if len(solvers) == 1 else "peer"
        return Plan(parts=parts, exchange=True, info={"kind": "phase", "mode": mode,
                                                      "then_gap": True})

    def _plan_turn(self, state: CDState) -> Plan:
        b = state.turns.pop(0)
        ws = state.ws[b]
        common = self._with_gram(state, ws + self.starts[b], b, state.turn_orders)
        order = PhaseOrder(ws=ws, solver_of=np.full(ws.shape[0], b, np.int64), solvers=(b,),
                           exchange=False, relay=True, screen=state.turn_screen,
                           correction=take_pending(state.pending, b), **common)
        state.turn_screen = None if not state.turns else state.turn_screen
        return Plan(parts={b: order}, info={"kind": "phase", "mode": "turns",
                                            "last_turn": not state.turns})

    def _gram_size(self, state: CDState, ids: np.ndarray, solver: int,
                   rent: float | None = None) -> tuple | None:
        """:func:`dask_strads.cd.gram.size_if_pays` of a phase of ``solver`` over ``ids``."""
        cached = state.gram_ids[solver] if solver < len(state.gram_ids) else None
        # a block whose columns have no Gram matrix (gram_ids None) may be in any
        # working set
        if cached is None or not self.datafit.gram or any(g is None for g in state.gram_ids):
            return None
        return gram.size_if_pays(state.costs, self.n, cached, ids, state.epochs, rent)

    def _gram_seconds(self, state: CDState, ids: np.ndarray, solver: int, epochs: float,
                      rent: float):
        size = self._gram_size(state, ids, solver, rent)
        return None if size is None else gram.phase_seconds(state.costs, self.n, *size,
                                                            epochs, state.epochs)

    def _on_gram(self, common: dict, w: int) -> dict:
        """A phase order's settings ``common`` for sweeping the Gram matrix of ``w``
        columns, to its tolerance."""
        return dict(common, gram=True, tol=gram.tolerance(self.n, w, common["tol"]))

    def _with_gram(self, state: CDState, ids: np.ndarray, solver: int, common: dict) -> dict:
        """``common`` on the Gram matrix of ``ids`` where that pays for ``solver``."""
        if self._gram_size(state, ids, solver) is None:
            return common
        return self._on_gram(common, ids.shape[0])

    @staticmethod
    def _nnz_of(state: CDState, b: int, local: np.ndarray) -> int:
        """Stored entries of block ``b``'s columns ``local`` (as its gap round said)."""
        ids, nnz = state.column_nnz[b]
        if local.shape[0] == 0 or ids.shape[0] == 0:
            return 0
        at = np.minimum(np.searchsorted(ids, local), ids.shape[0] - 1)
        return int(nnz[at][ids[at] == local].sum())

    def pull(self, state: CDState, partials: Mapping[Hashable, Any], plan: Plan) -> CDState:
        if not plan.parts:
            return state
        state.waiting = False
        if plan.info["kind"] == "gap":
            self._pull_gap(state, [partials[b] for b in range(self.n_blocks)])
        else:
            self._pull_phase(state, partials, plan.info)
            if plan.info.get("then_gap"):
                self._pull_gap(state, [partials[b].gap for b in range(self.n_blocks)])
        return state

    def _pull_gap(self, state: CDState, reports: list[GapReport]) -> None:
        pen = self.penalty
        gap, primal, dual_norm = self.datafit.duality_gap(pen.l1, pen.l2, reports)
        state.gap, state.primal = gap, primal
        state.support = [r.support for r in reports]  # as the blocks found it
        state.ws_target = self._ws_target(sum(s.shape[0] for s in state.support))
        state.intercept += reports[0].intercept_delta  # every block took the same step
        state.gap_rounds += 1
        state.fresh = True
        state.max_score = max(r.max_score for r in reports)
        state.candidates = [(r.candidates, r.scores) for r in reports]
        state.column_nnz = [_nnz_lookup(r) for r in reports]
        state.entry_bytes = reports[0].entry_bytes
        state.column_sources = [r.column_source for r in reports]
        state.shms = [r.shm for r in reports]
        state.gram_ids = [r.gram_ids for r in reports]
        if state.first_gap is None:
            state.first_gap = gap
        if gap <= self.tol_abs:
            state.converged = True
            state.stop = "converged"
        elif state.max_score == 0.0:
            state.stop = "stalled"  # no coordinate would move: the gap is rounding
        elif state.updates >= self.max_updates:
            state.stop = "max_iter"
        else:
            state.next = "phase"
            if self.screening and self.datafit.screens(pen.l2):
                state.screen = screen_rule(pen.l1, gap, dual_norm,
                                           self.datafit.dual_curvature)

    def _pull_phase(self, state: CDState, partials: Mapping[Hashable, PhaseReport],
                    info: dict) -> None:
        state.fresh = False
        for b, report in partials.items():
            s0 = self.starts[b]
            if report.screened.shape[0]:
                state.coef.set(report.screened + s0, 0.0)
                state.screened += report.screened.shape[0]
            state.coef.set(report.moved + s0, report.values)
            state.intercept += report.intercept_delta
            state.updates += report.updates
            state.shipped_bytes += report.shipped_bytes
            if report.delta is not None:
                relay(state.pending, b, report.delta, self.n)
        epochs = max(r.epochs for r in partials.values())
        sweep_s = max(r.sweep_s for r in partials.values())
        # a Gram phase's sweeps say nothing of what a sweep over columns costs
        swept = 0 if any(r.gram for r in partials.values()) else \
            max(r.swept_nnz for r in partials.values())
        for r in partials.values():
            if r.gram:
                state.costs.observe_gram(r.gram_sweep_s, r.gram_entries, r.gram_build_s,
                                         r.gram_madds)
        exchanges = epochs + 2 if info["mode"] == "peer" else 0
        state.costs.observe(epochs, sweep_s, swept, exchanges,
                            max(r.wait_s for r in partials.values()))
        state.epochs += epochs
        state.gram_phases += any(r.gram for r in partials.values())
        state.last_mode = info["mode"]
        if info["mode"] == "turns":
            # a block whose first sweep was within the tolerance had nothing left to do
            state.cycle_settled &= epochs <= 1
            if info["last_turn"] and not state.cycle_settled \
                    and state.updates < self.max_updates:
                state.turns = list(range(self.n_blocks))
                state.cycle_settled = True
                return
        if info["mode"] != "turns" or info["last_turn"]:
            state.phases += 1
            state.mode_counts[info["mode"]] = state.mode_counts.get(info["mode"], 0) + 1
            state.next = "gap"

    def objective(self, state: CDState) -> float | None:
        return state.primal / self.n if state.fresh else None

    def converged(self, state: CDState) -> bool:
        return state.stop is not None

    def why_stopped(self, state: CDState) -> str | None:
        return None if state.stop == "converged" else state.stop

    def progress(self, state: CDState) -> tuple[int, int, str]:
        # decades of the duality gap, from the first gap round's to the tolerance
        if state.first_gap is None or state.first_gap <= self.tol_abs:
            return (1 if state.stop else 0), 1, "gap decade"
        total = max(1, math.ceil(math.log10(state.first_gap / self.tol_abs)))
        done = total if state.converged else int(math.log10(state.first_gap
                                                             / max(state.gap, 1e-300)))
        return min(max(done, 0), total), total, "gap decade"

    def metrics(self, state: CDState) -> Mapping[str, float]:
        return {"gap": state.gap / self.n if state.fresh else float("nan"),
                "updates": state.updates, "phases": state.phases, "epochs": state.epochs,
                "ws_size": sum(w.shape[0] for w in state.ws) if state.ws else 0,
                "screened": state.screened, "nnz": state.coef.nnz,
                "solo_phases": state.mode_counts.get("solo", 0),
                "peer_phases": state.mode_counts.get("peer", 0),
                "gram_phases": state.gram_phases, "shipped_bytes": state.shipped_bytes}

    # ------------------------------------------------------------- checkpoints
    def state_arrays(self, state: CDState) -> Mapping[str, Any]:
        pending = np.stack([np.zeros(self.n) if d is None else d for d in state.pending])
        return {"coef_ids": state.coef.ids, "coef_values": state.coef.values,
                "n_features": self.p, "pending": pending, "updates": state.updates,
                "gap": state.gap, "primal": state.primal, "gap_rounds": state.gap_rounds,
                "phases": state.phases, "epochs": state.epochs, "intercept": state.intercept,
                "first_gap": np.nan if state.first_gap is None else state.first_gap}

    def load_state(self, arrays: Mapping[str, Any]) -> CDState:
        state = CDState(coef=coef_of_arrays(arrays),
                        pending=[p.copy() if np.any(p) else None for p in arrays["pending"]],
                        costs=Costs.from_settings(), intercept=float(arrays["intercept"]))
        state.updates = int(arrays["updates"])
        state.gap, state.primal = float(arrays["gap"]), float(arrays["primal"])
        state.gap_rounds, state.phases = int(arrays["gap_rounds"]), int(arrays["phases"])
        state.epochs = int(arrays["epochs"])
        first = float(arrays["first_gap"])
        state.first_gap = None if math.isnan(first) else first
        return state


def _nnz_lookup(report: GapReport) -> tuple[np.ndarray, np.ndarray]:
    """The support's and candidates' stored entries, sorted by local id."""
    ids = np.concatenate([report.support, report.candidates])
    nnz = np.concatenate([report.support_nnz, report.candidate_nnz])
    order = np.argsort(ids, kind="stable")
    return ids[order], nnz[order]


def coef_of_arrays(arrays: Mapping[str, Any]) -> SparseCoef:
    """The coefficients of a checkpoint (dense in those written before they were sparse)."""
    if "coef" in arrays:
        return SparseCoef.from_dense(arrays["coef"])
    return SparseCoef(int(arrays["n_features"]), np.array(arrays["coef_ids"]),
                      np.array(arrays["coef_values"]))
