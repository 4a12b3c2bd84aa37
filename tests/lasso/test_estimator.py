"""The estimators on a real cluster: scikit-learn parity, inputs, checks, model selection."""

from __future__ import annotations

import re
import warnings

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sparse
from distributed import Client
from sklearn import linear_model
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from dask_strads import ElasticNet, Lasso
from dask_strads._datasets.lasso import (
    alpha_max,
    make_correlated_regression,
    make_sparse_regression,
)
from dask_strads.cd.inputs import _prepare_local
from dask_strads.lasso import lasso_path
from tests.cd._local import objective


@pytest.fixture(scope="module")
def default_client(cluster):
    """The shared process cluster as the *default* client, so client=None finds it."""
    with Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


@pytest.fixture(scope="module")
def dense():
    X, y, _ = make_correlated_regression(200, 120, n_informative=8, correlation=0.7)
    return X, y


@pytest.fixture(scope="module")
def wide():
    """n < p, correlated: blocks interfere most here."""
    X, y, _ = make_correlated_regression(80, 160, n_informative=5, correlation=0.5)
    return X, y


@pytest.fixture(scope="module")
def sparse_data():
    X, y, _ = make_sparse_regression(300, 200, density=0.05, n_informative=8)
    return X, y


def reference(X, y, alpha, l1_ratio=1.0, **kw):
    return linear_model.ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-12,
                                   max_iter=100_000, **kw).fit(X, y)


def assert_same_objective(model, sk, X, y, alpha, l1_ratio=1.0):
    Xd = X.toarray() if sp.issparse(X) else X
    ours = objective(Xd, y, model.coef_, model.intercept_, alpha, l1_ratio)
    ref = objective(Xd, y, sk.coef_, sk.intercept_, alpha, l1_ratio)
    assert abs(ours - ref) <= 1e-6 * abs(ref), (ours, ref)
    np.testing.assert_allclose(model.coef_, sk.coef_, atol=1e-5)
    assert model.intercept_ == pytest.approx(sk.intercept_, abs=1e-5)


# ------------------------------------------------------------------ parity with sklearn
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("fmt", ["dense", "csr", "coo_pydata"])
def test_lasso_matches_sklearn(client, dense, sparse_data, fit_intercept, positive, fmt):
    X, y = dense if fmt == "dense" else sparse_data
    sk_X = X
    if fmt == "csr":
        X = sp.csr_matrix(X)
    elif fmt == "coo_pydata":
        X = sparse.COO.from_scipy_sparse(X)
    alpha = alpha_max(sk_X, y, fit_intercept=fit_intercept) / 20
    model = Lasso(alpha=alpha, fit_intercept=fit_intercept, positive=positive, tol=1e-10,
                  client=client, random_state=0).fit(X, y)
    sk = reference(sk_X, y, alpha, fit_intercept=fit_intercept, positive=positive)
    assert_same_objective(model, sk, sk_X, y, alpha)
    assert model.dual_gap_ <= 1e-10 * np.var(y - (y.mean() if fit_intercept else 0)) * 1.01 \
        or model.dual_gap_ <= 1e-10 * ((y - y.mean() * fit_intercept) ** 2).sum() / len(y)
    assert {"round", "time", "objective", "gap"} <= set(model.history_.columns)
    # far below a block's worth of entries per worker: one worker fits it alone
    assert model.n_blocks_ == 1
    np.testing.assert_allclose(model.predict(X), sk.predict(sk_X), atol=1e-4)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_elastic_net_matches_sklearn(client, dense, sparse_data, kind):
    X, y = dense if kind == "dense" else sparse_data
    alpha = alpha_max(X, y) / 10
    model = ElasticNet(alpha=alpha, l1_ratio=0.4, tol=1e-10, client=client).fit(X, y)
    assert_same_objective(model, reference(X, y, alpha, 0.4), X, y, alpha, 0.4)


@pytest.mark.parametrize("chunks", [
    "dense", "scipy",
    # pydata sparse compiles its numba kernels on each worker first: minutes on 2 cores
    pytest.param("pydata", marks=pytest.mark.slow),
])
def test_dask_array_input_stays_on_cluster(client, dense, sparse_data, chunks):
    X, y = dense if chunks == "dense" else sparse_data
    if chunks == "dense":
        dX = da.from_array(X, chunks=(50, 80))
    elif chunks == "scipy":
        dX = da.from_array(sp.csr_matrix(X), chunks=(100, 300), asarray=False)
    else:
        dX = da.from_array(sparse.COO.from_scipy_sparse(X), chunks=(100, 150), asarray=False)
    dy = da.from_array(y, chunks=50)
    alpha = alpha_max(X, y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, client=client).fit(dX, dy)
    assert_same_objective(model, reference(X, y, alpha), X, y, alpha)
    pred = model.predict(da.from_array(X.toarray() if sp.issparse(X) else X, chunks=(50, 80)))
    assert isinstance(pred, da.Array)
    np.testing.assert_allclose(pred.compute(), model.predict(X), atol=1e-10)


def test_the_client_loads_the_kernels_before_the_blocks_are_made(thread_client, dense,
                                                                 monkeypatch):
    """Workers of the client's installation then find the kernels in numba's cache
    instead of compiling them beside their blocks."""
    import dask_strads.cd.estimator as cd_estimator

    calls = []
    for name in ("warm_up_kernels", "_prepare_dask"):
        real = getattr(cd_estimator, name)

        def recorded(*args, _real=real, _name=name, **kwargs):
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(cd_estimator, name, recorded)
    X, y = dense
    Lasso(alpha=alpha_max(X, y) / 20, client=thread_client, progress=False).fit(
        da.from_array(X, chunks=(50, 80)), y)
    assert calls == ["warm_up_kernels", "_prepare_dask"]


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_coefficients_left_on_the_cluster_predict_as_the_gathered_ones(client, dense,
                                                                        sparse_data, kind):
    X, y = dense if kind == "dense" else sparse_data
    alpha = alpha_max(X, y) / 20
    # the two fits must take the same steps: whether a phase sweeps a Gram matrix
    # follows measured times, so it is pinned
    with dask.config.set({"dask-strads.cd.gram-max-bytes": 0}):
        gathered = ElasticNet(alpha=alpha, l1_ratio=0.8, tol=1e-10, client=client,
                              progress=False).fit(X, y)
        kept = ElasticNet(alpha=alpha, l1_ratio=0.8, tol=1e-10, client=client,
                          progress=False, gather_model=False).fit(X, y)
    assert isinstance(kept.coef_, da.Array) and kept.coef_.shape == (X.shape[1],)
    np.testing.assert_array_equal(client.compute(kept.coef_).result(), gathered.coef_)
    assert (kept.sparse_coef_ != gathered.sparse_coef_).nnz == 0
    assert kept.sparse_coef_.nnz == np.count_nonzero(gathered.coef_) > 0
    assert kept.intercept_ == gathered.intercept_
    np.testing.assert_allclose(kept.predict(X), gathered.predict(X), rtol=1e-12, atol=1e-12)
    dX = da.from_array(X, chunks=(70, -1), asarray=not sp.issparse(X))
    lazy = kept.predict(dX)
    assert isinstance(lazy, da.Array) and lazy.shape == (X.shape[0],)
    np.testing.assert_allclose(client.compute(lazy).result(), gathered.predict(X),
                               rtol=1e-12, atol=1e-12)
    assert kept.score(X, y) == pytest.approx(gathered.score(X, y), rel=1e-12)


def test_dask_dataframe_with_target_column(client, dense):
    X, y = dense
    cols = [f"f{i}" for i in range(X.shape[1])]
    df = pd.DataFrame(X, columns=cols)
    df["target"] = y
    ddf = dd.from_pandas(df, npartitions=3)
    alpha = alpha_max(X, y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, client=client).fit(ddf, "target")
    assert_same_objective(model, reference(X, y, alpha), X, y, alpha)
    assert list(model.feature_names_in_) == cols
    # features and a dask Series target
    model2 = Lasso(alpha=alpha, tol=1e-10, client=client).fit(ddf[cols], ddf["target"])
    np.testing.assert_allclose(model2.coef_, model.coef_, atol=1e-8)
    # predicting from the columns in another order would pair coefficients wrongly
    with pytest.raises(ValueError, match="feature names should match"):
        model.predict(ddf[cols[::-1]])
    np.testing.assert_allclose(model.predict(ddf[cols]).compute(), model.predict(X),
                               rtol=1e-12)


def test_column_names_of_mixed_types_are_blamed_on_x():
    X = np.random.default_rng(0).standard_normal((20, 4))
    with pytest.raises(TypeError, match="^X: .*Feature names"):
        Lasso(alpha=0.1).fit(pd.DataFrame(X, columns=["a", 1, "b", 2]), X[:, 0])


def test_dask_dataframe_of_pandas_nullable_numbers(client, dense):
    """Nullable Float64/Int64/boolean columns are numbers, as scikit-learn reads them; a
    missing value is a NaN, reported as any other."""
    X, y = dense
    frame = pd.DataFrame(X[:, :3], columns=["a", "b", "c"]).astype(
        {"a": "Float64", "b": "Float64"}).assign(k=(X[:, 3] > 0), n=np.arange(len(y)) % 3)
    frame = frame.astype({"k": "boolean", "n": "Int64"})
    plain = frame.astype("float64")
    alpha = alpha_max(plain.to_numpy(), y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, client=client).fit(
        dd.from_pandas(frame, npartitions=2), y)
    assert_same_objective(model, reference(plain.to_numpy(), y, alpha), plain.to_numpy(),
                          y, alpha)
    frame.loc[3, "a"] = pd.NA
    with pytest.raises(ValueError, match="X: contains NaN"):
        Lasso(alpha=alpha, client=client).fit(dd.from_pandas(frame, npartitions=2), y)


def test_pandas_frame_of_nullable_numbers_and_objects_holding_numbers(client, dense):
    """As scikit-learn reads a pandas X: nullable numbers and object columns of numbers
    are numbers; an object column holding a string is named."""
    X, y = dense
    frame = pd.DataFrame(X[:, :3], columns=["a", "b", "d"]).assign(
        c=np.arange(len(y)) % 3, k=(X[:, 3] > 0))
    frame = frame.astype({"a": "Float64", "b": object, "c": "Int64", "k": "boolean"})
    plain = frame.astype("float64")
    alpha = alpha_max(plain.to_numpy(), y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, client=client).fit(frame, y)
    assert_same_objective(model, reference(plain.to_numpy(), y, alpha), plain.to_numpy(),
                          y, alpha)
    frame.loc[5, "b"] = "n/a"
    with pytest.raises(TypeError, match=r"X: columns \['b'\] are not real numeric"):
        Lasso(alpha=alpha, client=client).fit(frame, y)


def test_dask_dataframe_read_from_parquet(client, dense, tmp_path):
    """The target column of a parquet dataset reads in fewer partitions than the
    features (dask/dask#12411)."""
    X, y = dense
    cols = [f"f{i}" for i in range(X.shape[1])]
    dd.from_pandas(pd.DataFrame(X, columns=cols).assign(target=y),
                   npartitions=4).to_parquet(tmp_path / "d.parquet")
    ddf = dd.read_parquet(tmp_path / "d.parquet")
    alpha = alpha_max(X, y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, client=client).fit(ddf[cols], ddf["target"])
    assert_same_objective(model, reference(X, y, alpha), X, y, alpha)
    np.testing.assert_allclose(model.predict(ddf[cols]).compute(), model.predict(X),
                               rtol=1e-12, atol=1e-12)


def test_wide_correlated_problem(client, wide):
    X, y = wide
    alpha = alpha_max(X, y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, client=client).fit(X, y)
    assert_same_objective(model, reference(X, y, alpha), X, y, alpha)


@pytest.mark.parametrize("l1_ratio", [1.0, 0.6])
def test_many_workers_match_sklearn(wide, l1_ratio):
    """One block per worker: five blocks of correlated columns (n < p) reach the
    tight tol (converged, no warning) with scikit-learn's objective."""
    from distributed import LocalCluster

    X, y = wide
    alpha = alpha_max(X, y) / 20
    with LocalCluster(n_workers=5, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster,
                                                               set_as_default=False) as c:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            model = ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-10, client=c,
                               random_state=0).fit(X, y)
    assert_same_objective(model, reference(X, y, alpha, l1_ratio), X, y, alpha, l1_ratio)


def test_staleness_converges_on_cluster(client, dense):
    X, y = dense
    alpha = alpha_max(X, y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, staleness=2, n_candidates=16, client=client).fit(X, y)
    assert_same_objective(model, reference(X, y, alpha), X, y, alpha)


@pytest.mark.parametrize("schedule", ["round_robin", "random", "shotgun"])
def test_other_schedules(client, sparse_data, schedule):
    X, y = sparse_data
    alpha = alpha_max(X, y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, schedule=schedule, n_candidates=32,
                  client=client, random_state=0).fit(X, y)
    assert_same_objective(model, reference(X, y, alpha), X, y, alpha)


def test_random_sweeps_a_whole_block_in_random_order(thread_client, dense):
    """A round of every column of a block is a random permutation of them, not the
    round robin's increasing order: one pass of the two gives different coefficients."""
    X, y = dense
    alpha = alpha_max(X, y) / 20
    one_pass = {}
    for schedule in ("round_robin", "random"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            one_pass[schedule] = Lasso(alpha=alpha, schedule=schedule, max_iter=1,
                                       n_candidates=X.shape[1], client=thread_client,
                                       random_state=0).fit(X, y).coef_
        model = Lasso(alpha=alpha, tol=1e-10, schedule=schedule, n_candidates=X.shape[1],
                      client=thread_client, random_state=0).fit(X, y)
        assert_same_objective(model, reference(X, y, alpha), X, y, alpha)
    assert not np.allclose(one_pass["round_robin"], one_pass["random"])


def test_rounds_that_only_wait_are_not_sampled_onto_the_dashboard(thread_client,
                                                                   sparse_data):
    """With rounds in flight a plain schedule waits for its gap round in rounds of no
    pushes; sampling one of those for the dashboard divided by zero workers."""
    X, y = sparse_data
    alpha = alpha_max(X, y) / 20
    with dask.config.set({"dask-strads.engine.dashboard-interval": 0}):
        model = Lasso(alpha=alpha, tol=1e-10, schedule="random", staleness=1,
                      n_candidates=32, client=thread_client, random_state=0).fit(X, y)
    assert_same_objective(model, reference(X, y, alpha), X, y, alpha)
    assert "tasks" in set(model.history_["transport"])


@pytest.mark.parametrize("schedule", ["round_robin", "shotgun"])
def test_a_plain_schedule_that_diverges_raises(thread_client, schedule):
    """Two blocks updating strongly correlated columns at once, unchecked, drive the
    objective up without bound: an error that says so, not coefficients of 1e50."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    model = Lasso(alpha=0.01, schedule=schedule, client=thread_client, random_state=0)
    with pytest.raises(FloatingPointError, match=f"diverged: schedule='{schedule}'"):
        model.fit(X, y)
    assert not hasattr(model, "coef_")
    converged = Lasso(alpha=0.01, tol=1e-10, client=thread_client).fit(X, y)  # priority
    assert_same_objective(converged, reference(X, y, 0.01), X, y, 0.01)


@pytest.mark.parametrize("n", [200, 2500])  # columns copied, and swept in place
def test_shotgun_on_dense_columns(client, n):
    X, y, _ = make_correlated_regression(n, 60, n_informative=6, correlation=0.5)
    alpha = alpha_max(X, y) / 20
    model = Lasso(alpha=alpha, tol=1e-10, schedule="shotgun", n_candidates=16,
                  client=client, random_state=0).fit(X, y)
    assert_same_objective(model, reference(X, y, alpha), X, y, alpha)


def test_thread_cluster_and_warm_start(thread_client, dense):
    X, y = dense
    alpha = alpha_max(X, y) / 20
    model = Lasso(alpha=alpha, tol=1e-8, client=thread_client, warm_start=True).fit(X, y)
    first_updates = model.history_["updates"].iloc[-1]
    model.fit(X, y)  # from the solution: converges on the first gap check
    assert model.history_["updates"].iloc[-1] < first_updates
    assert len(model.history_) == 1


def test_progress_bar_counts_decades_of_the_duality_gap(thread_client, dense, capsys):
    """The bar fills as the gap falls towards ``tol``, one step per decade, and ends
    full on convergence."""
    X, y = dense
    Lasso(alpha=alpha_max(X, y) / 20, tol=1e-8, max_iter=50, client=thread_client,
          progress=True).fit(X, y)
    err = capsys.readouterr().err
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    done, total = re.search(r"(\d+)/(\d+) \[", last).groups()
    assert int(done) == int(total) > 1, last
    assert "gap decade" in last


def test_max_iter_warns(client, dense):
    X, y = dense
    with pytest.warns(ConvergenceWarning, match="did not converge.* after 1 passes .*"
                                                "it reached max_iter=1 passes"):
        model = Lasso(alpha=alpha_max(X, y) / 100, tol=1e-14, max_iter=1,
                      client=client).fit(X, y)
    assert model.n_iter_ == 1  # at most max_iter, as scikit-learn's


@pytest.mark.slow
def test_lasso_path_matches_sklearn(client, dense):
    X, y = dense
    alphas, coefs, gaps, intercepts = lasso_path(X, y, n_alphas=4, eps=1e-2, tol=1e-10,
                                                 client=client)
    for i, a in enumerate(alphas):
        sk = reference(X, y, a)
        ours = objective(X, y, coefs[:, i], intercepts[i], a)
        assert ours == pytest.approx(objective(X, y, sk.coef_, sk.intercept_, a), rel=1e-6)
    assert alphas[0] == pytest.approx(alpha_max(X, y))
    assert not coefs[:, 0].any()


@pytest.mark.slow
def test_pipeline_and_grid_search(client, dense):
    X, y = dense
    grid = GridSearchCV(
        make_pipeline(StandardScaler(), Lasso(client=client, tol=1e-6)),
        {"lasso__alpha": [0.05, 0.2]}, cv=2,
    ).fit(X, y)
    sk = GridSearchCV(make_pipeline(StandardScaler(), linear_model.Lasso(tol=1e-10)),
                      {"lasso__alpha": [0.05, 0.2]}, cv=2).fit(X, y)
    assert grid.best_params_ == sk.best_params_
    np.testing.assert_allclose(grid.cv_results_["mean_test_score"],
                               sk.cv_results_["mean_test_score"], atol=1e-4)


# ------------------------------------------------------------------ validation
class ExplodingClient:
    """Any use of this 'client' fails: validation must happen before cluster work."""

    def __getattr__(self, name):
        raise AssertionError(f"cluster touched ({name}) before validation")


@pytest.mark.parametrize("params, match", [
    ({"alpha": -1.0}, "alpha"),
    ({"l1_ratio": 1.5}, "l1_ratio"),
    ({"max_iter": 0}, "max_iter"),
    ({"tol": -1.0}, "tol"),
    ({"schedule": "fastest"}, "schedule"),
    ({"n_candidates": 0}, "n_candidates"),
    ({"rho": 0.0}, "rho"),
    ({"staleness": -1}, "staleness"),
])
def test_invalid_parameters(params, match):
    X, y, _ = make_correlated_regression(20, 5, n_informative=2)
    with pytest.raises(ValueError, match=match):
        ElasticNet(client=ExplodingClient(), **params).fit(X, y)


def test_setting_the_deprecated_rho_warns_and_changes_nothing(client, dense):
    X, y = dense
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ref = Lasso(alpha=0.05, tol=1e-8, client=client, progress=False).fit(X, y)
    for cls in (Lasso, ElasticNet):
        with pytest.warns(FutureWarning, match="'rho' was deprecated .* no effect"):
            est = cls(alpha=0.05, tol=1e-8, rho=0.3, client=client, progress=False)
            if cls is ElasticNet:
                est.set_params(l1_ratio=1.0)
            est.fit(X, y)
        assert objective(X, y, est.coef_, est.intercept_, 0.05) == pytest.approx(
            objective(X, y, ref.coef_, ref.intercept_, 0.05), rel=1e-9)


def test_invalid_inputs_fail_before_cluster_work():
    X, y, _ = make_correlated_regression(20, 5, n_informative=2)
    est = Lasso(client=ExplodingClient())
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        est.fit(bad, y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        est.fit(X, y[:-1])
    with pytest.raises(ValueError, match="y"):
        est.fit(X, np.full(20, np.inf))
    dX = da.from_array(X, chunks=5)
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        est.fit(dX[dX[:, 0] > 0], y)
    with pytest.raises(ValueError, match="y: expected shape"):
        est.fit(dX, y[:-2])
    with pytest.raises(TypeError, match="X: expected a real numeric dtype"):
        est.fit(da.from_array(X.astype(complex), chunks=5), y)
    ddf = dd.from_pandas(pd.DataFrame(X, columns=list("abcde")), npartitions=2)
    with pytest.raises(ValueError, match="column 'z'"):
        est.fit(ddf, "z")


def test_nan_in_dask_array_is_rejected_before_fitting(client):
    X, y, _ = make_correlated_regression(20, 5, n_informative=2)
    X[4, 1] = np.inf
    with pytest.raises(ValueError, match="NaN or infinity"):
        Lasso(client=client).fit(da.from_array(X, chunks=10), y)
    X[4, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity"):
        Lasso(client=client).fit(da.from_array(sparse.COO.from_numpy(X), chunks=10,
                                               asarray=False), y)


def test_the_finite_check_survives_a_sum_that_overflows():
    from dask_strads.cd.finite import all_finite, chunk_is_finite

    big = np.full(4, 1e308)  # its sum overflows, every value is finite
    assert all_finite(big) and chunk_is_finite(sp.csc_matrix(big.reshape(2, 2)))
    for bad in (np.inf, -np.inf, np.nan):
        values = big.copy()
        values[2] = bad
        assert not all_finite(values)
        assert not chunk_is_finite(sp.csc_matrix(values.reshape(2, 2)))
    assert not all_finite(np.array([1.0, np.inf, -np.inf]))  # inf - inf is NaN, still caught
    assert all_finite(np.arange(5)) and all_finite(np.zeros(0))


@pytest.mark.parametrize("order", ["C", "F"])
def test_the_threaded_finite_check_sees_every_piece(monkeypatch, order):
    from dask_strads.cd import finite

    monkeypatch.setattr(finite, "_SPLIT_FROM", 8)  # pieces of a small array
    monkeypatch.setattr(finite.os, "cpu_count", lambda: 4)
    values = np.ones((8, 5), order=order)
    assert finite.all_finite_in_parallel(values)
    for where in [(0, 0), (7, 4), (3, 2), (7, 0)]:  # first, last and middle pieces
        for bad in (np.nan, np.inf):
            broken = values.copy(order=order)
            broken[where] = bad
            assert not finite.all_finite_in_parallel(broken)
    strided = np.ones((8, 10))[:, ::2]  # not contiguous: checked as it is
    strided[4, 3] = np.nan
    assert not finite.all_finite_in_parallel(strided)


@pytest.mark.parametrize("order", ["C", "F", "strided"])
def test_the_finite_check_of_dense_x_takes_what_the_blocks_need_of_it(monkeypatch, order):
    """Dense X is checked by its columns' squared norms, on several threads, in the
    pass that also takes X'y; the blocks are given both: every range of columns counts,
    every bad value is caught."""
    from dask_strads.cd import finite

    monkeypatch.setattr(finite, "_SPLIT_FROM", 8)  # ranges of columns of a small array
    monkeypatch.setattr(finite.os, "cpu_count", lambda: 3)
    est = Lasso(fit_intercept=False)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 14))[:, ::2] if order == "strided" else \
        np.asarray(rng.standard_normal((8, 7)), order=order)
    y = rng.standard_normal(8)
    squares, xty = est._validate_input(X, y)[3]
    np.testing.assert_allclose(squares, (X**2).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(xty, X.T @ y, rtol=1e-12)
    prepared = _prepare_local(X, y, 2, stats=(squares, xty))
    assert prepared.col_sq is squares and prepared.xty is xty
    centred = _prepare_local(X, y, 2, centre=True, stats=(squares, xty))
    assert centred.col_sq is None and centred.xty is None  # the blocks take their own
    for where in [(0, 0), (7, 6), (3, 3)]:
        for bad in (np.nan, np.inf):
            broken = np.array(X, order="F" if order == "F" else "C")
            broken[where] = bad
            with pytest.raises(ValueError, match="X: Input X contains"):
                est._validate_input(broken, y)
    huge = X * 1e160  # finite, but its squares overflow: the exact check accepts it
    assert np.isinf(est._validate_input(huge, y)[3][0]).any()
    assert est._validate_input(sp.csc_matrix(X), y)[3] is None
    # a fit that centres X: its blocks take their own, the check is a plain sum
    assert Lasso(fit_intercept=True)._validate_input(X, y)[3] is None


def test_a_non_finite_x_is_named_with_scikit_learns_words(client):
    y = np.arange(50.0)
    dense = np.ones((50, 4))
    dense[-1, -1] = np.nan
    csc = sp.csc_matrix(np.ones((50, 4)))
    csc.data[-1] = np.nan
    for X in (dense, csc):
        with pytest.raises(ValueError, match="^X: Input X contains NaN"):
            Lasso(alpha=0.1, client=client, progress=False).fit(X, y)
    with pytest.raises(ValueError, match="^X: Input X contains infinity"):
        Lasso(alpha=0.1, client=client, progress=False).fit(np.full((50, 4), np.inf), y)


# ------------------------------------------------------------------ estimator checks
@pytest.mark.usefixtures("default_client")
@parametrize_with_checks([Lasso(tol=1e-6), ElasticNet(tol=1e-6)])
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def test_dashboard_shows_lasso_pushes_and_the_span(client, dense):
    # Lasso rounds use the direct channel; sampled rounds still reach the task stream
    from distributed import get_task_stream


    X, y = dense
    every_round_through_tasks = {"dask-strads.engine.dashboard-interval": 0,
                                 "dask-strads.cd.min-block-nnz": 1}
    with dask.config.set(every_round_through_tasks), get_task_stream(client) as ts:
        est = Lasso(alpha=0.1, tol=1e-8, client=client, progress=False).fit(X, y)
    assert est.n_blocks_ == 2
    keys = [str(t["key"]) for t in ts.data]
    assert any(k.startswith("strads-lasso-push") for k in keys)
    # every round but the phases that exchange worker to worker (always direct)
    h = est.history_
    phases = h["solo_phases"] + h["peer_phases"]
    exchanged = phases.diff().fillna(phases) > 0
    assert exchanged.any()
    assert set(h.loc[~exchanged, "transport"]) == {"tasks"}
    assert set(h.loc[exchanged, "transport"]) <= {"direct"}
    spans = client.run_on_scheduler(
        lambda dask_scheduler: {s.name for s in dask_scheduler.extensions["spans"].spans.values()})
    assert any("lasso" in "".join(name).lower() for name in spans)
    sk = linear_model.Lasso(alpha=0.1, tol=1e-12, max_iter=100_000).fit(X, y)
    assert objective(X, y, est.coef_, est.intercept_, 0.1) == pytest.approx(
        objective(X, y, sk.coef_, sk.intercept_, 0.1), rel=1e-6)


@pytest.mark.parametrize("fmt", ["csc", "csr", "coo"])
def test_local_sparse_shards_are_canonical_column_blocks(fmt):
    from dask_strads.cd.inputs import _block_starts, _local_shards

    X = sp.random(50, 23, density=0.3, format=fmt, random_state=1)
    starts = _block_starts(23, 3)
    shards = _local_shards(X, starts, centre=False)
    Xc = X.tocsc()
    for b in range(3):
        shard = shards[b]
        assert sp.issparse(shard) and shard.format == "csc"
        assert shard.has_canonical_format
        np.testing.assert_array_equal(shard.toarray(), Xc[:, starts[b]:starts[b + 1]].toarray())
        np.testing.assert_array_equal(shard.indptr, Xc[:, starts[b]:starts[b + 1]].indptr)


@pytest.mark.parametrize("n_candidates, smallest", [(None, 100), (7, 7)])
def test_n_candidates_sets_the_smallest_working_set(client, n_candidates, smallest):
    """A fit from zero starts from ``n_candidates`` coordinates (the setting's 100 when
    None) and grows its working sets to hold twice the support."""
    X, y, _ = make_correlated_regression(200, 400, n_informative=60, random_state=3)
    model = Lasso(alpha=alpha_max(X, y) / 200, n_candidates=n_candidates, tol=1e-8,
                  client=client, progress=False).fit(X, y)
    ws = model.history_["ws_size"]
    assert ws[ws > 0].iloc[0] == smallest
    assert ws.max() >= max(2 * smallest, np.count_nonzero(model.coef_))
