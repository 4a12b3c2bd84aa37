"""The dependency check: coordinates whose columns are correlated are not updated at once.

Blocks sweeping at the same time update their coordinates against each other's old
residual; two strongly correlated columns on different blocks then move together and
overshoot (STRADS avoids it by never scheduling such a pair in one round). Here the
check decides who solves what in a peer phase: the correlated coordinates of the
working set that live on different blocks are grouped (connected components of the
conflict graph), and every group is solved by one block, in order (Gauss-Seidel).

Correlations are exact, between *tracked* columns: the support's, sent by their blocks
at gap rounds while the support is small (the cost is O(n T^2) for T tracked columns).
Like STRADS, a coordinate outside the support is taken as independent.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components


class CorrelationIndex:
    """Conflicts (``|corr| >= rho``) between tracked columns of different blocks."""

    def __init__(self, n_samples: int, rho: float, starts: np.ndarray):
        self.n = n_samples
        self.rho = rho
        self.starts = np.asarray(starts)
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.n_tracked = 0
        self._columns: dict[int, list] = {}  # block -> [(global ids, standardized)]

    def block_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, ids, side="right") - 1

    def add(self, block: int, ids: np.ndarray, columns) -> None:
        """Track columns ``ids`` (global) of ``block`` and record their conflicts with
        the tracked columns of the other blocks."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.shape[0] == 0:
            return
        for other, chunks in self._columns.items():
            if other == block:
                continue
            for other_ids, other_cols in chunks:
                C = _correlations(columns, other_cols, self.n)
                i, j = np.nonzero(np.abs(C) >= self.rho)
                if i.shape[0]:
                    self.rows.append(ids[i])
                    self.cols.append(other_ids[j])
        self._columns.setdefault(block, []).append((ids, columns))
        self.n_tracked += ids.shape[0]

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(self.rows), np.concatenate(self.cols)


def _correlations(a, b, n: int) -> np.ndarray:
    """Correlations between two sets of standardized columns (see
    :meth:`dask_strads.cd.block.ColumnBlock.standardized`)."""
    if a[0] == "dense":
        return a[1].T.astype(np.float64) @ b[1].astype(np.float64)
    _, Xa, mu_a, nrm_a = a
    _, Xb, mu_b, nrm_b = b
    raw = np.asarray((Xa.T @ Xb).todense())
    return (raw - n * np.outer(mu_a, mu_b)) / np.outer(nrm_a, nrm_b)


def partition(ws: list[np.ndarray], starts: np.ndarray, index: CorrelationIndex | None,
              solvers: tuple) -> list[np.ndarray]:
    """The solver of every working-set coordinate (per block, aligned with ``ws``): its
    own block, except that every group of conflicting coordinates goes to one solver
    (the block holding most of the group)."""
    own = [np.full(w.shape[0], b, dtype=np.int64) for b, w in enumerate(ws)]
    if index is None or len(solvers) < 2:
        return own
    rows, cols = index.pairs()
    if rows.shape[0] == 0:
        return own
    ids = np.concatenate([w + starts[b] for b, w in enumerate(ws)])
    owner = np.concatenate(own)
    pos = {int(g): k for k, g in enumerate(ids)}
    edges = [(pos[a], pos[b]) for a, b in zip(rows.tolist(), cols.tolist())
             if a in pos and b in pos]
    if not edges:
        return own
    e = np.array(edges)
    graph = sp.coo_matrix((np.ones(e.shape[0]), (e[:, 0], e[:, 1])),
                          shape=(ids.shape[0], ids.shape[0]))
    _, label = connected_components(graph, directed=False)
    solver = owner.copy()
    involved = np.unique(e)
    for lab in np.unique(label[involved]):
        members = np.flatnonzero(label == lab)
        counts = np.bincount(owner[members], minlength=len(ws))
        counts[[b for b in range(len(ws)) if b not in solvers]] = -1
        solver[members] = int(np.argmax(counts))
    out, k = [], 0
    for w in ws:
        out.append(solver[k:k + w.shape[0]])
        k += w.shape[0]
    return out
