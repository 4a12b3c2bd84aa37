"""Carried array blocks move between the worker processes of one machine through
shared memory: mapped by each, updated in place, never recycled."""

from __future__ import annotations

import errno
import glob
import math
import os

import dask
import numpy as np
import pytest

from dask_strads.engine import run, shared
from dask_strads.engine.carried import _recycle
from dask_strads.engine.plugin import _shares_files_with
from dask_strads.engine.shared_carried import CarriedFiles, mapped, memory_room, prefix

from . import programs

pytestmark = pytest.mark.skipif(not shared.available(), reason="no /dev/shm")


def _files(fit_id: str) -> list:
    return glob.glob(os.path.join(shared.SHM_DIR, prefix(fit_id) + "-*"))


def test_a_block_handed_on_is_copied_once_then_shared_in_place():
    holder, taker = CarriedFiles("t1", 0), CarriedFiles("t1", 0)
    try:
        block = np.arange(12, dtype=np.int32).reshape(3, 4)
        handle = holder.hand("c", block)
        mine = taker.open("c", handle)
        assert mapped(mine) and not mapped(block)
        np.testing.assert_array_equal(mine, block)
        mine[1, 2] = -7  # the taker samples in place ...
        back = taker.hand("c", mine)  # ... and hands the same memory back
        assert back == handle and len(_files("t1")) == 1
        again = holder.open("c", back)
        assert again[1, 2] == -7
        assert holder.hand("c", again) == handle  # no new file, no copy
    finally:
        holder.close()
        taker.close()
    assert _files("t1") == []


def _resident_bytes(view: np.ndarray) -> int:
    """This process's resident bytes of the mapping that holds ``view``."""
    start = view.__array_interface__["data"][0]
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= start < high
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError("mapping not found")


@pytest.mark.parametrize("room, drop", [(0.0, True), ((8 << 20) - 1, True), (8 << 20, False),
                                        (math.inf, False)])
def test_a_holder_keeps_the_pages_of_a_block_it_hands_on_while_two_more_fit(room, drop):
    holder, taker = CarriedFiles("t6", 0), CarriedFiles("t6", 0)
    try:
        view = taker.open("c", holder.hand("c", np.ones((512, 1024))))  # 4 MiB
        view += 1  # the taker's pages are now resident
        assert _resident_bytes(view) == view.nbytes
        taker.hand("c", view, room)
        assert _resident_bytes(view) == (0 if drop else view.nbytes)
        np.testing.assert_array_equal(holder.open("c", taker.hand("c", view)), 2.0)
    finally:
        holder.close()
        taker.close()


class _Worker:
    """What ``memory_room`` reads of a worker: its memory manager and monitor."""

    def __init__(self, limit, rss, target=0.6, spill=0.7, pause=0.8):
        self.memory_manager = type("M", (), dict(
            memory_limit=limit, memory_target_fraction=target,
            memory_spill_fraction=spill, memory_pause_fraction=pause))()
        self.monitor = type("S", (), dict(get_process_memory=lambda _: rss))()


@pytest.mark.parametrize("worker, room", [
    (_Worker(limit=1000, rss=550), 50),  # up to the target
    (_Worker(limit=1000, rss=650), -50),
    (_Worker(limit=1000, rss=650, target=False), 50),  # Dask acts from spill on
    (_Worker(limit=1000, rss=650, target=False, spill=False), 150),
    (_Worker(limit=1000, rss=990, target=False, spill=False, pause=False), math.inf),
    (_Worker(limit=None, rss=10**12), math.inf),  # no limit
    (object(), math.inf),  # not a worker (an in-process store without one)
])
def test_the_room_left_is_up_to_the_first_level_at_which_dask_acts(worker, room):
    assert memory_room(worker) == pytest.approx(room)


def test_a_block_whose_file_its_maker_removed_goes_on_in_a_new_one():
    maker, other = CarriedFiles("t2", 0), CarriedFiles("t2", 0)
    try:
        view = other.open("c", maker.hand("c", np.ones(5)))
        maker.close()  # e.g. a worker retired: its files go, the mapping stays valid
        view[0] = 3.0
        handle = other.hand("c", view)
        assert os.path.exists(handle.path)
        fresh = CarriedFiles("t2", 0)
        np.testing.assert_array_equal(fresh.open("c", handle), [3, 1, 1, 1, 1])
        fresh.close()
    finally:
        other.close()
    assert _files("t2") == []


@pytest.mark.parametrize("value", [{"version": 1}, np.array([object()]), np.zeros(0)])
def test_only_plain_arrays_are_shared(value):
    files = CarriedFiles("t3", 0)
    assert files.hand("c", value) is None
    assert _files("t3") == []


def test_without_room_in_dev_shm_a_block_goes_through_the_socket(monkeypatch):
    def no_room(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_room)
    files = CarriedFiles("t7", 0)
    assert files.hand("c", np.ones(8)) is None
    assert _files("t7") == []


def test_no_marker_when_the_setting_is_off():
    with dask.config.set({"dask-strads.engine.shared-carried": False}):
        assert CarriedFiles("t4", 0).marker() is None
    files = CarriedFiles("t4", 0)
    assert os.path.exists(files.marker())
    files.close()
    assert _files("t4") == []


def _set_shared_carried(on: bool) -> None:
    dask.config.set({"dask-strads.engine.shared-carried": on})


@pytest.mark.parametrize("on", [True, False])
def test_array_blocks_cross_processes_in_shared_memory_when_on(client, on):
    client.run(_set_shared_carried, on)
    try:
        rounds = 8
        res = run(programs.ArrayRotation(2, work_seconds=0.0), {0: None, 1: None}, client,
                  max_rounds=rounds, progress=False)
    finally:
        client.run(_set_shared_carried, True)
    arrivals = res.state["arrivals"]
    # the chain holds: every push saw the version the previous holder made
    assert sorted(v for v, _, _ in arrivals) == sorted(list(range(1, rounds + 1)) * 2)
    moved = [s for _, s, m in arrivals if m]
    assert len(moved) >= rounds  # the two blocks swap workers every round
    assert all(moved) if on else not any(moved)
    for value in res.carried.values():
        assert value[0] == rounds and not mapped(value)  # the client's own copy
    assert _files(res.fit_id) == []


def test_a_block_in_shared_memory_is_never_recycled():
    """Its memory may be another worker's block by the time its wrapper dies."""
    program, scratch = programs.ArrayRotation(1), {}
    files = CarriedFiles("t5", 0)
    try:
        view = files.open("c", files.hand("c", np.zeros(4, dtype=np.int64)))
        programs.take_recycled()
        _recycle(program, "c", [view, None], scratch)
        _recycle(program, "c", [np.zeros(4, dtype=np.int64), None], scratch)
        assert programs.take_recycled() == [("c", 0, False)]
    finally:
        files.close()


def test_a_holder_shares_only_with_a_worker_whose_marker_it_sees():
    files = CarriedFiles("t6", 0)
    marker = files.marker()
    assert _shares_files_with(marker)
    files.close()
    assert not _shares_files_with(marker)  # as on another machine: the socket then
