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
        self.companions: list[np.ndarray] = []
        # the companions' combination at the proposal just returned (see propose)
        self.companion: np.ndarray | None = None

    def propose(self, w: np.ndarray, companion: np.ndarray | None = None) -> np.ndarray | None:
        """Record ``w``; return the extrapolated point when ``K + 1`` iterates are in
        (then start collecting again), else None. ``companion``: a vector affine in
        ``w`` (``g0 - G (w - w0)``, say), recorded alongside; its value at the proposal
        is then :attr:`companion`, the same combination (exact for an affine map, as
        the weights sum to 1), without computing it from the proposal."""
        self.companion = None
        self.iterates.append(w.copy())
        if companion is not None:
            self.companions.append(companion.copy())
        if len(self.iterates) <= self.K:
            return None
        W = np.stack(self.iterates, axis=1)
        C = np.stack(self.companions, axis=1) if self.companions else None
        self.iterates, self.companions = [], []
        U = np.diff(W, axis=1)
        try:
            z = np.linalg.solve(U.T @ U, np.ones(self.K))
        except np.linalg.LinAlgError:
            return None
        total = z.sum()
        if not np.isfinite(total) or total == 0.0:
            return None
        if C is not None:
            self.companion = C[:, 1:] @ (z / total)
        return W[:, 1:] @ (z / total)
