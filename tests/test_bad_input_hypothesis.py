"""Random malformed inputs never crash a worker or hang a fit (hypothesis).

For each estimator, hypothesis draws inputs of random shapes (empty included), dtypes
(integer, float, bool, complex, strings), containers (numpy, scipy.sparse, pandas,
dask), with NaN / inf / negative or fractional values sprinkled in, mismatched targets,
duplicate or negative indices, and some invalid hyperparameters. Every call must either
fit (with finite fitted values) or raise ``ValueError`` / ``TypeError`` within a time
bound, and afterwards the cluster must have the same worker processes and no fit state
left on them.
"""

from __future__ import annotations

import concurrent.futures
import os
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dask_strads import LDA, ElasticNet, Lasso, MatrixFactorization
from dask_strads.engine.cluster import workers_of
from dask_strads.engine.tasks import fit_ids_here

pytestmark = pytest.mark.timeout(600)

# A fit of these sizes takes well under a second; the bound leaves room for a loaded
# 2-core CI machine.
CALL_SECONDS = 60.0
# DASK_STRADS_BAD_INPUT_EXAMPLES=200 explores further (locally; CI keeps the default).
SETTINGS = settings(max_examples=int(os.environ.get("DASK_STRADS_BAD_INPUT_EXAMPLES", "30")),
                    deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

DTYPES = ["float64"] * 4 + ["float32", "int64", "uint8", "bool", "complex128", "str", "object"]
SPRINKLES = ["none"] * 8 + ["nan", "inf", "-inf", "negative", "fraction"]


def _rare(draw, one_in: int) -> bool:
    # hypothesis favours small integers: the rare branch is the largest one
    return draw(st.integers(0, one_in - 1)) == one_in - 1


def _size(draw, largest: int) -> int:
    return 0 if _rare(draw, 8) else draw(st.integers(1, largest))


def _params(draw, valid: dict, invalid: list) -> dict:
    """Valid hyperparameters, one of them replaced by an invalid value one time in five."""
    params = dict(valid)
    if _rare(draw, 5):
        name, value = draw(st.sampled_from(invalid))
        params[name] = value
    return params


# ---------------------------------------------------------------------- building inputs
def _sprinkle(a: np.ndarray, how: str, rng: np.random.Generator) -> np.ndarray:
    if how == "none" or a.size == 0:
        return a
    value = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "negative": -3.0,
             "fraction": 0.5}[how]
    a = a.astype(np.float64)
    a.flat[rng.integers(a.size)] = value
    return a


def _as_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "str":
        return a.astype(str)
    if dtype == "object":
        out = a.astype(object)
        if out.size:
            out.flat[0] = "x"
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # casting NaN / inf / negatives to integers
        return a.astype(dtype)


def _container(a: np.ndarray, kind: str):
    import dask.array as da

    if kind == "numpy" or a.ndim != 2 or a.dtype.kind in "OUS":
        return a
    if kind == "csr":
        return sp.csr_matrix(a) if a.dtype.kind in "biufc" else a
    chunks = tuple(max(1, s // 2) for s in a.shape)
    x = da.from_array(a, chunks=chunks)
    if kind == "dask-unknown" and a.shape[0] and a.dtype.kind in "biuf":
        return x[da.from_array(np.ones(a.shape[0], dtype=bool), chunks=chunks[0])]
    return x


@st.composite
def linear_inputs(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n, p = _size(draw, 12), _size(draw, 5)
    X = rng.standard_normal((n, p))
    if p and _rare(draw, 3):
        X[:, rng.integers(p)] = draw(st.sampled_from([0.0, 1.5]))  # zero-variance column
    X = _sprinkle(X, draw(st.sampled_from(SPRINKLES)), rng)
    X = _as_dtype(X, draw(st.sampled_from(DTYPES)))
    if _rare(draw, 10):
        X = X.reshape(-1)  # 1-d
    y = rng.standard_normal(max(0, n + draw(st.sampled_from([0] * 6 + [-1, 1]))))
    y = _sprinkle(y, draw(st.sampled_from(["none"] * 8 + ["nan", "inf"])), rng)
    if _rare(draw, 10):
        y = np.c_[y, y]
    X = _container(X, draw(st.sampled_from(["numpy"] * 3 + ["csr", "dask", "dask-unknown"])))
    params = _params(draw, {"alpha": draw(st.sampled_from([0.1, 0.0])), "max_iter": 5,
                            "tol": 1e-3},
                     [("alpha", -1.0), ("alpha", float("nan")), ("max_iter", 0), ("tol", -1.0),
                      ("l1_ratio", 2.0), ("rho", 0.0), ("staleness", -1)])
    return (X, y), params


@st.composite
def lda_inputs(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n_docs, n_words = _size(draw, 10), _size(draw, 8)
    X = rng.poisson(draw(st.sampled_from([1.5, 0.3, 0.0])), size=(n_docs, n_words))
    X = _sprinkle(X, draw(st.sampled_from(SPRINKLES)), rng)
    X = _as_dtype(X, draw(st.sampled_from(DTYPES)))
    if _rare(draw, 10):
        X = X.reshape(-1)
    kind = draw(st.sampled_from(["numpy"] * 3 + ["csr", "frame", "dask", "dask-unknown"]))
    if kind == "frame" and X.ndim == 2:
        rows, cols = np.nonzero(X != 0)
        X = pd.DataFrame({"doc": rows, "word": cols, "count": X[rows, cols]})
        if len(X) and _rare(draw, 4):
            X.loc[0, "doc"] = -1  # negative document id
    else:
        X = _container(X, kind)
    params = _params(draw, {"n_components": draw(st.sampled_from([1, 2, 3])),
                            "max_iter": draw(st.sampled_from([1, 2]))},
                     [("n_components", 0), ("doc_topic_prior", 0.0), ("doc_topic_prior", -1.0),
                      ("doc_topic_prior", float("nan")), ("topic_word_prior", 0.0),
                      ("max_iter", 0), ("staleness", -1)])
    return (X,), params


@st.composite
def mf_inputs(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    m, n = _size(draw, 8), _size(draw, 6)
    nnz = 0 if m * n == 0 or _rare(draw, 8) else draw(st.integers(1, min(m * n, 20)))
    linear = rng.choice(m * n, size=nnz, replace=False) if nnz else np.zeros(0, dtype=int)
    rows, cols = np.divmod(linear, max(n, 1))
    values = rng.standard_normal(nnz)
    if nnz and _rare(draw, 4):
        extra = draw(st.sampled_from(["duplicate", "negative-row", "fractional-col"]))
        rows, cols, values = np.r_[rows, rows[0]], np.r_[cols, cols[0]], np.r_[values, 1.0]
        if extra == "negative-row":
            rows = rows.copy()
            rows[-1] = -1
        elif extra == "fractional-col":
            cols = cols + 0.5
    values = _sprinkle(values, draw(st.sampled_from(["none"] * 6 + ["nan", "inf"])), rng)
    values = _as_dtype(values, draw(st.sampled_from(DTYPES)))
    kind = draw(st.sampled_from(["tuple", "coo", "frame", "dask-frame"]))
    if kind == "coo":
        try:
            X = sp.coo_matrix((values, (rows, cols)), shape=(m, n))
        except (ValueError, TypeError):
            X = (rows, cols, values)  # scipy itself refuses these
    elif kind in ("frame", "dask-frame"):
        X = pd.DataFrame({"row": rows, "col": cols, "value": values})
        if kind == "dask-frame":
            import dask.dataframe as dd

            X = dd.from_pandas(X, npartitions=draw(st.integers(1, 2)))
    else:
        X = (rows, cols, values)
    params = _params(draw, {"n_components": draw(st.sampled_from([1, 2])),
                            "alpha": draw(st.sampled_from([0.1, 0.0])),
                            "max_iter": draw(st.sampled_from([1, 2]))},
                     [("n_components", 0), ("alpha", -1.0), ("alpha", float("nan")),
                      ("max_iter", 0), ("tol", -1.0), ("staleness", 1)])
    return (X,), params


# ---------------------------------------------------------------------- the property
def _cluster_state(client) -> tuple[dict, list]:
    return client.run(os.getpid), sorted(workers_of(client))


def _fit_ids(client) -> dict:
    return {w: set(ids) for w, ids in client.run(fit_ids_here).items()}


def _finite_fitted(est) -> None:
    for name in ("coef_", "intercept_", "components_", "W_", "H_", "objective_"):
        if hasattr(est, name):
            value = np.asarray(getattr(est, name), dtype=np.float64)
            assert np.isfinite(value).all(), f"fit returned non-finite {name}"


def _fits_or_rejects(est, args, client, baseline) -> None:
    """Fit in a thread with a time bound: it returns, or raises ValueError / TypeError."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings on tiny budgets
        future = pool.submit(est.fit, *args)
        try:
            future.result(timeout=CALL_SECONDS)
        except concurrent.futures.TimeoutError:
            pytest.fail(f"fit did not return within {CALL_SECONDS} s (hang?)")
        except (ValueError, TypeError) as error:
            event(f"rejected: {type(error).__name__}: {str(error)[:40]}")
        else:
            event("fitted")
            _finite_fitted(est)
    state, fits_before = baseline
    assert _cluster_state(client) == state, "a worker process died or was replaced"
    # fits of earlier tests (e.g. one whose client process was killed) are not ours
    new = {w: ids - fits_before.get(w, set()) for w, ids in _fit_ids(client).items()}
    assert all(not ids for ids in new.values()), f"fit state left on workers: {new}"


@pytest.fixture
def baseline(client):
    return _cluster_state(client), _fit_ids(client)


@SETTINGS
@given(data=linear_inputs(), enet=st.booleans())
def test_linear_models_survive_malformed_input(client, baseline, data, enet):
    args, params = data
    cls = ElasticNet if enet else Lasso
    if not enet:
        params.pop("l1_ratio", None)
    est = cls(client=client, **params)
    _fits_or_rejects(est, args, client, baseline)


@SETTINGS
@given(data=lda_inputs())
def test_lda_survives_malformed_input(client, baseline, data):
    args, params = data
    est = LDA(random_state=0, client=client, **params)
    _fits_or_rejects(est, args, client, baseline)


@SETTINGS
@given(data=mf_inputs())
def test_mf_survives_malformed_input(client, baseline, data):
    args, params = data
    est = MatrixFactorization(random_state=0, progress=False, client=client, **params)
    _fits_or_rejects(est, args, client, baseline)
