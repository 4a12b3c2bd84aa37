"""Sweeps on the Gram matrix of a working set, for dense columns longer than it is wide.

A sweep over the columns reads each column twice (``x_j'r``, then ``r -= x_j d``): ``2n``
entries per coordinate. The same Gauss-Seidel steps can be taken on ``g = X_ws' r`` and
``G = X_ws' X_ws``: a coordinate then costs at most ``w`` entries of ``G`` (``g -= d
G[:, j]``), and ``r`` changes once, at the end of the phase. ``G`` costs ``n w^2``
multiply-adds to form, which BLAS does many times faster per entry than a sweep reads
one, and ``w^2`` floats; a solver keeps it for the next phase and forms only the rows of
columns new to it (working sets change little from phase to phase). ``g`` at the start
is the gap round's ``X' r`` where the residual has not changed since.

``G`` is formed and kept in single precision: BLAS forms it twice as fast, a sweep
reads half the bytes, and the same memory holds twice the entries. Its rounding
only perturbs the phase's subproblem, never the fit's answer: every phase starts from
an exact ``g``, the residual takes the phase's steps exactly (``r -= X_ws d``), and the
gap round that decides whether the fit has converged takes ``X' r`` from the residual,
never from ``G``; so the phases converge to the Lasso's solution as an iterative
refinement does. The client orders it for a phase of one solver
where the costs the fit has measured say it pays (:func:`pays`;
:func:`dask_strads.cd.parallelism.phase_solvers` weighs it against peers): the
quadratic datafit's, over dense columns, with ``n`` not much smaller than ``w``.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit
from scipy.linalg import blas

from dask_strads.cd import kernels
from dask_strads.cd.parallelism import setting

# rows gathered at a time to form G: a block of them over the working set stays in cache
CHUNK_BYTES = 8 << 20
# entries a side of the square tiles a matrix is transposed by (a tile's rows stay in
# cache and in the TLB)
TILE = 64
# G's entries (see the module's docstring)
DTYPE = np.float32
# squared column norms whose Gram matrix DTYPE holds: below SQ_MAX every entry of G
# and every partial sum of one (at most the product of the columns' norms) is finite;
# above SQ_MIN a typical product (col_sq / n, n up to 1e8) keeps its digits
SQ_MAX = float(np.finfo(DTYPE).max) / 10
SQ_MIN = float(np.finfo(DTYPE).tiny) * 1e8


@njit(nogil=True, cache=True)
def _gather(X, cols, r0, r1, out, at):
    """``out[:, at + i] = X[r0:r1, cols[i]]``."""
    for i in range(cols.shape[0]):
        j = cols[i]
        for k in range(r0, r1):
            out[k - r0, at + i] = X[k, j]


@njit(nogil=True, cache=True)
def _column_dots(X, cols, r, out, at):
    """``out[at + i] = X[:, cols[i]]' r``."""
    for i in range(cols.shape[0]):
        out[at + i] = kernels.dot(X[:, cols[i]], r)


@njit(nogil=True, cache=True)
def epoch(G, col_sq, coef, g, l1, l2, positive):
    """One Gauss-Seidel sweep on ``g = X'r`` and ``G = X'X`` (the steps
    :func:`kernels.epoch_dense` takes); ``coef`` and ``g`` change in place. Returns the
    largest ``|coefficient change|``."""
    w = coef.shape[0]
    d_max = 0.0
    for i in range(w):
        c = col_sq[i]
        if c == 0.0:
            continue
        old = coef[i]
        new = kernels.coordinate_minimiser(g[i] + old * c, c, l1, l2, positive)
        if new != old:
            d = new - old
            for k in range(w):
                g[k] -= d * G[i, k]  # G is symmetric: its row is read in order
            coef[i] = new
            if abs(d) > d_max:
                d_max = abs(d)
    return d_max


@njit(nogil=True, cache=True)
def _add_upper(total, part):
    """``total[i, j] += part[i, j]`` for ``i <= j``, the triangle ``syrk`` writes (both
    Fortran: a column's entries are contiguous)."""
    for j in range(total.shape[1]):
        for i in range(j + 1):
            total[i, j] += part[i, j]


@njit(nogil=True, cache=True)
def _symmetric(upper, out):
    """``out`` (C order) the symmetric matrix whose upper triangle is ``upper``'s
    (Fortran), a tile at a time: a whole-matrix transpose reads a page per entry."""
    w = upper.shape[0]
    for j0 in range(0, w, TILE):
        for i0 in range(0, j0 + 1, TILE):
            for j in range(j0, min(j0 + TILE, w)):
                for i in range(i0, min(i0 + TILE, j + 1)):
                    v = upper[i, j]
                    out[i, j] = v
                    out[j, i] = v


@njit(nogil=True, cache=True)
def _move(src, src_rows, src_cols, dst, dst_rows, dst_cols):
    """``dst[dst_rows[i], dst_cols[j]] = src[src_rows[i], src_cols[j]]`` (numpy's
    fancy indexing of a submatrix is several times slower)."""
    for i in range(src_rows.shape[0]):
        a = src_rows[i]
        b = dst_rows[i]
        for j in range(src_cols.shape[0]):
            dst[b, dst_cols[j]] = src[a, src_cols[j]]


def _dense_parts(cols) -> list:
    return [(part.dense, np.ascontiguousarray(part.dense_cols, dtype=np.int64))
            for part in cols.parts]


def _pieces(parts: list, positions: np.ndarray) -> list:
    """``(X, columns)`` per part for the columns at ``positions`` (increasing) of the
    parts' concatenation, in that order."""
    out, at = [], 0
    for X, c in parts:
        k = positions[(positions >= at) & (positions < at + c.shape[0])] - at
        out.append((X, np.ascontiguousarray(c[k])))
        at += c.shape[0]
    return out


def _gather_pieces(pieces: list, r0: int, r1: int, out: np.ndarray) -> None:
    at = 0
    for X, c in pieces:
        _gather(X, c, r0, r1, out, at)
        at += c.shape[0]


def rows(cols, new: np.ndarray, known: np.ndarray, lo: int, hi: int) -> tuple:
    """``(X_new' X_new, X_new' X_known)`` over rows ``lo:hi`` of the columns of ``cols``
    at positions ``new`` and ``known``, as :data:`DTYPE`: a block of rows at a time,
    each column gathered once per block (straight from where it lies) and rounded to
    single precision, the block's products summed in double (a single-precision sum
    over all the rows would lose more than the rounding of the entries); the first by
    ``syrk``, half the work, whole (not one triangle), in C order."""
    parts = _dense_parts(cols)
    new_pieces, known_pieces = _pieces(parts, new), _pieces(parts, known)
    w = new.shape[0] + known.shape[0]
    nn = np.zeros((new.shape[0], new.shape[0]), order="F")  # its upper triangle
    nk = np.zeros((new.shape[0], known.shape[0]), order="F")
    # each block's products; allocated once (a temporary per block costs its pages)
    nn_block = np.empty(nn.shape, DTYPE, order="F")
    nk_block = np.empty(nk.shape, DTYPE, order="F")
    # blocks of equal size: each costs a sum over the whole matrix, however few its rows
    most = max(64, CHUNK_BYTES // (DTYPE().itemsize * w))
    n_chunks = max(1, -(-(hi - lo) // most))
    chunk = max(1, -(-(hi - lo) // n_chunks))
    picked = np.empty((chunk, new.shape[0]), DTYPE, order="F")
    rest = np.empty((chunk, known.shape[0]), DTYPE, order="F")
    for r0 in range(lo, hi, chunk):
        m = min(hi, r0 + chunk) - r0
        _gather_pieces(new_pieces, r0, r0 + m, picked)
        blas.ssyrk(1.0, picked[:m], beta=0.0, c=nn_block, trans=1, overwrite_c=True)
        _add_upper(nn, nn_block)
        if known.shape[0]:
            _gather_pieces(known_pieces, r0, r0 + m, rest)
            blas.sgemm(1.0, picked[:m], rest[:m], beta=0.0, c=nk_block, trans_a=True,
                       overwrite_c=True)
            nk += nk_block
    whole = np.empty(nn.shape, DTYPE)
    _symmetric(nn, whole)
    return whole, nk.astype(DTYPE)


def missing(cached: np.ndarray, ids: np.ndarray) -> int:
    """How many of ``ids`` are not in ``cached``."""
    return int(ids.shape[0] - np.isin(ids, cached).sum())


def positions(cached: np.ndarray, ids: np.ndarray) -> tuple:
    """Where each of ``ids`` lies in ``cached`` (-1: not there), and the positions in
    ``ids`` of those that are there and those that are not."""
    where = {int(j): k for k, j in enumerate(cached)}
    pos = np.array([where.get(int(j), -1) for j in ids], dtype=np.int64)
    return pos, np.flatnonzero(pos >= 0), np.flatnonzero(pos < 0)


class GramCache:
    """The Gram matrix of the columns a solver last solved, by global column id."""

    def __init__(self):
        self.drop()

    def drop(self) -> None:
        self.ids = np.zeros(0, np.int64)
        self.G = np.zeros((0, 0), DTYPE)

    def matrix(self, cols, n: int, formed: tuple | None = None) -> np.ndarray:
        """``G`` of ``cols`` (a column set over dense columns), in their order; the cache
        then holds exactly these columns. ``formed``: the missing rows, :func:`rows`
        summed over all ``n`` rows (else formed here)."""
        ids = np.asarray(cols.ids, dtype=np.int64)
        if np.array_equal(ids, self.ids):
            return self.G
        w = ids.shape[0]
        pos, known, new = positions(self.ids, ids)
        G = np.empty((w, w), DTYPE)
        if known.shape[0]:
            _move(self.G, pos[known], pos[known], G, known, known)
        if new.shape[0]:
            nn, nk = formed if formed is not None else rows(cols, new, known, 0, n)
            every_new = np.arange(new.shape[0])
            _move(nn, every_new, every_new, G, new, new)
            _move(nk, every_new, np.arange(known.shape[0]), G, new, known)
            _move(nk.T, np.arange(known.shape[0]), every_new, G, known, new)
        self.ids, self.G = ids, G
        return G


def phase_seconds(costs, n: int, w: int, w_new: int, epochs: float,
                  horizon: float) -> float:
    """What ``epochs`` sweeps over ``w`` dense columns of ``n`` rows cost on their Gram
    matrix, by ``costs`` (:class:`dask_strads.cd.parallelism.Costs`): forming its
    ``w_new`` missing rows, shared by the ``horizon`` sweeps the matrix is expected to
    serve; the sweeps; ``g`` and the closing residual update, a sweep over the columns."""
    build = costs.gram_build * n * w_new * w * epochs / max(horizon, epochs, 1.0)
    return costs.sweep_per_nnz * (build + n * w + epochs * costs.gram_step * w * w)


def pays(costs, n: int, w: int, w_new: int, spent_epochs: int,
         rent: float | None = None) -> bool:
    """Whether to sweep the Gram matrix: once the sweeps the fit has made, at ``rent``
    seconds each (default: one solver over the columns), would have paid for it (rent
    or buy: the working set is likely to last as long again, and a fit that ends soon
    never forms it), and while it fits in ``gram-max-bytes``."""
    if w == 0 or DTYPE().itemsize * w * w > float(setting("gram-max-bytes")):
        return False
    rent = costs.sweep_per_nnz * n * w if rent is None else rent
    return phase_seconds(costs, n, w, w_new, spent_epochs, spent_epochs) < spent_epochs * rent


def size_if_pays(costs, n: int, cached: np.ndarray, ids: np.ndarray, spent_epochs: int,
                 rent: float | None = None) -> tuple | None:
    """``(w, w_new)`` of a phase over columns ``ids`` (global) whose solver keeps the
    Gram matrix of ``cached``: their number and how many it lacks, where sweeping the
    matrix :func:`pays`; else None."""
    w, w_new = ids.shape[0], missing(cached, ids)
    return (w, w_new) if pays(costs, n, w, w_new, spent_epochs, rent) else None


def tolerance(n: int, w: int, tol: float) -> float:
    """A Gram phase's tolerance, ``w / n`` of ``tol`` (at most all of it): a sweep
    reads ``w`` entries of ``G`` per coordinate where one over the columns reads ``n``
    for a coordinate's dot product alone, so the phase buys that much more progress
    for the round it costs (the gap round, the residual's passes). From the shapes,
    not measured times, so that a fit takes the same steps every time."""
    return tol * min(1.0, w / n)


def in_range(col_sq: np.ndarray) -> bool:
    """Whether the Gram matrix of columns of squared norms ``col_sq`` holds in
    :data:`DTYPE` (zero columns never enter one)."""
    live = col_sq[col_sq > 0]
    return bool(np.all((live > SQ_MIN) & (live < SQ_MAX)))


def usable(cols, datafit) -> bool:
    """Whether a phase over ``cols`` may sweep their Gram matrix: dense columns of the
    quadratic datafit (whose objective is a quadratic in the coefficients)."""
    return datafit.gram and all(p.dense is not None for p in cols.parts)


def solve(cols, cache: GramCache, block, pen, order, acc, report, formed=None,
          build_s: float = 0.0, g0: np.ndarray | None = None,
          subtract: bool = True) -> None:
    """The phase's sweeps on the Gram matrix of ``cols`` (the caller's
    :func:`dask_strads.cd.phase._solve` contract: ``cols.coef`` and ``block.residual``
    end at the phase's point), with Anderson extrapolation ``acc`` kept when it lowers
    the objective; ``report`` says what forming (``formed`` rows took ``build_s``
    already) and sweeping cost. ``g0``: ``X_ws' r`` at the start, if known;
    ``subtract``: False leaves the residual as it was (the caller takes the change)."""
    t0 = time.perf_counter()
    w, w_new = cols.size, missing(cache.ids, cols.ids)
    G = cache.matrix(cols, block.n, formed)
    report.gram_build_s = build_s + time.perf_counter() - t0
    report.gram_madds = block.n * w_new * w
    t0 = time.perf_counter()
    if g0 is None:
        g0 = np.empty(cols.size)
        at = 0
        for X, c in _dense_parts(cols):
            _column_dots(X, c, block.residual, g0, at)
            at += c.shape[0]
    start = cols.coef.copy()
    coef, g = cols.coef, g0.copy()
    col_sq = np.ascontiguousarray(np.concatenate([p.col_sq for p in cols.parts]))

    def objective(b, grad):
        # 1/2 ||r0 - X d||^2 - 1/2 ||r0||^2 = -d'(g0 + g)/2 with g = g0 - G d
        d = b - start
        return -0.5 * float(d @ (g0 + grad)) + kernels.penalty(b, pen.l1, pen.l2)

    epochs, d_max, sweeping = 0, 0.0, 0.0
    while epochs < order.max_epochs:
        t1 = time.perf_counter()
        d_max = epoch(G, col_sq, coef, g, pen.l1, pen.l2, pen.positive)
        sweeping += time.perf_counter() - t1
        epochs += 1
        if d_max <= order.tol:
            break
        proposal = None if acc is None else acc.propose(coef, g)
        if proposal is not None:
            trial = acc.companion  # g at the proposal
            if objective(proposal, trial) < objective(coef, g):
                coef[:] = proposal
                g[:] = trial
    if subtract:
        cols.subtract(coef - start, block.residual)
    report.epochs = epochs
    report.updates = epochs * cols.size
    report.d_max = d_max
    report.sweep_s = time.perf_counter() - t0
    report.gram = True
    report.gram_sweep_s = sweeping
    report.gram_entries = epochs * w * w


def warm_up() -> None:
    X = np.ones((2, 2), order="F")
    c = np.arange(2, dtype=np.int64)
    out = np.empty((2, 2), DTYPE, order="F")
    _gather(X, c, 0, 2, out, 0)
    _column_dots(X, c, np.ones(2), np.empty(2), 0)
    _add_upper(np.zeros((2, 2), order="F"), out)
    _symmetric(np.zeros((2, 2), order="F"), np.empty((2, 2), DTYPE))
    G = np.eye(2, dtype=DTYPE)
    _move(G, c, c, np.empty((2, 2), DTYPE), c, c)
    epoch(G, np.ones(2), np.zeros(2), np.ones(2), 0.1, 0.0, False)
