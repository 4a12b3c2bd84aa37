"""Anderson extrapolation of coordinate-descent iterates (Bertrand and Massias, 2021).

CD epochs on a working set converge linearly near the solution; the last ``K + 1``
iterates ``w_0 .. w_K`` predict the limit as ``sum_k c_k w_k`` with ``c`` minimising
``||U c||`` subject to ``sum c = 1`` (``U`` the differences of the iterates). The caller
keeps the extrapolated point only when it lowers the objective.
"""

from __future__ import annotations

import numpy as np


class Anderson:
    """Collects iterates; every ``K + 1`` of them it proposes an extrapolated point."""

    def __init__(self, K: int):
        self.K = K
        self.iterates: list[np.ndarray] = []

    def propose(self, w: np.ndarray) -> np.ndarray | None:
        """Record ``w``; return the extrapolated point when ``K + 1`` iterates are in
        (then start collecting again), else None."""
        self.iterates.append(w.copy())
        if len(self.iterates) <= self.K:
            return None
        W = np.stack(self.iterates, axis=1)
        self.iterates = []
        U = np.diff(W, axis=1)
        try:
            z = np.linalg.solve(U.T @ U, np.ones(self.K))
        except np.linalg.LinAlgError:
            return None
        total = z.sum()
        if not np.isfinite(total) or total == 0.0:
            return None
        return W[:, 1:] @ (z / total)
