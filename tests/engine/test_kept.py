"""Recovery snapshots kept on the cluster (engine/kept.py): each worker keeps its
blocks' copies and sends one to a buddy; the client keeps only where they are. The test
clusters run on one host, where the default ("auto") sends the copies to the client:
the tests that keep them on the cluster say so."""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import threading
import time

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_strads.engine import run
from dask_strads.engine.arguments import _engine_settings
from dask_strads.engine.cluster import workers_of
from dask_strads.engine.kept import KeptStore, buddies, kept_of, spans_hosts

from .test_recovery import _SIGNALS, SignallingCheckpointedRotation


@pytest.fixture
def three_workers():
    with LocalCluster(n_workers=3, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="2GiB") as cluster:
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(3, timeout=120)
            yield client


def _kill_after_signal(client, signal: str, names: list, delay: float = 0.05):
    """Kill the workers named ``names`` at once (os._exit), ``delay`` after ``signal``."""
    event = _SIGNALS.setdefault(signal, threading.Event())
    by_name = {info["name"]: a for a, info in workers_of(client).items()}
    victims = [by_name[n] for n in names]

    def kill():
        event.wait(60)
        time.sleep(delay)
        with contextlib.suppress(Exception):
            client.run(os._exit, 1, workers=victims)

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


def _rotation(client, signal, on_cluster=True, rounds=40):
    with dask.config.set({"dask-strads.engine.snapshots-on-cluster": on_cluster}):
        return run(SignallingCheckpointedRotation(3, signal, after=10, work_seconds=0.02),
                   {b: None for b in range(3)}, client, max_rounds=rounds, progress=False,
                   checkpoint_every=4, transport="direct")


def _chains_intact(res, rounds):
    for value in res.carried.values():
        assert value["version"] == rounds
        assert [t[0] for t in value["trail"]] == list(range(rounds))


def _copies_left(client) -> dict:
    return {a: dict(fits) for a, fits in client.run(
        lambda dask_worker: {f: sorted(r) for f, r in kept_of(dask_worker).fits.items()}
    ).items() if fits}


def test_a_lost_worker_is_rebuilt_from_copies_kept_on_the_cluster(three_workers):
    """The carried blocks' version chains hold across the recovery, from copies the
    other workers kept; none is left once the fit ends."""
    killer = _kill_after_signal(three_workers, "kept-one", [1])
    res = _rotation(three_workers, "kept-one")
    killer.join()
    assert [r["from"] for r in res.recoveries] == ["cluster"], res.recoveries
    assert res.recoveries[0]["round"] >= 4
    _chains_intact(res, 40)
    assert _copies_left(three_workers) == {}


@pytest.fixture
def two_hosts():
    """Two worker processes on 127.0.0.1 and one on 127.0.0.2: to the engine, a cluster
    of two machines (the address's host is all it looks at)."""
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="2GiB") as cluster:
        far = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
             "--host", "127.0.0.2", "--nthreads", "1", "--name", "far", "--no-nanny",
             "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with Client(cluster, set_as_default=False) as client:
                client.wait_for_workers(3, timeout=120)
                yield client
        finally:
            far.kill()
            far.wait()


def test_auto_keeps_the_copies_on_the_cluster_when_the_workers_span_hosts(two_hosts):
    """The far worker's copies are on a worker of the other host: killed, it is rebuilt
    from them."""
    killer = _kill_after_signal(two_hosts, "kept-auto-far", ["far"])
    res = _rotation(two_hosts, "kept-auto-far", on_cluster="auto")
    killer.join()
    assert [r["from"] for r in res.recoveries] == ["cluster"], res.recoveries
    _chains_intact(res, 40)


@pytest.mark.parametrize("setting", [False, "auto"])
def test_off_or_on_one_host_the_snapshot_goes_to_the_client(three_workers, setting):
    signal = f"kept-{setting}"
    killer = _kill_after_signal(three_workers, signal, [1])
    res = _rotation(three_workers, signal, on_cluster=setting)
    killer.join()
    assert [r["from"] for r in res.recoveries] == ["client"], res.recoveries
    assert res.recoveries[0]["round"] >= 4
    _chains_intact(res, 40)


def test_a_worker_lost_with_its_buddy_restarts_the_fit_to_the_same_end(three_workers):
    """Workers 0 and 1 die at once: worker 0's copies were on 0 and on its buddy 1, so
    no copy of its blocks is left and the fit starts again from round 0."""
    killer = _kill_after_signal(three_workers, "kept-two", [0, 1])
    res = _rotation(three_workers, "kept-two")
    killer.join()
    assert res.recoveries and res.recoveries[-1]["from"] == "start", res.recoveries
    assert res.recoveries[-1]["round"] == 0
    _chains_intact(res, 40)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_the_setting_takes_true_false_or_auto(value):
    with dask.config.set({"dask-strads.engine.snapshots-on-cluster": value}), \
            pytest.raises(ValueError, match="snapshots-on-cluster"):
        _engine_settings()


def test_spans_hosts():
    assert not spans_hosts(["tcp://10.0.0.1:4000", "tcp://10.0.0.1:4001"])
    assert spans_hosts(["tcp://10.0.0.1:4000", "tcp://10.0.0.2:4000"])


def test_buddies_are_on_another_host_when_there_is_one():
    addresses = {"a": "tcp://n1:1", "b": "tcp://n1:2", "c": "tcp://n2:1", "d": "tcp://n2:2"}
    pairs = buddies(["a", "b", "c", "d"], addresses)
    assert pairs == {"a": "c", "b": "c", "c": "a", "d": "a"}
    assert buddies(["a", "b"], addresses) == {"a": "b", "b": "a"}  # one host: the next
    assert buddies(["a"], addresses) == {"a": None}
    # a handover: workers about to leave keep no one else's copy
    assert buddies(["a", "b", "c", "d"], addresses, avoid={"c"}) == {
        "a": "d", "b": "d", "c": "a", "d": "a"}


def test_the_store_keeps_a_snapshot_until_a_later_one_is_complete():
    store = KeptStore()
    store.put("f", "client-1", 4, {("block", 0): pickle.dumps(np.arange(3))})
    store.put("f", "client-1", 8, {("block", 0): pickle.dumps(np.arange(4))})
    first = store.value("f", 4, ("block", 0))
    first[:] = 7  # a restore that writes in place leaves the copy as it was
    np.testing.assert_array_equal(store.value("f", 4, ("block", 0)), np.arange(3))
    store.commit("f", 8)
    assert store.get("f", 4, ("block", 0)) is None
    np.testing.assert_array_equal(store.value("f", 8, ("block", 0)), np.arange(4))
    with pytest.raises(RuntimeError, match="no copy"):
        store.value("f", 8, ("block", 1))
    assert store.orphans({"client-2"}) == ["f"] and store.orphans({"client-1"}) == []
    store.drop("f")
    assert store.fits == {}
