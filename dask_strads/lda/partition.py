"""How LDA cuts a corpus: the vocabulary into blocks balanced by tokens and rows, the
documents into contiguous shards balanced by tokens."""

from __future__ import annotations

import numpy as np

__all__ = ["partition_documents", "partition_vocabulary"]


def partition_vocabulary(word_counts: np.ndarray, n_blocks: int) -> tuple[np.ndarray, np.ndarray,
                                                                          np.ndarray]:
    """Split the vocabulary into ``n_blocks`` blocks balanced by token count.

    Greedy longest-processing-time: words in decreasing count order go to the block
    with the smallest share of tokens plus share of words so far, which balances the
    sampling work per sub-round (frequent words) and the rows, i.e. the memory, per
    block (the long tail of rare words).

    Returns
    -------
    word_block : ndarray (V,) int32
        Block of each word.
    word_local : ndarray (V,) int32
        Row of each word inside its block (rows keep increasing word order).
    block_words : ndarray (n_blocks,) int64
        Number of words in each block.
    """
    word_counts = np.asarray(word_counts, dtype=np.int64)
    n_words = word_counts.shape[0]
    order = np.argsort(-word_counts, kind="stable")
    word_block = np.empty(n_words, dtype=np.int32)
    _lpt(word_counts[order], order, n_blocks, word_block)
    block_words = np.bincount(word_block, minlength=n_blocks).astype(np.int64)
    # rows inside a block follow the global word order
    word_local = np.empty(n_words, dtype=np.int32)
    by_block = np.argsort(word_block, kind="stable")
    starts = np.concatenate(([0], np.cumsum(block_words)))
    for b in range(n_blocks):
        word_local[by_block[starts[b]:starts[b + 1]]] = np.arange(block_words[b], dtype=np.int32)
    return word_block, word_local, block_words


def _lpt(sorted_counts, order, n_blocks, out):
    import heapq

    # cost = share of tokens + share of rows, so frequent words spread the sampling work
    # and the long tail of rare words spreads the rows (the block's memory)
    total = max(float(sorted_counts.sum()), 1.0)
    n_words = max(len(order), 1)
    heap = [(0.0, b) for b in range(n_blocks)]
    for c, w in zip(sorted_counts.tolist(), order.tolist(), strict=True):
        cost, b = heapq.heappop(heap)
        out[w] = b
        heapq.heappush(heap, (cost + c / total + 1.0 / n_words, b))


def partition_documents(doc_lengths: np.ndarray, n_blocks: int) -> np.ndarray:
    """Contiguous document ranges with about equal token counts: (n_blocks + 1,) bounds."""
    cum = np.concatenate(([0], np.cumsum(np.asarray(doc_lengths, dtype=np.int64))))
    targets = cum[-1] * np.arange(1, n_blocks) / n_blocks
    inner = np.searchsorted(cum, targets, side="left")
    bounds = np.concatenate(([0], inner, [len(cum) - 1])).astype(np.int64)
    return np.maximum.accumulate(bounds)
