"""Shared fixtures: one small LocalCluster per test session (processes and threads)."""

from __future__ import annotations

import os

import pytest

# One numba cache for the test process and every worker it spawns (workers inherit it).
os.environ.setdefault(
    "NUMBA_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".numba_cache"))

# what each model's workers compile when a fit starts, and the Lasso client's kernels
_WARM_UP = {
    "cd": "kernels.warm_up(); from dask_strads.cd import steps; steps.warm_up()",
    "lda": "kernels.warm_up()",
    "mf": "kernels.warm_up()",
}


def _cached(model: str) -> bool:
    """Whether the numba cache holds kernels of ``model`` compiled since its source
    last changed (numba recompiles stale ones at their first call anyway)."""
    import glob

    import dask_strads

    root = os.path.join(os.path.dirname(dask_strads.__file__), model)
    cache = os.environ["NUMBA_CACHE_DIR"]
    if os.path.isdir(os.path.join(root, "kernels")):  # a package of kernel modules (lda):
        # numba names its cache directory after the package's directory
        sources = glob.glob(os.path.join(root, "kernels", "*.py"))
        index = glob.glob(os.path.join(cache, "kernels_*", "*.nbi"))
    else:
        sources = [os.path.join(root, "kernels.py")]
        index = glob.glob(os.path.join(cache, f"{model}_*", "kernels.*.nbi"))
    return bool(index) and (min(map(os.path.getmtime, index))
                            >= max(map(os.path.getmtime, sources)))


def _drop_package_cache(model: str) -> None:
    """Delete the cached kernels of a package of kernel modules (lda). numba checks a
    cached function against its own file only: a sampler that inlines a helper edited in
    another module would load from the cache as it was."""
    import glob

    import dask_strads

    if os.path.isdir(os.path.join(os.path.dirname(dask_strads.__file__), model, "kernels")):
        for path in glob.glob(os.path.join(os.environ["NUMBA_CACHE_DIR"], "kernels_*",
                                           "*.nb[ic]")):
            os.remove(path)


def pytest_sessionstart(session):
    """Compile the models' numba kernels into the shared cache first, one process per
    model, side by side. On a clean clone (CI) the first fit of a model otherwise waits
    for its workers to compile, one model after the other, and this process compiles
    the same kernels again."""
    import subprocess
    import sys

    stale = [m for m in _WARM_UP if not _cached(m)]
    for m in stale:
        _drop_package_cache(m)
    procs = {m: subprocess.Popen([sys.executable, "-c",
                                  f"from dask_strads.{m} import kernels; {code}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for m, code in _WARM_UP.items() if m in stale}
    for m, proc in procs.items():
        out, _ = proc.communicate()
        if proc.returncode:  # the tests that use these kernels will fail and say why
            print(f"\ncompiling the {m} kernels failed:\n{out.decode(errors='replace')}")


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
