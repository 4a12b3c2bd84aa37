"""Finiteness checks of data: shards on the workers where dask input lives, arrays on
the client.

A module of its own, importing only numpy, scipy and the shards' class: a worker
unpickling a task that names one of these functions imports this module, and should not
pay for the client-side validation's imports (scikit-learn)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from dask_strads.cd.shards import CentredColumns


def all_finite(values: np.ndarray) -> bool:
    """``np.isfinite(values).all()`` without its boolean temporary in the common case.

    NaN and infinity carry through a sum, so a finite sum proves every value finite;
    only a sum that overflowed needs the exact check (scikit-learn's shortcut), which
    allocates a boolean array as large as the values."""
    if values.dtype.kind not in "fc":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        total = values.sum()
    return bool(np.isfinite(total)) or bool(np.isfinite(values).all())


# below this many values one thread checks in well under the time of a round
_SPLIT_FROM = 1 << 23


def client_threads(n_values: int, most: int | None = None) -> int:
    """Threads for a pass over ``n_values`` on the client (at most ``most``): its
    cores, but none for fewer than ``_SPLIT_FROM`` values."""
    threads = min(os.cpu_count() or 1, n_values // _SPLIT_FROM)
    return max(1, threads if most is None else min(threads, most))


def all_finite_in_parallel(values: np.ndarray) -> bool:
    """:func:`all_finite` of a contiguous array on the client's cores at once: one core
    sums slower than the memory bus reads, and numpy's sum releases the GIL."""
    threads = client_threads(values.size)
    if threads < 2 or not (values.flags.c_contiguous or values.flags.f_contiguous):
        return all_finite(values)
    pieces = np.array_split(values.ravel(order="K"), threads)
    with ThreadPoolExecutor(threads) as pool:
        return all(pool.map(all_finite, pieces))


def chunk_is_finite(chunk) -> bool:
    """Whether a dask chunk or shard (dense, centred, scipy or pydata sparse) holds only
    finite values."""
    if isinstance(chunk, CentredColumns):  # a non-finite column stays so when centred
        chunk = chunk.values
    if hasattr(chunk, "to_scipy_sparse"):
        chunk = chunk.to_scipy_sparse()
    if sp.issparse(chunk):
        return all_finite(chunk.data)
    return all_finite(np.asarray(chunk))
