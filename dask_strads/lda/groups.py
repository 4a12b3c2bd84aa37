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

import threading
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
        T``), shard ``t`` on thread ``t`` throughout, every step ending on all threads
        before the next starts: ``out[t][u]``. An error on one thread stops all at the
        end of the step and is raised here."""
        T = self.threads
        out = [[None] * T for _ in range(T)]
        if T == 1:
            out[0][0] = work(0, 0)
            return out
        step_done = threading.Barrier(T)

        def run(t: int) -> None:
            for u in range(T):
                try:
                    out[t][u] = work(t, u)
                except BaseException:
                    step_done.abort()  # the others stop at the step's end, not wait
                    raise
                step_done.wait()

        errors = []
        with ThreadPoolExecutor(T - 1, thread_name_prefix="dask-strads-lda") as pool:
            others = [pool.submit(run, t) for t in range(1, T)]
            try:
                run(0)
            except BaseException as exc:
                errors.append(exc)
            errors += [e for e in (f.exception() for f in others) if e is not None]
        if errors:  # the first error that is not another thread's broken barrier
            raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)),
                       errors[0])
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
