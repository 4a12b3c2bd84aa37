"""Numba reduction kernels used by pulls.

Pushes return small partials; a pull combines them. These kernels cover the common
shapes: dense vectors summed, sparse ``(index, value)`` pieces scattered into a dense
vector, and row slices stitched by offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numba
import numpy as np

__all__ = ["sum_dense", "sum_sparse", "concat_slices"]


@numba.njit(nogil=True, cache=True)
def _add_into(out, x):
    for i in range(x.shape[0]):
        out[i] += x[i]


@numba.njit(nogil=True, cache=True)
def _scatter_add(out, idx, val):
    for k in range(idx.shape[0]):
        out[idx[k]] += val[k]


def sum_dense(parts: Iterable[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """Sum equally shaped 1-D arrays (into ``out`` when given)."""
    parts = list(parts)
    if out is None:
        if not parts:
            raise ValueError("sum_dense: no partials to reduce and no `out` given")
        out = np.zeros_like(parts[0])
    for p in parts:
        _add_into(out, np.ascontiguousarray(p, dtype=out.dtype))
    return out


def sum_sparse(parts: Iterable[tuple[np.ndarray, np.ndarray]], size: int | None = None,
               out: np.ndarray | None = None, dtype=np.float64) -> np.ndarray:
    """Scatter-add sparse ``(index, value)`` partials into a dense vector."""
    if out is None:
        if size is None:
            raise ValueError("sum_sparse: give `size` or `out`")
        out = np.zeros(size, dtype=dtype)
    for idx, val in parts:
        _scatter_add(out, np.asarray(idx, dtype=np.int64), np.asarray(val, dtype=out.dtype))
    return out


def concat_slices(parts: Sequence[tuple[int, np.ndarray]], size: int,
                  dtype=np.float64) -> np.ndarray:
    """Stitch ``(offset, values)`` slices into one vector of length ``size``."""
    out = np.empty(size, dtype=dtype)
    for offset, values in parts:
        out[offset:offset + len(values)] = values
    return out
