"""Log-likelihoods: the complete-data ``log p(w, z)`` in its doc, word and topic-total
parts, and the documents' ``log p(w | theta, phi)``."""

from __future__ import annotations

import math

import numba
import numpy as np

from dask_strads.lda.kernels.common import _JIT
from dask_strads.lda.kernels.prior import _prior_parts
from dask_strads.lda.kernels.tables import _lgamma_table, _lgamma_term, _lgamma_term_alpha


@numba.njit(**_JIT)
def doc_loglik(ndk, doc_ptr, alpha):
    """Doc part of the complete-data log-likelihood (the ``lda`` package's ``log p(z)``):
    ``sum_d lgamma(sum alpha) - lgamma(n_d + sum alpha) + sum_k lgamma(n_dk + alpha_k) -
    lgamma(alpha_k)``, ``alpha`` (K,) float64."""
    n_docs, n_topics = ndk.shape
    sym, a0, alpha_sum, _, _ = _prior_parts(alpha)
    lg_alpha = _lgamma_alpha(alpha)
    lg_sum = math.lgamma(alpha_sum)
    table = _lgamma_table(a0)
    ll = 0.0
    for d in range(n_docs):
        ll += lg_sum - math.lgamma(alpha_sum + (doc_ptr[d + 1] - doc_ptr[d]))
        for k in range(n_topics):
            c = ndk[d, k]
            if c > 0:
                ll += _lgamma_term_alpha(table, alpha, lg_alpha, sym, k, c)
    return ll


@numba.njit(**_JIT)
def _lgamma_alpha(alpha):
    out = np.empty(alpha.shape[0], dtype=np.float64)
    for k in range(alpha.shape[0]):
        out[k] = math.lgamma(alpha[k])
    return out


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


@numba.njit(**_JIT)
def doc_loglik_lists(doc_ptr, dl_topic, dl_count, dl_nnz, alpha):
    """``doc_loglik`` from the sparse doc lists."""
    n_docs = doc_ptr.shape[0] - 1
    sym, a0, alpha_sum, _, _ = _prior_parts(alpha)
    lg_alpha = _lgamma_alpha(alpha)
    lg_sum = math.lgamma(alpha_sum)
    table = _lgamma_table(a0)
    ll = 0.0
    for d in range(n_docs):
        lo = doc_ptr[d]
        ll += lg_sum - math.lgamma(alpha_sum + (doc_ptr[d + 1] - lo))
        for j in range(lo, lo + dl_nnz[d]):
            c = dl_count[j]
            if c > 0:
                ll += _lgamma_term_alpha(table, alpha, lg_alpha, sym, dl_topic[j], c)
    return ll


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
