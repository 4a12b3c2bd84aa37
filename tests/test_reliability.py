"""Reliability through the estimators: a worker killed mid-fit, checkpoints and resume.

Each model's fit on a 3-worker cluster loses one worker process (``os._exit``, as on a
node failure) while it runs; the fit must neither hang nor fail, must record the
recovery, and must end where an undisturbed fit ends (within the fit's tolerance; LDA's
Gibbs chain is seeded per sub-round and shard, so it must end with the very same counts).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.exceptions import ConvergenceWarning

from dask_strads import LDA, Lasso, LogisticRegression, MatrixFactorization
from dask_strads._datasets.logistic import C_min, make_classification
from dask_strads.datasets import (
    alpha_max,
    make_correlated_regression,
    make_lda_corpus,
    make_ratings,
    make_sparse_regression,
)
from dask_strads.engine import checkpoint as ckpt
from dask_strads.engine.tasks import fit_ids_here


@pytest.fixture(scope="module")
def three_workers():
    # A killed worker's nanny starts a new one, which takes 5-10 s on a busy 2-core machine
    # (imports); LocalCluster closes a nanny whose worker is not back within this timeout
    # (15 s by default), and the cluster would then stay one worker short.
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "120s"}), \
            LocalCluster(n_workers=3, threads_per_worker=1, host="127.0.0.1",
                         dashboard_address=":0", memory_limit="3GiB") as cluster:
        with Client(cluster, set_as_default=False) as client:
            client.wait_for_workers(3)
            yield client


def once_fitting(client, delay, act, holders=fit_ids_here):
    """``act(client, worker)`` on a worker that holds blocks, ``delay`` seconds after
    ``holders`` (run on every worker) first lists a fit there; from a thread whose
    ``held`` lists the worker once acted on."""
    held = []

    def watch():
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                found = [w for w, ids in client.run(holders).items() if ids]
            except Exception:
                found = []
            if found:
                time.sleep(delay)
                held.append(found[-1])
                act(client, found[-1])
                return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.held = held
    t.start()
    return t


def _kill(client, worker):
    # not a task: the scheduler would run a lost task again, on the restarted worker,
    # killing it in a later fit
    with contextlib.suppress(Exception):
        client.run(os._exit, 1, workers=[worker])


def kill_once_fitting(client, delay):
    """Kill a worker that holds blocks, ``delay`` seconds after the fit placed them."""
    return once_fitting(client, delay, _kill)


def fit_losing_a_worker(client, est, X, y, delay=0.3):
    """Fit ``est`` while a worker holding its blocks is killed ``delay`` s in; it must
    end well within its 120 s time limit, and the cluster gets its worker back."""
    killer = kill_once_fitting(client, delay=delay)
    est._time_limit = 120
    t0 = time.perf_counter()
    est.fit(X, y)
    killer.join(30)
    assert killer.held, "the worker was never killed"
    assert time.perf_counter() - t0 < 120
    client.wait_for_workers(3)


def lasso_problem():
    # about 270 rounds, 3 s on 3 workers
    X, y, _ = make_correlated_regression(600, 2000, n_informative=40, correlation=0.3,
                                         random_state=0)
    return X, y, alpha_max(X, y) / 20


def lasso_objective(est, X, y):
    r = y - X @ est.coef_ - est.intercept_
    return 0.5 * r @ r / len(y) + est.alpha * np.abs(est.coef_).sum()


# one column block per worker, however small the problem
THREE_BLOCKS = {"dask-strads.cd.min-block-nnz": 1}


def test_lasso_survives_a_killed_worker(three_workers):
    X, y, alpha = lasso_problem()
    with dask.config.set(THREE_BLOCKS):
        ref = Lasso(alpha, tol=1e-10, max_iter=5000, client=three_workers,
                    progress=False).fit(X, y)
        three_workers.wait_for_workers(3)
        est = Lasso(alpha, tol=1e-10, max_iter=5000, client=three_workers, progress=False,
                    checkpoint_every=3)
        fit_losing_a_worker(three_workers, est, X, y)
    assert ref.n_blocks_ == est.n_blocks_ == 3
    assert lasso_objective(est, X, y) == pytest.approx(lasso_objective(ref, X, y), rel=1e-6)


def test_lasso_survives_a_worker_killed_in_peer_phases(three_workers):
    """Phases solved by peers, whose pushes wait for each other's values: a killed
    worker must not leave the others waiting."""
    X, y, _ = make_sparse_regression(4000, 40_000, density=2e-3, n_informative=100,
                                     random_state=0)
    alpha = alpha_max(X, y) / 30
    kw = dict(tol=1e-10, max_iter=5000, client=three_workers, progress=False)
    # exchanges priced at nothing and shipping columns dear: every phase has peers
    peers = {**THREE_BLOCKS, "dask-strads.cd.exchange-seconds": 0.0,
             "dask-strads.cd.bandwidth": 1e-3}
    three_workers.wait_for_workers(3)  # a block per worker: peers may exchange
    with dask.config.set(peers):
        ref = Lasso(alpha, **kw).fit(X, y)
        three_workers.wait_for_workers(3)
        est = Lasso(alpha, checkpoint_every=2, **kw)
        fit_losing_a_worker(three_workers, est, X, y)
    assert ref.history_["peer_phases"].iloc[-1] > 0
    assert lasso_objective(est, X, y) == pytest.approx(lasso_objective(ref, X, y), rel=1e-6)


def test_a_worker_killed_in_an_exchange_round_does_not_leave_it_hanging(three_workers):
    """A program without checkpoints cannot recover: the fit must fail at once with
    WorkerLost, not wait on the killed worker's values."""
    from dask_strads.engine import run
    from dask_strads.engine.loop import WorkerLost
    from tests.engine.programs import PeerJacobi

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 24))
    y = X @ rng.standard_normal(24)
    data = {b: (X[:, b * 8:(b + 1) * 8], y) for b in range(3)}
    killer = kill_once_fitting(three_workers, delay=1.0)
    t0 = time.perf_counter()
    with pytest.raises(WorkerLost, match="no checkpoint"):
        run(PeerJacobi(y, inner=1000, pause=0.01), data, three_workers, max_rounds=50,
            progress=False)
    killer.join(30)
    assert killer.held, "the worker was never killed"
    assert time.perf_counter() - t0 < 30  # a round alone would take 10 s
    three_workers.wait_for_workers(3)
    assert not any(client_fits for client_fits in three_workers.run(fit_ids_here).values())


def test_mf_survives_a_killed_worker(three_workers):
    data = make_ratings(3000, 1500, rank=5, n_observed=150_000, random_state=1)
    # all inner sweeps (inner_tol=0): a fit that outlasts the kill's delay
    kw = dict(n_components=8, alpha=0.05, max_iter=12, tol=0, random_state=0, inner_tol=0.0,
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
    # data of another shape is refused before any cluster work, and the checkpoint kept
    with pytest.raises(ValueError, match="resume: the checkpoint in .* is of a fit to "
                                         f"{X.shape[0]} samples and {X.shape[1]} features"):
        Lasso(alpha, client=object()).fit(X[:, :10], y, resume=tmp_path)
    assert ckpt.load(tmp_path).round > 0


def logistic_problem():
    X, y = make_classification(600, 2000, n_informative=40, correlation=0.3)
    return X, y, 20 * C_min(X, y)


def logistic_objective(est, X, y):
    z = X @ est.coef_.ravel() + est.intercept_[0]
    return est.C * np.logaddexp(0.0, -np.where(y == 1, 1.0, -1.0) * z).sum() \
        + np.abs(est.coef_).sum()


def test_logistic_survives_a_killed_worker(three_workers):
    X, y, C = logistic_problem()
    kw = dict(C=C, tol=1e-10, client=three_workers, progress=False)
    with dask.config.set(THREE_BLOCKS):
        ref = LogisticRegression(**kw).fit(X, y)
        three_workers.wait_for_workers(3)
        est = LogisticRegression(**kw, checkpoint_every=3)
        fit_losing_a_worker(three_workers, est, X, y)
    assert ref.n_blocks_ == est.n_blocks_ == 3
    assert logistic_objective(est, X, y) == pytest.approx(logistic_objective(ref, X, y),
                                                          rel=1e-6)


def test_logistic_checkpoint_and_resume_through_the_estimator(client, tmp_path):
    X, y, C = logistic_problem()
    kw = dict(C=C, tol=1e-10, client=client, progress=False)
    ref = LogisticRegression(**kw).fit(X, y)
    first = LogisticRegression(**kw, checkpoint=tmp_path, checkpoint_every=2)
    first._time_limit = 0.3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        first.fit(X, y)
    # stopped by its time limit (unless it converged first), and the warning says so
    assert all("time limit" in str(w.message) for w in caught
               if issubclass(w.category, ConvergenceWarning))
    assert ckpt.load(tmp_path).round > 0
    resumed = LogisticRegression(**kw).fit(X, y, resume=tmp_path)
    assert resumed.history_["round"].iloc[0] > 0
    assert logistic_objective(resumed, X, y) == pytest.approx(logistic_objective(ref, X, y),
                                                              rel=1e-6)


def lda_corpus():
    X, _ = make_lda_corpus(800, 400, 10, doc_length=60, random_state=0)
    return X


def assert_lda_counts_consistent(est, X):
    """Word-topic table, topic totals and doc-topic counts agree with the corpus."""
    alpha = est.doc_topic_prior_
    n_dk_plus = est.doc_topic_ * (np.asarray(X.sum(axis=1)) + alpha.sum())
    ndk = n_dk_plus - alpha
    np.testing.assert_allclose(ndk, np.rint(ndk), atol=1e-6)  # integer counts
    ndk = np.rint(ndk).astype(np.int64)
    nwk = np.rint(est.components_ - est.topic_word_prior).astype(np.int64)
    assert ndk.min() >= 0 and nwk.min() >= 0
    np.testing.assert_array_equal(ndk.sum(axis=1), np.asarray(X.sum(axis=1)).ravel())
    np.testing.assert_array_equal(nwk.sum(axis=0), np.asarray(X.sum(axis=0)).ravel())
    np.testing.assert_array_equal(ndk.sum(axis=0), nwk.sum(axis=1))  # topic totals
    np.testing.assert_array_equal(est._topic_totals, nwk.sum(axis=1))
    assert est.n_tokens_ == X.sum()


@pytest.mark.parametrize("optimize, threads", [
    ({}, 1), ({"optimize_interval": 3, "optimize_burn_in": 2}, 1), ({}, 2)],
    ids=["fixed-alpha", "optimised-alpha", "2-threads-per-block"])
def test_lda_survives_a_killed_worker(three_workers, optimize, threads):
    X = lda_corpus()
    iters = 100
    kw = dict(n_components=10, max_iter=iters, random_state=0, client=three_workers,
              block_threads=threads, **optimize)
    ref = LDA(**kw)
    ref.fit_transform(X)
    assert ref.n_blocks_ == 3 and ref.block_threads_ == threads and not ref.recoveries_
    three_workers.wait_for_workers(3)
    # about a third of the way into the undisturbed fit (on either transport)
    killer = kill_once_fitting(three_workers, delay=ref.history_["time"].iloc[-1] / 3)
    est = LDA(**kw, checkpoint_every=6)
    t0 = time.perf_counter()
    est.fit_transform(X)
    seconds = time.perf_counter() - t0
    killer.join(30)
    assert killer.held, "the worker was never killed"
    [recovery] = est.recoveries_
    print(f"\nLDA recovery: {recovery}; fit {seconds:.1f} s "
          f"(undisturbed {ref.history_['time'].iloc[-1]:.1f} s)")
    assert recovery["round"] % 6 == 0 and recovery["seconds"] < 10
    # every round is in the history, those pulled after the snapshot twice
    rounds = est.history_["round"]
    assert set(rounds) == set(ref.history_["round"]) == set(range(3 * (iters + 1)))
    assert len(rounds) >= len(ref.history_) and rounds.iloc[-1] == 3 * (iters + 1) - 1
    assert_lda_counts_consistent(est, X)
    # the same chain as the undisturbed fit: every draw is seeded by round and shard
    n = X.sum()
    assert est.loglikelihoods_[-1] / n == pytest.approx(ref.loglikelihoods_[-1] / n, rel=1e-12)
    np.testing.assert_allclose(est.loglikelihoods_, ref.loglikelihoods_, rtol=1e-12)
    np.testing.assert_array_equal(est.components_, ref.components_)
    np.testing.assert_allclose(est.doc_topic_, ref.doc_topic_, rtol=1e-12)
    np.testing.assert_array_equal(est.doc_topic_prior_, ref.doc_topic_prior_)
    assert len(set(est.doc_topic_prior_)) == (10 if optimize else 1)
    three_workers.wait_for_workers(3)


@pytest.mark.parametrize("optimize, threads", [
    ({}, 1), ({"optimize_interval": 2, "optimize_burn_in": 1}, 1), ({}, 2)],
    ids=["fixed-alpha", "optimised-alpha", "2-threads-per-block"])
def test_lda_checkpoint_and_resume_through_the_estimator(client, tmp_path, monkeypatch,
                                                         optimize, threads):
    from dask_strads.lda import estimator as lda_estimator

    X = lda_corpus()
    kw = dict(n_components=10, max_iter=8, n_blocks=3, sync_every=2, staleness=1, client=client,
              **optimize)
    if threads > 1:  # else the workers' threads, which the checkpoint need not know
        kw["block_threads"] = threads
    full = LDA(**kw, random_state=7)
    full.fit_transform(X)
    # An interrupted fit: the engine stops after round 17 of 27 (mid-rotation, iteration 5),
    # and leaves its checkpoint there.
    engine_run = lda_estimator.run

    def interrupted(*args, **kwargs):
        return engine_run(*args, **{**kwargs, "max_rounds": 17})

    monkeypatch.setattr(lda_estimator, "run", interrupted)
    first = LDA(**kw, random_state=7, checkpoint=tmp_path, checkpoint_every=5).fit(X)
    monkeypatch.undo()
    assert first.n_iter_ == 4 and first.history_["round"].iloc[-1] == 16
    assert ckpt.load(tmp_path).round == 17
    # A new estimator (seed and blocks from the checkpoint) continues the same chain.
    resumed = LDA(**kw)
    resumed.fit_transform(X, resume=tmp_path)
    assert resumed.history_["round"].iloc[0] == 17 and resumed.n_iter_ == full.n_iter_ == 8
    np.testing.assert_allclose(resumed.loglikelihoods_, full.loglikelihoods_, rtol=1e-12)
    np.testing.assert_array_equal(resumed.components_, full.components_)
    np.testing.assert_allclose(resumed.doc_topic_, full.doc_topic_, rtol=1e-12)
    assert_lda_counts_consistent(resumed, X)
    np.testing.assert_allclose(resumed.transform(X[:20]), full.transform(X[:20]), rtol=1e-12)
    np.testing.assert_array_equal(resumed.doc_topic_prior_, full.doc_topic_prior_)
    # resuming with settings the checkpoint contradicts fails before any fit work
    for bad, match in ((dict(random_state=8), "random_state"), (dict(n_components=9),
                                                                 "n_components"),
                       (dict(n_blocks=2), "n_blocks"),
                       (dict(block_threads=threads + 1), "block_threads")):
        with pytest.raises(ValueError, match=match):
            LDA(**{**kw, **bad}).fit(X, resume=tmp_path)
    with pytest.raises(FileNotFoundError, match="resume"):
        LDA(**kw).fit(X, resume=tmp_path / "nothing")
