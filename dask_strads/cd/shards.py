"""How a dense column block of dask input is kept on the cluster: as the block uses it.

A block sweeps Fortran columns, centred when the fit centres ``X`` for its intercept.
Made once on the worker that holds the chunk, the shard is then the block's own matrix
(no copy per block, none at a recovery), so a block costs its columns' bytes once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class CentredColumns:
    """Columns of ``X`` minus their ``means``, as a Fortran array."""

    values: np.ndarray
    means: np.ndarray

    @property
    def shape(self) -> tuple:
        return self.values.shape


def dense_shard(chunk, centre: bool):
    """A dense chunk as a block's matrix: Fortran float64, centred if ``centre``."""
    if not centre:
        return np.asfortranarray(chunk, dtype=np.float64)
    means = np.asarray(chunk, dtype=np.float64).mean(axis=0)
    values = np.empty(chunk.shape, dtype=np.float64, order="F")
    np.subtract(chunk, means, out=values)
    return CentredColumns(values, means)
