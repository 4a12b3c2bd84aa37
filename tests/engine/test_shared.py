"""Large shards reach workers on the client's machine through shared memory."""

from __future__ import annotations

import gc
import glob
import logging
import mmap
import os
import subprocess
import sys

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from dask_strads.engine import run, shared
from dask_strads.engine.arguments import _engine_settings

from .programs import BlockLeastSquares
from .test_loop import N_BLOCKS, coef_of, lstsq_problem

pytestmark = pytest.mark.skipif(not shared.available(), reason="no /dev/shm")


def _mapped(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a memory-mapped file."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


@pytest.mark.parametrize("make", [
    lambda: np.arange(12.0).reshape(3, 4),
    lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    lambda: sp.random(30, 20, density=0.2, format="csc", random_state=0),
    lambda: (np.ones(5, dtype=np.int32), {"y": np.linspace(0, 1, 7)}),
])
def test_a_shared_shard_attaches_to_an_equal_writable_copy_on_write_view(make):
    obj = make()
    path = shared.new_path("dask-strads-test")
    handle = shared.share(obj, path)
    try:
        back = shared.attach(handle)
        arrays = [back] if isinstance(back, np.ndarray) else \
            [back.data, back.indices, back.indptr] if sp.issparse(back) else \
            [back[0], back[1]["y"]]
        expected = [obj] if isinstance(obj, np.ndarray) else \
            [obj.data, obj.indices, obj.indptr] if sp.issparse(obj) else [obj[0], obj[1]["y"]]
        for a, e in zip(arrays, expected, strict=True):
            np.testing.assert_array_equal(a, e)
            assert a.dtype == e.dtype and a.flags.f_contiguous == e.flags.f_contiguous
            assert _mapped(a) and a.flags.writeable
            a[...] = 0  # the worker's own page: the file keeps the client's bytes
        again = shared.attach(handle)
        first = again if isinstance(again, np.ndarray) else \
            again.data if sp.issparse(again) else again[0]
        np.testing.assert_array_equal(first, expected[0])
    finally:
        shared.remove([path])
    assert not os.path.exists(path)


def test_an_object_without_buffers_is_not_shared():
    path = shared.new_path("dask-strads-test")
    assert shared.share({"a": 1}, path) is None
    assert not os.path.exists(path)


def _file_of_a_process_that_is_gone() -> str:
    """A file in /dev/shm made by a process that exited without removing it."""
    made = subprocess.run(
        [sys.executable, "-c", "from dask_strads.engine import shared; "
         "path = shared.new_path('dask-strads-test'); open(path, 'wb').close(); print(path)"],
        capture_output=True, text=True, check=True)
    return made.stdout.strip()


def test_the_files_of_a_process_that_is_gone_are_removed_and_no_others():
    orphan = _file_of_a_process_that_is_gone()
    ours = shared.new_path("dask-strads-test")
    name = os.path.basename(orphan)
    namespace = int(name.split("-n")[-1].split("p")[0])
    elsewhere = orphan.replace(f"-n{namespace}p", f"-n{namespace + 1}p")  # another container
    unnamed = os.path.join(shared.SHM_DIR, "dask-strads-test-by-hand")
    for path in (ours, elsewhere, unnamed):
        open(path, "wb").close()
    try:
        assert os.path.exists(orphan)
        assert orphan in shared.remove_orphans()  # (with any a killed test left)
        assert not os.path.exists(orphan)
        assert all(os.path.exists(p) for p in (ours, elsewhere, unnamed))
    finally:
        shared.remove([orphan, ours, elsewhere, unnamed])


def test_a_fit_removes_what_a_killed_process_left(client, caplog):
    orphan = _file_of_a_process_that_is_gone()
    X, y, data = lstsq_problem()
    with dask.config.set({"dask-strads.engine.shared-memory-above": 0}), \
            caplog.at_level(logging.INFO, logger="dask_strads"):
        res = run(_ExpectShards(y, mapped=True), _fortran(data), client,
                  max_rounds=5000, progress=False, transport="direct")
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)
    assert not os.path.exists(orphan)
    assert f"removed {orphan}, left by a process killed mid-fit" in caplog.text


class _ExpectShards(BlockLeastSquares):
    """Fails on the worker unless each shard's columns arrive mapped (or not)."""

    def __init__(self, y, mapped: bool):
        super().__init__(y, parallel=N_BLOCKS)
        self.mapped = mapped

    def init_block(self, block_id, shard):
        if _mapped(shard[0]) != self.mapped:
            raise AssertionError(f"block {block_id}: shard mapped {_mapped(shard[0])}, "
                                 f"expected {self.mapped}")
        return super().init_block(block_id, shard)


def _fortran(data):
    return {b: (np.asfortranarray(X_b), y) for b, (X_b, y) in data.items()}


@pytest.mark.parametrize("above", [0, "1GiB", None])
def test_large_shards_reach_process_workers_mapped_and_the_files_go_with_the_fit(
        client, above):
    X, y, data = lstsq_problem()
    before = set(glob.glob(os.path.join(shared.SHM_DIR, "dask-strads-*")))
    with dask.config.set({"dask-strads.engine.shared-memory-above": above}):
        res = run(_ExpectShards(y, mapped=above == 0), _fortran(data), client,
                  max_rounds=5000, progress=False, transport="direct")
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)
    # nothing of the fit is left (it may remove what a killed process left)
    assert set(glob.glob(os.path.join(shared.SHM_DIR, "dask-strads-*"))) <= before


def test_in_process_workers_get_the_shards_themselves(thread_client):
    X, y, data = lstsq_problem()
    with dask.config.set({"dask-strads.engine.shared-memory-above": 0}):
        res = run(_ExpectShards(y, mapped=False), _fortran(data), thread_client,
                  max_rounds=5000, progress=False, transport="direct")
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_a_lasso_on_mapped_shards_equals_one_on_sent_shards(client):
    from dask_strads import Lasso
    from dask_strads._datasets.lasso import make_correlated_regression

    X, y, _ = make_correlated_regression(300, 600, n_informative=10, correlation=0.5,
                                         random_state=0)
    fits = {}
    for above in (None, 0):
        with dask.config.set({"dask-strads.engine.shared-memory-above": above,
                              "dask-strads.cd.min-block-nnz": 1}):
            fits[above] = Lasso(alpha=0.05, tol=1e-10, client=client, progress=False).fit(X, y)
    assert fits[0].n_blocks_ == 2

    def objective(est):
        r = y - X @ est.coef_ - est.intercept_
        return r @ r / (2 * len(y)) + 0.05 * np.abs(est.coef_).sum()

    # the same problem solved: each fit within its duality gap of the optimum (their
    # paths follow measured times, so they need not stop at the same point)
    gap = max(fits[0].dual_gap_, fits[None].dual_gap_)
    assert abs(objective(fits[0]) - objective(fits[None])) <= gap + 1e-15
    np.testing.assert_allclose(fits[0].coef_, fits[None].coef_, rtol=0, atol=1e-6)


def test_a_full_dev_shm_means_the_socket(client, monkeypatch):
    """A container's /dev/shm is often 64 MB: no room is found out before any write (a
    write to a full tmpfs would kill the client with SIGBUS) and the shard goes through
    the socket, the fit as usual."""
    import errno

    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_room)
    path = shared.new_path("dask-strads-test")
    assert shared.share(np.ones(1000), path) is None
    assert not os.path.exists(path)
    X, y, data = lstsq_problem()
    before = set(glob.glob(os.path.join(shared.SHM_DIR, "dask-strads-*")))
    with dask.config.set({"dask-strads.engine.shared-memory-above": 0}):
        res = run(_ExpectShards(y, mapped=False), _fortran(data), client,
                  max_rounds=5000, progress=False, transport="direct")
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)
    # nothing of the fit is left (it may remove what a killed process left)
    assert set(glob.glob(os.path.join(shared.SHM_DIR, "dask-strads-*"))) <= before


@pytest.mark.parametrize("value", [-1, "lots", True])
def test_shared_memory_above_must_be_a_size(value):
    with dask.config.set({"dask-strads.engine.shared-memory-above": value}), \
            pytest.raises(ValueError, match="shared-memory-above"):
        _engine_settings()


def test_an_attached_arrays_file_and_offset_are_found_and_open_elsewhere():
    X = np.asfortranarray(np.arange(60.0).reshape(6, 10))
    path = shared.new_path("dask-strads-test")
    handle = shared.share(X, path)
    try:
        back = shared.attach(handle)
        where, offset = shared.mapped_at(back)
        assert where == path and offset == handle.spans[0][0]
        # a block of columns: its first element, 3 columns of 6 in
        assert shared.mapped_at(back[:, 3:]) == (path, offset + 3 * 6 * 8)
        assert shared.mapped_at(back.copy()) is None
        assert shared.mapped_at(X) is None
        maps: dict = {}
        cols = shared.open_mapped(path, offset + 3 * 6 * 8, (6, 7), maps)
        np.testing.assert_array_equal(cols, X[:, 3:])
        assert cols.flags.f_contiguous and cols.flags.writeable  # typed like a block's
        again = shared.open_mapped(path, offset, (6, 10), maps)
        assert list(maps) == [path] and np.shares_memory(again, cols)
    finally:
        shared.remove([path])
    del back
    gc.collect()
    assert all(p != path for p, _, _ in shared._MAPPED.values())  # forgotten once unmapped


# what a Gram matrix is worth depends on the shipping: each run either never or always
# sweeps one
GRAM = {"never": {"dask-strads.cd.gram-max-bytes": 0},
        "always": {"dask-strads.cd.gram-step-cost": 1e-6,
                   "dask-strads.cd.gram-build-cost": 1e-9}}


@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("gram", ["never", "always"])
def test_a_solo_solver_reads_the_other_blocks_columns_in_shared_memory(client, intercept,
                                                                        order, gram):
    """Blocks whose columns lie in /dev/shm send a solver on the same host where they
    lie, not their bytes; the fit is the same bit for bit. A C-ordered X, and one the
    fit centres for its intercept, is laid out (and centred) as it is written there."""
    from dask_strads import Lasso
    from dask_strads._datasets.lasso import make_correlated_regression

    X, y, _ = make_correlated_regression(300, 600, n_informative=20, correlation=0.5,
                                         random_state=1)
    X = np.asarray(X, order=order)
    fits = {}
    for above in (None, 0):
        with dask.config.set({"dask-strads.engine.shared-memory-above": above,
                              "dask-strads.cd.min-block-nnz": 1,
                              # peers made dear: every phase has one solver
                              "dask-strads.cd.peer-sweeps-factor": 1e6, **GRAM[gram]}):
            fits[above] = Lasso(alpha=0.01, tol=1e-10, fit_intercept=intercept,
                                client=client, progress=False).fit(X, y)
    for fit in fits.values():
        assert fit.n_blocks_ == 2
        assert fit.history_["solo_phases"].iloc[-1] > 0
        assert fit.history_["peer_phases"].iloc[-1] == 0
        assert (fit.history_["gram_phases"].iloc[-1] > 0) == (gram == "always")
    assert fits[None].history_["shipped_bytes"].iloc[-1] > 0
    assert fits[0].history_["shipped_bytes"].iloc[-1] == 0
    if gram == "never":
        np.testing.assert_array_equal(fits[0].coef_, fits[None].coef_)
    else:  # the solver (whose columns come first in the matrix) follows what it keeps
        def objective(fit):
            r = y - X @ fit.coef_ - fit.intercept_
            return r @ r / (2 * len(y)) + 0.01 * np.abs(fit.coef_).sum()

        assert objective(fits[0]) == pytest.approx(objective(fits[None]), rel=1e-10)
