"""Two-level sums over K values: O(1) to keep current, O(sqrt K) to draw from (the
sparse sampler's word and smoothing buckets)."""

from __future__ import annotations

import numba


@numba.njit(nogil=True, cache=True)
def _block_shift(n):
    """log2 of the block size of two-level sums over ``n`` values: about sqrt(n), >= 8."""
    shift = 3
    while (1 << (2 * shift)) < n:
        shift += 1
    return shift


@numba.njit(nogil=True, cache=True, inline="always")
def _sums_build(sums, values, shift):
    """Sums of ``values`` over blocks of ``1 << shift``."""
    sums[:] = 0.0
    for k in range(values.shape[0]):
        sums[k >> shift] += values[k]


@numba.njit(nogil=True, cache=True, inline="always")
def _sums_add(sums, k, delta, shift):
    """``values[k]`` changed by ``delta``: O(1)."""
    sums[k >> shift] += delta


@numba.njit(nogil=True, cache=True, inline="always")
def _sums_find(sums, values, u, shift):
    """Smallest k with ``values[0] + ... + values[k] > u``: blocks, then the block's
    values (the last one if rounding leaves ``u`` beyond the total)."""
    n_blocks = sums.shape[0]
    b = 0
    while b < n_blocks - 1 and u >= sums[b]:
        u -= sums[b]
        b += 1
    k = b << shift
    end = min(k + (1 << shift), values.shape[0])
    while k < end - 1 and u >= values[k]:
        u -= values[k]
        k += 1
    return k
