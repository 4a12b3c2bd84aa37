"""``sample_mh``: O(1) exact Metropolis-Hastings with doc and word proposals."""

from __future__ import annotations

import numba
import numpy as np

from dask_strads.engine.indexing import u as _u
from dask_strads.lda.kernels.common import _AHEAD, _JIT, _next, _prefetch, _seed_state
from dask_strads.lda.kernels.prior import _alias_draw, _alias_table, _prior_parts
from dask_strads.lda.kernels.tables import _log_plus, _log_plus_alpha, _log_table

_RING = 32  # tokens of pre-drawn proposals kept (a power of two > _AHEAD)


@numba.njit(**_JIT)
def sample_mh(run_lo, run_hi, run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, ndk, nwk, nk,
              alpha, beta, vbeta, mh_steps, seed, dl_topic, dl_count, dl_nnz):
    """Sample the tokens of runs ``run_lo:run_hi`` by O(1) exact MH (see module docstring).

    Mutates ``zd``, ``ndk``, ``nwk`` and ``nk``; returns the number of tokens whose
    topic changed and the changes of the doc and word parts of the log-likelihood
    (``doc_loglik``, ``word_loglik``) that the moves made. ``alpha``: (K,) float64; the
    doc proposal's draw from an asymmetric alpha is one of an alias table built per call.
    """
    state = _seed_state(seed)
    sym, a0, alpha_sum, _, _ = _prior_parts(alpha)
    log_a = _log_table(a0, nk)
    if sym:  # a symmetric alpha draws the topic of the uniform part as a scalar prior did
        a_prob, a_alias = _alias_table(np.ones(1))
    else:
        a_prob, a_alias = _alias_table(alpha)
    to_alias = alpha.shape[0] / alpha_sum
    log_b = _log_table(beta, nk)
    d_doc = 0.0
    d_word = 0.0
    ahead = _seed_state(seed ^ 0x5851F42D4C957F2D)  # stream of the pre-drawn proposals
    n_topics = nk.shape[0]
    k_alpha = alpha_sum
    k_beta = n_topics * beta
    longest = 1
    for r in range(run_lo, run_hi):
        longest = max(longest, run_ptr[r + 1] - run_ptr[r])
    rz = np.empty(longest, dtype=np.int32)  # the run's topics, in run order
    lrow = np.zeros(n_topics, dtype=np.int64)  # the run's counts (this shard's n_wk)
    ring = np.empty((_RING, 2 * mh_steps), dtype=np.float64)
    ndk_flat = ndk.reshape(-1)
    tok_lo = run_ptr[run_lo]
    tok_end = run_ptr[run_hi]
    for i in range(tok_lo, min(tok_lo + _AHEAD, tok_end)):
        for m in range(2 * mh_steps):
            ahead, ring[i & (_RING - 1), m] = _next(ahead)
    moved = 0
    for r in range(run_lo, run_hi):
        row = nwk[run_word[r]]
        a = run_ptr[r]
        n_r = run_ptr[r + 1] - a
        for j in range(n_r):
            if j + _AHEAD < n_r:
                _prefetch(zd, tok_pos[a + j + _AHEAD])
            t = _u(zd[_u(tok_pos[a + j])])
            rz[j] = t
            lrow[t] += 1
        for j in range(n_r):
            i = a + j
            q = i + _AHEAD
            if q < tok_end:
                # draw token q's doc proposals now and prefetch the slots they pick
                dq = tok_doc[q]
                lq = doc_ptr[dq]
                nq = doc_ptr[dq + 1] - lq
                for m in range(mh_steps):
                    ahead, rnd = _next(ahead)
                    ring[q & (_RING - 1), 2 * m] = rnd
                    slot = int(rnd * (nq + k_alpha))
                    if slot < nq:
                        _prefetch(zd, lq + slot)
                    ahead, ring[q & (_RING - 1), 2 * m + 1] = _next(ahead)
            if j + _AHEAD // 2 < n_r:
                # halfway: the doc-topic counts token h will likely read (its own topic's,
                # and those of the topics its proposals pick, whose slots are now cached)
                h = j + _AHEAD // 2
                dh = tok_doc[a + h]
                base = dh * n_topics
                _prefetch(ndk_flat, base + rz[h])
                lh = doc_ptr[dh]
                nh = doc_ptr[dh + 1] - lh
                for m in range(mh_steps):
                    slot = int(ring[(a + h) & (_RING - 1), 2 * m] * (nh + k_alpha))
                    if slot < nh:
                        _prefetch(ndk_flat, base + zd[lh + slot])
                    slot = int(ring[(a + h) & (_RING - 1), 2 * m + 1] * (n_r + k_beta))
                    if slot < n_r:
                        _prefetch(ndk_flat, base + rz[slot])
            d = _u(tok_doc[i])
            p = _u(tok_pos[i])
            s = _u(rz[j])
            z0 = s
            # take the token out: every count below is "without token i"
            ndk[d, s] -= 1
            row[s] -= 1
            nk[s] -= 1
            lrow[s] -= 1
            d_lo = doc_ptr[d]
            n_d = doc_ptr[d + 1] - d_lo
            for m in range(mh_steps):
                # doc proposal q(t) ∝ n_dt + alpha_t (+1 at the token's own slot, = s)
                u = ring[i & (_RING - 1), 2 * m] * (n_d + k_alpha)
                if u < n_d:
                    t = _u(zd[_u(d_lo + int(u))])
                elif sym:
                    t = _u(min(int((u - n_d) / a0), n_topics - 1))
                else:
                    t = _u(_alias_draw(a_prob, a_alias, (u - n_d) * to_alias))
                if t != s:
                    state, rnd = _next(state)
                    if rnd * (row[s] + beta) * (nk[t] + vbeta) < (row[t] + beta) * (nk[s] + vbeta):
                        s = t
                        zd[p] = s
                        rz[j] = s
                # word proposal q(t) ∝ (this shard's n_wt) + beta (+1 at the own slot)
                u = ring[i & (_RING - 1), 2 * m + 1] * (n_r + k_beta)
                if u < n_r:
                    t = _u(rz[_u(int(u))])
                else:
                    t = _u(min(int((u - n_r) / beta), n_topics - 1))
                if t != s:
                    state, rnd = _next(state)
                    if (rnd * (ndk[d, s] + alpha[s]) * (row[s] + beta) * (nk[t] + vbeta)
                            * (lrow[t] + beta)
                            < (ndk[d, t] + alpha[t]) * (row[t] + beta) * (nk[s] + vbeta)
                            * (lrow[s] + beta)):
                        s = t
                        zd[p] = s
                        rz[j] = s
            if s != z0:
                moved += 1
                d_doc += (_log_plus_alpha(log_a, alpha, sym, s, ndk[d, s])
                          - _log_plus_alpha(log_a, alpha, sym, z0, ndk[d, z0]))
                d_word += _log_plus(log_b, beta, row[s]) - _log_plus(log_b, beta, row[z0])
            ndk[d, s] += 1
            row[s] += 1
            nk[s] += 1
            lrow[s] += 1
        for j in range(n_r):
            lrow[_u(rz[j])] = 0
    return moved, d_doc, d_word
