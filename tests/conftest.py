"""Shared fixtures: one small LocalCluster per test session (processes and threads)."""

from __future__ import annotations

import os

import pytest

# One numba cache for the test process and every worker it spawns (workers inherit it).
os.environ.setdefault(
    "NUMBA_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".numba_cache"))


def _cluster(processes: bool):
    from distributed import LocalCluster

    # The process cluster listens on 127.0.0.1 only; the threads cluster talks in-process.
    extra = {"host": "127.0.0.1"} if processes else {}
    return LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=processes,
        dashboard_address=":0",
        memory_limit="4GiB",
        **extra,
    )


@pytest.fixture(scope="session")
def cluster():
    with _cluster(processes=True) as c:
        yield c


@pytest.fixture(scope="session")
def thread_cluster():
    with _cluster(processes=False) as c:
        yield c


@pytest.fixture
def client(cluster):
    """A synchronous client of the shared 2-worker process cluster."""
    from distributed import Client

    with Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2)
        yield c


@pytest.fixture
def thread_client(thread_cluster):
    """A synchronous client of the shared 2-worker in-process (threads) cluster."""
    from distributed import Client

    with Client(thread_cluster, set_as_default=False) as c:
        c.wait_for_workers(2)
        yield c


@pytest.fixture(params=["processes", "threads"])
def any_client(request):
    """Both kinds of cluster, for tests that must hold on either."""
    return request.getfixturevalue("client" if request.param == "processes" else "thread_client")
