"""The client a fit runs on: checked, pickled without, embedded where processes cannot
be started, waited for (and said so) while its cluster has no workers."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client, LocalCluster
from sklearn.linear_model import Lasso as ScikitLasso

from dask_strads import LDA, Lasso, MatrixFactorization


@pytest.mark.parametrize("client", ["tcp://127.0.0.1:8786", 42])
def test_a_client_that_is_no_client_is_named(client):
    X = np.random.default_rng(0).standard_normal((20, 4))
    with pytest.raises(TypeError, match="client: expected a distributed.Client or None"):
        Lasso(alpha=0.1, client=client).fit(X, X[:, 0])


def test_models_fitted_with_a_client_pickle_without_it(thread_client):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 8))
    counts = sp.random(30, 20, density=0.3, random_state=1, format="csr")
    counts.data = np.ceil(counts.data * 5)
    ratings = sp.random(30, 20, density=0.3, random_state=2, format="csr")
    fitted = [
        (Lasso(alpha=0.05, client=thread_client).fit(X, X[:, 0]), lambda m: m.predict(X)),
        (LDA(2, max_iter=3, client=thread_client, random_state=0).fit(counts),
         lambda m: m.components_),
        (MatrixFactorization(n_components=2, max_iter=3, client=thread_client,
                             random_state=0).fit(ratings), lambda m: m.predict([0], [1])),
    ]
    for model, output in fitted:
        copy = pickle.loads(pickle.dumps(model))
        assert copy.client is None and model.client is thread_client
        np.testing.assert_array_equal(output(copy), output(model))


def _fit_here(queue) -> None:
    X = np.random.default_rng(0).standard_normal((40, 6))
    try:
        model = Lasso(alpha=0.05, progress=False).fit(X, X[:, 0])
        queue.put(("fitted", float(model.coef_[0])))
    except Exception as exc:  # reported to the test
        queue.put(("failed", repr(exc)))


@pytest.mark.timeout(120)
def test_a_fit_in_a_daemonic_process_embeds_a_cluster_of_threads():
    """A joblib/loky job (a parallel GridSearchCV) or a Dask worker is a daemonic
    process, which may not start processes of its own."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    job = context.Process(target=_fit_here, args=(queue,), daemon=True)
    job.start()
    try:
        outcome, value = queue.get(timeout=100)
    finally:
        job.join(10)
    assert outcome == "fitted", value
    assert 0.5 < value <= 1.0


def _fit_in_task(X, y):
    return Lasso(alpha=0.05, tol=1e-10, progress=False).fit(X, y).coef_


@pytest.mark.timeout(120)
def test_a_fit_in_a_dask_task_runs_on_that_cluster(client):
    """A fit inside a task (joblib's dask backend, a task of the user's) uses the
    cluster it runs on, its thread seceded (it started an embedded cluster inside the
    worker, or waited for its own thread)."""
    X = np.random.default_rng(0).standard_normal((60, 8))
    y = X[:, 0] - X[:, 1]
    coef = client.submit(_fit_in_task, X, y).result(timeout=100)
    direct = Lasso(alpha=0.05, tol=1e-10, client=client).fit(X, y)
    np.testing.assert_allclose(coef, direct.coef_, atol=1e-8)


def test_a_cluster_without_workers_says_the_fit_waits_for_one(caplog):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 6))
    y = X @ rng.standard_normal(6)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        model = Lasso(alpha=0.01, tol=1e-10, client=client, progress=False)
        fitting = threading.Thread(target=model.fit, args=(X, y))
        with caplog.at_level("WARNING", logger="dask_strads"):
            fitting.start()
            deadline = time.monotonic() + 30
            while "no workers yet" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "the cluster has no workers yet" in caplog.text
            assert fitting.is_alive()  # waiting, not failed
            cluster.scale(1)
            fitting.join(60)
    assert not fitting.is_alive()
    expected = ScikitLasso(alpha=0.01, tol=1e-12, max_iter=100_000).fit(X, y).coef_
    np.testing.assert_allclose(model.coef_, expected, atol=1e-5)
