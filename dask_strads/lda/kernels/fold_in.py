"""``fold_in``: topic distributions of new documents with the topics held fixed."""

from __future__ import annotations

import numba
import numpy as np

from dask_strads.lda.kernels.common import _JIT
from dask_strads.lda.kernels.prior import _prior_parts


@numba.njit(**_JIT)
def fold_in(indptr, indices, data, phi, alpha, n_iter, burn_in, seed):
    """Doc-topic distributions of new documents by Gibbs sampling with ``phi`` fixed.

    ``phi`` (V, K) holds ``p(w | k)``, ``alpha`` (K,) the doc-topic prior. Returns the
    mean over the post-burn-in sweeps of ``(n_dk + alpha_k) / (n_d + sum alpha)`` for
    every document (D, K) float64 (an empty document: the prior's mean).
    """
    np.random.seed(seed)
    sym, _, alpha_sum, _, _ = _prior_parts(alpha)
    n_docs = indptr.shape[0] - 1
    n_topics = phi.shape[1]
    theta = np.zeros((n_docs, n_topics), dtype=np.float64)
    cum = np.empty(n_topics, dtype=np.float64)
    ndk = np.zeros(n_topics, dtype=np.int64)
    for d in range(n_docs):
        n_d = 0
        for j in range(indptr[d], indptr[d + 1]):
            n_d += data[j]
        if n_d == 0:
            for k in range(n_topics):
                theta[d, k] = 1.0 / n_topics if sym else alpha[k] / alpha_sum
            continue
        words = np.empty(n_d, dtype=np.int64)
        z = np.empty(n_d, dtype=np.int64)
        t = 0
        ndk[:] = 0
        for j in range(indptr[d], indptr[d + 1]):
            for _ in range(data[j]):
                words[t] = indices[j]
                # initial topic drawn from p(k | w) ∝ phi_wk
                acc = 0.0
                for k in range(n_topics):
                    acc += phi[indices[j], k]
                    cum[k] = acc
                u = np.random.random() * acc
                k = 0
                while k < n_topics - 1 and cum[k] <= u:
                    k += 1
                z[t] = k
                ndk[k] += 1
                t += 1
        n_kept = 0
        for it in range(n_iter):
            for t in range(n_d):
                w = words[t]
                ndk[z[t]] -= 1
                acc = 0.0
                for k in range(n_topics):
                    acc += (ndk[k] + alpha[k]) * phi[w, k]
                    cum[k] = acc
                u = np.random.random() * acc
                lo = 0
                hi = n_topics - 1
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if cum[mid] <= u:
                        lo = mid + 1
                    else:
                        hi = mid
                z[t] = lo
                ndk[lo] += 1
            if it >= burn_in:
                n_kept += 1
                for k in range(n_topics):
                    theta[d, k] += ndk[k] + alpha[k]
        for k in range(n_topics):
            theta[d, k] /= n_kept * (n_d + alpha_sum)
    return theta
