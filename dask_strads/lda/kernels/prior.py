"""The doc-topic prior alpha in the kernels: a float64 array of length K (a symmetric
prior is a constant array), its parts the samplers use, the alias table of the MH doc
proposal's draw from alpha, and the doc-topic histograms its optimisation needs.

A symmetric alpha takes the very arithmetic of a scalar prior (``_prior_parts``), so its
chains are those of a scalar alpha, bit for bit."""

from __future__ import annotations

import numba
import numpy as np

from dask_strads.lda.kernels.common import _JIT


@numba.njit(**_JIT)
def _prior_parts(alpha):
    """``(symmetric, alpha[0], sum of alpha, weights, multiplier)``: the samplers' alpha
    buckets are ``multiplier * sum_k weights_k * x_k``, with ``weights = 1`` and
    ``multiplier = alpha[0]`` for a symmetric alpha (a scalar prior's arithmetic:
    multiplying by 1.0 is exact) and ``weights = alpha``, ``multiplier = 1`` otherwise."""
    n_topics = alpha.shape[0]
    a0 = alpha[0]
    sym = True
    for k in range(n_topics):
        if alpha[k] != a0:
            sym = False
    if sym:
        return True, a0, n_topics * a0, np.ones(n_topics, dtype=np.float64), a0
    total = 0.0
    for k in range(n_topics):
        total += alpha[k]
    return False, a0, total, alpha.copy(), 1.0


@numba.njit(**_JIT)
def _alias_table(weights):
    """Walker's alias table of ``weights`` (Vose's construction): a draw is O(1)."""
    n = weights.shape[0]
    total = 0.0
    for k in range(n):
        total += weights[k]
    prob = np.empty(n, dtype=np.float64)
    alias = np.arange(n)
    small = np.empty(n, dtype=np.int64)
    large = np.empty(n, dtype=np.int64)
    n_small = 0
    n_large = 0
    for k in range(n):
        prob[k] = weights[k] * n / total
        if prob[k] < 1.0:
            small[n_small] = k
            n_small += 1
        else:
            large[n_large] = k
            n_large += 1
    while n_small > 0 and n_large > 0:
        n_small -= 1
        s = small[n_small]
        g = large[n_large - 1]
        alias[s] = g
        prob[g] = (prob[g] + prob[s]) - 1.0
        if prob[g] < 1.0:
            n_large -= 1
            small[n_small] = g
            n_small += 1
    for j in range(n_large):  # what rounding leaves is 1
        prob[large[j]] = 1.0
    for j in range(n_small):
        prob[small[j]] = 1.0
    return prob, alias


@numba.njit(nogil=True, cache=True, inline="always")
def _alias_draw(prob, alias, x):
    """The draw of ``x`` uniform in ``[0, K)`` (its integer part picks the column, its
    fraction the side)."""
    i = min(int(x), prob.shape[0] - 1)
    if x - i < prob[i]:
        return i
    return alias[i]


@numba.njit(**_JIT)
def doc_topic_histogram(ndk, max_count):
    """``hist[k, c]``: documents with ``n_dk = c`` (c >= 1; column 0 stays 0), from dense
    (D, K) counts."""
    n_docs, n_topics = ndk.shape
    hist = np.zeros((n_topics, max_count + 1), dtype=np.int64)
    for d in range(n_docs):
        for k in range(n_topics):
            c = ndk[d, k]
            if c > 0:
                hist[k, c] += 1
    return hist


@numba.njit(**_JIT)
def doc_topic_histogram_lists(doc_ptr, dl_topic, dl_count, dl_nnz, n_topics, max_count):
    """``doc_topic_histogram`` from the sparse doc lists."""
    hist = np.zeros((n_topics, max_count + 1), dtype=np.int64)
    for d in range(doc_ptr.shape[0] - 1):
        lo = doc_ptr[d]
        for j in range(lo, lo + dl_nnz[d]):
            c = dl_count[j]
            if c > 0:
                hist[dl_topic[j], c] += 1
    return hist
