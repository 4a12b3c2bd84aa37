"""The O(K) collapsed Gibbs samplers: ``sample_gibbs`` (the reference) and ``sample_dense``
(the word's distribution kept current, vectorised)."""

from __future__ import annotations

import numba
import numpy as np

from dask_strads.engine.indexing import u as _u
from dask_strads.lda.kernels.common import _AHEAD, _JIT, _next, _prefetch, _seed_state
from dask_strads.lda.kernels.prior import _prior_parts
from dask_strads.lda.kernels.tables import _log_plus, _log_plus_alpha, _log_table


@numba.njit(**_JIT)
def sample_gibbs(run_lo, run_hi, run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, ndk, nwk, nk,
                 alpha, beta, vbeta, mh_steps, seed, dl_topic, dl_count, dl_nnz):
    """Exact collapsed Gibbs sampling, O(K) per token (same signature and returns as
    ``sample_mh``)."""
    np.random.seed(seed)
    sym, a0, _, _, _ = _prior_parts(alpha)
    log_a = _log_table(a0, nk)
    log_b = _log_table(beta, nk)
    d_doc = 0.0
    d_word = 0.0
    n_topics = nk.shape[0]
    inv_den = np.empty(n_topics, dtype=np.float64)
    for k in range(n_topics):
        inv_den[k] = 1.0 / (nk[k] + vbeta)
    cum = np.empty(n_topics, dtype=np.float64)
    moved = 0
    for r in range(run_lo, run_hi):
        w = run_word[r]
        row = nwk[w]
        for i in range(run_ptr[r], run_ptr[r + 1]):
            d = tok_doc[i]
            p = tok_pos[i]
            s = zd[p]
            ndk[d, s] -= 1
            row[s] -= 1
            nk[s] -= 1
            inv_den[s] = 1.0 / (nk[s] + vbeta)
            acc = 0.0
            if sym:  # a scalar prior's loop: no load of alpha per topic
                for k in range(n_topics):
                    acc += (ndk[d, k] + a0) * (row[k] + beta) * inv_den[k]
                    cum[k] = acc
            else:
                for k in range(n_topics):
                    acc += (ndk[d, k] + alpha[k]) * (row[k] + beta) * inv_den[k]
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
            t = lo
            zd[p] = t
            if t != s:
                moved += 1
                d_doc += (_log_plus_alpha(log_a, alpha, sym, t, ndk[d, t])
                          - _log_plus_alpha(log_a, alpha, sym, s, ndk[d, s]))
                d_word += _log_plus(log_b, beta, row[t]) - _log_plus(log_b, beta, row[s])
            ndk[d, t] += 1
            row[t] += 1
            nk[t] += 1
            inv_den[t] = 1.0 / (nk[t] + vbeta)
    return moved, d_doc, d_word


@numba.njit(nogil=True, cache=True, fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})
def sample_dense(run_lo, run_hi, run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, ndk, nwk, nk,
                 alpha, beta, vbeta, mh_steps, seed, dl_topic, dl_count, dl_nnz):
    """Exact collapsed Gibbs over all K topics with the word's ``phi_w`` at hand (same
    signature and returns as ``sample_mh``).

    Word-major order makes ``phi_w(k) = (n_wk + beta) / (n_k + V beta)`` one array per
    run, kept exact in O(1) per token (only the token's old and new topics change), so a
    token costs K multiply-adds ``(n_dk + alpha_k) phi_w(k)`` over a dense doc-topic row,
    which vectorise, and a scan for the draw: for small K and short documents cheaper
    than the sparse sampler's bookkeeping and mixing as Gibbs does (MH needs more
    sweeps). The next tokens' topics and doc-topic rows are prefetched.
    """
    state = _seed_state(seed)
    sym, a0, _, _, _ = _prior_parts(alpha)
    log_a = _log_table(a0, nk)
    log_b = _log_table(beta, nk)
    d_doc = 0.0
    d_word = 0.0
    n_topics = nk.shape[0]
    inv_den = np.empty(n_topics, dtype=np.float64)
    for k in range(n_topics):
        inv_den[k] = 1.0 / (nk[k] + vbeta)
    phi = np.empty(n_topics, dtype=np.float64)
    prob = np.empty(n_topics, dtype=np.float64)
    ndk_flat = ndk.reshape(-1)
    moved = 0
    tok_end = run_ptr[run_hi]
    for r in range(run_lo, run_hi):
        row = nwk[run_word[r]]
        for k in range(n_topics):
            phi[k] = (row[k] + beta) * inv_den[k]
        for i in range(run_ptr[r], run_ptr[r + 1]):
            if i + _AHEAD < tok_end:
                q = i + _AHEAD
                _prefetch(zd, tok_pos[q])
                base = _u(tok_doc[q]) * n_topics
                for k in range(0, n_topics, 16):
                    _prefetch(ndk_flat, base + k)
            d = _u(tok_doc[i])
            p = _u(tok_pos[i])
            s = _u(zd[p])
            nd = ndk[d]
            nd[s] -= 1
            row[s] -= 1
            nk[s] -= 1
            inv_den[s] = 1.0 / (nk[s] + vbeta)
            phi[s] = (row[s] + beta) * inv_den[s]
            total = 0.0
            for k in range(n_topics):
                v = (nd[k] + alpha[k]) * phi[k]
                prob[k] = v
                total += v
            state, rnd = _next(state)
            u = rnd * total
            t = n_topics - 1
            for k in range(n_topics - 1):
                u -= prob[k]
                if u < 0.0:
                    t = k
                    break
            zd[p] = t
            if t != s:
                moved += 1
                d_doc += (_log_plus_alpha(log_a, alpha, sym, t, nd[t])
                          - _log_plus_alpha(log_a, alpha, sym, s, nd[s]))
                d_word += _log_plus(log_b, beta, row[t]) - _log_plus(log_b, beta, row[s])
            nd[t] += 1
            row[t] += 1
            nk[t] += 1
            inv_den[t] = 1.0 / (nk[t] + vbeta)
            phi[t] = (row[t] + beta) * inv_den[t]
    return moved, d_doc, d_word
