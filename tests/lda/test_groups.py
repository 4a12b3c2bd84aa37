"""A block's threads (groups.py): the inner rotation's order and errors, and the
vocabulary blocks made of fine blocks."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from dask_strads.lda.groups import ShardGroup, carried_partition
from dask_strads.lda.program import partition_vocabulary


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_every_step_ends_on_every_thread_before_the_next_starts(threads):
    seen, lock = [], threading.Lock()

    def work(t, u):
        time.sleep(0.001 * ((t * 7 + u * 3) % 4))  # the threads finish out of order
        with lock:
            seen.append((u, t, threading.get_ident()))
        return t * 10 + u

    out = ShardGroup(0, [None] * threads).rotate(work)
    assert out == [[t * 10 + u for u in range(threads)] for t in range(threads)]
    steps = [u for u, _, _ in seen]
    assert steps == sorted(steps) and len(seen) == threads ** 2
    # a shard keeps its thread, and the shards of a step run on different threads
    for u in range(threads):
        assert len({ident for s, _, ident in seen if s == u}) == threads


@pytest.mark.parametrize("failing", [0, 1])
def test_an_error_in_one_thread_stops_the_rotation_and_is_raised(failing):
    started = []

    def work(t, u):
        started.append((t, u))
        if (t, u) == (failing, 1):
            raise ZeroDivisionError("shard failed")
        return None

    with pytest.raises(ZeroDivisionError, match="shard failed"):
        ShardGroup(0, [None] * 3).rotate(work)
    assert not [s for s in started if s[1] == 2]  # no thread went on to the next step


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_vocabulary_block_is_its_fine_blocks_one_after_the_other(threads):
    counts = np.random.default_rng(0).zipf(1.5, 300).clip(max=10_000)
    wb, wl, bw = partition_vocabulary(counts, 2 * threads)
    block, row, rows, offsets = carried_partition(wb, wl, bw, threads)
    assert rows.tolist() == [bw[:threads].sum(), bw[threads:].sum()]
    np.testing.assert_array_equal(block, wb // threads)
    for q in range(2):  # every row of a block holds one word, fine block j at its offsets
        words = np.flatnonzero(block == q)
        assert sorted(row[words]) == list(range(rows[q]))
        for j in range(threads):
            fine = words[wb[words] == q * threads + j]
            np.testing.assert_array_equal(row[fine] - offsets[q, j], wl[fine])
            assert offsets[q, j + 1] - offsets[q, j] == bw[q * threads + j]
