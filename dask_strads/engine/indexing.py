"""Unsigned indexing for numba kernels.

Numba wraps negative indices around (``a[-1]``) for every *signed* integer index,
which costs a compare and a select per access, and in a gather such as
``r[indices[q]]`` inside a loop over ``q`` it is paid twice per element. Indexing with
an unsigned integer skips it, with bit-identical results.

Use ``u()`` only on values known to be non-negative (indices, ``indptr`` entries), and
keep its results out of arithmetic with signed integers: numba types
``uint64 + int64`` as float64.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["u"]


@njit(nogil=True, cache=True, inline="always")
def u(i):
    """``i`` (non-negative) as an unsigned index: no wraparound check."""
    return np.uintp(i)
