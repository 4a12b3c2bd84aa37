"""Several threads per block: a block of the rotation is a group of document shards.

With ``T`` threads per block, the vocabulary is cut into ``P x T`` fine blocks and the
documents into ``P x T`` shards. Vocabulary block ``q`` of the rotation (what travels
between workers) is fine blocks ``q T .. q T + T - 1``, one after the other; resident
block ``p`` is shards ``p T .. p T + T - 1``. A push of block ``p`` with vocabulary block
``q`` runs an inner rotation of ``T`` steps: at step ``u`` shard ``t`` samples fine
block ``(t + u) mod T``, the ``T`` shards in parallel threads (the kernels release the
GIL) and the steps one after another. No two threads ever touch the same words or the
same documents, every shard meets every fine block of ``q`` once, and the inner steps
need no message: one round of the engine does the work of ``T`` sub-rounds.

Each shard keeps its own copy of the topic totals, as shards on different workers do,
so the draws do not depend on the threads' timing: a fit is the same chain on any
cluster with the same number of blocks and threads per block.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = ["ShardGroup", "carried_partition"]


class ShardGroup:
    """The document shards (``DocShard``) of one resident block, in document order."""

    def __init__(self, block_id: Hashable, shards: Sequence):
        self.block_id = block_id
        self.shards = list(shards)

    @property
    def threads(self) -> int:
        return len(self.shards)

    @property
    def n_tokens(self) -> int:
        return sum(s.n_tokens for s in self.shards)

    def doc_topic(self) -> np.ndarray:
        """Dense (D, K) doc-topic counts of the block's documents, in order."""
        return np.concatenate([s.doc_topic() for s in self.shards])

    def rotate(self, work: Callable[[int, int], object]) -> list[list]:
        """``work(t, u)`` for shard ``t`` at inner step ``u`` (fine block ``(t + u) mod
        T``), the shards of a step in parallel: ``out[t][u]``."""
        T = self.threads
        out = [[None] * T for _ in range(T)]
        if T == 1:
            out[0][0] = work(0, 0)
            return out
        with ThreadPoolExecutor(T - 1, thread_name_prefix="dask-strads-lda") as pool:
            for u in range(T):
                others = [pool.submit(work, t, u) for t in range(1, T)]
                try:
                    out[0][u] = work(0, u)
                finally:  # every shard ends the step before the next starts
                    for t, future in enumerate(others, start=1):
                        out[t][u] = future.result()
        return out


def carried_partition(word_block: np.ndarray, word_local: np.ndarray, block_words: np.ndarray,
                      threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From the fine partition (``partition_vocabulary`` into ``P x threads`` blocks) to
    the rotation's: each word's vocabulary block and row in it, the rows per block, and
    the (P, threads + 1) row offsets of the fine blocks inside their vocabulary block."""
    fine = np.asarray(block_words, dtype=np.int64).reshape(-1, threads)
    offsets = np.zeros((fine.shape[0], threads + 1), dtype=np.int64)
    np.cumsum(fine, axis=1, out=offsets[:, 1:])
    word_block = np.asarray(word_block)
    carried_block = (word_block // threads).astype(np.int32)
    carried_local = (offsets[carried_block, word_block % threads]
                     + np.asarray(word_local)).astype(np.int32)
    return carried_block, carried_local, offsets[:, -1].copy(), offsets
