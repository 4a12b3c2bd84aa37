"""LogisticRegression on a real cluster: scikit-learn's objective, inputs, labels, checks,
model selection, and errors before any cluster work."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from dask_strads import LogisticRegression
from dask_strads._datasets.logistic import C_min, make_classification

TWO_BLOCKS = {"dask-strads.cd.min-block-nnz": 1}


def objective(X, y01, coef, intercept, C, l1_ratio=1.0):
    """scikit-learn's objective: ``C`` times the summed log-loss plus the penalty."""
    coef = np.ravel(coef)
    z = np.asarray(X @ coef).ravel() + intercept
    ys = np.where(y01 == 1, 1.0, -1.0)
    return (C * np.logaddexp(0.0, -ys * z).sum() + l1_ratio * np.abs(coef).sum()
            + 0.5 * (1.0 - l1_ratio) * coef @ coef)


def reference(X, y, C, l1_ratio=1.0, fit_intercept=True):
    """scikit-learn's saga at a tight tolerance, which leaves the intercept unpenalised as
    we do (liblinear penalises it, and with a large ``intercept_scaling`` to make up for
    that its L1 solver can run to ``max_iter``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return linear_model.LogisticRegression(
            C=C, l1_ratio=l1_ratio, solver="saga", tol=1e-12, max_iter=100_000,
            fit_intercept=fit_intercept, random_state=0).fit(X, y)


@pytest.fixture(scope="module")
def dense():
    return make_classification(300, 150, n_informative=8, correlation=0.6)


@pytest.fixture(scope="module")
def text():
    X, y = make_classification(400, 600, n_informative=10, design="text")
    return X.tocsr(), y


@pytest.mark.parametrize("blocks", [1, 2])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("kind", ["dense", "text"])
def test_l1_matches_sklearn(client, dense, text, kind, fit_intercept, blocks):
    X, y = dense if kind == "dense" else text
    C = 10 * C_min(X, y, fit_intercept=fit_intercept)
    config = TWO_BLOCKS if blocks == 2 else {}
    with dask.config.set(config):
        model = LogisticRegression(C=C, fit_intercept=fit_intercept, tol=1e-10, client=client,
                                   progress=False).fit(X, y)
    assert model.n_blocks_ == blocks
    sk = reference(X, y, C, fit_intercept=fit_intercept)
    ours = objective(X, y, model.coef_, model.intercept_[0], C)
    ref = objective(X, y, sk.coef_, sk.intercept_[0] if fit_intercept else 0.0, C)
    assert ours <= ref * (1 + 1e-6), (ours, ref)
    assert abs(ours - ref) <= 1e-6 * ref
    assert model.coef_.shape == (1, X.shape[1]) and model.intercept_.shape == (1,)
    assert np.mean(model.predict(X) == sk.predict(X)) > 0.99
    if not fit_intercept:
        assert model.intercept_[0] == 0.0


def test_elastic_net_matches_sklearn(client, dense):
    X, y = dense
    C = 5 * C_min(X, y)
    model = LogisticRegression(penalty="elasticnet", l1_ratio=0.5, C=C, tol=1e-10,
                               client=client, progress=False).fit(X, y)
    sk = reference(X, y, C, l1_ratio=0.5)
    assert objective(X, y, model.coef_, model.intercept_[0], C, 0.5) == pytest.approx(
        objective(X, y, sk.coef_, sk.intercept_[0], C, 0.5), rel=1e-6)


def test_labels_probabilities_and_decisions_agree(client, dense):
    X, y01 = dense
    names = np.array(["spam", "ham"])[y01]  # "ham" < "spam": classes_[1] is "spam"
    model = LogisticRegression(C=10 * C_min(X, y01), client=client, progress=False)
    model.fit(X, names)
    assert model.classes_.tolist() == ["ham", "spam"]
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    z = model.decision_function(X)
    np.testing.assert_allclose(proba[:, 1], 1 / (1 + np.exp(-z)))
    np.testing.assert_array_equal(model.predict(X), np.where(z > 0, "spam", "ham"))
    np.testing.assert_allclose(model.predict_log_proba(X), np.log(proba))
    assert model.score(X, names) == np.mean(model.predict(X) == names)
    # the same fit on 0/1 labels: "spam" is 0 there, so the signs flip
    numeric = LogisticRegression(C=model.C, client=client, progress=False).fit(X, 1 - y01)
    np.testing.assert_allclose(numeric.coef_, model.coef_, atol=1e-6)


@pytest.fixture(scope="module")
def three_classes():
    """Three classes, each told apart by its own few features."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((240, 40))
    y = np.argmax(X[:, :3] @ np.diag([2.0, 2.0, 2.0]) + 0.5 * rng.standard_normal((240, 3)),
                  axis=1)
    return X, np.array(["cat", "cow", "dog"])[y]


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_more_classes_are_fitted_one_vs_rest(client, three_classes, fit_intercept):
    X, labels = three_classes
    C = 0.5
    model = LogisticRegression(C=C, tol=1e-10, fit_intercept=fit_intercept, client=client,
                               progress=False).fit(X, labels)
    assert model.classes_.tolist() == ["cat", "cow", "dog"]
    assert model.coef_.shape == (3, 40) and model.intercept_.shape == (3,)
    for k, name in enumerate(model.classes_):
        rest = (labels == name).astype(int)  # this class against the rest
        ref = reference(X, rest, C, fit_intercept=fit_intercept)
        ours = objective(X, rest, model.coef_[k], model.intercept_[k], C)
        assert ours <= objective(X, rest, ref.coef_, ref.intercept_, C) * (1 + 1e-6)
    z = model.decision_function(X)
    assert z.shape == (240, 3)
    np.testing.assert_array_equal(model.predict(X), model.classes_[z.argmax(axis=1)])
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(proba.argmax(axis=1), z.argmax(axis=1))
    assert model.score(X, labels) > 0.8
    assert sorted(model.history_["class"].unique()) == ["cat", "cow", "dog"]


def test_one_vs_rest_on_dask_input_matches_local_input(client, three_classes):
    X, labels = three_classes
    local = LogisticRegression(C=0.5, tol=1e-10, client=client, progress=False)
    local.fit(X, labels)
    dX = da.from_array(X, chunks=(80, 20))
    remote = LogisticRegression(C=0.5, tol=1e-10, client=client, progress=False)
    remote.fit(dX, da.from_array(labels, chunks=80))
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-6)
    pred, proba = remote.predict(dX), remote.predict_proba(dX)
    assert isinstance(pred, da.Array) and isinstance(proba, da.Array)
    np.testing.assert_array_equal(pred.compute(), local.predict(X))
    np.testing.assert_allclose(proba.compute(), local.predict_proba(X), atol=1e-6)


def test_dask_input_stays_on_the_cluster(client, text):
    X, y = text
    C = 10 * C_min(X, y)
    local = LogisticRegression(C=C, tol=1e-10, client=client, progress=False).fit(X, y)
    dX = da.from_array(X.tocsc(), chunks=(400, 150), asarray=False)
    dy = da.from_array(y, chunks=100)
    remote = LogisticRegression(C=C, tol=1e-10, client=client, progress=False).fit(dX, dy)
    np.testing.assert_allclose(remote.coef_, local.coef_, atol=1e-6)
    pred = remote.predict(dX)
    assert isinstance(pred, da.Array)
    np.testing.assert_array_equal(pred.compute(), local.predict(X))
    assert isinstance(remote.predict_proba(dX), da.Array)


def test_setting_the_deprecated_rho_warns_and_changes_nothing(client, dense):
    X, y = dense
    C = 10 * C_min(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ref = LogisticRegression(C=C, tol=1e-8, client=client, progress=False).fit(X, y)
    with pytest.warns(FutureWarning, match="'rho' was deprecated .* no effect"):
        est = LogisticRegression(C=C, tol=1e-8, rho=0.5, client=client,
                                 progress=False).fit(X, y)
    assert objective(X, y, est.coef_, est.intercept_[0], C) == pytest.approx(
        objective(X, y, ref.coef_, ref.intercept_[0], C), rel=1e-9)


def test_warm_start_continues_from_the_last_solution(client, dense):
    X, y = dense
    C = 10 * C_min(X, y)
    model = LogisticRegression(C=C, tol=1e-8, warm_start=True, client=client,
                               progress=False).fit(X, y)
    gap_rounds = int(model.history_["objective"].notna().sum())
    model.fit(X, y)
    assert int(model.history_["objective"].notna().sum()) < gap_rounds
    assert len(model.history_) == 1  # converged at the first gap round


def test_pipeline_and_grid_search(client, text):
    X, y = text
    C0 = C_min(X, y)
    pipe = make_pipeline(MaxAbsScaler(), LogisticRegression(client=client, progress=False))
    search = GridSearchCV(pipe, {"logisticregression__C": [2 * C0, 20 * C0]}, cv=2)
    search.fit(X, y)
    assert search.best_params_["logisticregression__C"] in (2 * C0, 20 * C0)
    assert 0.5 <= search.score(X, y) <= 1.0


class ExplodingClient:
    """Any use of this 'client' fails: validation must happen before cluster work."""

    def __getattr__(self, name):
        raise AssertionError(f"cluster touched ({name}) before validation")


@pytest.mark.parametrize("params, labels, match", [
    ({}, np.zeros(20), "expected 2 classes, got 1 class"),
    ({"checkpoint": "ckpt"}, np.arange(20) % 3, "checkpoint: a fit of 3 classes"),
    ({}, np.linspace(0, 1, 20), "expected class labels, got a 'continuous'"),
    ({"C": -1.0}, np.arange(20) % 2, "'C' parameter"),
    ({"C": 0.0}, np.arange(20) % 2, "'C' parameter"),
    ({"penalty": "l2"}, np.arange(20) % 2, "'penalty' parameter"),
    ({"penalty": "elasticnet"}, np.arange(20) % 2, "l1_ratio: required"),
])
def test_bad_input_fails_before_cluster_work(params, labels, match):
    X, _ = make_classification(20, 5, n_informative=2)
    with pytest.raises(ValueError, match=match):
        LogisticRegression(client=ExplodingClient(), **params).fit(X, labels)


def test_an_l1_ratio_that_a_pure_l1_penalty_ignores_warns(thread_client):
    X, y = make_classification(40, 5, n_informative=2, random_state=0)
    with pytest.warns(UserWarning, match="l1_ratio=0.5 has no effect with penalty='l1'"):
        LogisticRegression(l1_ratio=0.5, client=thread_client).fit(X, y)


def test_nan_fails_before_cluster_work():
    X, y = make_classification(20, 5, n_informative=2)
    X[2, 3] = np.nan
    with pytest.raises(ValueError, match="X.*NaN"):
        LogisticRegression(client=ExplodingClient()).fit(X, y)
    X = sp.csr_matrix(np.nan_to_num(X))
    with pytest.raises(ValueError, match="y"):
        LogisticRegression(client=ExplodingClient()).fit(X, np.r_[np.nan, y[1:]])


@pytest.mark.slow
@pytest.mark.usefixtures("default_client")
@parametrize_with_checks([LogisticRegression(tol=1e-6)])
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


@pytest.fixture(scope="module")
def default_client(cluster):
    from distributed import Client

    with Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


def test_a_fit_stopped_at_max_iter_says_so_with_its_passes(client, dense):
    from sklearn.exceptions import ConvergenceWarning

    X, y = dense
    with pytest.warns(ConvergenceWarning,
                      match=r"after 1 passes \(tol=1e-14\): it reached max_iter=1 passes"):
        LogisticRegression(C=C_min(X, y) * 100, tol=1e-14, max_iter=1, client=client,
                           progress=False).fit(X, y)
