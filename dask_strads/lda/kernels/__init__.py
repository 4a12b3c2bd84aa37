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
The doc-topic prior ``alpha`` is a (K,) float64 array everywhere (asymmetric, or a
constant array for a symmetric prior, which keeps a scalar prior's arithmetic; see
``prior``).

Samplers (all sample each token of a word in turn, holding the word's row; the same
signature, the last three arrays are the sparse doc lists of ``sample_sparse``):

``sample_sparse``
    Exact collapsed Gibbs with two buckets: ``p(k) ∝ n_dk phi_w(k) + alpha_k phi_w(k)``;
    the doc bucket over the document's non-zero topics (sparse lists), the smoothing
    bucket from two-level sums over ``alpha_k phi_w(k)`` kept current (O(1) to keep, O(sqrt K) for
    the rare draw from it). O(nnz_d) per token, with a prefetch of the doc list.
``sample_mh``
    Metropolis-Hastings with alternating doc and word proposals (LightLDA's cycle),
    exact for the collapsed posterior and O(1) per token, with no table to build: the
    doc proposal ``q(t) ∝ n_dt + alpha_t`` is a random slot of the document (the token's
    own slot included, holding its current topic) or, with weight ``sum alpha``, a topic
    drawn from alpha (uniform for a symmetric one, else from an alias table built per
    call); its doc factor cancels, leaving the acceptance ``phi_w(t) / phi_w(s)`` with
    ``phi_w(k) = (n_wk + beta) / (n_k + V beta)``. The word proposal ``q(t) ∝ m_wt +
    beta`` is a random slot of the word's run in this shard (``m_w``: the shard's own
    counts of the word, which are ``n_w`` on one shard) or a uniform topic, accepted with
    ``(n_dt + alpha_t)(n_wt + beta)(n_s + V beta)(m_ws + beta)`` over the same with ``s``
    and ``t`` swapped. Both proposals read current counts, so the chain's stationary
    distribution is the exact posterior. The slots the proposals will pick are drawn 16
    tokens ahead and their topics and doc-topic counts prefetched: the cost is a few
    cache misses per token whatever K. It mixes less per sweep than Gibbs, more per
    second (``mh_steps`` pairs of proposals per token).
``sample_gibbs``
    Plain collapsed Gibbs sampling, O(K) per token (the reference).

Modules, one concept each: ``layout`` (tokens, doc-topic counts, doc lists),
``count_blocks`` (a carried block's packed form), ``prior`` (alpha's forms and
histograms), ``mh``, ``dense`` (``sample_gibbs`` and
``sample_dense``) and ``sparse`` (the samplers), ``loglik``, ``fold_in``; their shared
parts are ``common`` (jit options, prefetch, random numbers), ``sums`` (two-level sums)
and ``tables`` (log and lgamma tables). Every name is re-exported here.

numba's on-disk cache (``cache=True``) checks a function against its own file only: after
editing a helper module (``common``, ``sums``, ``tables``, ``prior``), touch the modules
that inline from it or clear the cache (an installed release rewrites every file; the
test session's ``conftest`` deletes a stale cache of this package).
"""

from __future__ import annotations

import numpy as np

# the tests' names for the shared parts (numba functions of their own)
from dask_strads.lda.kernels.common import _prefetch as _prefetch
from dask_strads.lda.kernels.count_blocks import count_row_nnz, gather_rows, scatter_rows, zero_rows
from dask_strads.lda.kernels.dense import sample_dense, sample_gibbs
from dask_strads.lda.kernels.fold_in import fold_in
from dask_strads.lda.kernels.layout import (
    add_block_counts,
    build_doc_lists,
    build_tokens,
    count_doc_topic,
    doc_topic_from_lists,
)
from dask_strads.lda.kernels.loglik import (
    doc_loglik,
    doc_loglik_lists,
    doc_word_loglik,
    topic_loglik,
    word_loglik,
)
from dask_strads.lda.kernels.mh import sample_mh
from dask_strads.lda.kernels.prior import doc_topic_histogram, doc_topic_histogram_lists
from dask_strads.lda.kernels.sparse import sample_sparse, sparse_gibbs
from dask_strads.lda.kernels.sums import _block_shift as _block_shift
from dask_strads.lda.kernels.sums import _sums_add as _sums_add
from dask_strads.lda.kernels.sums import _sums_build as _sums_build
from dask_strads.lda.kernels.sums import _sums_find as _sums_find

__all__ = [
    "SAMPLERS", "add_block_counts", "build_doc_lists", "build_tokens", "count_doc_topic",
    "count_row_nnz", "doc_loglik", "doc_loglik_lists", "doc_topic_from_lists",
    "doc_topic_histogram", "doc_topic_histogram_lists",
    "doc_word_loglik", "fold_in", "gather_rows", "sample_dense", "sample_gibbs", "sample_mh",
    "sample_sparse", "scatter_rows", "sparse_gibbs", "topic_loglik", "warm_up", "word_loglik",
    "zero_rows",
]

SAMPLERS = {"sparse": sample_sparse, "mh": sample_mh, "dense": sample_dense,
            "gibbs": sample_gibbs}


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
    alpha = np.full(2, 0.1)
    doc_loglik_lists(doc_ptr, dl_topic, dl_count, dl_nnz, alpha)
    for sampler in SAMPLERS.values():
        sampler(0, len(run_word), run_word, run_ptr, tok_doc, tok_pos, zd, doc_ptr, ndk, nwk, nk,
                alpha, 0.01, 0.02, 2, 0, dl_topic, dl_count, dl_nnz)
    doc_loglik(ndk, doc_ptr, alpha)
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
    theta = fold_in(indptr, indices, data, phi, alpha, 2, 1, 0)
    doc_word_loglik(indptr, indices, data, theta, phi)
    doc_topic_histogram(ndk, 2)
    doc_topic_histogram_lists(doc_ptr, dl_topic, dl_count, dl_nnz, 2, 2)
