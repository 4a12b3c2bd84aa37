"""Tables of ``log(x0 + c)`` and ``lgamma(x0 + c) - lgamma(x0)`` for small counts ``c``:
the log-likelihood and its changes by the samplers' moves without a transcendental call
per count."""

from __future__ import annotations

import math

import numba
import numpy as np

_LOG_TABLE = 4096  # counts below this take log(c + prior) from a table built per call


@numba.njit(nogil=True, cache=True)
def _log_table(x0, nk):
    """``log(x0 + c)`` for the small counts ``c`` a sampler call with topic totals ``nk``
    can meet: none exceeds the tokens' total, and a call on few tokens should not pay
    for a long table."""
    table = np.empty(min(_LOG_TABLE, nk.sum() + 1), dtype=np.float64)
    for c in range(table.shape[0]):
        table[c] = math.log(x0 + c)
    return table


@numba.njit(nogil=True, cache=True, inline="always")
def _log_plus(table, x0, c):
    """``log(x0 + c)`` = ``lgamma(x0 + c + 1) - lgamma(x0 + c)``: the change of the
    log-likelihood when a count goes from ``c`` to ``c + 1``."""
    if c < table.shape[0]:
        return table[c]
    return math.log(x0 + c)


_LGAMMA_TABLE = 4096  # counts below this take lgamma from a table built per call


@numba.njit(nogil=True, cache=True)
def _lgamma_table(x0):
    """``lgamma(x0 + c) - lgamma(x0)`` for the small counts ``c``."""
    lg0 = math.lgamma(x0)
    table = np.empty(_LGAMMA_TABLE, dtype=np.float64)
    for c in range(_LGAMMA_TABLE):
        table[c] = math.lgamma(x0 + c) - lg0
    return table


@numba.njit(nogil=True, cache=True, inline="always")
def _lgamma_term(table, x0, lg0, c):
    """``lgamma(x0 + c) - lgamma(x0)``, the same value whether tabled or not."""
    if c < _LGAMMA_TABLE:
        return table[c]
    return math.lgamma(x0 + c) - lg0


@numba.njit(nogil=True, cache=True, inline="always")
def _log_plus_alpha(table, alpha, sym, k, c):
    """``log(alpha_k + c)``: from the table of ``alpha[0]`` for a symmetric alpha, else
    computed (the doc-topic count of topic ``k`` went from ``c`` to ``c + 1``)."""
    # written out rather than calling _log_plus: nested inside this inlined function, it
    # made every sampler markedly slower per move
    if sym:
        if c < table.shape[0]:
            return table[c]
        return math.log(alpha[0] + c)
    return math.log(alpha[k] + c)


@numba.njit(nogil=True, cache=True, inline="always")
def _lgamma_term_alpha(table, alpha, lg_alpha, sym, k, c):
    """``lgamma(alpha_k + c) - lgamma(alpha_k)``: tabled for a symmetric alpha, else
    computed (``lg_alpha``: ``lgamma(alpha)``)."""
    if sym:  # written out, as _log_plus_alpha
        if c < _LGAMMA_TABLE:
            return table[c]
        return math.lgamma(alpha[0] + c) - lg_alpha[0]
    return math.lgamma(alpha[k] + c) - lg_alpha[k]
