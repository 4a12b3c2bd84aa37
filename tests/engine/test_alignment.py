"""Float arrays reach pushes aligned, whatever offset Dask's messages left them at.

A shard or carried block deserialized on a worker is often a view at an odd offset of
the received message; numpy then cannot use BLAS on it (a 4000 x 20000 ``X' r`` took
170-200 ms instead of 31 ms). The engine realigns shards and carried blocks before the
program sees them.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import sparse

from dask_strads.engine import Plan, Program, run
from dask_strads.engine.wire import realign


def misaligned(values: np.ndarray, order: str = "C", offset: int = 3) -> np.ndarray:
    """A copy of ``values`` stored at ``offset`` bytes into a buffer: not aligned."""
    buf = np.empty(values.nbytes + 16, dtype=np.uint8)
    out = np.ndarray(values.shape, values.dtype, buffer=buf[offset:], order=order)
    out[...] = values
    assert not out.flags.aligned
    return out


def test_a_misaligned_array_becomes_an_aligned_copy_with_its_layout():
    x = misaligned(np.arange(20.0).reshape(4, 5), order="F")
    y = realign(x)
    assert y.flags.aligned and y.flags.f_contiguous
    np.testing.assert_array_equal(y, x)
    x.flags.writeable = False
    assert not realign(x).flags.writeable


def test_aligned_arrays_integers_and_other_objects_pass_unchanged():
    x = np.arange(10.0)
    assert realign(x) is x
    counts = misaligned(np.arange(10, dtype=np.int32))
    assert realign(counts) is counts  # numba reads them misaligned at no cost
    marker = object()
    assert realign(marker) is marker
    assert realign(None) is None


def test_containers_are_walked():
    a = misaligned(np.arange(7.0))
    out = realign({"values": (a, 3), "more": [misaligned(np.ones(3, dtype=np.float32))]})
    assert out["values"][0].flags.aligned and out["values"][1] == 3
    assert out["more"][0].flags.aligned
    np.testing.assert_array_equal(out["values"][0], np.arange(7.0))
    # nothing to realign: the very same containers come back
    fine = {"values": (np.arange(3.0), 1), "more": [np.ones(2)]}
    assert realign(fine) is fine


@pytest.mark.parametrize("fmt", ["csc", "csr"])
def test_scipy_compressed_matrices_get_aligned_buffers(fmt):
    X = sp.random(30, 20, density=0.2, format=fmt, random_state=0)
    dense = X.toarray()
    X.indices = misaligned(X.indices)
    X.data = misaligned(X.data)
    Y = realign(X)
    assert Y.data.flags.aligned
    np.testing.assert_array_equal(Y.toarray(), dense)
    assert not X.data.flags.aligned  # the object passed in is left as it was
    assert realign(Y) is Y


def test_pydata_sparse_gets_aligned_buffers():
    dense = np.arange(12.0).reshape(3, 4) * (np.arange(12).reshape(3, 4) % 3 == 0)
    C = sparse.COO.from_numpy(dense)
    C.data = misaligned(C.data)
    out = realign(C)
    assert out.data.flags.aligned
    np.testing.assert_array_equal(out.todense(), dense)
    assert not C.data.flags.aligned


class AlignmentProbe(Program):
    """Shards arrive misaligned (an in-process cluster passes them by reference) and
    every push hands on its carried block misaligned: pushes must see them aligned."""

    name = "alignment"
    transport = "tasks"

    def __init__(self, n_blocks: int):
        self.n_blocks = n_blocks

    def init_block(self, block_id, shard):
        return {"shard_aligned": shard.flags.aligned, "shard_sum": float(shard.sum()),
                "carried_aligned": []}

    def init_carried(self, carried_id):
        return np.zeros(5)

    def push(self, block, part, carried=None):
        block["carried_aligned"].append(bool(carried.flags.aligned))
        return {}, misaligned(carried + 1.0)

    def block_result(self, block_id, block):
        return block

    def init_state(self, summaries):
        return {}

    def schedule(self, state, ctx):
        P = self.n_blocks
        return Plan(parts={b: None for b in range(P)},
                    carry={b: (b + ctx.round) % P for b in range(P)})

    def pull(self, state, partials, plan):
        return state


def test_programs_see_aligned_shards_and_carried_blocks(thread_client):
    shards = {b: misaligned(np.full((6, 4), float(b + 1)), order="F") for b in range(2)}
    res = run(AlignmentProbe(2), shards, thread_client, max_rounds=4, progress=False)
    for b in range(2):
        out = res.block_results[b]
        assert out["shard_aligned"]
        assert out["shard_sum"] == 24.0 * (b + 1)
        assert out["carried_aligned"] == [True] * 4
