"""``sample_sparse``: exact collapsed Gibbs with SparseLDA's buckets over sparse doc lists."""

from __future__ import annotations

import numba
import numpy as np

from dask_strads.lda.kernels.common import (
    _AHEAD,
    _JIT,
    _PREFETCH_LIST,
    _next,
    _prefetch,
    _seed_state,
)
from dask_strads.lda.kernels.prior import _prior_parts
from dask_strads.lda.kernels.sums import _block_shift, _sums_add, _sums_build, _sums_find
from dask_strads.lda.kernels.tables import _log_plus, _log_plus_alpha, _log_table


@numba.njit(nogil=True, cache=True, inline="always")
def _doc_list_pass(dl_topic, dl_count, lo, nnz, s, row, inv_den, beta, cum):
    """Take one token of topic ``s`` out of a doc list and sum the doc bucket
    ``sum_k n_dk (n_wk + beta) inv_den_k`` (cumulative sums in ``cum``). An entry that
    drops to zero stays until the caller compacts it. Returns (bucket, position of s)."""
    acc = 0.0
    pos_s = lo
    for j in range(lo, lo + nnz):
        k = dl_topic[j]
        c = dl_count[j]
        if k == s:
            c -= 1
            dl_count[j] = c
            pos_s = j
        acc += c * (row[k] + beta) * inv_den[k]
        cum[j - lo] = acc
    return acc, pos_s


@numba.njit(nogil=True, cache=True, inline="always")
def _doc_list_pass_phi(dl_topic, dl_count, lo, nnz, s, phi, cum):
    """``_doc_list_pass`` with the word's ``phi_w`` at hand (frequent words)."""
    acc = 0.0
    pos_s = lo
    for j in range(lo, lo + nnz):
        k = dl_topic[j]
        c = dl_count[j]
        if k == s:
            c -= 1
            dl_count[j] = c
            pos_s = j
        acc += c * phi[k]
        cum[j - lo] = acc
    return acc, pos_s


@numba.njit(nogil=True, cache=True, inline="always")
def _rank(cum, n, u):
    """How many of the non-decreasing ``cum[:n]`` are ``<= u``: the index the draw ``u``
    falls in, counted without branches (a search's exit branch mispredicts)."""
    j = 0
    for q in range(n):
        j += cum[q] <= u
    return j


@numba.njit(nogil=True, cache=True, inline="always")
def _doc_list_add(dl_topic, dl_count, lo, nnz, pos_s, pos_t, t):
    """Add one token of topic ``t`` (at ``pos_t``, or -1: unknown) and drop the entry of
    the old topic if it reached zero. Returns the new number of entries and the count
    of ``t`` before the addition."""
    if pos_t < 0:
        for j in range(lo, lo + nnz):
            if dl_topic[j] == t:
                pos_t = j
                break
    if pos_t < 0:
        pos_t = lo + nnz
        dl_topic[pos_t] = t
        dl_count[pos_t] = 0
        nnz += 1
    before = dl_count[pos_t]
    dl_count[pos_t] = before + 1
    if dl_count[pos_s] == 0:
        nnz -= 1
        dl_topic[pos_s] = dl_topic[lo + nnz]
        dl_count[pos_s] = dl_count[lo + nnz]
    return nnz, before


@numba.njit(**_JIT)
def sample_sparse(run_lo, run_hi, run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, ndk, nwk, nk,
                  alpha, beta, vbeta, mh_steps, seed, dl_topic, dl_count, dl_nnz):
    """Exact collapsed Gibbs, word-major, with SparseLDA's buckets (see ``sparse_gibbs``)."""
    return sparse_gibbs(run_lo, run_hi, run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, nwk,
                        nk, alpha, beta, vbeta, seed, dl_topic, dl_count, dl_nnz,
                        max(1, nk.shape[0] // 8))


@numba.njit(**_JIT)
def sparse_gibbs(run_lo, run_hi, run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, nwk, nk,
                 alpha, beta, vbeta, seed, dl_topic, dl_count, dl_nnz, short_run):
    """Exact collapsed Gibbs, word-major, with SparseLDA's buckets.

    ``p(k) ∝ n_dk phi_w(k) + alpha_k n_wk / (n_k + V beta) + alpha_k beta / (n_k + V beta)``
    with ``phi_w(k) = (n_wk + beta) / (n_k + V beta)``. The doc bucket is summed over
    the document's non-zero topics (sparse lists, O(nnz_d)). Words with many tokens
    here (a run of at least ``short_run``, K / 8 by default) draw the rest,
    ``alpha_k phi_w(k)``, from two-level sums over it built for the word (O(K) once,
    O(1) per token to keep, O(sqrt K) per draw, and few draws land in this bucket, whose
    mass is small next to the doc bucket's). Rare words draw it as a word bucket over
    the word's non-zero topics (O(nnz_w)) plus the smoothing bucket, from two-level sums over
    ``alpha_k / (n_k + V beta)`` shared by all words, so they never pay O(K) per token.
    (The alpha buckets are ``am * sum_k aw_k * x_k`` by ``_prior_parts``: for a symmetric
    alpha the arithmetic of a scalar one.)
    All sums are kept current: the sampler is exact. The sparse doc lists are the
    doc-topic counts (no dense ``ndk``). Returns as ``sample_mh``.
    """
    state = _seed_state(seed)
    sym, a0, _, aw, am = _prior_parts(alpha)
    log_a = _log_table(a0, nk)
    log_b = _log_table(beta, nk)
    d_doc = 0.0
    d_word = 0.0
    n_topics = nk.shape[0]
    ab = am * beta
    inv_den = np.empty(n_topics, dtype=np.float64)
    ainv = np.empty(n_topics, dtype=np.float64)  # aw * inv_den (kept by rare words)
    for k in range(n_topics):
        inv_den[k] = 1.0 / (nk[k] + vbeta)
        ainv[k] = aw[k] * inv_den[k]
    phi = np.empty(n_topics, dtype=np.float64)
    aphi = np.empty(n_topics, dtype=np.float64)  # aw * phi
    shift = _block_shift(n_topics)
    n_sums = ((n_topics - 1) >> shift) + 1
    tsum = np.empty(n_sums, dtype=np.float64)  # per frequent word: sums of aphi
    ssum = np.empty(n_sums, dtype=np.float64)  # shared: sums of ainv
    _sums_build(ssum, ainv, shift)
    smooth_total = 0.0
    for k in range(n_topics):
        smooth_total += ainv[k]
    smooth_updates = 0
    smooth_dirty = False
    cum = np.empty(n_topics + 1, dtype=np.float64)
    wl_topic = np.empty(n_topics, dtype=np.int64)  # rare word: its non-zero topics
    in_wl = np.zeros(n_topics, dtype=np.bool_)
    moved = 0
    tok_end = run_ptr[run_hi]
    for r in range(run_lo, run_hi):
        w = run_word[r]
        row = nwk[w]
        frequent = run_ptr[r + 1] - run_ptr[r] >= short_run
        total = 0.0
        wsum = 0.0
        n_wl = 0
        if frequent:
            for k in range(n_topics):
                v = (row[k] + beta) * inv_den[k]
                phi[k] = v
                av = aw[k] * v
                aphi[k] = av
                total += av
            _sums_build(tsum, aphi, shift)
            smooth_dirty = True  # frequent words leave the shared sums alone
        else:
            if smooth_dirty:
                for k in range(n_topics):
                    ainv[k] = aw[k] * inv_den[k]
                _sums_build(ssum, ainv, shift)
                smooth_total = 0.0
                for k in range(n_topics):
                    smooth_total += ainv[k]
                smooth_updates = 0
                smooth_dirty = False
            for k in range(n_topics):
                if row[k] != 0:
                    wl_topic[n_wl] = k
                    in_wl[k] = True
                    n_wl += 1
                    wsum += aw[k] * row[k] * inv_den[k]
        since_build = 0
        for i in range(run_ptr[r], run_ptr[r + 1]):
            if i + _AHEAD < tok_end:
                j = i + _AHEAD
                _prefetch(zd, tok_pos[j])
                # that token's doc list, which the pass below reads whole: its first
                # _PREFETCH_LIST entries (the hardware streams the rest of a long one)
                lj = doc_ptr[tok_doc[j]]
                for q in range(0, min(dl_nnz[tok_doc[j]], _PREFETCH_LIST) + 16, 16):
                    _prefetch(dl_count, lj + q)
                    _prefetch(dl_topic, lj + q)
            d = tok_doc[i]
            p = tok_pos[i]
            s = zd[p]
            lo = doc_ptr[d]
            nnz = dl_nnz[d]
            # take the token out of the word's row and the totals
            old_inv = inv_den[s]
            if not frequent:
                wsum -= aw[s] * row[s] * old_inv
            row[s] -= 1
            nk[s] -= 1
            new_inv = 1.0 / (nk[s] + vbeta)
            inv_den[s] = new_inv
            if frequent:
                v = (row[s] + beta) * new_inv
                phi[s] = v
                av = aw[s] * v
                _sums_add(tsum, s, av - aphi[s], shift)
                total += av - aphi[s]
                aphi[s] = av
                acc, pos_s = _doc_list_pass_phi(dl_topic, dl_count, lo, nnz, s, phi, cum)
            else:
                new_a = aw[s] * new_inv
                _sums_add(ssum, s, new_a - ainv[s], shift)
                smooth_total += new_a - ainv[s]
                ainv[s] = new_a
                wsum += aw[s] * row[s] * new_inv
                acc, pos_s = _doc_list_pass(dl_topic, dl_count, lo, nnz, s, row, inv_den, beta,
                                            cum)
            state, rnd = _next(state)
            pos_t = -1
            if frequent:
                u = rnd * (acc + am * total)
                if u < acc:
                    pos_t = lo + _rank(cum, nnz - 1, u)
                    t = dl_topic[pos_t]
                else:
                    t = _sums_find(tsum, aphi, (u - acc) / am, shift)
            else:
                if wsum < 0.0:
                    wsum = 0.0
                u = rnd * (acc + am * wsum + ab * smooth_total)
                if u < acc:
                    pos_t = lo + _rank(cum, nnz - 1, u)
                    t = dl_topic[pos_t]
                elif u < acc + am * wsum:
                    u = (u - acc) / am
                    t = wl_topic[n_wl - 1]
                    for j in range(n_wl):
                        k = wl_topic[j]
                        u -= aw[k] * row[k] * inv_den[k]
                        if u < 0.0:
                            t = k
                            break
                else:
                    t = _sums_find(ssum, ainv, (u - acc - am * wsum) / ab, shift)
            if t == s and pos_t < 0:
                pos_t = pos_s
            count_s = dl_count[pos_s]  # the old topic's count without this token
            dl_nnz[d], count_t = _doc_list_add(dl_topic, dl_count, lo, nnz, pos_s, pos_t, t)
            zd[p] = t
            if t != s:
                d_doc += (_log_plus_alpha(log_a, alpha, sym, t, count_t)
                          - _log_plus_alpha(log_a, alpha, sym, s, count_s))
                d_word += _log_plus(log_b, beta, row[t]) - _log_plus(log_b, beta, row[s])
            old_inv = inv_den[t]
            if not frequent:
                wsum -= aw[t] * row[t] * old_inv
                if not in_wl[t]:
                    in_wl[t] = True
                    wl_topic[n_wl] = t
                    n_wl += 1
            row[t] += 1
            nk[t] += 1
            new_inv = 1.0 / (nk[t] + vbeta)
            inv_den[t] = new_inv
            if frequent:
                v = (row[t] + beta) * new_inv
                phi[t] = v
                av = aw[t] * v
                _sums_add(tsum, t, av - aphi[t], shift)
                total += av - aphi[t]
                aphi[t] = av
            else:
                new_a = aw[t] * new_inv
                _sums_add(ssum, t, new_a - ainv[t], shift)
                smooth_total += new_a - ainv[t]
                ainv[t] = new_a
                wsum += aw[t] * row[t] * new_inv
                smooth_updates += 1
            if t != s:
                moved += 1
            since_build += 1
            if frequent and since_build == 4096:
                # bound the floating-point drift of the incremental sums
                total = 0.0
                for k in range(n_topics):
                    total += aphi[k]
                _sums_build(tsum, aphi, shift)
                since_build = 0
            if smooth_updates == 65536:
                _sums_build(ssum, ainv, shift)
                smooth_total = 0.0
                for k in range(n_topics):
                    smooth_total += ainv[k]
                smooth_updates = 0
        if not frequent:
            for j in range(n_wl):
                in_wl[wl_topic[j]] = False
    return moved, d_doc, d_word
