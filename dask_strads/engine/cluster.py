"""The cluster a fit runs on when the caller gives none: the default client's, else an
embedded LocalCluster private to the call (on the loopback interface, closed after it).
"""

from __future__ import annotations

import contextlib
import os

from distributed import Client, LocalCluster, default_client


def workers_of(client) -> dict:
    """The scheduler's workers (address -> info), asked now. ``client.scheduler_info()``
    returns the client's cached identity, which its periodic refresh may replace with one
    that lists no workers between the query and the return."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def worker_count(client) -> int:
    """How many workers the scheduler has now (at least 1: a fit waits for one)."""
    return max(1, len(workers_of(client)))


def embedded_cluster(n_workers: int | None = None, asynchronous: bool = False) -> LocalCluster:
    """The LocalCluster of a call that has no client: ``n_workers`` processes (default:
    the cores, at most 4) of one thread each, listening on 127.0.0.1 only."""
    n = n_workers or min(os.cpu_count() or 2, 4)
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                        dashboard_address="127.0.0.1:0", asynchronous=asynchronous)


@contextlib.contextmanager
def cluster_client(client: Client | None = None, n_workers: int | None = None):
    """The client a fit runs on: the given one, else the default one, else an embedded
    LocalCluster (closed on exit). Estimators use it to hold one client across the data
    preparation and the engine run."""
    if client is None:
        try:
            client = default_client()
        except ValueError:  # no default client
            client = None
    if client is not None:
        yield client
        return
    with embedded_cluster(n_workers) as cluster, Client(cluster, set_as_default=False) as c:
        yield c


@contextlib.asynccontextmanager
async def embedded_client(n_workers: int | None = None):
    """An asynchronous client of an embedded LocalCluster, both closed on exit."""
    async with embedded_cluster(n_workers, asynchronous=True) as cluster:
        async with Client(cluster, asynchronous=True, set_as_default=False) as c:
            yield c
