"""Lost workers, checkpoints and resume (the engine's share of reliability)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import time

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_strads.engine import Plan, Program, run
from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine.cluster import workers_of
from dask_strads.engine.loop import WorkerLost
from dask_strads.engine.store import FitStore
from dask_strads.engine.tasks import fit_ids_here, snapshot_task

from .programs import BlockLeastSquares, CheckpointedRotation, RotationProbe
from .test_loop import coef_of, lstsq_problem


@pytest.fixture
def three_workers():
    """A fresh cluster per test: after a kill, the nanny that restarts the worker may
    itself be closed (seen once in CI: "Closing Nanny ... Reason: nanny-close" right
    after the restarted worker registered), and a cluster shared by the next tests
    then waited for its third worker until the timeout, test after test."""
    with LocalCluster(n_workers=3, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="2GiB") as cluster:
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(3, timeout=120)
            yield client


# Client-side signals from programs to the test (programs must stay picklable, so they
# hold only a key into this table).
_SIGNALS: dict[str, threading.Event] = {}


class SignallingLeastSquares(BlockLeastSquares):
    """Sets a client-side event once ``after`` block updates have been pulled."""

    def __init__(self, y, signal: str, after: int = 20, **kwargs):
        super().__init__(y, **kwargs)
        self.signal, self.after = signal, after

    def pull(self, state, partials, plan):
        state = super().pull(state, partials, plan)
        if state["updates"] >= self.after and self.signal in _SIGNALS:
            _SIGNALS[self.signal].set()
        return state


class SignallingRotation(RotationProbe):
    """Sets a client-side event once ``after`` rounds have been pulled."""

    def __init__(self, n_blocks, signal: str, after: int = 3, **kwargs):
        super().__init__(n_blocks, **kwargs)
        self.signal, self.after = signal, after

    def pull(self, state, partials, plan):
        state = super().pull(state, partials, plan)
        if len(state["log"]) >= self.after * self.n_blocks and self.signal in _SIGNALS:
            _SIGNALS[self.signal].set()
        return state


def kill_a_worker_after(client, seconds, index=1, signal=None):
    """Kill one worker process (os._exit, as on a node failure) from a thread,
    ``seconds`` after ``signal`` fired (or after the call)."""
    victim = sorted(workers_of(client))[index]
    held = []
    event = _SIGNALS.setdefault(signal, threading.Event()) if signal else None

    def kill():
        if event is not None:
            event.wait(60)
        time.sleep(seconds)
        held.append(victim)
        # not a task: the scheduler would run a lost task again, on the restarted worker
        with contextlib.suppress(Exception):
            client.run(os._exit, 1, workers=[victim])

    t = threading.Thread(target=kill, daemon=True)
    t.held = held  # the victim, once killed
    t.start()
    return t


@pytest.mark.parametrize("transport, staleness", [("tasks", 0), ("tasks", 1), ("direct", 0),
                                                  ("direct", 2)])
def test_fit_survives_a_killed_worker(three_workers, transport, staleness):
    X, y, data = lstsq_problem(n=300, p=40)
    signal = f"killed-worker-{transport}-{staleness}"
    killer = kill_a_worker_after(three_workers, 0.2, signal=signal)
    t0 = time.perf_counter()
    res = run(SignallingLeastSquares(y, signal, after=20, work_seconds=0.02), data,
              three_workers, max_rounds=20000, progress=False, transport=transport,
              checkpoint_every=10, staleness=staleness)
    killer.join()
    assert time.perf_counter() - t0 < 120
    assert res.stop_reason == "converged"
    assert len(res.recoveries) >= 1
    rec = res.recoveries[0]
    assert rec["seconds"] < 30 and rec["lost"]
    # restored from a snapshot taken during the fit (the pipeline drains for it)
    assert rec["round"] >= 10
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


@pytest.mark.parametrize("victim", ["relay", "leaf"])
def test_a_relayed_fit_survives_a_killed_worker(three_workers, victim):
    """Three pushing workers in two relay groups: {0, 2} relayed by 0, and {1}."""
    X, y, data = lstsq_problem(n=300, p=40)
    name = {"relay": 0, "leaf": 2}[victim]
    addresses = sorted(workers_of(three_workers))
    index = [workers_of(three_workers)[a]["name"] for a in addresses].index(name)
    signal = f"killed-{victim}"
    killer = kill_a_worker_after(three_workers, 0.2, index=index, signal=signal)
    with dask.config.set({"dask-strads.engine.relay-above": 1}):
        res = run(SignallingLeastSquares(y, signal, after=40, work_seconds=0.02,
                                         parallel=4),
                  data, three_workers, max_rounds=20000, progress=False,
                  transport="direct", checkpoint_every=10)
    killer.join()
    assert killer.held and res.stop_reason == "converged"
    assert len(res.recoveries) >= 1 and res.recoveries[0]["lost"]
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_a_relayed_rotation_survives_a_killed_worker(three_workers):
    """Carried blocks through relays: a push whose block was on the killed worker fails
    behind its relay, and the fit recovers with every version chain whole."""
    signal = "relayed-rotation"
    killer = kill_a_worker_after(three_workers, 0.05, signal=signal)
    rounds = 40
    with dask.config.set({"dask-strads.engine.relay-above": 1}):
        res = run(SignallingCheckpointedRotation(3, signal, after=8, work_seconds=0.02),
                  {b: None for b in range(3)}, three_workers, max_rounds=rounds,
                  progress=False, checkpoint_every=4, transport="direct")
    killer.join()
    assert killer.held and len(res.recoveries) >= 1
    for value in res.carried.values():
        assert [t[0] for t in value["trail"]] == list(range(rounds))


def test_a_worker_lost_before_the_first_snapshot_restarts_the_fit(three_workers):
    """Without a checkpoint directory no snapshot is taken at round 0 (the blocks are then
    what init_block makes of the shards): a worker lost before the first one restarts
    the fit from its shards, which still converges."""
    from distributed import get_task_stream

    X, y, data = lstsq_problem(n=300, p=40)
    signal = "lost-before-the-first-snapshot"
    killer = kill_a_worker_after(three_workers, 0.1, signal=signal)
    with dask.config.set({"dask-strads.engine.snapshot-interval": "1000000s"}), \
            get_task_stream(three_workers) as stream:  # no snapshot during the fit
        res = run(SignallingLeastSquares(y, signal, after=20, work_seconds=0.02), data,
                  three_workers, max_rounds=20000, progress=False, transport="tasks")
    killer.join()
    assert res.stop_reason == "converged"
    assert [r["round"] for r in res.recoveries] == [0], res.recoveries
    snapshots = [t["key"] for t in stream.data if "-snapshot-" in t["key"]]
    assert not snapshots
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_program_without_checkpoints_fails_clearly_instead_of_hanging(three_workers):
    killer = kill_a_worker_after(three_workers, 0.1, index=0, signal="no-checkpoint")
    t0 = time.perf_counter()
    with pytest.raises(WorkerLost, match="no checkpoint"):
        run(SignallingRotation(3, "no-checkpoint", work_seconds=0.1),
            {b: None for b in range(3)}, three_workers, max_rounds=300, progress=False)
    killer.join()
    assert time.perf_counter() - t0 < 60


class SignallingCheckpointedRotation(SignallingRotation, CheckpointedRotation):
    """A signalling rotation probe that takes snapshots."""


@pytest.mark.parametrize("transport", ["tasks", "direct"])
def test_in_place_carried_blocks_recover_from_an_unshared_snapshot(transport):
    """Pushes that update their carried blocks in place, on an in-process cluster (where
    client and workers share objects): the snapshot a recovery restores must still hold
    the blocks as they were when it was taken, or the version chain breaks (the probe
    raises on a carried block that arrives at the wrong version)."""
    signal = f"in-place-recovery-{transport}"
    event = _SIGNALS.setdefault(signal, threading.Event())
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(3)

        def lose_a_worker():
            event.wait(60)
            time.sleep(0.05)
            victim = sorted(cluster.workers)[1]
            cluster.sync(cluster.workers[victim].close)

        killer = threading.Thread(target=lose_a_worker, daemon=True)
        killer.start()
        rounds = 40
        res = run(SignallingCheckpointedRotation(3, signal, after=8, inplace=True,
                                                 work_seconds=0.02),
                  {b: None for b in range(3)}, client, max_rounds=rounds, progress=False,
                  checkpoint_every=4, transport=transport)
        killer.join()
    assert len(res.recoveries) >= 1
    assert 4 <= res.recoveries[0]["round"] < rounds
    for value in res.carried.values():
        # restored as of the snapshot: the rounds lost after it appear once, replayed
        assert value["version"] == rounds
        assert [t[0] for t in value["trail"]] == list(range(rounds))


# ---------------------------------------------------------------- checkpoint files
@pytest.mark.parametrize("transport", ["tasks", "direct"])
def test_a_carried_block_lost_with_its_worker_is_rebuilt_quietly(three_workers, transport):
    """Tasks: the scheduler recomputes a carried block lost with its worker by running
    again the push tasks that made it, back to the first round; those runs do nothing
    (the recovery rebuilds the block from its snapshot), and no worker logs them as
    failed. Direct: the next holder cannot fetch it, and the client recovers."""
    signal = f"carried-block-lost-{transport}"
    killer = kill_a_worker_after(three_workers, 0.05, signal=signal)
    rounds = 40
    res = run(SignallingCheckpointedRotation(3, signal, after=8, work_seconds=0.02),
              {b: None for b in range(3)}, three_workers, max_rounds=rounds, progress=False,
              checkpoint_every=4, transport=transport)
    killer.join()
    assert len(res.recoveries) >= 1
    for value in res.carried.values():
        assert [t[0] for t in value["trail"]] == list(range(rounds))
    failed = [msg for records in three_workers.get_worker_logs().values()
              for _, msg in records if "Compute Failed" in msg]
    assert failed == []


def test_a_snapshot_of_blocks_released_from_their_worker_is_not_a_failed_task(client):
    """A recovery under way may release a fit's blocks on a worker before a snapshot task
    reaches it: the task answers None (the client then looks for the lost worker)
    instead of failing, which the worker would log with a traceback."""
    [worker] = sorted(workers_of(client))[:1]
    fut = client.submit(snapshot_task, "no-such-fit", [0], workers=[worker], pure=False)
    assert fut.result() is None
    failed = [msg for _, msg in client.get_worker_logs(workers=[worker])[worker]
              if "Compute Failed" in msg and "no-such-fit" in msg]
    assert failed == []


def test_checkpoint_round_trip_without_pickle(tmp_path):
    snap = ckpt.Snapshot(round=7, state={"coef": np.arange(3.0), "step": 0.5, "n": 3},
                         blocks={0: {"z": np.arange(4, dtype=np.int32)}, (1, "a"): None},
                         carried={2: np.ones((2, 2))}, elapsed=1.5)
    path = ckpt.save(tmp_path, snap)
    with np.load(path, allow_pickle=False) as z:  # loads with pickle disabled
        assert "header" in z
    back = ckpt.load(tmp_path)
    assert back.round == 7 and back.elapsed == 1.5
    np.testing.assert_array_equal(back.state["coef"], np.arange(3.0))
    assert back.state["step"] == 0.5 and back.state["n"] == 3
    np.testing.assert_array_equal(back.blocks[0]["z"], np.arange(4))
    assert back.blocks[(1, "a")] is None
    np.testing.assert_array_equal(back.carried[2], np.ones((2, 2)))


def test_checkpoint_rejects_objects(tmp_path):
    with pytest.raises(TypeError, match="pickle"):
        ckpt.save(tmp_path, ckpt.Snapshot(round=1, state={"bad": np.array([{}], dtype=object)}))
    assert not os.path.exists(tmp_path / ckpt.FILENAME)


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    ckpt.save(tmp_path, ckpt.Snapshot(round=1, state={"x": np.zeros(2)}))

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save(tmp_path, ckpt.Snapshot(round=2, state={"x": np.ones(2)}))
    monkeypatch.undo()
    assert ckpt.load(tmp_path).round == 1
    assert sorted(os.listdir(tmp_path)) == [ckpt.FILENAME]  # no temporary left behind


def test_resume_continues_to_the_same_result(client, tmp_path):
    X, y, data = lstsq_problem()
    first = run(BlockLeastSquares(y), data, client, max_rounds=12, progress=False,
                checkpoint=tmp_path, checkpoint_every=4, transport="direct")
    assert first.stop_reason == "max_rounds"
    assert ckpt.load(tmp_path).round == 12
    res = run(BlockLeastSquares(y), data, client, max_rounds=3000, progress=False,
              resume=tmp_path, transport="direct")
    assert res.stop_reason == "converged" and res.history["round"].iloc[0] == 12
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_a_push_of_an_earlier_placement_is_refused():
    """After a recovery the scheduler may rerun a lost push task of the old placement (a
    carried block's history), or a direct call may arrive late: the rebuilt blocks refuse
    it instead of replaying an old round on themselves."""
    fit = FitStore(program=None, epoch=2)
    fit.check_epoch("f", 2)
    with pytest.raises(RuntimeError, match="stale push of fit f"):
        fit.check_epoch("f", 1)


def test_resume_from_a_missing_checkpoint_is_a_clear_error(tmp_path):
    X, y, data = lstsq_problem()
    with pytest.raises(FileNotFoundError, match="resume"):
        run(BlockLeastSquares(y), data, client=None, resume=tmp_path / "nothing")


@pytest.mark.slow
def test_killed_client_process_resumes_to_the_same_result(client, tmp_path):
    """The client process dies mid-fit (SIGKILL); a new one resumes from the checkpoint."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from distributed import Client
        from dask_strads.engine import Plan, Program, run
        from tests.engine.programs import BlockLeastSquares
        from tests.engine.test_loop import lstsq_problem
        if __name__ == "__main__":
            X, y, data = lstsq_problem()
            with Client({client.scheduler.address!r}) as c:
                print("started", flush=True)
                run(BlockLeastSquares(y, tol=0, work_seconds=0.02), data, c, max_rounds=10**6,
                    progress=False, transport="direct", checkpoint={str(tmp_path)!r},
                    checkpoint_every=5)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        deadline = time.time() + 60
        while not os.path.exists(tmp_path / ckpt.FILENAME) or ckpt.load(tmp_path).round < 20:
            assert time.time() < deadline, "the fit never checkpointed"
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait(30)
        proc.stdout.close()
    snap = ckpt.load(tmp_path)
    assert snap.round >= 20
    orphaned = {f for ids in client.run(fit_ids_here).values() for f in ids}
    assert orphaned  # the dead client's blocks are still on the workers ...
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y), data, client, max_rounds=3000, progress=False,
              resume=tmp_path, transport="direct")
    # ... until the next fit starts and frees them
    assert not orphaned & {f for ids in client.run(fit_ids_here).values() for f in ids}
    assert res.stop_reason == "converged"
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


class _HoldsData(Program):
    """Each block keeps a worker-owned copy of its (large) shard."""

    name = "holds"
    transport = "direct"

    def init_block(self, block_id, shard):
        return {"data": shard * 2.0}

    def push(self, block, part, carried=None):
        return float(block["data"][:10].sum())

    def schedule(self, state, ctx):
        return Plan(parts={0: None, 1: None})

    def pull(self, state, partials, plan):
        return state


def test_worker_memory_returns_to_baseline_after_a_fit(client):
    def rss():
        return client.run(lambda: __import__("psutil").Process().memory_info().rss)

    # a small fit first, so that imports (numba, pandas, ...) are in the baseline
    run(_HoldsData(), {0: np.ones(10), 1: np.ones(10)}, client, max_rounds=1, progress=False)
    before = rss()
    rng = np.random.default_rng(0)
    data = {b: rng.standard_normal(12_500_000) for b in range(2)}  # 100 MB per block
    res = run(_HoldsData(), data, client, max_rounds=4, progress=False)
    assert res.n_rounds == 4
    del data
    # the block (100 MB) and its scattered shard (100 MB) are gone again, once the
    # workers have heard that the fit and its keys were released
    deadline = time.monotonic() + 10
    while True:
        after = rss()
        grown = {w: after[w] - before[w] for w in before}
        if all(g < 60e6 for g in grown.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert all(g < 60e6 for g in grown.values()), (before, after)


def test_rounds_submitted_before_the_loss_is_known_wait_for_recovery(monkeypatch):
    """The scheduler's news of a lost worker reaches the engine late (here 0.5 s). Rounds
    submitted meanwhile are pinned to the dead worker's address, so they wait until the
    lost-worker path cancels them. Pinned to its name, they failed on the scheduler
    (``TypeError: addresses should be strings or tuples``: a name it no longer knows),
    and cancelling such a half-made task could drop the client's connection along with
    every key it held, the fit's shards included. (A cluster of its own: the killed
    worker's nanny does not always come back, and the module's cluster must.)"""
    from dask_strads.engine import loop

    on_event = loop._Runner._on_event

    def late(self, event):
        asyncio.get_running_loop().call_later(0.5, on_event, self, event)

    monkeypatch.setattr(loop._Runner, "_on_event", late)
    X, y, data = lstsq_problem(n=300, p=40)
    signal = "late-news"
    with LocalCluster(n_workers=3, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(3)
        killer = kill_a_worker_after(client, 0.1, signal=signal)
        res = run(SignallingLeastSquares(y, signal, after=20, work_seconds=0.02), data,
                  client, max_rounds=20000, progress=False, transport="tasks",
                  checkpoint_every=10)
        killer.join()
        assert res.stop_reason == "converged" and len(res.recoveries) >= 1
        np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0],
                                   atol=1e-8)
        assert client.gather(client.scatter(3)) == 3  # the client is intact


def test_waiting_for_blocks_kept_on_the_cluster_gives_up_when_a_worker_is_lost(cluster):
    """The end of a fit that keeps its carried blocks on the cluster waits for the tasks
    that take them out of their workers; a worker lost meanwhile ends that wait at once
    (the recovery takes over) instead of leaving it on a task pinned to a dead worker."""
    from dask_strads.engine.recovery import _Recovery

    async def scenario():
        async with Client(cluster.scheduler_address, asynchronous=True) as c:
            runner = _Recovery()
            runner.client, runner.lost, runner.lost_workers = c, asyncio.Event(), {"w1"}
            # (short: cancelling does not stop a running task, which keeps its thread)
            stuck = c.submit(time.sleep, 3, pure=False)
            asyncio.get_running_loop().call_later(0.2, runner.lost.set)
            t0 = time.perf_counter()
            with pytest.raises(WorkerLost, match="w1"):
                await runner._wait_done([stuck])
            waited = time.perf_counter() - t0
            done = c.submit(int, "3", pure=False)
            runner.lost.clear()
            await runner._wait_done([done])  # no loss: returns once the task is done
            return waited, stuck.status, await done

    waited, status, value = asyncio.run(scenario())
    assert waited < 2 and status == "cancelled" and value == 3
