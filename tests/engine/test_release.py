"""A fit's state leaves the workers when it ends: by a call to its blocks' workers where
it can, else by a broadcast through the scheduler; its task keys leave the scheduler."""

from __future__ import annotations

import time

from dask_strads.engine import run
from dask_strads.engine.tasks import fit_ids_here

from .programs import BlockLeastSquares
from .test_loop import lstsq_problem


def test_worker_state_and_keys_are_released_after_the_fit(client):
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y), data, client, max_rounds=20, progress=False,
              transport="tasks")
    assert all(res.fit_id not in ids for ids in client.run(fit_ids_here).values())
    deadline = time.time() + 10
    while True:
        keys = client.run_on_scheduler(
            lambda dask_scheduler, f=res.fit_id: [str(k) for k in dask_scheduler.tasks
                                                 if f in str(k)])
        if not keys or time.time() > deadline:
            break
        time.sleep(0.1)
    assert keys == []


def _broadcasts(client, monkeypatch) -> list:
    """The functions the client runs on every worker from now on (names)."""
    names = []
    run_everywhere = client.run

    def counted(function, *args, **kwargs):
        names.append(function.__name__)
        return run_everywhere(function, *args, **kwargs)

    monkeypatch.setattr(client, "run", counted)
    return names


def test_a_fit_placed_once_is_released_by_a_call_to_its_workers(client, monkeypatch):
    X, y, data = lstsq_problem()
    broadcasts = _broadcasts(client, monkeypatch)
    res = run(BlockLeastSquares(y), data, client, max_rounds=20, progress=False,
              transport="direct")
    assert "release_fit" not in broadcasts  # not through the scheduler to every worker
    monkeypatch.undo()
    assert all(res.fit_id not in ids for ids in client.run(fit_ids_here).values())


def _refuse_let_go(dask_worker):
    """A worker whose release call fails (as one from an older plugin would)."""
    async def refuse(**kwargs):
        raise TypeError("strads_let_go() got an unexpected keyword argument 'whole'")

    dask_worker._kept_let_go = dask_worker.handlers["strads_let_go"]
    dask_worker.handlers["strads_let_go"] = refuse


def _restore_let_go(dask_worker):
    dask_worker.handlers["strads_let_go"] = dask_worker._kept_let_go


def test_a_worker_whose_release_call_fails_gets_the_broadcast(client, monkeypatch):
    X, y, data = lstsq_problem()
    client.run(_refuse_let_go)
    try:
        broadcasts = _broadcasts(client, monkeypatch)
        res = run(BlockLeastSquares(y), data, client, max_rounds=20, progress=False,
                  transport="direct")
        monkeypatch.undo()
    finally:
        client.run(_restore_let_go)
    assert "release_fit" in broadcasts
    assert all(res.fit_id not in ids for ids in client.run(fit_ids_here).values())
