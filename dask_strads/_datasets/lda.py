"""Seeded synthetic corpora drawn from a known LDA model (tests, demos, benchmarks)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["make_lda_corpus"]


def make_lda_corpus(
    n_docs: int = 1000,
    n_words: int = 500,
    n_topics: int = 10,
    *,
    doc_length: int = 100,
    doc_topic_prior: float | np.ndarray = 0.1,
    topic_word_prior: float = 0.01,
    zipf: float = 0.0,
    random_state: int | np.random.Generator | None = 0,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Draw a document-term count matrix from the LDA generative model.

    Each topic is ``phi_k ~ Dirichlet(topic_word_prior * V * base)`` where ``base`` is
    uniform (``zipf=0``) or Zipf-shaped (``base_w ∝ 1 / (w + 10) ** zipf``, so that a
    few words are frequent in every topic, like natural text); each document has
    ``theta_d ~ Dirichlet(doc_topic_prior)`` and a Poisson(``doc_length``) number of
    tokens (at least one), each drawn from ``z ~ theta_d`` then ``w ~ phi_z``.

    Parameters
    ----------
    n_docs, n_words, n_topics : int
        Corpus shape D x V and number of true topics K.
    doc_length : int
        Mean number of tokens per document.
    doc_topic_prior, topic_word_prior : float
        Dirichlet concentrations (per component) of the generating model;
        ``doc_topic_prior`` may also be ``n_topics`` values (an asymmetric prior).
    zipf : float
        Exponent of the Zipf base measure of the topic-word priors (0: uniform).
    random_state : int, Generator or None
        Seed.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_docs, n_words), dtype int32
        Document-term counts.
    topic_word : ndarray of shape (n_topics, n_words)
        The true topic-word distributions (rows sum to one).

    Examples
    --------
    >>> X, topics = make_lda_corpus(50, 30, 3, doc_length=20, random_state=0)
    >>> X.shape, topics.shape
    ((50, 30), (3, 30))
    """
    for name, value in (("n_docs", n_docs), ("n_words", n_words), ("n_topics", n_topics)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    prior = np.asarray(doc_topic_prior, dtype=np.float64)
    if prior.ndim not in (0, 1) or (prior.ndim == 1 and prior.shape != (n_topics,)) or \
            not np.all(prior > 0) or not np.all(np.isfinite(prior)):
        raise ValueError(f"doc_topic_prior must be a positive number or {n_topics} of them, "
                         f"got {doc_topic_prior!r}")
    rng = np.random.default_rng(random_state)
    base = 1.0 / (np.arange(n_words) + 10.0) ** zipf
    base *= n_words / base.sum()
    topic_word = rng.dirichlet(topic_word_prior * base, size=n_topics)
    # Dirichlet draws with tiny concentrations underflow to exact zeros (and NaN rows)
    topic_word = np.nan_to_num(topic_word) + 1e-300
    topic_word /= topic_word.sum(axis=1, keepdims=True)
    theta = rng.gamma(prior, size=(n_docs, n_topics)) + 1e-300
    theta /= theta.sum(axis=1, keepdims=True)
    lengths = np.maximum(rng.poisson(doc_length, size=n_docs), 1)
    n_tokens = int(lengths.sum())
    docs = np.repeat(np.arange(n_docs), lengths)
    # topic of each token by inverse CDF on its document's theta
    cdf = np.cumsum(theta, axis=1)
    cdf[:, -1] = 1.0
    u = rng.random(n_tokens)
    topics = np.empty(n_tokens, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    for d in range(n_docs):
        lo, hi = starts[d], starts[d + 1]
        topics[lo:hi] = np.searchsorted(cdf[d], u[lo:hi], side="right")
    np.minimum(topics, n_topics - 1, out=topics)
    # word of each token, grouped by topic
    words = np.empty(n_tokens, dtype=np.int64)
    order = np.argsort(topics, kind="stable")
    bounds = np.searchsorted(topics[order], np.arange(n_topics + 1))
    wcdf = np.cumsum(topic_word, axis=1)
    wcdf[:, -1] = 1.0
    for k in range(n_topics):
        idx = order[bounds[k]:bounds[k + 1]]
        words[idx] = np.searchsorted(wcdf[k], rng.random(idx.size), side="right")
    np.minimum(words, n_words - 1, out=words)
    X = sp.csr_matrix(
        (np.ones(n_tokens, dtype=np.int32), (docs, words)), shape=(n_docs, n_words)
    )
    X.sum_duplicates()
    return X, topic_word
