"""Workers that join during a fit take blocks after the next snapshot, and the fit ends
as an undisturbed one does.

The pushes of the fits here wait, at their third, until the joining workers have
registered (a marker file): so the workers always join mid-fit, and the waits change
nothing the fits compute.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_strads.engine import run

from .programs import BlockLeastSquares, CheckpointedRotation
from .test_loop import coef_of, lstsq_problem


def _wait_for(marker: str, seconds: float = 60.0) -> None:
    deadline = time.time() + seconds
    while not os.path.exists(marker) and time.time() < deadline:
        time.sleep(0.01)


class _JoinedLeastSquares(BlockLeastSquares):
    def __init__(self, y, marker: str, **kwargs):
        super().__init__(y, **kwargs)
        self.marker = marker

    def push(self, block, part, carried=None):
        block["pushes"] = block.get("pushes", 0) + 1
        if block["pushes"] == 3:
            _wait_for(self.marker)
        return super().push(block, part, carried)


class _JoinedRotation(CheckpointedRotation):
    def __init__(self, n_blocks, marker: str, **kwargs):
        super().__init__(n_blocks, **kwargs)
        self.marker = marker

    def push(self, block, part, carried=None):
        if part["round"] == 2:
            _wait_for(self.marker)
        return super().push(block, part, carried)


@pytest.fixture
def two_workers():
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="2GiB") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        yield cluster, client


def grow(cluster, client, n: int, marker) -> threading.Thread:
    """Scale to ``n`` workers and, once they are all registered, write ``marker``."""

    def scale():
        cluster.scale(n)
        client.wait_for_workers(n, timeout=120)
        marker.write_text("joined")

    t = threading.Thread(target=scale, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("transport", ["direct", "tasks"])
def test_joined_workers_take_blocks_and_the_fit_ends_as_undisturbed(two_workers, tmp_path,
                                                                    transport):
    cluster, client = two_workers
    X, y, data = lstsq_problem(n=300, p=40)
    kw = dict(max_rounds=20000, progress=False, transport=transport, checkpoint_every=10)
    ref = run(BlockLeastSquares(y), data, client, **kw)
    assert len(set(ref.placement.values())) == 2 and not ref.spreads

    marker = tmp_path / "joined"
    grower = grow(cluster, client, 4, marker)
    res = run(_JoinedLeastSquares(y, str(marker)), data, client, **kw)
    grower.join(30)
    assert res.stop_reason == "converged" and not res.recoveries
    assert res.spreads and all(s["round"] % 10 == 0 for s in res.spreads)
    assert len(set(res.placement.values())) == 4  # one block per worker from then on
    # taken over at a snapshot: no round ran twice, and the same rounds as undisturbed
    assert res.history["round"].is_unique and res.n_rounds == ref.n_rounds
    np.testing.assert_allclose(coef_of(res), coef_of(ref), rtol=0, atol=1e-12)
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


@pytest.mark.parametrize("transport", ["direct", "tasks"])
def test_carried_blocks_move_with_the_spread(two_workers, tmp_path, transport):
    cluster, client = two_workers
    marker = tmp_path / "joined"
    grower = grow(cluster, client, 4, marker)
    res = run(_JoinedRotation(4, str(marker), work_seconds=0.005), dict.fromkeys(range(4)),
              client, max_rounds=40, progress=False, transport=transport, checkpoint_every=4)
    grower.join(30)
    last = res.spreads[-1]["round"]
    assert res.state["pulled"] == 40 and not res.recoveries
    # the state and the blocks were rebuilt at the spread: what they logged since ran on
    # the four workers, and every carried block's version chain held (a push checks the
    # version it receives)
    assert {entry[3] for entry in res.state["log"]} == set(res.placement.values())
    assert len(set(res.placement.values())) == 4
    assert [len(seen) for seen in res.block_results.values()] == [40 - last] * 4


def test_a_joined_worker_that_would_not_help_takes_nothing(two_workers, tmp_path):
    cluster, client = two_workers
    X, y, _ = lstsq_problem(n=300, p=40)
    data = {b: (X[:, b * 20:(b + 1) * 20], y) for b in range(2)}  # one block per worker
    marker = tmp_path / "joined"
    grower = grow(cluster, client, 3, marker)
    res = run(_JoinedLeastSquares(y, str(marker)), data, client, max_rounds=20000,
              progress=False, transport="direct", checkpoint_every=10)
    grower.join(30)
    assert marker.exists() and res.stop_reason == "converged"
    assert not res.spreads and len(set(res.placement.values())) == 2
