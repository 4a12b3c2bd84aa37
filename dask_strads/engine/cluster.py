"""The cluster a fit runs on when the caller gives none: the default client's, else an
embedded LocalCluster private to the call (on the loopback interface, closed after it).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import warnings

from distributed import Client, LocalCluster, default_client, get_worker, worker_client

from dask_strads import config


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
    the cores, at most 4) of one thread each, listening on 127.0.0.1 only. Where worker
    processes cannot start (a daemonic process; a joblib/loky job of a parallel
    GridSearchCV), its workers are threads."""
    n = n_workers or min(os.cpu_count() or 2, 4)
    if not multiprocessing.current_process().daemon:
        try:
            return LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                asynchronous=asynchronous)
        except RuntimeError as exc:  # raised by a synchronous start only
            warnings.warn(f"dask_strads: worker processes cannot start here ({exc}); the "
                          "fit's own cluster runs its workers as threads", RuntimeWarning,
                          stacklevel=2)
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=False,
                        dashboard_address=":0", asynchronous=asynchronous)


@contextlib.contextmanager
def cluster_client(client: Client | None = None, n_workers: int | None = None):
    """The client a fit runs on: the given one, else (in a Dask task) the task's cluster,
    else the default one, else an embedded LocalCluster (closed on exit). Estimators use
    it to hold one client across the data preparation and the engine run."""
    config.check()  # before any cluster work, as the arguments are
    if client is not None and not isinstance(client, Client):
        raise TypeError(f"client: expected a distributed.Client or None, got "
                        f"{type(client).__name__} (to join a scheduler at an address, "
                        "pass distributed.Client(address))")
    if client is None and _in_a_task():
        # the cluster this task runs on; its thread seceded meanwhile, so that the fit's
        # work does not wait for the thread that waits for it
        with worker_client() as client:
            yield client
        return
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


def _in_a_task() -> bool:
    try:
        get_worker()
    except ValueError:
        return False
    return True


class PicklesWithoutClient:
    """An estimator that pickles without its ``client``, a connection rather than part of
    the model: unpickled, its ``client`` is None (a later fit uses the default client)."""

    def __getstate__(self):
        state = super().__getstate__()
        return dict(state, client=None) if state.get("client") is not None else state


@contextlib.asynccontextmanager
async def embedded_client(n_workers: int | None = None):
    """An asynchronous client of an embedded LocalCluster, both closed on exit."""
    async with embedded_cluster(n_workers, asynchronous=True) as cluster:
        async with Client(cluster, asynchronous=True, set_as_default=False) as c:
            yield c
