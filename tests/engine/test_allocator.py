"""The worker processes' allocator settings while they hold fits (engine/allocator.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from dask_strads.engine import allocator
from dask_strads.engine.store import FitStore, WorkerStore

PROBE = textwrap.dedent("""
    import resource
    import numpy as np
    from dask_strads.engine import allocator

    def faults():
        # 100 rounds of a 1 MiB array written and freed: page faults per round (after
        # one not counted: glibc's dynamic threshold rises at the first free)
        a = np.empty(2**17)
        a[:] = 1.0
        del a
        start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(100):
            a = np.empty(2**17)
            a[:] = 1.0
            del a
        return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 100

    print(allocator.applies(), faults(), allocator.tune(), faults(), end=" ")
    allocator.restore()
    print(faults())
""")


def _probe(env_extra):
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in (allocator.ENV_TRIM, allocator.ENV_MMAP)}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    return out[0] == "True", float(out[1]), out[2] == "True", float(out[3]), float(out[4])


@pytest.mark.skipif(allocator._glibc() is None, reason="mallopt is glibc's: nothing to tune")
def test_nanny_style_process_reuses_freed_memory_while_tuned():
    """With the nanny's MALLOC_TRIM_THRESHOLD_ every 1 MiB array faults its 256 pages
    in again; tuned, freed memory is reused; restored, the faults come back."""
    applies, before, tuned, during, after = _probe({allocator.ENV_TRIM: "65536"})
    assert applies and tuned
    assert before > 200
    assert during < 5
    assert after > 200


@pytest.mark.skipif(allocator._glibc() is None, reason="mallopt is glibc's: nothing to tune")
def test_process_without_the_variable_is_left_alone():
    """glibc's dynamic threshold already reuses freed memory: nothing is changed."""
    applies, before, tuned, during, after = _probe({})
    assert not applies and not tuned
    assert before < 5 and during < 5 and after < 5


def test_store_tunes_while_it_holds_any_fit(monkeypatch):
    calls = []
    monkeypatch.setattr(allocator, "tune", lambda: calls.append("tune") or True)
    monkeypatch.setattr(allocator, "restore", lambda: calls.append("restore"))
    store = WorkerStore()
    a, b = FitStore(program=None), FitStore(program=None)
    store.add("a", a)
    store.add("b", b)
    assert calls == ["tune"] and store.allocator_tuned
    assert store.pop("a") is a
    assert calls == ["tune"]
    assert store.pop("missing") is None
    assert store.pop("b") is b
    assert calls == ["tune", "restore"] and not store.allocator_tuned
    assert store.pop("b") is None
    assert calls == ["tune", "restore"]
    # where nothing was tuned, nothing is restored
    monkeypatch.setattr(allocator, "tune", lambda: calls.append("tune") or False)
    store.add("c", FitStore(program=None))
    store.pop("c")
    assert calls == ["tune", "restore", "tune"]


def test_release_fit_restores_the_allocator(monkeypatch):
    """release_fit (the client's client.run at the end of a fit) and release_orphans
    go through the store."""
    from dask_strads.engine.store import store_of
    from dask_strads.engine.tasks import release_fit, release_orphans

    calls = []
    monkeypatch.setattr(allocator, "tune", lambda: calls.append("tune") or True)
    monkeypatch.setattr(allocator, "restore", lambda: calls.append("restore"))

    class FakeWorker:
        extensions: dict = {}

    w = FakeWorker()
    w.extensions = {}
    store = store_of(w)
    store.add("f1", FitStore(program=None, owner="gone"))
    store.add("f2", FitStore(program=None, owner="alive"))
    assert release_orphans(["alive"], dask_worker=w) == ["f1"]
    assert calls == ["tune"]
    assert release_fit("f2", dask_worker=w) == 0
    assert calls == ["tune", "restore"]


def _advice():
    """numpy's huge-page advice now (reading it means setting it: set it back)."""
    before = allocator.hugepage_advice(True)
    allocator.hugepage_advice(before)
    return before


@pytest.mark.skipif(allocator._hugepage_switch() is None,
                    reason="this numpy cannot switch its huge-page advice")
@pytest.mark.parametrize("setting", [True, False])
def test_store_turns_numpys_hugepage_advice_off_while_it_holds_any_fit(setting):
    before = allocator.hugepage_advice(setting)
    try:
        store = WorkerStore()
        store.add("a", FitStore(program=None))
        assert _advice() is False
        store.add("b", FitStore(program=None))
        store.pop("a")
        assert _advice() is False  # a fit is still held
        store.pop("b")
        assert _advice() is setting  # as it was before the first fit
        store.pop("b")
        assert _advice() is setting
        # a client's fit and a worker's blocks in one process share the setting: it
        # comes back only when both let go, whichever goes first
        for first, second in (("worker", "client"), ("client", "worker")):
            allocator.hold_hugepage_off()  # the client's fit
            store.add("c", FitStore(program=None))
            release = {"worker": lambda: store.pop("c"),
                       "client": allocator.release_hugepage_off}
            release[first]()
            assert _advice() is False
            release[second]()
            assert _advice() is setting
        allocator.release_hugepage_off()  # one release too many changes nothing
        assert _advice() is setting
    finally:
        allocator.hugepage_advice(before)


def test_store_changes_only_what_each_fit_allows(monkeypatch):
    """The fit's switches (dask-strads.process.*) reach the store with its blocks: a fit
    that allows nothing changes nothing; the changes last while some fit allows them,
    and a new placement of a fit replaces its holds instead of adding to them."""
    calls = []
    monkeypatch.setattr(allocator, "tune", lambda: calls.append("tune") or True)
    monkeypatch.setattr(allocator, "restore", lambda: calls.append("restore"))
    monkeypatch.setattr(allocator, "hold_hugepage_off", lambda: calls.append("hold"))
    monkeypatch.setattr(allocator, "release_hugepage_off", lambda: calls.append("release"))
    store = WorkerStore()
    store.add("off", FitStore(program=None), (False, False))
    assert calls == [] and not store.allocator_tuned
    store.add("malloc", FitStore(program=None), (True, False))
    assert calls == ["tune"]
    store.add("pages", FitStore(program=None), (False, True))
    assert calls == ["tune", "hold"]
    store.add("pages", FitStore(program=None), (False, True))  # placed again
    assert calls == ["tune", "hold", "hold", "release"]
    store.pop("malloc")
    assert calls[-1] == "restore" and not store.allocator_tuned
    store.pop("pages")
    store.pop("off")
    assert calls == ["tune", "hold", "hold", "release", "restore", "release"]


def test_a_worker_closed_while_it_holds_a_fit_gives_its_process_back_its_settings():
    """A worker closed mid-fit (lost, to the fit) is never sent the fit's release. In an
    in-process cluster its process is the client's, whose allocator and numpy settings
    must come back all the same."""
    from distributed import Client, LocalCluster

    from dask_strads.engine.plugin import PLUGIN_NAME, StradsPlugin
    from dask_strads.engine.store import store_of

    def take_a_fit(dask_worker):
        store_of(dask_worker).add("fit", FitStore(program=None), (True, True))

    before = dict(allocator._HOLDS)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.register_plugin(StradsPlugin(), name=PLUGIN_NAME)
        victim = sorted(cluster.workers)[0]
        client.run(take_a_fit, workers=[cluster.workers[victim].address])
        assert allocator._HOLDS["count"] == before["count"] + 1
        cluster.sync(cluster.workers[victim].close)
        deadline = time.monotonic() + 10  # released once the worker has closed
        while allocator._HOLDS != before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert allocator._HOLDS == before
