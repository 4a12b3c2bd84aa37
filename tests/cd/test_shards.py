"""Dense X made into column blocks: dask X on the cluster, a piece at a time; X in the
client's memory on the client."""

from __future__ import annotations

import pickle
import time

import dask
import dask.array as da
import numpy as np
import pytest
from dask.sizeof import sizeof
from distributed import Client, LocalCluster

from dask_strads import Lasso
from dask_strads.cd import shards as shards_module
from dask_strads.cd.block import as_block_matrix
from dask_strads.cd.inputs import _block_starts, _local_shards
from dask_strads.cd.shards import (
    CentredColumns,
    ColumnsAsGiven,
    dense_shards,
    piece_bounds,
    waves,
)
from dask_strads.engine import shared


def test_pieces_are_the_chunks_of_x_cut_at_the_block_starts():
    widths = (4, 1, 1, 5, 2, 7)  # chunk edges 0 4 5 6 11 13 20
    pieces = piece_bounds(widths, np.array([0, 9, 20]))
    assert pieces == [[(0, 4), (4, 5), (5, 6), (6, 9)], [(9, 11), (11, 13), (13, 20)]]


def test_waves_group_a_blocks_pieces_up_to_the_wave_bytes(monkeypatch):
    monkeypatch.setattr(shards_module, "WAVE_BYTES", 3 * 10 * 8)  # 3 columns of 10 rows
    nbytes = [w * 10 * 8 for w in (4, 1, 1, 3, 1)]
    # a piece larger than a wave is a wave of its own; the others fill waves in order
    assert waves(nbytes) == [[0], [1, 2], [3], [4]]
    assert sum(waves([8] * 5), []) == [0, 1, 2, 3, 4]


def _layout(X, layout):
    if layout == "C":
        return np.ascontiguousarray(X)
    if layout == "F":
        return np.asfortranarray(X)
    return np.repeat(X, 2, axis=1)[:, ::2]  # every other column of a wider array


@pytest.mark.parametrize("centre", [False, True])
@pytest.mark.parametrize("layout", ["C", "F", "strided", "integers"])
def test_local_blocks_are_the_fortran_columns_of_x_in_any_layout(monkeypatch, centre, layout):
    monkeypatch.setattr(shards_module, "BAND_ROWS", 4)  # several bands, a short last one
    monkeypatch.setattr(shards_module, "SHARE_CHUNK_BYTES", 3 * 30 * 8)  # 3 columns a chunk
    rng = np.random.default_rng(1)
    X = rng.integers(-9, 9, (30, 23)) if layout == "integers" else \
        _layout(rng.standard_normal((30, 23)), layout)
    before = X.copy()
    starts = _block_starts(23, 3)
    made = _local_shards(X, starts, centre)
    for b, (a, z) in enumerate(zip(starts[:-1], starts[1:])):
        cols, shard = X[:, a:z].astype(np.float64), made[b]
        if layout == "F" and not centre:  # Fortran float64 columns are the block as they are
            assert isinstance(shard, np.ndarray) and np.shares_memory(shard, X)
        else:
            assert isinstance(shard, ColumnsAsGiven) and sizeof(shard) >= cols.nbytes
        if centre:
            np.testing.assert_allclose(shard.means, cols.mean(axis=0), rtol=1e-12)
            cols = cols - shard.means
        # the block's matrix, however the shard reaches its worker
        path = shared.new_path("dask-strads-test")
        try:
            mapped = shared.attach(shared.share(shard, path))
            ways = {"this process": as_block_matrix(shard), "shared memory": mapped,
                    "pickled": pickle.loads(pickle.dumps(shard, protocol=5))}
            for way, got in ways.items():
                if centre:
                    assert isinstance(got, CentredColumns), way
                    np.testing.assert_array_equal(got.means, shard.means, err_msg=way)
                    got = got.values
                assert got.flags.f_contiguous and got.dtype == np.float64, way
                np.testing.assert_array_equal(got, cols, err_msg=way)
            values = mapped.values if centre else mapped
            assert shared.mapped_at(values) == (path, 0)  # where solvers read its columns
            if centre:  # the pass that centred the columns took their norms, chunk by chunk
                np.testing.assert_allclose(mapped.squares, (cols**2).sum(axis=0), rtol=1e-12)
        finally:
            shared.remove([path])
    np.testing.assert_array_equal(X, before)


@pytest.fixture(scope="module")
def two_thread_workers():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        yield cluster, client


def _expected(X, a, b, centre):
    cols = X[:, a:b]
    return cols - cols.mean(axis=0) if centre else cols


@pytest.mark.parametrize("centre", [False, True])
def test_blocks_are_the_fortran_columns_of_x(two_thread_workers, monkeypatch, centre):
    _, client = two_thread_workers
    monkeypatch.setattr(shards_module, "WAVE_BYTES", 2 * 30 * 8)
    monkeypatch.setattr(shards_module, "BAND_ROWS", 4)  # C-ordered pieces copied in bands
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 23))
    starts = np.array([0, 12, 23])
    made = client.gather(dense_shards(client, da.from_array(X, chunks=(7, 3)), starts, centre))
    for b, (a, z) in enumerate(zip(starts[:-1], starts[1:])):
        got = made[b]
        if centre:
            assert isinstance(got, CentredColumns)
            np.testing.assert_allclose(got.means, X[:, a:z].mean(axis=0), rtol=1e-12)
            got = got.values
        assert got.flags.f_contiguous and got.shape == (30, z - a)
        np.testing.assert_allclose(got, _expected(X, a, z, centre), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("centre", [False, True])
def test_local_blocks_are_made_as_dask_ones(centre):
    """X in the client's memory: the same blocks, made on the client."""
    from dask_strads.cd.inputs import _prepare_local

    X = np.random.default_rng(1).standard_normal((30, 23))
    prepared = _prepare_local(X, np.ones(30), 2, centre=centre)
    for b, (a, z) in enumerate(zip(prepared.starts[:-1], prepared.starts[1:])):
        got = as_block_matrix(prepared.shards[b])  # laid out where it goes
        assert isinstance(got, CentredColumns) == centre
        got = got.values if centre else got
        assert got.flags.f_contiguous and got.shape == (30, z - a)
        np.testing.assert_allclose(got, _expected(X, a, z, centre), rtol=1e-12, atol=1e-12)


# in-process workers: the process's memory is far above their limits
NO_PROCESS_MEMORY_RULES = {f"distributed.worker.memory.{rule}": False
                           for rule in ("spill", "pause", "terminate")}


def test_dask_counts_a_block_being_made_once_so_nothing_is_spilled(monkeypatch):
    """Dask spills once the bytes it counts pass its target (60% of the limit). Two
    blocks of 1.6 MB on 4.5 MB workers stay under it only if no block is counted twice
    while it is made (as a chain of tasks handing the block on was)."""
    monkeypatch.setattr(shards_module, "WAVE_BYTES", 4 * 200 * 100 * 8)
    with dask.config.set(NO_PROCESS_MEMORY_RULES), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                         memory_limit="4.5MB", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        X = da.random.default_rng(0).standard_normal((200, 2000), chunks=(200, 100))
        shards = dense_shards(client, X, np.array([0, 1000, 2000]), True)
        written = client.run(lambda dask_worker: dask_worker.data.cumulative_metrics[
            "disk-write", "count"])
        assert list(written.values()) == [0, 0]
        held = client.who_has(list(shards.values()))
        assert sorted(w for [w] in held.values()) == sorted(written)  # one block each
        got = client.gather(shards[1])
    np.testing.assert_allclose(got.values, _expected(X.compute(), 1000, 2000, True),
                               rtol=1e-12, atol=1e-12)


def test_pieces_reach_their_block_without_passing_through_a_client(two_thread_workers):
    """X persisted on both workers: a block's pieces come worker to worker (cut where
    their chunk is) and are read from its memory, not sent to a client."""
    _, client = two_thread_workers
    X = client.persist(da.random.default_rng(4).standard_normal((60, 40), chunks=(30, 5)))
    client.rebalance(X)

    def sent_to_clients(dask_worker):
        return sum(e["total"] for e in dask_worker.transfer_outgoing_log if e["who"] is None)

    before = client.run(sent_to_clients)
    shards = dense_shards(client, X, np.array([0, 20, 40]), False)
    assert client.run(sent_to_clients) == before
    got = client.gather(shards[1])
    np.testing.assert_array_equal(got, client.compute(X[:, 20:]).result())


def test_a_chunk_held_elsewhere_sends_only_the_columns_a_block_needs(two_thread_workers):
    """X persisted in chunks of rows spread over both workers: each block takes its half
    of the columns of every chunk, and a chunk on the other worker is cut there, so
    only that half crosses (a whole chunk would be twice the bytes)."""
    _, client = two_thread_workers
    X = client.persist(da.random.default_rng(5).standard_normal((60, 40), chunks=(10, 40)))
    client.rebalance(X)
    held = {key[1]: workers for key, workers in client.who_has(X).items()}
    assert len({w for ws in held.values() for w in ws}) == 2  # both hold chunks

    def received(dask_worker):
        return sum(e["total"] for e in dask_worker.transfer_incoming_log)

    before = client.run(received)
    starts = np.array([0, 20, 40])
    shards = dense_shards(client, X, starts, False)
    maker = {b: w for b, f in shards.items() for w in client.who_has([f])[f.key]}
    cut = 10 * 20 * 8  # a chunk's rows, a block's columns
    needed = {w: 0 for w in before}
    for b in shards:
        needed[maker[b]] += cut * sum(maker[b] not in held[i] for i in held)
    got = {w: n - before[w] for w, n in client.run(received).items()}
    for w in got:  # whole chunks would be twice the bytes
        assert got[w] == needed[w] or needed[w] < got[w] < 2 * needed[w], (got, needed)
    np.testing.assert_array_equal(client.gather(shards[1]), client.compute(X[:, 20:]).result())


_MADE: list = []  # the first row of each chunk _chunk_of_rows made (workers are threads)


def _chunk_of_rows(block_info=None):
    lo = block_info[None]["array-location"][0][0]
    _MADE.append(lo)
    return np.random.default_rng(lo).standard_normal((10, 40))


def _counted_rows():
    """A lazy X in chunks of 10 rows whose chunks record in _MADE each time they are
    made."""
    _MADE.clear()
    return da.map_blocks(_chunk_of_rows, chunks=((10,) * 6, (40,)), dtype=np.float64)


def test_a_lazy_x_whose_chunks_feed_several_blocks_is_computed_once(two_thread_workers):
    """Each chunk of rows holds columns of both blocks: computed once and cut where it
    is, not once per block; let go once the blocks are made."""
    _, client = two_thread_workers
    X = _counted_rows()
    shards = dense_shards(client, X, np.array([0, 20, 40]), True)
    assert sorted(_MADE) == list(range(0, 60, 10))
    expected = np.vstack([np.random.default_rng(lo).standard_normal((10, 40))
                          for lo in range(0, 60, 10)])
    for b, (a, z) in enumerate([(0, 20), (20, 40)]):
        got = client.gather(shards[b])
        np.testing.assert_allclose(got.values, _expected(expected, a, z, True), rtol=1e-12,
                                   atol=1e-12)
    keys = {k for row in X.__dask_keys__() for k in row}

    def held(dask_scheduler):
        return keys & set(dask_scheduler.tasks)

    deadline = time.monotonic() + 10
    while client.run_on_scheduler(held) and time.monotonic() < deadline:
        time.sleep(0.05)  # the client lets go of X in the background
    assert not client.run_on_scheduler(held)


def test_a_lazy_x_is_not_held_whole_where_the_workers_lack_the_room():
    """Held beside the blocks, X would fill more than half the workers' memory: each
    block computes its own pieces instead."""
    X = _counted_rows()  # 19 kB
    with dask.config.set(NO_PROCESS_MEMORY_RULES), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                         memory_limit="35kB", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        dense_shards(client, X, np.array([0, 20, 40]), False)
    assert sorted(_MADE) == sorted(list(range(0, 60, 10)) * 2)


def test_the_scheduler_knows_each_shards_bytes(two_thread_workers):
    _, client = two_thread_workers
    X = np.random.default_rng(3).standard_normal((50, 20))
    futures = dense_shards(client, da.from_array(X, chunks=(50, 5)), np.array([0, 8, 20]),
                           True)

    def nbytes(keys, dask_scheduler=None):
        return [dask_scheduler.tasks[k].nbytes for k in keys]

    known = client.run_on_scheduler(nbytes, [futures[b].key for b in (0, 1)])
    assert known[0] >= 50 * 8 * 8 and known[1] >= 50 * 12 * 8


def test_a_block_lost_with_its_worker_is_made_again():
    """Each block is a chain of tasks from X's graph: the scheduler makes it again."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        X = np.random.default_rng(1).standard_normal((40, 16))
        starts = np.array([0, 8, 16])
        futures = dense_shards(client, da.from_array(X, chunks=(40, 2)), starts, True)
        holder = next(iter(client.who_has([futures[0]]).values()))[0]
        [name] = [n for n, w in cluster.workers.items() if w.address == holder]
        cluster.sync(cluster.workers[name].close)  # not retired: its data is lost
        assert holder not in client.scheduler_info()["workers"]
        got = client.gather(futures[0])
    np.testing.assert_allclose(got.values, _expected(X, 0, 8, True), rtol=1e-12, atol=1e-12)


def test_a_block_made_from_x_computed_once_is_made_again_from_its_graph():
    """X computed once is let go when the blocks are made: a block lost later is made
    from X's graph."""
    X = _counted_rows()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        futures = dense_shards(client, X, np.array([0, 20, 40]), False)
        assert len(_MADE) == 6  # once for both blocks
        holder = next(iter(client.who_has([futures[0]]).values()))[0]
        [name] = [n for n, w in cluster.workers.items() if w.address == holder]
        cluster.sync(cluster.workers[name].close)
        got = client.gather(futures[0])
    assert len(_MADE) > 6
    np.testing.assert_array_equal(got, X[:, :20].compute(scheduler="sync"))


def test_a_non_finite_value_in_a_later_piece_is_reported(two_thread_workers, monkeypatch):
    _, client = two_thread_workers
    monkeypatch.setattr(shards_module, "WAVE_BYTES", 8)
    X = np.random.default_rng(2).standard_normal((20, 12))
    X[3, 11] = np.inf
    with pytest.raises(ValueError, match="X: contains NaN or infinity"):
        Lasso(alpha=0.1, client=client, progress=False).fit(
            da.from_array(X, chunks=(20, 2)), np.ones(20))
