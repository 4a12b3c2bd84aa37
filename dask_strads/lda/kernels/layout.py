"""A document shard's token layout (doc-major topics, word-major runs; see the package
docstring) and its doc-topic counts, dense or as the sparse sampler's doc lists."""

from __future__ import annotations

import numba
import numpy as np

from dask_strads.lda.kernels.common import _JIT


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
