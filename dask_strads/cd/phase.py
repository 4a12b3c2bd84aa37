"""A phase: the working set solved on the workers, to the inner tolerance, in one round.

The client assigns every coordinate of the working set to a *solver* block (see
:mod:`dask_strads.cd.parallelism`). A phase then runs in one push per block:

* **alone** (no exchange): the block solves its own coordinates against its residual;
  with more than one block the client runs the blocks one after another and relays
  their residual changes (block Gauss-Seidel; used when blocks share a worker).
* **one solver** (``solo``): the other blocks send it copies of their coordinates'
  columns, or where they lie when the solver sees the same ``/dev/shm`` (dense shards
  the client mapped there); it solves them all (Gauss-Seidel over the whole working
  set) and sends back its residual change and their new values.
* **several solvers** (``peer``): every solver sweeps its coordinates, the blocks swap
  their residual changes after every sweep and all take the same steps
  (:mod:`dask_strads.cd.steps`), so their residuals stay equal.

Exchanges go worker to worker (:func:`dask_strads.engine.exchange`), never through the
client. Sweeps stop once a sweep changes no coefficient by more than the order's
``tol``; a single solver extrapolates its iterates (:mod:`dask_strads.cd.anderson`).
"""

from __future__ import annotations

import time

import numpy as np

from dask_strads.cd import gram, kernels
from dask_strads.cd.anderson import Anderson
from dask_strads.cd.block import ColumnBlock, add_delta, compact
from dask_strads.cd.columns import ColumnSet, MappedColumns
from dask_strads.cd.messages import PhaseOrder, PhaseReport
from dask_strads.cd.peers import peer_sweeps
from dask_strads.engine import all_reduce, shared


class Penalty:
    """The penalty's constants on the ``cd_fast`` scale."""

    def __init__(self, l1: float, l2: float, positive: bool):
        self.l1 = float(l1)
        self.l2 = float(l2)
        self.positive = bool(positive)


def run_phase(block: ColumnBlock, order: PhaseOrder, pen: Penalty, datafit,
              exchange=None) -> PhaseReport:
    """Run ``order`` on ``block``; ``exchange``: the round's all-gather (exchange phases)."""
    screened, screen_delta = np.zeros(0, np.int64), None
    if order.screen is not None:
        screened, screen_delta = block.screen(pen.l2, order.screen.dual_scale,
                                              order.screen.radius)
    block.apply(order.correction)
    live = block.alive[order.ws] if order.ws.shape[0] else np.zeros(0, bool)
    ws, solver_of = order.ws[live], order.solver_of[live]
    report = PhaseReport(moved=np.zeros(0, np.int64), values=np.zeros(0), screened=screened)
    if not order.exchange:
        start = block.residual.copy() if order.relay else None
        if screen_delta is not None and start is not None:
            add_delta(start, screen_delta, -1.0)  # the change includes the screening's
        if ws.shape[0]:
            cols = block.columns(ws, swept=not order.gram)
            g0 = block.kept_gradient(ws) if order.gram else None
            _solve(cols, block, pen, datafit, order, report, g0=g0)
            _take_values(block, cols.ids, cols.coef, report)
        if start is not None:
            report.delta = compact(block.residual - start)
            # the residual the other blocks will compute from the relayed change
            block.residual[:] = start
            block.apply(report.delta)
        return report
    return _exchange_phase(block, order, pen, datafit, exchange, ws, solver_of, screen_delta,
                           report)


def _exchange_phase(block, order, pen, datafit, exchange, ws, solver_of, screen_delta,
                    report) -> PhaseReport:
    own = block.id
    waited = [0.0]

    def swap(value):
        t0 = time.perf_counter()
        try:
            return exchange(value)
        finally:
            waited[0] += time.perf_counter() - t0

    solo = len(order.solvers) == 1
    # a solo phase first learns which blocks see the solver's /dev/shm (and what Gram
    # matrix it keeps)
    kept = block.gram_cache.ids if order.gram and own == order.solvers[0] else None
    first = swap({"screen": screen_delta, "shm": shared.shm_id() if solo else None,
                  "gram": kept})
    for b, msg in first.items():
        if b != own:
            block.apply(msg["screen"])
    cols, g0 = None, None
    if solo:
        (solver,) = order.solvers
        sent, xtr = None, None
        if own != solver and np.any(solver_of == solver):
            theirs = ws[solver_of == solver]
            if block.column_source is not None and first[solver]["shm"] == block.column_source:
                sent = block.mapped_columns(theirs)
            else:
                sent = block.columns(theirs).compact()
                report.shipped_bytes = sent.nnz * 12
            xtr = block.kept_gradient(theirs) if order.gram else None
        elif own == solver and order.gram and block.column_source is not None:
            # for the others to form their share of the Gram matrix's missing rows
            sent = block.mapped_columns(ws[solver_of == own])
        messages = swap((sent, xtr))
        received = {b: m[0] for b, m in messages.items()}
        formed = _form_gram_rows(block, first, received, solver) if order.gram else None
        if own == solver:
            swept = not order.gram
            mine = [(block.columns(ws[solver_of == own], swept),
                     block.kept_gradient(ws[solver_of == own]) if order.gram else None)]
            mine += [(block.peer_columns.read(c, swept) if isinstance(c, MappedColumns)
                      else c, g)
                     for b, (c, g) in messages.items() if b != own and c is not None]
            mine = [(c, g) for c, g in mine if c.size]
            cols = ColumnSet.concat([c for c, _ in mine]) if mine else None
            g0 = _joined([g for _, g in mine])
    elif own in order.solvers:
        own_cols = block.columns(ws[solver_of == own])
        cols = own_cols.writable() if own_cols.size else None
    if solo:
        incoming = _end_solo(block, solver, cols, swap,
                             lambda: _solve(cols, block, pen, datafit, order, report, formed,
                                            g0, subtract=False))
    else:
        peer_sweeps(block, cols, order, pen, swap, report)
        finals = swap(_foreign(block, cols))
        incoming = [v for b, v in finals.items() if b != own]
    if cols is not None:
        _take_values(block, cols.ids, cols.coef, report)
    for values in incoming:
        if values is not None:
            _take_values(block, *values, report)
    report.wait_s = waited[0]
    return report


def _end_solo(block: ColumnBlock, solver, cols: ColumnSet | None, swap, solve) -> list:
    """A solo phase from the solver's sweeps (``solve()``, which leaves the closing
    change of a Gram phase off the residual) on: every block ends with the same
    residual, bit for bit, and gets the values of its coordinates that the solver
    moved (returned as ``[(ids, values)]``, the solver's own taken by the caller).
    After Gram sweeps every block takes ``X_b d_b`` for its own columns at once (not
    the solver for all of them)."""
    if block.id == solver:
        before = block.residual.copy()
        start = None if cols is None else cols.coef.copy()
        on_gram = cols is not None and solve()
        steps = cols.coef - start if on_gram else None
        result = {"delta": None if on_gram else compact(block.residual - before),
                  "on_gram": on_gram,
                  "steps": _foreign(block, cols, steps) if on_gram else None}
        swap(dict(result, values=_foreign(block, cols)))
        block.residual[:] = before
        own = _take_change(block, cols.ids, steps) if on_gram else None
        incoming = []
    else:
        result = swap(None)[solver]
        own = _take_change(block, *result["steps"]) if result["steps"] is not None else None
        incoming = [result["values"]]
    if result["on_gram"]:
        for _, change in sorted(swap(own).items()):
            block.apply(change)  # in block order: the same sum on every block
    else:
        block.apply(result["delta"])
    return incoming


def _take_change(block: ColumnBlock, ids: np.ndarray, steps: np.ndarray):
    """``-X_b d`` (compacted) for the block's own columns among ``ids`` (global)
    moving by ``steps``; None when none of them is its."""
    mine = block.owns(ids)
    if not mine.any():
        return None
    change = np.zeros(block.n)
    local = np.ascontiguousarray(ids[mine] - block.start, dtype=np.int64)
    kernels.subtract_dense(block.X, local, np.ascontiguousarray(steps[mine]), change)
    return compact(change)


def _form_gram_rows(block, first: dict, received: dict, solver) -> tuple | None:
    """The rows the solver's Gram matrix lacks, ``((X_new' X_new, X_new' X_known),
    seconds)``, every block forming them over its share of the samples and the shares
    summed among them (:func:`~dask_strads.engine.all_reduce`: about ``log2 B`` messages
    each, not ``B - 1``), where every block reads every column of the working set in
    place (all see one ``/dev/shm``); None where the solver forms them alone. Every block
    decides alike, from what all were sent."""
    in_place = all(c is None or isinstance(c, MappedColumns) for c in received.values())
    one_shm = len({m["shm"] for m in first.values()}) == 1
    if not (in_place and one_shm and isinstance(received[solver], MappedColumns)):
        return None
    t0 = time.perf_counter()
    # in the order the solver joins them: its own columns first
    pieces = [received[solver]] + [c for b, c in received.items()
                                   if b != solver and c is not None]
    cols = ColumnSet.concat([block.peer_columns.read(c, swept=False) for c in pieces])
    _, known, new = gram.positions(first[solver]["gram"], cols.ids)
    if not new.shape[0]:
        return None
    blocks = list(first)
    k, B, n = blocks.index(block.id), len(blocks), block.n
    nn, nk = gram.rows(cols, new, known, n * k // B, n * (k + 1) // B)
    total = all_reduce(np.hstack([nn, nk]))
    m = new.shape[0]
    return (total[:, :m], total[:, m:]), time.perf_counter() - t0


def _joined(pieces: list) -> np.ndarray | None:
    """The pieces' concatenation, or None where any of them is missing."""
    if not pieces or any(p is None for p in pieces):
        return None
    return np.concatenate(pieces)


def _foreign(block: ColumnBlock, cols: ColumnSet | None, values=None):
    """``(ids, values)`` of the coordinates of ``cols`` that other blocks own: their
    coefficients, or ``values`` (in the order of ``cols``)."""
    if cols is None:
        return None
    values = cols.coef if values is None else values
    theirs = ~block.owns(cols.ids)
    return (cols.ids[theirs], values[theirs]) if theirs.any() else None


def _solve(cols: ColumnSet, block: ColumnBlock, pen: Penalty, datafit, order: PhaseOrder,
           report: PhaseReport, formed: tuple | None = None,
           g0: np.ndarray | None = None, subtract: bool = True) -> bool:
    """Sweeps of one solver until the order's tolerance or epoch budget, with Anderson
    extrapolation kept when it lowers the objective; on the columns' Gram matrix where
    that is expected to be cheaper (``g0``: the columns' ``X' r`` if the blocks kept
    it from the gap round; ``subtract``: whether its closing change ``X_ws d`` is
    taken off the residual here). Returns whether it swept the Gram matrix."""
    acc = Anderson(order.anderson) if order.anderson else None
    if order.gram and gram.usable(cols, datafit):
        rows, seconds = formed if formed is not None else (None, 0.0)
        gram.solve(cols, block.gram_cache, block, pen, order, acc, report, rows, seconds,
                   g0, subtract)
        return True
    block.gram_cache.drop()  # not kept for phases that do not use it
    r = block.residual
    t0 = time.perf_counter()
    epochs = 0
    d_max = 0.0
    while epochs < order.max_epochs:
        d_max = max([datafit.epoch(part, block, pen) for part in cols.parts])
        report.intercept_delta += datafit.intercept_step(block)
        epochs += 1
        if d_max <= order.tol:
            break
        proposal = None if acc is None else acc.propose(cols.coef)
        if proposal is not None:
            trial = r.copy()
            shift = cols.subtract(proposal - cols.coef, trial)
            now = _objective(block, r, block.r_sum, cols.coef, pen, datafit)
            then = _objective(block, trial, block.r_sum + shift, proposal, pen, datafit)
            if then < now:
                r[:] = trial
                block.r_sum += shift
                cols.coef[:] = proposal
    report.epochs = epochs
    report.updates = epochs * cols.size
    report.d_max = d_max
    report.sweep_s = time.perf_counter() - t0
    report.swept_nnz = epochs * cols.nnz
    return False


def _objective(block: ColumnBlock, r: np.ndarray, r_sum: float, coef: np.ndarray,
               pen: Penalty, datafit) -> float:
    """The objective up to the terms of coefficients outside ``coef``, fixed here."""
    return datafit.value(block, r, r_sum) + kernels.penalty(coef, pen.l1, pen.l2)


def _take_values(block: ColumnBlock, ids: np.ndarray, values: np.ndarray,
                 report: PhaseReport) -> None:
    mine = block.owns(ids)
    if not mine.any():
        return
    local = ids[mine] - block.start
    new = values[mine]
    changed = block.coef[local] != new
    block.coef[local[changed]] = new[changed]
    report.moved = np.concatenate([report.moved, local[changed]])
    report.values = np.concatenate([report.values, new[changed]])
