"""An estimator left at its defaults fits on the default client and shows its progress."""

from __future__ import annotations

import pytest
from distributed import Client

from dask_strads import LDA, ElasticNet, Lasso, LogisticRegression, MatrixFactorization
from dask_strads.datasets import make_correlated_regression, make_lda_corpus, make_ratings
from dask_strads.engine.store import WorkerStore


def _regression():
    X, y, _ = make_correlated_regression(60, 20, n_informative=3, random_state=0)
    return X, y


def _classification():
    X, y = _regression()
    return X, (y > 0).astype(int)


CASES = {
    "Lasso": (lambda: Lasso(alpha=0.1), _regression),
    "ElasticNet": (lambda: ElasticNet(alpha=0.1), _regression),
    "LogisticRegression": (lambda: LogisticRegression(C=1.0), _classification),
    "LDA": (lambda: LDA(n_components=3, max_iter=2, random_state=0),
            lambda: (make_lda_corpus(40, 30, 3, doc_length=20, random_state=0)[0],)),
    "MatrixFactorization": (lambda: MatrixFactorization(n_components=2, max_iter=2,
                                                        random_state=0),
                            lambda: (make_ratings(40, 30, rank=2, n_observed=600).train,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_estimator_at_its_defaults_uses_the_default_client_and_shows_a_bar(
        name, thread_cluster, capsys, monkeypatch):
    make, data = CASES[name]
    built_on = []  # the schedulers of the workers the fit built its blocks on
    add = WorkerStore.add

    def recording(self, fit_id, fit, *args):
        built_on.append(fit.worker.scheduler.address)
        return add(self, fit_id, fit, *args)

    monkeypatch.setattr(WorkerStore, "add", recording)  # the cluster runs in this process
    with Client(thread_cluster):  # becomes the default client
        make().fit(*data())
    assert built_on and set(built_on) == {thread_cluster.scheduler_address}
    assert f"dask_strads.{name}: 100%" in capsys.readouterr().err  # the progress bar
