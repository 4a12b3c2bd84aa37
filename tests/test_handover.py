"""A worker retired gracefully mid-fit hands its blocks over: the fit runs no round
again, the worker waits for it (and only for it), and the fit ends where an undisturbed
fit ends."""

from __future__ import annotations

import logging

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_strads import LDA, Lasso, MatrixFactorization
from dask_strads.datasets import make_ratings
from dask_strads.engine.store import store_of
from dask_strads.engine.tasks import fit_ids_here

from .test_reliability import (
    THREE_BLOCKS,
    assert_lda_counts_consistent,
    lasso_objective,
    lasso_problem,
    lda_corpus,
    once_fitting,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def three_workers():
    """A cluster per test: LocalCluster does not replace a retired worker."""
    with LocalCluster(n_workers=3, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="3GiB") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(3)
        yield client


@pytest.fixture(autouse=True)
def no_dashboard_rounds():
    """No round goes as tasks for the dashboard: a retirement that meets one in flight
    is recovered, not handed over (``test_retirement`` tests that path), and would make
    these tests depend on the moment it lands."""
    with dask.config.set({"dask-strads.engine.dashboard-interval": None}):
        yield


def retire_once_fitting(client, after_pushes):
    """Retire a worker (``client.retire_workers``) once a fit begun after this call has
    run ``after_pushes`` pushes there: a point in the fit's progress, not a time, which
    a busy machine would move."""
    before = {f for fits in client.run(fit_ids_here).values() for f in fits}

    def pushed(dask_worker=None) -> list:
        return [f for f, fit in store_of(dask_worker).fits.items()
                if f not in before and fit.next_seq >= after_pushes]

    return once_fitting(client, 0, lambda c, worker: c.retire_workers([worker]),
                        holders=pushed)


def handover_events(caplog) -> list:
    return [r.strads for r in caplog.records
            if getattr(r, "strads", {}).get("event") == "handover"]


def recovery_events(caplog) -> list:
    return [r.strads for r in caplog.records
            if getattr(r, "strads", {}).get("event") == "recovered"]


def fit_losing_a_worker_to_retirement(client, caplog, fit, after_pushes):
    retirer = retire_once_fitting(client, after_pushes)
    with caplog.at_level(logging.INFO, logger="dask_strads"):
        est = fit()
    retirer.join(30)
    assert retirer.held, "no worker was retired"
    assert retirer.held[0] not in client.scheduler_info()["workers"]
    [handover] = handover_events(caplog)
    assert handover["workers"] and handover["moved"] and not recovery_events(caplog)
    return est, handover


def test_lda_retired_worker_hands_over_the_same_chain(three_workers, caplog):
    X = lda_corpus()
    kw = dict(n_components=10, max_iter=100, random_state=0, client=three_workers)
    ref = LDA(**kw)
    ref.fit_transform(X)
    est = LDA(**kw)
    _, handover = fit_losing_a_worker_to_retirement(
        three_workers, caplog, lambda: est.fit_transform(X), len(ref.history_) // 3)
    assert est.recoveries_ == [] and [h["round"] for h in est.handovers_] == \
        [handover["round"]]
    # no sub-round ran again, and every draw is seeded by round and shard
    assert list(est.history_["round"]) == list(ref.history_["round"])
    np.testing.assert_array_equal(est.components_, ref.components_)
    np.testing.assert_allclose(est.loglikelihoods_, ref.loglikelihoods_, rtol=1e-12)
    np.testing.assert_allclose(est.doc_topic_, ref.doc_topic_, rtol=1e-12)
    assert_lda_counts_consistent(est, X)


def test_mf_retired_worker_hands_over(three_workers, caplog):
    """MF's blocks reduce among their workers while each has its own; after the handover
    two share one, and the client reduces: the same trajectory either way."""
    data = make_ratings(3000, 1500, rank=5, n_observed=150_000, random_state=1)
    kw = dict(n_components=8, alpha=0.05, max_iter=12, tol=0, random_state=0, inner_tol=0.0,
              client=three_workers, progress=False)
    ref = MatrixFactorization(**kw).fit(data.train)
    est, _ = fit_losing_a_worker_to_retirement(
        three_workers, caplog, lambda: MatrixFactorization(**kw).fit(data.train),
        len(ref.history_) // 3)
    assert est.objective_ == pytest.approx(ref.objective_, rel=1e-8)
    np.testing.assert_allclose(est.W_ @ est.H_.T, ref.W_ @ ref.H_.T, rtol=1e-6, atol=1e-8)


def test_lasso_retired_worker_hands_over(three_workers, caplog):
    X, y, alpha = lasso_problem()
    kw = dict(tol=1e-10, max_iter=5000, client=three_workers, progress=False)
    with dask.config.set(THREE_BLOCKS):
        ref = Lasso(alpha, **kw).fit(X, y)
        est, _ = fit_losing_a_worker_to_retirement(
            three_workers, caplog, lambda: Lasso(alpha, **kw).fit(X, y), len(ref.history_) // 3)
    assert ref.n_blocks_ == est.n_blocks_ == 3
    assert lasso_objective(est, X, y) == pytest.approx(lasso_objective(ref, X, y), rel=1e-6)
