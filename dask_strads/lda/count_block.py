"""A vocabulary block as it travels between workers (:class:`CountBlock`), and the
worker's buffers that blocks arriving there reuse."""

from __future__ import annotations

import threading

import numpy as np

from dask_strads.lda import kernels

__all__ = ["CountBlock"]


class CountBlock:
    """A vocabulary block's word-topic counts as they travel: the non-zero entries row by
    row (CSR without the dense zeros, which are most of a block once topics are
    sparse: at K = 1000 a block of 25000 words is 100 MB dense), in the smallest integer
    types that hold them.

    ``unpack(scratch)`` rebuilds the dense (V_b, K) int32 block, on a worker in memory
    recycled from blocks that left it (see ``LDAProgram.recycle_carried``).
    """

    __slots__ = ("shape", "indptr", "topics", "counts")

    def __init__(self, shape, indptr, topics, counts):
        self.shape = (int(shape[0]), int(shape[1]))
        self.indptr = indptr
        self.topics = topics
        self.counts = counts

    @classmethod
    def pack(cls, nwk: np.ndarray, worth: float = 0.5) -> CountBlock | None:
        """``nwk`` packed, or None when packing would not save ``1 - worth`` of its bytes."""
        n_rows, n_topics = nwk.shape
        indptr = np.empty(n_rows + 1, dtype=np.int64)
        big = int(kernels.count_row_nnz(nwk, indptr))
        nnz = int(indptr[-1])
        ttype = np.int16 if n_topics <= np.iinfo(np.int16).max else np.int32
        ctype = np.uint16 if big <= np.iinfo(np.uint16).max else np.int32
        if nnz < np.iinfo(np.int32).max:
            indptr = indptr.astype(np.int32)
        size = indptr.nbytes + nnz * (np.dtype(ttype).itemsize + np.dtype(ctype).itemsize)
        if size > worth * nwk.nbytes:
            return None
        topics = np.empty(nnz, dtype=ttype)
        counts = np.empty(nnz, dtype=ctype)
        kernels.gather_rows(nwk, indptr, topics, counts)
        return cls(nwk.shape, indptr, topics, counts)

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.topics.nbytes + self.counts.nbytes

    def unpack(self, scratch: dict | None = None) -> np.ndarray:
        out = take_buffer(scratch, self.shape) if scratch is not None else None
        if out is None:
            out = np.zeros(self.shape, dtype=np.int32)
        kernels.scatter_rows(out, self.indptr, self.topics, self.counts)
        return out

    def __reduce__(self):
        return (CountBlock, (self.shape, self.indptr, self.topics, self.counts))


# A worker keeps at most this many count buffers for arriving blocks: with a block in
# each direction per sub-round, two serve any rotation.
_POOL_SIZE = 2


def take_buffer(scratch: dict, shape) -> np.ndarray | None:
    """A zeroed (V_b, K) int32 array from the worker's recycled buffers, or None."""
    size = shape[0] * shape[1]
    with scratch.setdefault("lock", threading.Lock()):
        pool = scratch.get("buffers", [])
        fits = [i for i, item in enumerate(pool) if item[0].shape[0] >= size]
        if not fits:
            return None
        flat, extent, packed = pool.pop(min(fits, key=lambda i: pool[i][0].shape[0]))
    # the buffer still holds the block that left: zero its entries (known from the form
    # it left in, O(non-zeros)), or all it held
    if packed is not None:
        kernels.zero_rows(flat[:packed.shape[0] * packed.shape[1]].reshape(packed.shape),
                          packed.indptr, packed.topics)
    else:
        flat[:extent].fill(0)
    return flat[:size].reshape(shape)


def give_buffer(scratch: dict, value: np.ndarray, packed: CountBlock | None) -> None:
    """Keep the memory of a block that left this worker for the next one to arrive."""
    root = value
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.dtype != np.int32 or not root.flags.c_contiguous or not root.flags.writeable:
        return
    if not value.flags.c_contiguous or (value.__array_interface__["data"][0]
                                        != root.__array_interface__["data"][0]):
        return  # not a leading view of its buffer: nothing to reuse safely
    flat = root.reshape(-1)
    with scratch.setdefault("lock", threading.Lock()):
        pool = scratch.setdefault("buffers", [])
        if len(pool) < _POOL_SIZE:
            pool.append((flat, value.size, packed if isinstance(packed, CountBlock) else None))
