"""Numba kernels of LDA: token layout, word-major samplers, counts and log-likelihood.

Plain arrays in and out. A resident block (a document shard) is stored as

* ``doc_ptr`` (D+1,) int64 and ``zd`` (N,) int32: the topic of every token, doc-major
  (document ``d`` owns ``zd[doc_ptr[d]:doc_ptr[d+1]]``);
* the same tokens in word-major order, grouped by vocabulary block then word:
  ``tok_doc`` (N,) int32 (local document) and ``tok_pos`` (N,) int64 (index into ``zd``);
  a *run* is the tokens of one word: ``run_word[r]`` is the word's index inside its
  vocabulary block and ``run_ptr[r]:run_ptr[r+1]`` its tokens; ``block_run_ptr[b]:
  block_run_ptr[b+1]`` are the runs of vocabulary block ``b``;
* ``ndk`` (D, K) int32 doc-topic counts and ``nk`` (K,) int64, the shard's copy of the
  topic totals.

A carried block is ``nwk`` (V_b, K) int32, the word-topic counts of one vocabulary block.

Samplers (all sample each token of a word in turn, holding the word's row; the same
signature, the last three arrays are the sparse doc lists of ``sample_sparse``):

``sample_sparse``
    Exact collapsed Gibbs with two buckets: ``p(k) ∝ n_dk phi_w(k) + alpha phi_w(k)``;
    the doc bucket over the document's non-zero topics (sparse lists), the smoothing
    bucket from two-level sums over ``phi_w`` kept current (O(1) to keep, O(sqrt K) for
    the rare draw from it). O(nnz_d) per token, with a prefetch of the doc list.
``sample_mh``
    Metropolis-Hastings with alternating doc and word proposals (LightLDA's cycle),
    exact for the collapsed posterior and O(1) per token, with no table to build: the
    doc proposal ``q(t) ∝ n_dt + alpha`` is a random slot of the document (the token's
    own slot included, holding its current topic) or, with weight ``K alpha``, a uniform
    topic; its doc factor cancels, leaving the acceptance ``phi_w(t) / phi_w(s)`` with
    ``phi_w(k) = (n_wk + beta) / (n_k + V beta)``. The word proposal ``q(t) ∝ m_wt +
    beta`` is a random slot of the word's run in this shard (``m_w``: the shard's own
    counts of the word, which are ``n_w`` on one shard) or a uniform topic, accepted with
    ``(n_dt + alpha)(n_wt + beta)(n_s + V beta)(m_ws + beta)`` over the same with ``s``
    and ``t`` swapped. Both proposals read current counts, so the chain's stationary
    distribution is the exact posterior. The slots the proposals will pick are drawn 16
    tokens ahead and their topics and doc-topic counts prefetched: the cost is a few
    cache misses per token whatever K. It mixes less per sweep than Gibbs, more per
    second (``mh_steps`` pairs of proposals per token).
``sample_gibbs``
    Plain collapsed Gibbs sampling, O(K) per token (the reference).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from dask_strads.engine.indexing import u as _u

_JIT = {"nogil": True, "cache": True}
_AHEAD = 16  # tokens between prefetching a token's topic and using it
_PREFETCH_LIST = 256  # doc-list entries prefetched per token ahead (16 cache lines)


# ------------------------------------------------------------------- carried blocks
# A count block leaves its worker as its non-zero entries, row by row (see
# ``program.CountBlock``); the receiver scatters them into memory it keeps for that.
@numba.njit(**_JIT)
def count_row_nnz(nwk, indptr):
    """``indptr[r + 1] = indptr[r] +`` non-zero entries of row ``r``; the largest count.
    (Branch-free: a pass over 100 MB of counts is memory-bound, not branch-bound.)"""
    n_rows, n_topics = nwk.shape
    n = 0
    big = 0
    indptr[0] = 0
    for r in range(n_rows):
        row = nwk[r]
        m = 0
        for k in range(n_topics):
            c = row[k]
            m += c != 0
            big = max(big, c)
        n += m
        indptr[r + 1] = n
    return big


@numba.njit(**_JIT)
def gather_rows(nwk, indptr, topics, counts):
    """The non-zero entries of ``nwk`` row by row, into ``topics`` and ``counts``.
    (A branch per entry: at a few % non-zeros it predicts well, and beats storing every
    entry and advancing on non-zeros.)"""
    n_rows, n_topics = nwk.shape
    for r in range(n_rows):
        j = indptr[r]
        if j == indptr[r + 1]:
            continue
        row = nwk[r]
        for k in range(n_topics):
            c = row[k]
            if c != 0:
                topics[j] = k
                counts[j] = c
                j += 1


@numba.njit(**_JIT)
def scatter_rows(nwk, indptr, topics, counts):
    """Add the entries ``gather_rows`` took into ``nwk`` (zeros: sets them)."""
    for r in range(nwk.shape[0]):
        for j in range(indptr[r], indptr[r + 1]):
            nwk[r, topics[j]] += counts[j]


@numba.njit(**_JIT)
def zero_rows(nwk, indptr, topics):
    """Zero the entries listed (a block's non-zeros, as packed)."""
    for r in range(nwk.shape[0]):
        for j in range(indptr[r], indptr[r + 1]):
            nwk[r, topics[j]] = 0


# ----------------------------------------------------------------------------- layout
@numba.njit(**_JIT)
def build_tokens(indptr, indices, data, word_block, word_local, block_word_offset):
    """Expand a CSR doc-term shard into doc-major and word-major token arrays.

    Returns ``doc_ptr, tok_doc, tok_pos, run_word, run_ptr, block_run_ptr``.
    """
    n_docs = indptr.shape[0] - 1
    n_blocks = block_word_offset.shape[0] - 1
    n_vocab = block_word_offset[n_blocks]
    doc_ptr = np.zeros(n_docs + 1, dtype=np.int64)
    count = np.zeros(n_vocab + 1, dtype=np.int64)
    for d in range(n_docs):
        total = 0
        for j in range(indptr[d], indptr[d + 1]):
            c = data[j]
            total += c
            w = indices[j]
            count[block_word_offset[word_block[w]] + word_local[w] + 1] += c
        doc_ptr[d + 1] = doc_ptr[d] + total
    n_tokens = doc_ptr[n_docs]
    n_runs = 0
    for g in range(n_vocab):
        if count[g + 1] > 0:
            n_runs += 1
        count[g + 1] += count[g]
    start = count[:n_vocab].copy()
    tok_doc = np.empty(n_tokens, dtype=np.int32)
    tok_pos = np.empty(n_tokens, dtype=np.int64)
    t = 0
    for d in range(n_docs):
        for j in range(indptr[d], indptr[d + 1]):
            w = indices[j]
            g = block_word_offset[word_block[w]] + word_local[w]
            for _ in range(data[j]):
                p = start[g]
                start[g] = p + 1
                tok_doc[p] = d
                tok_pos[p] = t
                t += 1
    run_word = np.empty(n_runs, dtype=np.int32)
    run_ptr = np.empty(n_runs + 1, dtype=np.int64)
    block_run_ptr = np.zeros(n_blocks + 1, dtype=np.int64)
    r = 0
    for b in range(n_blocks):
        for g in range(block_word_offset[b], block_word_offset[b + 1]):
            if count[g + 1] > count[g]:
                run_word[r] = g - block_word_offset[b]
                run_ptr[r] = count[g]
                r += 1
        block_run_ptr[b + 1] = r
    run_ptr[n_runs] = n_tokens
    return doc_ptr, tok_doc, tok_pos, run_word, run_ptr, block_run_ptr


@numba.njit(**_JIT)
def count_doc_topic(doc_ptr, zd, n_topics):
    """Doc-topic counts (D, K) int32 from the doc-major topic list."""
    n_docs = doc_ptr.shape[0] - 1
    ndk = np.zeros((n_docs, n_topics), dtype=np.int32)
    for d in range(n_docs):
        for p in range(doc_ptr[d], doc_ptr[d + 1]):
            ndk[d, zd[p]] += 1
    return ndk


@numba.njit(**_JIT)
def add_block_counts(run_lo, run_hi, run_word, run_ptr, tok_pos, zd, nwk):
    """Add this shard's word-topic counts of runs ``run_lo:run_hi`` into ``nwk``."""
    for r in range(run_lo, run_hi):
        w = run_word[r]
        for i in range(run_ptr[r], run_ptr[r + 1]):
            nwk[w, zd[tok_pos[i]]] += 1


# ----------------------------------------------------------------------------- two-level sums
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


# ----------------------------------------------------------------------------- prefetch
@intrinsic
def _prefetch(typingctx, arr, index):
    """Software prefetch of ``arr[index]`` (1-d array): hides the latency of the random
    reads of the next tokens' topics and doc-topic counts (the sampler is memory bound)."""
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        arrty, idxty = signature.args
        ary = context.make_array(arrty)(context, builder, args[0])
        idx = context.cast(builder, args[1], idxty, types.intp)
        ptr = cgutils.get_item_pointer2(
            context, builder, ary.data, cgutils.unpack_tuple(builder, ary.shape),
            cgutils.unpack_tuple(builder, ary.strides), arrty.layout, [idx])
        # one declaration for every array type in a module: the address as a byte pointer
        ptr = builder.bitcast(ptr, cgutils.voidptr_t)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


# ----------------------------------------------------------------------------- rng
@numba.njit(nogil=True, cache=True, inline="always")
def _next(state):
    """xorshift64* step: returns the new state and a uniform float in [0, 1)."""
    x = state
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    mixed = (x * np.uint64(0x2545F4914F6CDD1D)) >> np.uint64(11)
    return x, float(mixed) * (1.0 / 9007199254740992.0)


@numba.njit(nogil=True, cache=True)
def _seed_state(seed):
    """A non-zero xorshift state from any integer seed (splitmix64 scrambling)."""
    z = np.uint64(seed) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    if z == np.uint64(0):
        z = np.uint64(0x2545F4914F6CDD1D)
    return z


# ----------------------------------------------------------------------------- ll deltas
_LOG_TABLE = 4096  # counts below this take log(c + prior) from a table built per call


@numba.njit(nogil=True, cache=True)
def _log_table(x0):
    """``log(x0 + c)`` for the small counts ``c``."""
    table = np.empty(_LOG_TABLE, dtype=np.float64)
    for c in range(_LOG_TABLE):
        table[c] = math.log(x0 + c)
    return table


@numba.njit(nogil=True, cache=True, inline="always")
def _log_plus(table, x0, c):
    """``log(x0 + c)`` = ``lgamma(x0 + c + 1) - lgamma(x0 + c)``: the change of the
    log-likelihood when a count goes from ``c`` to ``c + 1``."""
    if c < _LOG_TABLE:
        return table[c]
    return math.log(x0 + c)


# ----------------------------------------------------------------------------- samplers
_RING = 32  # tokens of pre-drawn proposals kept (a power of two > _AHEAD)


@numba.njit(**_JIT)
def sample_mh(run_lo, run_hi, run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, ndk, nwk, nk,
              alpha, beta, vbeta, mh_steps, seed, dl_topic, dl_count, dl_nnz):
    """Sample the tokens of runs ``run_lo:run_hi`` by O(1) exact MH (see module docstring).

    Mutates ``zd``, ``ndk``, ``nwk`` and ``nk``; returns the number of tokens whose
    topic changed and the changes of the doc and word parts of the log-likelihood
    (``doc_loglik``, ``word_loglik``) that the moves made.
    """
    state = _seed_state(seed)
    log_a = _log_table(alpha)
    log_b = _log_table(beta)
    d_doc = 0.0
    d_word = 0.0
    ahead = _seed_state(seed ^ 0x5851F42D4C957F2D)  # stream of the pre-drawn proposals
    n_topics = nk.shape[0]
    k_alpha = n_topics * alpha
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
                # doc proposal q(t) ∝ n_dt + alpha (+1 at the token's own slot, = s)
                u = ring[i & (_RING - 1), 2 * m] * (n_d + k_alpha)
                if u < n_d:
                    t = _u(zd[_u(d_lo + int(u))])
                else:
                    t = _u(min(int((u - n_d) / alpha), n_topics - 1))
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
                    if (rnd * (ndk[d, s] + alpha) * (row[s] + beta) * (nk[t] + vbeta)
                            * (lrow[t] + beta)
                            < (ndk[d, t] + alpha) * (row[t] + beta) * (nk[s] + vbeta)
                            * (lrow[s] + beta)):
                        s = t
                        zd[p] = s
                        rz[j] = s
            if s != z0:
                moved += 1
                d_doc += _log_plus(log_a, alpha, ndk[d, s]) - _log_plus(log_a, alpha, ndk[d, z0])
                d_word += _log_plus(log_b, beta, row[s]) - _log_plus(log_b, beta, row[z0])
            ndk[d, s] += 1
            row[s] += 1
            nk[s] += 1
            lrow[s] += 1
        for j in range(n_r):
            lrow[_u(rz[j])] = 0
    return moved, d_doc, d_word


@numba.njit(**_JIT)
def sample_gibbs(run_lo, run_hi, run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, ndk, nwk, nk,
                 alpha, beta, vbeta, mh_steps, seed, dl_topic, dl_count, dl_nnz):
    """Exact collapsed Gibbs sampling, O(K) per token (same signature and returns as
    ``sample_mh``)."""
    np.random.seed(seed)
    log_a = _log_table(alpha)
    log_b = _log_table(beta)
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
            for k in range(n_topics):
                acc += (ndk[d, k] + alpha) * (row[k] + beta) * inv_den[k]
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
                d_doc += _log_plus(log_a, alpha, ndk[d, t]) - _log_plus(log_a, alpha, ndk[d, s])
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
    token costs K multiply-adds ``(n_dk + alpha) phi_w(k)`` over a dense doc-topic row,
    which vectorise, and a scan for the draw: for small K and short documents cheaper
    than the sparse sampler's bookkeeping and mixing as Gibbs does (MH needs more
    sweeps). The next tokens' topics and doc-topic rows are prefetched.
    """
    state = _seed_state(seed)
    log_a = _log_table(alpha)
    log_b = _log_table(beta)
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
                v = (nd[k] + alpha) * phi[k]
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
                d_doc += _log_plus(log_a, alpha, nd[t]) - _log_plus(log_a, alpha, nd[s])
                d_word += _log_plus(log_b, beta, row[t]) - _log_plus(log_b, beta, row[s])
            nd[t] += 1
            row[t] += 1
            nk[t] += 1
            inv_den[t] = 1.0 / (nk[t] + vbeta)
            phi[t] = (row[t] + beta) * inv_den[t]
    return moved, d_doc, d_word


@numba.njit(**_JIT)
def build_doc_lists(doc_ptr, ndk):
    """Sparse doc-topic lists for ``sample_sparse``: doc ``d``'s non-zero topics and
    counts in slots ``doc_ptr[d]:doc_ptr[d] + dl_nnz[d]`` (capacity ``n_d`` >= nnz)."""
    n_docs, n_topics = ndk.shape
    n_tokens = doc_ptr[n_docs]
    dl_topic = np.zeros(n_tokens, dtype=np.int32)
    dl_count = np.zeros(n_tokens, dtype=np.int32)
    dl_nnz = np.zeros(n_docs, dtype=np.int32)
    for d in range(n_docs):
        j = doc_ptr[d]
        for k in range(n_topics):
            if ndk[d, k] > 0:
                dl_topic[j] = k
                dl_count[j] = ndk[d, k]
                j += 1
        dl_nnz[d] = j - doc_ptr[d]
    return dl_topic, dl_count, dl_nnz


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

    ``p(k) ∝ n_dk phi_w(k) + alpha n_wk / (n_k + V beta) + alpha beta / (n_k + V beta)``
    with ``phi_w(k) = (n_wk + beta) / (n_k + V beta)``. The doc bucket is summed over
    the document's non-zero topics (sparse lists, O(nnz_d)). Words with many tokens
    here (a run of at least ``short_run``, K / 8 by default) draw the rest,
    ``alpha phi_w``, from two-level sums over ``phi_w`` built for the word (O(K) once,
    O(1) per token to keep, O(sqrt K) per draw, and few draws land in this bucket, whose
    mass is small next to the doc bucket's). Rare words draw it as a word bucket over
    the word's non-zero topics (O(nnz_w)) plus the smoothing bucket, from two-level sums over
    ``1 / (n_k + V beta)`` shared by all words, so they never pay O(K) per token.
    All sums are kept current: the sampler is exact. The sparse doc lists are the
    doc-topic counts (no dense ``ndk``). Returns as ``sample_mh``.
    """
    state = _seed_state(seed)
    log_a = _log_table(alpha)
    log_b = _log_table(beta)
    d_doc = 0.0
    d_word = 0.0
    n_topics = nk.shape[0]
    ab = alpha * beta
    inv_den = np.empty(n_topics, dtype=np.float64)
    for k in range(n_topics):
        inv_den[k] = 1.0 / (nk[k] + vbeta)
    phi = np.empty(n_topics, dtype=np.float64)
    shift = _block_shift(n_topics)
    n_sums = ((n_topics - 1) >> shift) + 1
    tsum = np.empty(n_sums, dtype=np.float64)  # per frequent word: sums of phi_w
    ssum = np.empty(n_sums, dtype=np.float64)  # shared: sums of inv_den
    _sums_build(ssum, inv_den, shift)
    smooth_total = 0.0
    for k in range(n_topics):
        smooth_total += inv_den[k]
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
                total += v
            _sums_build(tsum, phi, shift)
            smooth_dirty = True  # frequent words leave the shared sums alone
        else:
            if smooth_dirty:
                _sums_build(ssum, inv_den, shift)
                smooth_total = 0.0
                for k in range(n_topics):
                    smooth_total += inv_den[k]
                smooth_updates = 0
                smooth_dirty = False
            for k in range(n_topics):
                if row[k] != 0:
                    wl_topic[n_wl] = k
                    in_wl[k] = True
                    n_wl += 1
                    wsum += row[k] * inv_den[k]
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
                wsum -= row[s] * old_inv
            row[s] -= 1
            nk[s] -= 1
            new_inv = 1.0 / (nk[s] + vbeta)
            inv_den[s] = new_inv
            if frequent:
                v = (row[s] + beta) * new_inv
                _sums_add(tsum, s, v - phi[s], shift)
                total += v - phi[s]
                phi[s] = v
                acc, pos_s = _doc_list_pass_phi(dl_topic, dl_count, lo, nnz, s, phi, cum)
            else:
                _sums_add(ssum, s, new_inv - old_inv, shift)
                smooth_total += new_inv - old_inv
                wsum += row[s] * new_inv
                acc, pos_s = _doc_list_pass(dl_topic, dl_count, lo, nnz, s, row, inv_den, beta,
                                            cum)
            state, rnd = _next(state)
            pos_t = -1
            if frequent:
                u = rnd * (acc + alpha * total)
                if u < acc:
                    pos_t = lo + _rank(cum, nnz - 1, u)
                    t = dl_topic[pos_t]
                else:
                    t = _sums_find(tsum, phi, (u - acc) / alpha, shift)
            else:
                if wsum < 0.0:
                    wsum = 0.0
                u = rnd * (acc + alpha * wsum + ab * smooth_total)
                if u < acc:
                    pos_t = lo + _rank(cum, nnz - 1, u)
                    t = dl_topic[pos_t]
                elif u < acc + alpha * wsum:
                    u = (u - acc) / alpha
                    t = wl_topic[n_wl - 1]
                    for j in range(n_wl):
                        k = wl_topic[j]
                        u -= row[k] * inv_den[k]
                        if u < 0.0:
                            t = k
                            break
                else:
                    t = _sums_find(ssum, inv_den, (u - acc - alpha * wsum) / ab, shift)
            if t == s and pos_t < 0:
                pos_t = pos_s
            count_s = dl_count[pos_s]  # the old topic's count without this token
            dl_nnz[d], count_t = _doc_list_add(dl_topic, dl_count, lo, nnz, pos_s, pos_t, t)
            zd[p] = t
            if t != s:
                d_doc += _log_plus(log_a, alpha, count_t) - _log_plus(log_a, alpha, count_s)
                d_word += _log_plus(log_b, beta, row[t]) - _log_plus(log_b, beta, row[s])
            old_inv = inv_den[t]
            if not frequent:
                wsum -= row[t] * old_inv
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
                _sums_add(tsum, t, v - phi[t], shift)
                total += v - phi[t]
                phi[t] = v
            else:
                _sums_add(ssum, t, new_inv - old_inv, shift)
                smooth_total += new_inv - old_inv
                wsum += row[t] * new_inv
                smooth_updates += 1
            if t != s:
                moved += 1
            since_build += 1
            if frequent and since_build == 4096:
                # bound the floating-point drift of the incremental sums
                total = 0.0
                for k in range(n_topics):
                    total += phi[k]
                _sums_build(tsum, phi, shift)
                since_build = 0
            if smooth_updates == 65536:
                _sums_build(ssum, inv_den, shift)
                smooth_total = 0.0
                for k in range(n_topics):
                    smooth_total += inv_den[k]
                smooth_updates = 0
        if not frequent:
            for j in range(n_wl):
                in_wl[wl_topic[j]] = False
    return moved, d_doc, d_word


@numba.njit(**_JIT)
def doc_topic_from_lists(doc_ptr, dl_topic, dl_count, dl_nnz, n_topics):
    """Dense (D, K) int32 doc-topic counts from the sparse doc lists."""
    n_docs = doc_ptr.shape[0] - 1
    ndk = np.zeros((n_docs, n_topics), dtype=np.int32)
    for d in range(n_docs):
        lo = doc_ptr[d]
        for j in range(lo, lo + dl_nnz[d]):
            ndk[d, dl_topic[j]] += dl_count[j]
    return ndk


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


@numba.njit(**_JIT)
def doc_loglik_lists(doc_ptr, dl_count, dl_nnz, n_topics, alpha):
    """``doc_loglik`` from the sparse doc lists."""
    n_docs = doc_ptr.shape[0] - 1
    lg_alpha = math.lgamma(alpha)
    lg_kalpha = math.lgamma(n_topics * alpha)
    table = _lgamma_table(alpha)
    ll = 0.0
    for d in range(n_docs):
        lo = doc_ptr[d]
        ll += lg_kalpha - math.lgamma(n_topics * alpha + (doc_ptr[d + 1] - lo))
        for j in range(lo, lo + dl_nnz[d]):
            c = dl_count[j]
            if c > 0:
                ll += _lgamma_term(table, alpha, lg_alpha, c)
    return ll


SAMPLERS = {"sparse": sample_sparse, "mh": sample_mh, "dense": sample_dense,
            "gibbs": sample_gibbs}


# ----------------------------------------------------------------------------- likelihood
@numba.njit(**_JIT)
def doc_loglik(ndk, doc_ptr, alpha):
    """Doc part of the complete-data log-likelihood (the ``lda`` package's ``log p(z)``)."""
    n_docs, n_topics = ndk.shape
    lg_alpha = math.lgamma(alpha)
    lg_kalpha = math.lgamma(n_topics * alpha)
    table = _lgamma_table(alpha)
    ll = 0.0
    for d in range(n_docs):
        ll += lg_kalpha - math.lgamma(n_topics * alpha + (doc_ptr[d + 1] - doc_ptr[d]))
        for k in range(n_topics):
            c = ndk[d, k]
            if c > 0:
                ll += _lgamma_term(table, alpha, lg_alpha, c)
    return ll


@numba.njit(**_JIT)
def word_loglik(nwk, beta):
    """Word part: ``sum_{w,k: n_wk > 0} lgamma(n_wk + beta) - lgamma(beta)``."""
    lg_beta = math.lgamma(beta)
    table = _lgamma_table(beta)
    ll = 0.0
    n_words, n_topics = nwk.shape
    for w in range(n_words):
        for k in range(n_topics):
            c = nwk[w, k]
            if c > 0:
                ll += _lgamma_term(table, beta, lg_beta, c)
    return ll


def topic_loglik(nk: np.ndarray, n_vocab: int, beta: float) -> float:
    """Topic-total part: ``K lgamma(V beta) - sum_k lgamma(n_k + V beta)``."""
    from scipy.special import gammaln

    return float(len(nk) * gammaln(n_vocab * beta) - gammaln(nk + n_vocab * beta).sum())


# ----------------------------------------------------------------------------- fold-in
@numba.njit(**_JIT)
def fold_in(indptr, indices, data, phi, alpha, n_iter, burn_in, seed):
    """Doc-topic distributions of new documents by Gibbs sampling with ``phi`` fixed.

    ``phi`` (V, K) holds ``p(w | k)``. Returns the mean over the post-burn-in sweeps of
    ``(n_dk + alpha) / (n_d + K alpha)`` for every document (D, K) float64.
    """
    np.random.seed(seed)
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
                theta[d, k] = 1.0 / n_topics
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
                    acc += (ndk[k] + alpha) * phi[w, k]
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
                    theta[d, k] += ndk[k] + alpha
        for k in range(n_topics):
            theta[d, k] /= n_kept * (n_d + n_topics * alpha)
    return theta


@numba.njit(**_JIT)
def doc_word_loglik(indptr, indices, data, theta, phi):
    """``sum_d sum_w x_dw log(sum_k theta_dk phi_wk)``: log-likelihood of the documents."""
    n_docs = indptr.shape[0] - 1
    n_topics = phi.shape[1]
    ll = 0.0
    for d in range(n_docs):
        for j in range(indptr[d], indptr[d + 1]):
            w = indices[j]
            p = 0.0
            for k in range(n_topics):
                p += theta[d, k] * phi[w, k]
            ll += data[j] * math.log(p)
    return ll


def warm_up() -> None:
    """Compile (or load from cache) every kernel on tiny inputs."""
    indptr = np.array([0, 2, 3], dtype=np.int64)
    indices = np.array([0, 1, 1], dtype=np.int32)
    data = np.array([1, 2, 1], dtype=np.int64)  # counts reach the kernels as int64
    word_block = np.zeros(2, dtype=np.int32)
    word_local = np.arange(2, dtype=np.int32)
    offset = np.array([0, 2], dtype=np.int64)
    doc_ptr, tok_doc, tok_pos, run_word, run_ptr, brp = build_tokens(
        indptr, indices, data, word_block, word_local, offset)
    zd = np.zeros(doc_ptr[-1], dtype=np.int32)
    ndk = count_doc_topic(doc_ptr, zd, 2)
    nwk = np.zeros((2, 2), dtype=np.int32)
    add_block_counts(0, len(run_word), run_word, run_ptr, tok_pos, zd, nwk)
    nk = np.bincount(zd, minlength=2).astype(np.int64)
    dl_topic, dl_count, dl_nnz = build_doc_lists(doc_ptr, ndk)
    doc_topic_from_lists(doc_ptr, dl_topic, dl_count, dl_nnz, 2)
    doc_loglik_lists(doc_ptr, dl_count, dl_nnz, 2, 0.1)
    for sampler in SAMPLERS.values():
        sampler(0, len(run_word), run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, ndk, nwk, nk,
                0.1, 0.01, 0.02, 2, 0, dl_topic, dl_count, dl_nnz)
    doc_loglik(ndk, doc_ptr, 0.1)
    word_loglik(nwk, 0.01)
    pairs = [(t, c) for t in (np.int16, np.int32) for c in (np.uint16, np.int32)]
    for ptr in (np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int32)):
        count_row_nnz(nwk, ptr)
        for ttype, ctype in pairs:
            topics, counts = np.zeros(ptr[-1], ttype), np.zeros(ptr[-1], ctype)
            gather_rows(nwk, ptr, topics, counts)
            scatter_rows(nwk, ptr, topics, counts)
            zero_rows(nwk, ptr, topics)
    phi = np.full((2, 2), 0.5)
    theta = fold_in(indptr, indices, data, phi, 0.1, 2, 1, 0)
    doc_word_loglik(indptr, indices, data, theta, phi)
