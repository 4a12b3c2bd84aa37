"""Reliability through the estimators: a worker killed mid-fit, checkpoints and resume.

Each model's fit on a 3-worker cluster loses one worker process (``os._exit``, as on a
node failure) while it runs; the fit must neither hang nor fail, must record the
recovery, and must end where an undisturbed fit ends (within the fit's tolerance).
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_strads import Lasso, MatrixFactorization
from dask_strads.datasets import alpha_max, make_correlated_regression, make_ratings
from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine.worker import fit_ids_here


@pytest.fixture(scope="module")
def three_workers():
    with LocalCluster(n_workers=3, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="3GiB") as cluster:
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(3)
            yield client


def kill_once_fitting(client, delay):
    """Kill a worker that holds blocks, ``delay`` seconds after the fit placed them."""
    held = []

    def watch():
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                holders = [w for w, ids in client.run(fit_ids_here).items() if ids]
            except Exception:
                holders = []
            if holders:
                time.sleep(delay)
                held.append(client.submit(os._exit, 1, workers=[holders[-1]], pure=False))
                return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.held = held
    t.start()
    return t


def lasso_problem():
    X, y, _ = make_correlated_regression(600, 2000, n_informative=40, correlation=0.5,
                                         random_state=0)
    return X, y, alpha_max(X, y) / 50


def lasso_objective(est, X, y):
    r = y - X @ est.coef_ - est.intercept_
    return 0.5 * r @ r / len(y) + est.alpha * np.abs(est.coef_).sum()


def test_lasso_survives_a_killed_worker(three_workers):
    X, y, alpha = lasso_problem()
    ref = Lasso(alpha, tol=1e-10, max_iter=5000, client=three_workers, progress=False).fit(X, y)
    three_workers.wait_for_workers(3)
    killer = kill_once_fitting(three_workers, delay=0.3)
    est = Lasso(alpha, tol=1e-10, max_iter=5000, client=three_workers, progress=False,
                checkpoint_every=3)
    # slow the rounds a little so that the kill lands mid-fit
    est._time_limit = 120
    t0 = time.perf_counter()
    est.fit(X, y)
    killer.join(30)
    assert killer.held, "the worker was never killed"
    assert time.perf_counter() - t0 < 120
    assert lasso_objective(est, X, y) == pytest.approx(lasso_objective(ref, X, y), rel=1e-6)
    three_workers.wait_for_workers(3)


def test_mf_survives_a_killed_worker(three_workers):
    data = make_ratings(3000, 1500, rank=5, n_observed=150_000, random_state=1)
    kw = dict(n_components=8, alpha=0.05, max_iter=12, tol=0, random_state=0,
              client=three_workers, progress=False)
    ref = MatrixFactorization(**kw).fit(data.train)
    three_workers.wait_for_workers(3)
    killer = kill_once_fitting(three_workers, delay=1.0)
    est = MatrixFactorization(**kw, checkpoint_every=20).fit(data.train)
    killer.join(30)
    assert killer.held, "the worker was never killed"
    # CCD++ is deterministic: recovery from a snapshot continues the same trajectory
    assert est.objective_ == pytest.approx(ref.objective_, rel=1e-8)
    np.testing.assert_allclose(est.W_ @ est.H_.T, ref.W_ @ ref.H_.T, rtol=1e-6, atol=1e-8)
    three_workers.wait_for_workers(3)


def test_mf_checkpoint_and_resume_through_the_estimator(client, tmp_path):
    data = make_ratings(2000, 1000, rank=5, n_observed=100_000, random_state=2)
    kw = dict(n_components=8, alpha=0.05, tol=0, max_iter=25, random_state=0, client=client,
              progress=False)
    full = MatrixFactorization(**kw).fit(data.train)
    # an interrupted fit (here: by its time limit) leaves a checkpoint ...
    first = MatrixFactorization(**kw, checkpoint=tmp_path, checkpoint_every=7,
                                time_limit=0.5).fit(data.train)
    assert first.stop_reason_ == "time_limit"
    assert 0 < ckpt.load(tmp_path).round
    # ... from which a new fit continues to the result of the uninterrupted one
    resumed = MatrixFactorization(**kw).fit(data.train, resume=tmp_path)
    assert resumed.objective_ == pytest.approx(full.objective_, rel=1e-8)


def test_lasso_checkpoint_and_resume_through_the_estimator(client, tmp_path):
    X, y, alpha = lasso_problem()
    ref = Lasso(alpha, tol=1e-10, max_iter=5000, client=client, progress=False).fit(X, y)
    first = Lasso(alpha, tol=1e-10, max_iter=5000, client=client, progress=False,
                  checkpoint=tmp_path, checkpoint_every=2)
    first._time_limit = 0.5
    first.fit(X, y)
    assert ckpt.load(tmp_path).round > 0
    resumed = Lasso(alpha, tol=1e-10, max_iter=5000, client=client, progress=False)
    resumed.fit(X, y, resume=tmp_path)
    assert resumed.history_["round"].iloc[0] > 0
    assert lasso_objective(resumed, X, y) == pytest.approx(lasso_objective(ref, X, y), rel=1e-6)
