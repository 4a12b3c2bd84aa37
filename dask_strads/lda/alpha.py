"""Optimisation of an asymmetric doc-topic prior alpha by Minka's fixed point (as MALLET and
tomotopy do), from histograms the document shards return.

One update iterates ``MINKA_ITERATIONS`` times (tomotopy's number)::

    alpha_k <- max(alpha_k * sum_d [psi(n_dk + alpha_k) - psi(alpha_k)]
                             / sum_d [psi(n_d + sum alpha) - psi(sum alpha)], MIN_ALPHA)

Both sums only depend on how many documents have ``n_dk = c`` (per topic ``k`` and count
``c >= 1``; ``c = 0`` adds nothing) and how many have length ``n``: each shard returns
those counts (its non-zero histogram entries), O(K x longest document) at most, never its
doc-topic table. The update is a function of the histograms and the current alpha only,
summed in block order: the same round state gives the same alpha, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MINKA_ITERATIONS", "MIN_ALPHA", "minka_update", "shard_histograms"]

MINKA_ITERATIONS = 10
MIN_ALPHA = 1e-5  # a topic no document uses would otherwise reach alpha_k = 0


def shard_histograms(hist: np.ndarray, doc_lengths: np.ndarray) -> dict[str, np.ndarray]:
    """A shard's histograms as they travel: ``hist`` (K, C + 1) documents with ``n_dk = c``
    (``kernels.doc_topic_histogram``) as its non-zero entries, and the documents per
    length (lengths >= 1)."""
    topic, count = np.nonzero(hist)
    lengths, per_length = np.unique(np.asarray(doc_lengths, dtype=np.int64), return_counts=True)
    keep = lengths > 0
    return {"topic": topic.astype(np.int64), "count": count.astype(np.int64),
            "docs": hist[topic, count].astype(np.int64),
            "length": lengths[keep], "length_docs": per_length[keep].astype(np.int64)}


def minka_update(alpha: np.ndarray, histograms: Sequence[dict[str, np.ndarray]],
                 n_iter: int = MINKA_ITERATIONS, floor: float = MIN_ALPHA) -> np.ndarray:
    """The fixed-point update of ``alpha`` (K,) from the shards' ``shard_histograms``."""
    from scipy.special import digamma

    alpha = np.array(alpha, dtype=np.float64)
    topic = np.concatenate([h["topic"] for h in histograms])
    count = np.concatenate([h["count"] for h in histograms]).astype(np.float64)
    docs = np.concatenate([h["docs"] for h in histograms]).astype(np.float64)
    length = np.concatenate([h["length"] for h in histograms]).astype(np.float64)
    length_docs = np.concatenate([h["length_docs"] for h in histograms]).astype(np.float64)
    for _ in range(int(n_iter)):
        total = alpha.sum()
        den = np.sum(length_docs * (digamma(length + total) - digamma(total)))
        if not den > 0:  # no document has a token: nothing to learn from
            return alpha
        a = alpha[topic]
        num = np.bincount(topic, weights=docs * (digamma(count + a) - digamma(a)),
                          minlength=len(alpha))
        alpha = np.maximum(alpha * num / den, floor)
    return alpha
