"""Bad-input catalogue: every estimator rejects malformed input before the cluster works.

Policy tested here, for ``Lasso``, ``ElasticNet``, ``LDA`` and ``MatrixFactorization``:

* Malformed input or an invalid hyperparameter raises ``ValueError`` or ``TypeError``
  whose message names the offending argument (``X``, ``y``, ``validation``, ``init`` or
  the hyperparameter), before any work reaches the cluster: the engine's ``run`` is never
  called, the scheduler sees no task transition, and no worker holds fit state.
* Exception: the *values* of a dask collection (NaN, negative counts, duplicates, ...)
  live on the cluster and can only be checked there. Such inputs get one validation pass
  on the cluster, then the same error, still before the engine runs, and the pass leaves
  no keys behind. Everything knowable without computing (dtype, ndim, known shapes,
  unknown chunk sizes) is checked before any task.
* A failed fit leaves the estimator as it was: a fresh estimator gets no fitted attribute
  and a fitted one keeps all of its fitted attributes unchanged.
* Zero-variance (constant or all-zero) columns are valid for ``Lasso`` / ``ElasticNet``,
  as in scikit-learn: their coefficient stays exactly 0 and the other coefficients match
  scikit-learn's; nothing divides by zero.
* Empty documents are valid for ``LDA`` (a corpus may contain documents that lost all of
  their words to preprocessing): they get the prior's uniform topic distribution; a corpus
  without any token is an error. Empty rows / columns of ``MatrixFactorization`` are valid
  and get finite (zero) factors.
"""

from __future__ import annotations

import gc
import importlib
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn import linear_model

from dask_strads import LDA, ElasticNet, Lasso, MatrixFactorization
from dask_strads.engine.tasks import fit_ids_here

pytestmark = pytest.mark.timeout(300)

ESTIMATORS = ("Lasso", "ElasticNet", "LDA", "MatrixFactorization")


# ---------------------------------------------------------------------- data
def _regression(n: int = 24, p: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = X @ rng.standard_normal(p) + 0.1 * rng.standard_normal(n)
    return X, y


def _counts(n_docs: int = 16, n_words: int = 10, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.poisson(1.5, size=(n_docs, n_words)).astype(np.int64)
    X[:, 0] += 1  # every document has a token
    return X


def _ratings(m: int = 12, n: int = 9, nnz: int = 50, seed: int = 0) -> sp.coo_matrix:
    rng = np.random.default_rng(seed)
    linear = rng.choice(m * n, size=nnz, replace=False)
    rows, cols = np.divmod(linear, n)
    W, H = rng.standard_normal((m, 2)), rng.standard_normal((n, 2))
    values = np.einsum("ij,ij->i", W[rows], H[cols]) + 0.05 * rng.standard_normal(nnz)
    return sp.coo_matrix((values, (rows, cols)), shape=(m, n))


def _make(name: str, client, **params):
    """A cheap-to-fit estimator on ``client``."""
    if name == "Lasso":
        return Lasso(**{"alpha": 0.05, "max_iter": 50, "client": client, **params})
    if name == "ElasticNet":
        return ElasticNet(**{"alpha": 0.05, "l1_ratio": 0.5, "max_iter": 50, "client": client,
                             **params})
    if name == "LDA":
        return LDA(**{"n_components": 3, "max_iter": 2, "random_state": 0, "client": client,
                      **params})
    return MatrixFactorization(**{"n_components": 2, "max_iter": 2, "random_state": 0,
                                  "progress": False, "client": client, **params})


def _valid_input(name: str) -> tuple[tuple, dict]:
    if name in ("Lasso", "ElasticNet"):
        return _regression(), {}
    if name == "LDA":
        return (_counts(),), {}
    return (_ratings(),), {}


def _fitted_attributes(est) -> dict:
    return {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("_")}


def _same(a, b) -> bool:
    if isinstance(a, pd.DataFrame):
        return isinstance(b, pd.DataFrame) and a.equals(b)
    if sp.issparse(a):
        return sp.issparse(b) and a.shape == b.shape and (a != b).nnz == 0
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind
                              in "fc")
    return a == b or (a != a and b != b)


def _expect_error(est, args, kwargs, exc, match: str, method: str = "fit") -> str:
    """Fit, expect ``exc`` matching ``match``; return the message.

    The exception (and its traceback, whose frames hold the fit's futures) is dropped
    before returning, as it would be in a user's session once the error was handled.
    """
    try:
        getattr(est, method)(*args, **kwargs)
    except exc as error:
        message = f"{type(error).__name__}: {error}"
    else:
        pytest.fail(f"DID NOT RAISE {exc}")
    assert re.search(match, message), f"error message does not name {match!r}: {message}"
    return message


# ---------------------------------------------------------------------- cluster watch
def _scheduler_counters(dask_scheduler=None) -> tuple[int, int]:
    return dask_scheduler.transition_counter, len(dask_scheduler.tasks)


def _quiet(client, timeout: float = 10.0) -> tuple[int, int]:
    """Scheduler counters once they stop moving (earlier tests' keys released)."""
    last = client.run_on_scheduler(_scheduler_counters)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = client.run_on_scheduler(_scheduler_counters)
        if now == last:
            return now
        last = now
    return last


class EngineReached(AssertionError):
    """The invalid input got as far as the engine."""


def _forbidden_run(*args, **kwargs):
    raise EngineReached("dask_strads.engine.run was called: the input was not rejected "
                        "before the fit started")


@pytest.fixture
def no_engine(monkeypatch):
    """Make every reference to the engine's ``run`` fail the test if called."""
    import dask_strads.engine

    real = dask_strads.engine.run
    for mod_name in [m for m in sys.modules if m.startswith("dask_strads")]:
        mod = sys.modules[mod_name]
        if getattr(mod, "run", None) is real:
            monkeypatch.setattr(mod, "run", _forbidden_run)
    for mod_name in ("dask_strads.lasso.estimator", "dask_strads.lda.estimator",
                     "dask_strads.mf.estimator"):
        mod = importlib.import_module(mod_name)
        if getattr(mod, "run", None) is real:
            monkeypatch.setattr(mod, "run", _forbidden_run)
    return real


@dataclass
class ClusterWatch:
    """What the cluster looked like before a call that must not touch it."""

    client: object
    counters: tuple[int, int] = (0, 0)
    pids: dict = field(default_factory=dict)
    fits: dict = field(default_factory=dict)

    def start(self) -> ClusterWatch:
        self.pids = self.client.run(os.getpid)
        self.counters = _quiet(self.client)
        # fits of earlier tests (e.g. one whose client process was killed) are not ours
        self.fits = self.client.run(fit_ids_here)
        return self

    def check(self, *, cluster_pass: bool) -> None:
        if cluster_pass:
            # a validation pass over dask data: allowed, but it must leave no keys behind
            gc.collect()  # as a session would, eventually: cycles through tracebacks
            deadline = time.monotonic() + 5
            while (self.client.run_on_scheduler(_scheduler_counters)[1] > self.counters[1]
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            n_tasks = self.client.run_on_scheduler(_scheduler_counters)[1]
            assert n_tasks <= self.counters[1], (
                f"the failed fit left {n_tasks - self.counters[1]} key(s) on the scheduler")
        else:
            now = self.client.run_on_scheduler(_scheduler_counters)
            assert now == self.counters, (
                "work reached the cluster before validation: scheduler (transitions, tasks) "
                f"went from {self.counters} to {now}")
        fits = self.client.run(fit_ids_here)
        new = {w: sorted(set(ids) - set(self.fits.get(w, []))) for w, ids in fits.items()}
        assert all(not ids for ids in new.values()), f"fit state left on workers: {new}"
        assert self.client.run(os.getpid) == self.pids, "a worker process was replaced"


@pytest.fixture(scope="module")
def mclient(cluster):
    """One client of the shared process cluster for the whole module (cheaper than one
    per test; the catalogue has ~200 cases)."""
    from distributed import Client

    with Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2)
        yield c


@pytest.fixture
def watch(mclient, no_engine):
    return ClusterWatch(mclient)


# ---------------------------------------------------------------------- input catalogue
@dataclass(frozen=True)
class Case:
    name: str
    make_input: Callable[[], tuple[tuple, dict]]
    exc: type | tuple
    match: str
    cluster_pass: bool = False  # values of a dask input: checked by a pass on the cluster


BAD = (ValueError, TypeError)


def _with(a: np.ndarray, index, value) -> np.ndarray:
    a = np.array(a, dtype=np.result_type(a, type(value)) if not isinstance(value, str)
                 else object)
    a[index] = value
    return a


def _da(a, chunks):
    import dask.array as da

    return da.from_array(a, chunks=chunks, asarray=False if sp.issparse(a) else None)


def _dd(frame: pd.DataFrame, npartitions: int = 2):
    import dask.dataframe as dd

    return dd.from_pandas(frame, npartitions=npartitions)


def _unknown_rows(a, chunks):
    x = _da(a, chunks)
    if sp.issparse(a):
        keep = np.ones(a.shape[0], dtype=bool)
        keep[0] = False
        import dask.array as da

        return x[da.from_array(keep, chunks=chunks[0])]
    return x[x[:, 0] > -np.inf]


def _linear_cases() -> list[Case]:
    X, y = _regression()
    n, p = X.shape
    strings = np.array([[f"{v:.2f}" for v in row] for row in X])
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(p)])
    frame_str = frame.assign(f0=[f"s{i}" for i in range(n)])

    def ddf_with_target(df):
        return _dd(df.assign(target=y))

    return [
        Case("X-nan", lambda: ((_with(X, (3, 2), np.nan), y), {}), ValueError, r"\bX\b"),
        Case("X-inf", lambda: ((_with(X, (0, 0), np.inf), y), {}), ValueError, r"\bX\b"),
        Case("X-sparse-neg-inf", lambda: ((sp.csr_matrix(_with(X, (5, 1), -np.inf)), y), {}),
             ValueError, r"\bX\b"),
        Case("y-nan", lambda: ((X, _with(y, 4, np.nan)), {}), ValueError, r"\by\b"),
        Case("y-inf", lambda: ((X, _with(y, 4, -np.inf)), {}), ValueError, r"\by\b"),
        Case("y-too-short", lambda: ((X, y[:-1]), {}), ValueError, r"\by\b"),
        Case("y-too-long", lambda: ((X, np.r_[y, 1.0]), {}), ValueError, r"\by\b"),
        Case("y-2-columns", lambda: ((X, np.c_[y, y]), {}), ValueError, r"\by\b"),
        Case("y-none", lambda: ((X, None), {}), ValueError, r"\by\b"),
        Case("X-1d", lambda: ((X[:, 0], y), {}), ValueError, r"\bX\b"),
        Case("X-3d", lambda: ((X[:, :, None], y), {}), ValueError, r"\bX\b"),
        Case("X-0-rows", lambda: ((X[:0], y[:0]), {}), ValueError, r"\bX\b"),
        Case("X-0-columns", lambda: ((X[:, :0], y), {}), ValueError, r"\bX\b"),
        Case("X-sparse-0-rows", lambda: ((sp.csr_matrix((0, p)), y[:0]), {}), ValueError,
             r"\bX\b"),
        Case("X-sparse-0-columns", lambda: ((sp.csc_matrix((n, 0)), y), {}), ValueError,
             r"\bX\b"),
        Case("X-str", lambda: ((strings, y), {}), BAD, r"\bX\b"),
        Case("X-object-str", lambda: ((_with(X, (1, 1), "a"), y), {}), BAD, r"\bX\b"),
        Case("X-complex", lambda: ((X + 1j, y), {}), BAD, r"\bX\b"),
        Case("X-sparse-complex", lambda: ((sp.csr_matrix(X + 1j), y), {}), BAD, r"\bX\b"),
        Case("X-frame-str-column", lambda: ((frame_str, y), {}), BAD, r"\bX\b"),
        Case("y-str", lambda: ((X, np.array([f"{v:.2f}" for v in y])), {}), BAD, r"\by\b"),
        Case("y-object-str", lambda: ((X, _with(y, 0, "a")), {}), BAD, r"\by\b"),
        Case("y-complex", lambda: ((X, y + 1j), {}), BAD, r"\by\b"),
        # dask: structure is known without computing
        Case("dask-X-unknown-chunks", lambda: ((_unknown_rows(X, (12, p)), y), {}), ValueError,
             r"\bX\b"),
        Case("dask-X-1d", lambda: ((_da(X[:, 0], 12), y), {}), ValueError, r"\bX\b"),
        Case("dask-X-complex", lambda: ((_da(X + 1j, (12, p)), y), {}), BAD, r"\bX\b"),
        Case("dask-X-str", lambda: ((_da(strings, (12, p)), y), {}), BAD, r"\bX\b"),
        Case("dask-X-0-rows", lambda: ((_da(X[:0], (1, p)), y[:0]), {}), ValueError, r"\bX\b"),
        Case("dask-X-0-columns", lambda: ((_da(X[:, :0], (12, 1)), y), {}), ValueError,
             r"\bX\b"),
        Case("dask-y-too-short", lambda: ((_da(X, (12, p)), _da(y[:-1], 12)), {}), ValueError,
             r"\by\b"),
        Case("dask-X-numpy-y-too-short", lambda: ((_da(X, (12, p)), y[:-1]), {}), ValueError,
             r"\by\b"),
        Case("dask-frame-str-column", lambda: ((ddf_with_target(frame_str), "target"), {}),
             BAD, r"\bX\b"),
        Case("dask-frame-missing-target", lambda: ((ddf_with_target(frame), "nope"), {}),
             ValueError, r"\by\b"),
        # dask: values can only be checked where the data lives
        Case("dask-X-nan", lambda: ((_da(_with(X, (20, 3), np.nan), (12, p)), y), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-X-sparse-inf", lambda: ((_da(sp.csr_matrix(_with(X, (2, 3), np.inf)),
                                                (12, p)), y), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-y-nan", lambda: ((_da(X, (12, p)), _da(_with(y, 7, np.nan), 12)), {}),
             ValueError, r"\by\b", cluster_pass=True),
        Case("dask-y-unknown-length", lambda: ((_da(X, (12, p)), _unknown_rows(
            np.c_[y, y][:-1], (12, 2))[:, 0]), {}), ValueError, r"\by\b", cluster_pass=True),
        Case("dask-frame-nan", lambda: ((ddf_with_target(frame.assign(f2=_with(X[:, 2], 5,
                                                                                np.nan))),
                                         "target"), {}),
             ValueError, r"\bX\b", cluster_pass=True),
    ]


def _lda_cases() -> list[Case]:
    X = _counts()
    n_docs, n_words = X.shape
    coo = sp.coo_matrix(X)
    frame = pd.DataFrame({"doc": coo.row, "word": coo.col, "count": coo.data})
    return [
        Case("X-nan", lambda: ((_with(X, (2, 3), np.nan),), {}), ValueError, r"\bX\b"),
        Case("X-inf", lambda: ((_with(X, (2, 3), np.inf),), {}), ValueError, r"\bX\b"),
        Case("X-negative", lambda: ((_with(X, (2, 3), -1),), {}), ValueError, r"\bX\b"),
        Case("X-sparse-negative", lambda: ((sp.csr_matrix(_with(X, (0, 1), -2)),), {}),
             ValueError, r"\bX\b"),
        Case("X-fractional", lambda: ((_with(X, (1, 1), 0.5),), {}), ValueError, r"\bX\b"),
        Case("X-sparse-fractional", lambda: ((sp.csc_matrix(_with(X, (4, 4), 2.25)),), {}),
             ValueError, r"\bX\b"),
        Case("X-sparse-nan", lambda: ((sp.coo_matrix(_with(X, (4, 4), np.nan)),), {}),
             ValueError, r"\bX\b"),
        Case("X-1d", lambda: ((X[0],), {}), ValueError, r"\bX\b"),
        Case("X-3d", lambda: ((X[:, :, None],), {}), ValueError, r"\bX\b"),
        Case("X-0-documents", lambda: ((X[:0],), {}), ValueError, r"\bX\b"),
        Case("X-0-words", lambda: ((X[:, :0],), {}), ValueError, r"\bX\b"),
        Case("X-sparse-0x0", lambda: ((sp.csr_matrix((0, 0), dtype=np.int64),), {}),
             ValueError, r"\bX\b"),
        Case("X-sparse-no-tokens", lambda: ((sp.csr_matrix((n_docs, n_words),
                                                           dtype=np.int64),), {}),
             ValueError, r"\bX\b"),
        Case("X-dense-no-tokens", lambda: ((np.zeros_like(X),), {}), ValueError, r"\bX\b"),
        Case("X-str", lambda: ((X.astype(str),), {}), BAD, r"\bX\b"),
        Case("X-object-str", lambda: ((_with(X, (0, 0), "a"),), {}), BAD, r"\bX\b"),
        Case("X-complex", lambda: ((X + 0j,), {}), BAD, r"\bX\b"),
        Case("X-sparse-complex", lambda: ((sp.csr_matrix(X + 0j),), {}), BAD, r"\bX\b"),
        Case("frame-missing-count", lambda: ((frame[["doc", "word"]],), {}), ValueError,
             r"\bX\b"),
        Case("frame-negative-count", lambda: ((frame.assign(count=-frame["count"]),), {}),
             ValueError, r"\bX\b"),
        Case("frame-fractional-count", lambda: ((frame.assign(count=frame["count"] + 0.5),),
                                                {}),
             ValueError, r"\bX\b"),
        Case("frame-negative-doc", lambda: ((frame.assign(doc=frame["doc"] - 1),), {}),
             ValueError, r"\bX\b"),
        Case("frame-str-word", lambda: ((frame.assign(word=frame["word"].astype(str)),), {}),
             BAD, r"\bX\b"),
        Case("frame-nan-count", lambda: ((frame.assign(count=_with(frame["count"].to_numpy(),
                                                                   0, np.nan)),), {}),
             ValueError, r"\bX\b"),
        # dask: structure
        Case("dask-X-unknown-chunks", lambda: ((_unknown_rows(X, (8, n_words)),), {}),
             ValueError, r"\bX\b"),
        Case("dask-X-1d", lambda: ((_da(X[0], 5),), {}), ValueError, r"\bX\b"),
        Case("dask-X-complex", lambda: ((_da(X + 0j, (8, n_words)),), {}), BAD, r"\bX\b"),
        Case("dask-X-str", lambda: ((_da(X.astype(str), (8, n_words)),), {}), BAD, r"\bX\b"),
        Case("dask-X-0-documents", lambda: ((_da(X[:0], (1, n_words)),), {}), ValueError,
             r"\bX\b"),
        Case("dask-X-0-words", lambda: ((_da(X[:, :0], (8, 1)),), {}), ValueError, r"\bX\b"),
        Case("dask-frame-missing-count", lambda: ((_dd(frame[["doc", "word"]]),), {}),
             ValueError, r"\bX\b"),
        Case("dask-frame-str-word", lambda: ((_dd(frame.assign(
            word=frame["word"].astype(str))),), {}), BAD, r"\bX\b"),
        # dask: values
        Case("dask-X-negative", lambda: ((_da(_with(X, (12, 3), -1), (8, n_words)),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-X-nan", lambda: ((_da(_with(X, (12, 3), np.nan), (8, n_words)),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-X-fractional", lambda: ((_da(_with(X, (1, 3), 0.5), (8, n_words)),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-X-sparse-negative", lambda: ((_da(sp.csr_matrix(_with(X, (12, 3), -1)),
                                                     (8, n_words)),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-X-no-tokens", lambda: ((_da(np.zeros_like(X), (8, n_words)),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-frame-negative-count", lambda: ((_dd(frame.assign(count=-frame["count"])),),
                                                   {}),
             ValueError, r"\bX\b", cluster_pass=True),
    ]


def _mf_cases() -> list[Case]:
    A = _ratings()
    m, n = A.shape
    r, c, v = A.row, A.col, A.data
    frame = pd.DataFrame({"row": r, "col": c, "value": v})

    def coo(rows, cols, values, shape=(m, n)):
        return sp.coo_matrix((values, (rows, cols)), shape=shape)

    dup_r, dup_c, dup_v = np.r_[r, r[0]], np.r_[c, c[0]], np.r_[v, 1.0]
    return [
        Case("X-nan", lambda: ((coo(r, c, _with(v, 3, np.nan)),), {}), ValueError, r"\bX\b"),
        Case("X-inf-csr", lambda: ((coo(r, c, _with(v, 3, np.inf)).tocsr(),), {}), ValueError,
             r"\bX\b"),
        Case("X-tuple-inf", lambda: (((r, c, _with(v, 0, -np.inf)),), {}), ValueError, r"\bX\b"),
        Case("X-frame-nan", lambda: ((frame.assign(value=_with(v, 1, np.nan)),), {}),
             ValueError, r"\bX\b"),
        Case("X-duplicate-coo", lambda: ((coo(dup_r, dup_c, dup_v),), {}), ValueError,
             r"\bX\b"),
        Case("X-duplicate-tuple", lambda: (((dup_r, dup_c, dup_v),), {}), ValueError, r"\bX\b"),
        Case("X-duplicate-frame", lambda: ((pd.concat([frame, frame.iloc[:1]]),), {}),
             ValueError, r"\bX\b"),
        Case("X-negative-row", lambda: (((_with(r, 0, -1), c, v),), {}), ValueError, r"\bX\b"),
        Case("X-negative-col-frame", lambda: ((frame.assign(col=_with(c, 2, -3)),), {}),
             ValueError, r"\bX\b"),
        Case("X-fractional-index", lambda: (((r + 0.5, c, v),), {}), ValueError, r"\bX\b"),
        Case("X-str-index", lambda: (((r.astype(str), c, v),), {}), BAD, r"\bX\b"),
        Case("X-unequal-lengths", lambda: (((r, c[:-1], v),), {}), ValueError, r"\bX\b"),
        Case("X-2d-index-arrays", lambda: (((r[:, None], c[:, None], v[:, None]),), {}),
             ValueError, r"\bX\b"),
        Case("X-dense-numpy", lambda: ((A.toarray(),), {}), TypeError, r"\bX\b"),
        Case("X-list", lambda: (([r, c, v],), {}), TypeError, r"\bX\b"),
        Case("X-empty-0x0", lambda: ((sp.coo_matrix((0, 0)),), {}), ValueError, r"\bX\b"),
        Case("X-empty-0-columns", lambda: ((sp.csr_matrix((m, 0)),), {}), ValueError,
             r"\bX\b"),
        Case("X-no-entries", lambda: ((sp.csr_matrix((m, n)),), {}), ValueError, r"\bX\b"),
        Case("X-empty-tuple", lambda: (((r[:0], c[:0], v[:0]),), {}), ValueError, r"\bX\b"),
        Case("X-empty-frame", lambda: ((frame.iloc[:0],), {}), ValueError, r"\bX\b"),
        Case("X-str-values", lambda: (((r, c, v.astype(str)),), {}), BAD, r"\bX\b"),
        Case("X-object-values", lambda: (((r, c, _with(v, 0, "a")),), {}), BAD, r"\bX\b"),
        Case("X-complex-values", lambda: (((r, c, v + 1j),), {}), BAD, r"\bX\b"),
        Case("X-sparse-complex", lambda: ((coo(r, c, v + 1j).tocsr(),), {}), BAD, r"\bX\b"),
        Case("X-frame-two-columns", lambda: ((frame[["row", "col"]],), {}), ValueError,
             r"\bX\b"),
        Case("validation-out-of-range", lambda: ((A,), {"validation": (np.array([m]),
                                                                       np.array([0]),
                                                                       np.array([1.0]))}),
             ValueError, r"\bvalidation\b"),
        Case("validation-nan", lambda: ((A,), {"validation": (np.array([0]), np.array([0]),
                                                              np.array([np.nan]))}),
             ValueError, r"\bvalidation\b"),
        Case("validation-unequal-lengths", lambda: ((A,), {"validation": (
            np.array([0, 1]), np.array([0]), np.array([1.0]))}), ValueError,
            r"\bvalidation\b"),
        Case("validation-dense", lambda: ((A,), {"validation": A.toarray()}), TypeError,
             r"\bvalidation\b"),
        # dask: structure
        Case("dask-array-dense-chunks", lambda: ((_da(A.toarray(), (6, n)),), {}), TypeError,
             r"\bX\b"),
        Case("dask-array-unknown-chunks", lambda: ((_unknown_rows(A.tocsr(), (6, n)),), {}),
             ValueError, r"\bX\b"),
        Case("dask-array-1d", lambda: ((_da(v, 10),), {}), ValueError, r"\bX\b"),
        Case("dask-frame-two-columns", lambda: ((_dd(frame[["row", "col"]]),), {}), ValueError,
             r"\bX\b"),
        Case("dask-frame-str-values", lambda: ((_dd(frame.assign(value=v.astype(str))),), {}),
             BAD, r"\bX\b"),
        Case("dask-frame-complex-values", lambda: ((_dd(frame.assign(value=v + 1j)),), {}),
             BAD, r"\bX\b"),
        # dask: values
        Case("dask-frame-nan", lambda: ((_dd(frame.assign(value=_with(v, 1, np.nan))),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-frame-duplicates", lambda: ((_dd(pd.concat([frame, frame.iloc[:2]])),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-frame-negative-index", lambda: ((_dd(frame.assign(row=_with(r, 0, -2))),),
                                                   {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-frame-fractional-index", lambda: ((_dd(frame.assign(col=c + 0.5)),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-frame-empty", lambda: ((_dd(frame.iloc[:0], 1),), {}), ValueError, r"\bX\b",
             cluster_pass=True),
        Case("dask-array-sparse-nan", lambda: ((_da(coo(r, c, _with(v, 2, np.nan)).tocsr(),
                                                    (6, n)),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-array-no-entries", lambda: ((_da(sp.csr_matrix((m, n)), (6, n)),), {}),
             ValueError, r"\bX\b", cluster_pass=True),
        Case("dask-frame-validation-out-of-range", lambda: ((_dd(frame),), {
            "validation": (np.array([0]), np.array([n + 5]), np.array([1.0]))}), ValueError,
            r"\bvalidation\b", cluster_pass=True),
    ]


def _catalogue() -> list:
    params = []
    for est in ("Lasso", "ElasticNet"):
        params += [pytest.param(est, case, id=f"{est}-{case.name}") for case in _linear_cases()]
    params += [pytest.param("LDA", case, id=f"LDA-{case.name}") for case in _lda_cases()]
    params += [pytest.param("MatrixFactorization", case, id=f"MF-{case.name}")
               for case in _mf_cases()]
    return params


@pytest.mark.parametrize("estimator,case", _catalogue())
def test_bad_input_is_rejected_before_cluster_work(estimator, case, watch, mclient):
    args, kwargs = case.make_input()
    est = _make(estimator, mclient)
    watch.start()
    _expect_error(est, args, kwargs, case.exc, case.match)
    watch.check(cluster_pass=case.cluster_pass)
    assert not _fitted_attributes(est), (
        f"a failed fit left fitted attributes {sorted(_fitted_attributes(est))}")


# ---------------------------------------------------------------------- hyperparameters
NAN = float("nan")
INF = float("inf")
COMMON_BAD = [
    ("max_iter", 0, ValueError), ("max_iter", -3, ValueError), ("max_iter", 2.5, BAD),
    ("max_iter", "10", BAD), ("n_components", 0, ValueError),
    ("staleness", -1, ValueError), ("staleness", 0.5, BAD),
    ("random_state", "seed", BAD),
]
LINEAR_BAD = [
    ("alpha", -1.0, ValueError), ("alpha", NAN, ValueError), ("alpha", "big", BAD),
    ("alpha", None, BAD),
    ("tol", -1e-3, ValueError), ("tol", NAN, ValueError),
    # rho is deprecated (it has no effect) but still checked while it is accepted
    ("rho", 0.0, ValueError), ("rho", -0.5, ValueError), ("rho", 1.5, ValueError),
    ("rho", NAN, ValueError),
    ("schedule", "bogus", ValueError), ("schedule", None, BAD),
    ("n_candidates", 0, ValueError), ("n_candidates", 2.5, BAD),
    ("positive", "yes", BAD), ("fit_intercept", "no", BAD), ("warm_start", 2, BAD),
]
ENET_BAD = [("l1_ratio", 1.5, ValueError), ("l1_ratio", -0.1, ValueError),
            ("l1_ratio", NAN, ValueError)]
LDA_BAD = [
    ("n_components", 2.5, BAD), ("n_components", -1, ValueError),
    ("doc_topic_prior", 0.0, ValueError), ("doc_topic_prior", -1.0, ValueError),
    ("doc_topic_prior", NAN, ValueError), ("doc_topic_prior", INF, ValueError),
    ("topic_word_prior", 0.0, ValueError), ("topic_word_prior", NAN, ValueError),
    ("topic_word_prior", INF, ValueError),
    ("sampler", "vb", ValueError), ("sync_every", 0, ValueError), ("n_blocks", 0, ValueError),
    ("mh_steps", 0, ValueError), ("transform_iter", 1, ValueError),
    ("gather_model", "yes", BAD),
    ("doc_topic_prior", [0.1, 0.2], ValueError), ("doc_topic_prior", [0.1, -0.2, 0.3], ValueError),
    ("doc_topic_prior", [0.1, NAN, 0.3], ValueError),
    ("optimize_interval", -1, ValueError), ("optimize_interval", 1.5, BAD),
    ("optimize_burn_in", -1, ValueError),
]
MF_BAD = [
    ("n_components", 1.5, BAD), ("n_components", True, BAD),
    ("alpha", -0.1, ValueError), ("alpha", NAN, ValueError), ("alpha", INF, ValueError),
    ("alpha", "big", BAD),
    ("tol", -1.0, ValueError), ("tol", NAN, ValueError),
    ("inner_iter", 0, ValueError), ("staleness", 1, ValueError),
    ("n_blocks", 0, ValueError), ("time_limit", 0, ValueError), ("time_limit", -1.0, ValueError),
    ("init", "nndsvd", ValueError), ("init", None, BAD),
]


def _hyper_catalogue() -> list:
    params = []
    table = {
        "Lasso": COMMON_BAD + LINEAR_BAD,
        "ElasticNet": COMMON_BAD + LINEAR_BAD + ENET_BAD,
        "LDA": COMMON_BAD + LDA_BAD,
        "MatrixFactorization": COMMON_BAD + MF_BAD,
    }
    for est, rows in table.items():
        for name, value, exc in rows:
            if name == "n_components" and est in ("Lasso", "ElasticNet"):
                continue
            params.append(pytest.param(est, name, value, exc, id=f"{est}-{name}={value!r}"))
    return params


@pytest.mark.parametrize("estimator,name,value,exc", _hyper_catalogue())
def test_invalid_hyperparameter_is_rejected_before_cluster_work(estimator, name, value, exc,
                                                                watch, mclient):
    args, kwargs = _valid_input(estimator)
    est = _make(estimator, mclient, **{name: value})
    watch.start()
    _expect_error(est, args, kwargs, exc, rf"\b{name}\b")
    watch.check(cluster_pass=False)
    assert not _fitted_attributes(est), (
        f"a failed fit left fitted attributes {sorted(_fitted_attributes(est))}")


def test_lda_fit_transform_validates_too(watch, mclient):
    watch.start()
    _expect_error(_make("LDA", mclient, n_components=0), (_counts(),), {}, ValueError,
                  r"\bn_components\b", method="fit_transform")
    _expect_error(_make("LDA", mclient), (_with(_counts(), (0, 0), -1),), {}, ValueError,
                  r"\bX\b", method="fit_transform")
    watch.check(cluster_pass=False)


def test_mf_init_arrays_are_validated_before_cluster_work(watch, mclient):
    A = _ratings()
    m, n = A.shape
    W0, H0 = np.ones((m, 2)), np.ones((n, 2))
    watch.start()
    for init in ((W0[:, :1], H0), (W0, H0[:-1]), (_with(W0, (0, 0), np.nan), H0),
                 (W0, _with(H0, (1, 1), np.inf))):
        est = _make("MatrixFactorization", mclient, init=init)
        _expect_error(est, (A,), {}, ValueError, r"\binit\b")
        assert _fitted_attributes(est) == {}
    est = _make("MatrixFactorization", mclient, init=(W0 + 0j, H0))
    _expect_error(est, (A,), {}, BAD, r"\binit\b")
    watch.check(cluster_pass=False)


# ---------------------------------------------------------------------- no half-fitted models
def _failing_inputs(estimator: str) -> dict:
    """A local bad input, a dask one found bad on the cluster, and a bad hyperparameter."""
    if estimator in ("Lasso", "ElasticNet"):
        X, y = _regression()
        return {
            "local": ((_with(X, (0, 0), np.nan), y), {}, {}),
            "dask-values": ((_da(_with(X, (13, 1), np.inf), (12, X.shape[1])), y), {}, {}),
            # a different feature count: n_features_in_ must not follow the failed fit
            "dask-values-other-shape": ((_da(_with(np.c_[X, X], (13, 1), np.nan), (12, 4)),
                                         y), {}, {}),
            "hyperparameter": ((X, y), {}, {"alpha": -1.0}),
        }
    if estimator == "LDA":
        X = _counts()
        return {
            "local": ((_with(X, (0, 0), -1),), {}, {}),
            "dask-values": ((_da(_with(X, (9, 0), -1), (8, X.shape[1])),), {}, {}),
            "dask-values-other-shape": ((_da(_with(np.c_[X, X], (9, 0), -1), (8, 4)),), {},
                                        {}),
            "hyperparameter": ((X,), {}, {"doc_topic_prior": -1.0}),
        }
    A = _ratings()
    frame = pd.DataFrame({"row": A.row, "col": A.col, "value": A.data})
    shifted = frame.assign(row=frame["row"] + 30)
    return {
        "local": ((sp.coo_matrix((_with(A.data, 0, np.nan), (A.row, A.col)), shape=A.shape),),
                  {}, {}),
        "dask-values": ((_dd(pd.concat([frame, frame.iloc[:1]])),), {}, {}),
        "dask-values-other-shape": ((_dd(pd.concat([shifted, shifted.iloc[:1]])),), {}, {}),
        "hyperparameter": ((A,), {}, {"n_components": 0}),
    }


@pytest.mark.parametrize("kind", ["local", "dask-values", "dask-values-other-shape",
                                  "hyperparameter"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_failed_fit_keeps_previous_model(estimator, kind, mclient):
    args, kwargs = _valid_input(estimator)
    est = _make(estimator, mclient)
    if estimator in ("Lasso", "ElasticNet"):
        est.set_params(warm_start=True)
    est.fit(*args, **kwargs)
    before = _fitted_attributes(est)
    assert before, "the valid fit set no fitted attributes"
    bad_args, bad_kwargs, bad_params = _failing_inputs(estimator)[kind]
    good_params = {k: getattr(est, k) for k in bad_params}
    est.set_params(**bad_params)
    _expect_error(est, bad_args, bad_kwargs, BAD, "")
    est.set_params(**good_params)
    after = _fitted_attributes(est)
    assert sorted(after) == sorted(before), "fitted attributes appeared or vanished"
    changed = [k for k in before if not _same(before[k], after[k])]
    assert not changed, f"a failed fit changed the fitted attributes {changed}"
    # the model still works after the failed fit
    if estimator in ("Lasso", "ElasticNet"):
        np.testing.assert_allclose(est.predict(args[0]), args[0] @ est.coef_ + est.intercept_)
    elif estimator == "LDA":
        assert est.transform(args[0]).shape == (args[0].shape[0], est.n_components)
    else:
        assert np.isfinite(est.predict(args[0].row, args[0].col)).all()


# ---------------------------------------------------------------------- valid edge cases
@pytest.mark.parametrize("kind", ["dense", "sparse", "dask"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("estimator", ["Lasso", "ElasticNet"])
def test_zero_variance_columns_match_sklearn(estimator, kind, fit_intercept, mclient):
    # Policy (as scikit-learn): constant and all-zero columns are valid; their coefficient
    # is exactly 0 (with an intercept a constant column is all-zero once centred; without
    # one, a constant column is an ordinary feature), and nothing divides by zero.
    X, y = _regression(40, 6, seed=3)
    X[:, 1] = 0.0
    X[:, 4] = 2.5
    alpha = 0.02
    sk_cls = linear_model.Lasso if estimator == "Lasso" else linear_model.ElasticNet
    extra = {} if estimator == "Lasso" else {"l1_ratio": 0.5}
    sk = sk_cls(alpha=alpha, fit_intercept=fit_intercept, tol=1e-12, max_iter=100_000,
                **extra).fit(X, y)
    data = {"dense": X, "sparse": sp.csc_matrix(X), "dask": _da(X, (20, 3))}[kind]
    ours = _make(estimator, mclient, alpha=alpha, fit_intercept=fit_intercept, tol=1e-12,
                 max_iter=100_000).fit(data, y)
    assert np.isfinite(ours.coef_).all() and np.isfinite(ours.intercept_)
    assert ours.coef_[1] == 0.0
    if fit_intercept:
        assert ours.coef_[4] == 0.0
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=1e-5, atol=1e-7)
    assert ours.intercept_ == pytest.approx(sk.intercept_, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("estimator", ["Lasso", "ElasticNet"])
def test_all_columns_constant(estimator, mclient):
    _, y = _regression(30, 3, seed=4)
    X = np.tile([1.0, 0.0, -3.0], (30, 1))
    ours = _make(estimator, mclient, tol=1e-10).fit(X, y)
    np.testing.assert_array_equal(ours.coef_, np.zeros(3))
    assert ours.intercept_ == pytest.approx(y.mean(), rel=1e-12)
    np.testing.assert_allclose(ours.predict(X), np.full(30, y.mean()), rtol=1e-12)


def test_lda_empty_documents_and_words_are_handled(mclient):
    # Policy: documents without tokens (and words never used) are valid; an empty
    # document's topic distribution is the prior's, uniform; the corpus must have a token.
    X = _counts(12, 8, seed=5)
    X[[0, 5, 11]] = 0
    X[:, 3] = 0
    model = _make("LDA", mclient, n_components=3, max_iter=5)
    theta = model.fit_transform(X)
    K, beta = 3, model.topic_word_prior
    assert theta.shape == (12, K)
    np.testing.assert_allclose(theta[[0, 5, 11]], 1.0 / K, rtol=1e-12)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0, rtol=1e-12)
    assert model.n_tokens_ == X.sum()
    assert model.components_.sum() == pytest.approx(X.sum() + K * X.shape[1] * beta)
    np.testing.assert_allclose(model.components_[:, 3], beta)
    folded = model.transform(np.zeros((2, 8), dtype=np.int64))
    np.testing.assert_allclose(folded, 1.0 / K, rtol=1e-12)
    # also through the dask path, where documents are converted on the workers
    dask_model = _make("LDA", mclient, n_components=3, max_iter=5).fit(_da(X, (4, 8)))
    assert dask_model.n_tokens_ == X.sum()


@pytest.mark.parametrize("alpha", [0.1, 0.0])
def test_mf_empty_rows_and_columns_are_handled(alpha, mclient):
    # Policy: rows / columns without observed entries are valid; their factors stay finite
    # (zero when alpha > 0: the regulariser is all they see).
    A = _ratings(12, 9, 50, seed=6).tocsr()
    A = sp.lil_matrix(A)
    A[2, :] = 0
    A[:, 7] = 0
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    model = _make("MatrixFactorization", mclient, alpha=alpha, max_iter=3).fit(A)
    assert model.W_.shape == (12, 2) and model.H_.shape == (9, 2)
    assert np.isfinite(model.W_).all() and np.isfinite(model.H_).all()
    assert np.isfinite(model.objective_)
    if alpha > 0:
        np.testing.assert_array_equal(model.W_[2], 0.0)
        np.testing.assert_array_equal(model.H_[7], 0.0)
    assert np.isfinite(model.predict(np.arange(12), np.full(12, 7))).all()
