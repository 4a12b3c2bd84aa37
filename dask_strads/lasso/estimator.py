"""scikit-learn estimators ``Lasso`` and ``ElasticNet`` on the STRADS engine.

The estimators validate their inputs, cut ``X`` into column blocks (one per worker),
build a :class:`~dask_strads.cd.program.CDProgram` and run it; the fitted
attributes are plain numpy values, as in scikit-learn.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from dask_strads.cd.parallelism import n_blocks as choose_n_blocks
from dask_strads.cd.parallelism import setting
from dask_strads.cd.plain import PlainProgram
from dask_strads.cd.program import CDProgram
from dask_strads.engine import run
from dask_strads.engine.loop import cluster_client

SCHEDULES = ("priority", "round_robin", "random", "shotgun")

__all__ = ["ElasticNet", "Lasso", "lasso_path", "enet_path"]

# Work per block and round: enough coordinate updates that the ~1 ms round trip stays
# a small share (measured on bench problem (a): see bench/results/lasso.md).
ROUND_FLOPS = 4e6


# ---------------------------------------------------------------------- inputs
def _is_dask_collection(x) -> bool:
    return hasattr(x, "__dask_graph__") and callable(x.__dask_graph__)


def _is_dataframe(x) -> bool:
    return _is_dask_collection(x) and hasattr(x, "columns") and hasattr(x, "to_dask_array")


def _is_pydata_sparse(x) -> bool:
    return type(x).__module__.split(".")[0] == "sparse" and hasattr(x, "to_scipy_sparse")


def _all_finite(values: np.ndarray) -> bool:
    """``np.isfinite(values).all()`` without its boolean temporary in the common case.

    NaN and infinity carry through a sum, so a finite sum proves every value finite;
    only a sum that overflowed needs the exact check (scikit-learn's shortcut). On a
    block of Lasso problem (c) (25 M values) the exact check took 16-20 ms, and 100 ms
    in a fresh worker, which first faults in the 25 MB temporary; the sum 14 ms."""
    if values.dtype.kind not in "fc":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        total = values.sum()
    return bool(np.isfinite(total)) or bool(np.isfinite(values).all())


def _chunk_is_finite(chunk) -> bool:
    if _is_pydata_sparse(chunk):
        chunk = chunk.to_scipy_sparse()
    if sp.issparse(chunk):
        return _all_finite(chunk.data)
    return _all_finite(np.asarray(chunk))


@dataclass
class _Prepared:
    """Inputs ready for the engine: column-block shards and the target on the client."""

    shards: dict
    starts: np.ndarray
    y: np.ndarray
    n_samples: int
    n_features: int
    sparse: bool
    nnz: int


def _block_starts(n_features: int, n_blocks: int) -> np.ndarray:
    n_blocks = max(1, min(n_blocks, n_features))
    return np.linspace(0, n_features, n_blocks + 1).round().astype(np.int64)


def _n_workers(client) -> int:
    return max(1, len(client.scheduler_info(n_workers=-1)["workers"]))


def _local_shards(X, starts) -> dict:
    if sp.issparse(X):
        X = sp.csc_matrix(X)
        return {b: _csc_columns(X, starts[b], starts[b + 1]) for b in range(len(starts) - 1)}
    return {b: np.asfortranarray(X[:, starts[b]:starts[b + 1]])
            for b in range(len(starts) - 1)}


def _csc_columns(X, start: int, stop: int):
    """Columns ``start:stop`` of a CSC matrix, cut from ``X``'s arrays (scipy's column
    slicing goes through a general submatrix routine: 0.3 s for 6 M non-zeros; this is a
    slice, or a plain copy when scipy prunes a small view of a large array)."""
    lo, hi = X.indptr[start], X.indptr[stop]
    out = sp.csc_matrix((X.data[lo:hi], X.indices[lo:hi], X.indptr[start:stop + 1] - lo),
                        shape=(X.shape[0], stop - start), copy=False)
    if X.has_canonical_format:
        out.has_canonical_format = True
    return out


def _reject_text(data, name: str) -> None:
    """Strings (even numeric ones), objects holding strings and complex numbers are
    rejected up front: scikit-learn would parse or fail with a message naming nothing."""
    if data is None or _is_dask_collection(data):
        return
    if hasattr(data, "dtypes") and hasattr(data, "columns"):  # pandas DataFrame
        bad = []
        for col, dtype in data.dtypes.items():
            try:
                ok = np.dtype(dtype).kind in "biuf"
            except TypeError:  # pandas extension dtypes (strings, categories, ...)
                ok = False
            if not ok:
                bad.append(col)
        if bad:
            raise TypeError(f"{name}: columns {bad} are not real numeric (dtypes "
                            f"{[str(data.dtypes[c]) for c in bad]})")
        return
    if sp.issparse(data) or _is_pydata_sparse(data):
        kind = np.dtype(data.dtype).kind
    else:
        try:
            arr = np.asarray(data)
        except Exception:  # ragged nested lists and the like: scikit-learn explains
            return
        kind = arr.dtype.kind
        if kind == "O" and any(isinstance(v, str | bytes) for v in arr.ravel()):
            raise TypeError(f"{name}: contains strings; expected real numbers")
    if kind in "US":
        raise TypeError(f"{name}: expected real numbers, got text (dtype kind {kind!r})")
    if kind == "c":
        # scikit-learn's words (its estimator checks look for them)
        raise ValueError(f"{name}: Complex data not supported; expected real numbers")


def _blame(X, y, exc: Exception) -> str:
    """Which argument a scikit-learn validation error is about."""
    if "inconsistent numbers of samples" in str(exc):
        return "X, y"
    try:
        check_array(X, accept_sparse=True, dtype=np.float64)
    except (ValueError, TypeError):
        return "X"
    return "y"


def _validate_dask(est, X, y):
    """Check a dask.array / dask.dataframe ``X`` and its ``y`` without computing ``X``."""
    import dask.array as da

    feature_names = None
    if _is_dataframe(X):
        if isinstance(y, str):
            if y not in X.columns:
                raise ValueError(f"y: column {y!r} is not in X's columns {list(X.columns)}")
            y_col = y
            y = X[y_col]
            X = X.drop(columns=[y_col])
        feature_names = np.asarray([str(c) for c in X.columns], dtype=object)
        def real(t):
            try:
                return np.dtype(t).kind in "biuf"
            except TypeError:  # pandas extension dtypes (strings, ...)
                return False

        bad = [c for c, t in X.dtypes.items() if not real(t)]
        if bad:
            raise TypeError(f"X: columns {bad} are not real numeric (dtypes "
                            f"{[str(X.dtypes[c]) for c in bad]})")
        X = X.to_dask_array(lengths=True)
    if not isinstance(X, da.Array):
        raise TypeError(f"X: unsupported dask collection {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"X: expected a 2-d array, got {X.ndim} dimension(s)")
    if any(math.isnan(c) for c in X.chunks[0]) or any(math.isnan(c) for c in X.chunks[1]):
        raise ValueError("X: dask array with unknown chunk sizes; call "
                         "X.compute_chunk_sizes() (or to_dask_array(lengths=True)) first")
    if X.dtype.kind not in "biuf":
        raise TypeError(f"X: expected a real numeric dtype, got {X.dtype}")
    n, p = X.shape
    if n < 1 or p < 1:
        raise ValueError(f"X: found array with shape {X.shape}; at least 1 sample and 1 "
                         "feature are required")
    if _is_dataframe(y) or (_is_dask_collection(y) and hasattr(y, "to_dask_array")):
        y = y.to_dask_array(lengths=True)
    if _is_dask_collection(y):
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1:
            raise ValueError(f"y: expected a 1-d target, got shape {y.shape}")
        if not math.isnan(y.shape[0]) and y.shape[0] != n:
            raise ValueError(f"y: {y.shape[0]} samples, but X has {n}")
    else:
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"y: expected shape ({n},), got {y.shape}")
        if y.dtype.kind not in "biuf":
            raise TypeError(f"y: expected a real numeric dtype, got {y.dtype}")
        y = y.astype(np.float64)
        if not np.isfinite(y).all():
            raise ValueError("y: contains NaN or infinity")
    return X, y, feature_names


def _prepare_dask(X, y, client, n_blocks) -> _Prepared:
    """Rechunk ``X`` to column blocks on the cluster; the chunks become the shards."""
    from distributed import futures_of

    n, p = X.shape
    starts = _block_starts(p, n_blocks)
    if X.dtype != np.float64:
        X = X.astype(np.float64)
    X = X.rechunk({0: -1, 1: tuple(np.diff(starts).tolist())})
    X = client.persist(X)
    by_key = {f.key: f for f in futures_of(X)}
    keys = X.__dask_keys__()
    shards = {b: by_key[keys[0][b]] for b in range(len(starts) - 1)}
    finite = client.gather([client.submit(_chunk_is_finite, f, pure=False)
                            for f in shards.values()])
    if not all(finite):
        raise ValueError("X: contains NaN or infinity")
    if _is_dask_collection(y):
        y = np.asarray(client.compute(y).result(), dtype=np.float64)
        if y.shape[0] != n:
            raise ValueError(f"y: {y.shape[0]} samples, but X has {n}")
        if not np.isfinite(y).all():
            raise ValueError("y: contains NaN or infinity")
    meta = X._meta
    is_sparse = sp.issparse(meta) or _is_pydata_sparse(meta)
    return _Prepared(shards, starts, y, n, p, is_sparse, -1)


def _prepare_local(X, y, n_blocks) -> _Prepared:
    n, p = X.shape
    starts = _block_starts(p, n_blocks)
    nnz = X.nnz if sp.issparse(X) else n * p
    return _Prepared(_local_shards(X, starts), starts, np.asarray(y, dtype=np.float64), n, p,
                     sp.issparse(X), nnz)




# ---------------------------------------------------------------------- estimator
class ElasticNet(RegressorMixin, BaseEstimator):
    """Linear regression with combined L1 and L2 priors, fitted by STRADS coordinate descent.

    Minimises scikit-learn's objective::

        1 / (2 n) ||y - X b - b0||^2 + alpha l1_ratio ||b||_1
            + alpha (1 - l1_ratio) / 2 ||b||^2

    Column blocks of ``X`` and their coefficients live on the Dask workers (model
    parallelism); each round a priority schedule picks the coordinates to update,
    keeps only candidates whose columns are nearly uncorrelated with those picked on
    other workers, and the workers update them by exact coordinate descent.

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength.
    l1_ratio : float, default=0.5
        Mix of L1 (1.0) and L2 (0.0) penalties.
    fit_intercept : bool, default=True
        Fit an unpenalised intercept (``X`` and ``y`` are centered; sparse ``X`` only
        implicitly, it is never densified).
    max_iter : int, default=1000
        Maximum number of coordinate updates, in passes over the features.
    tol : float, default=1e-4
        Stop once the duality gap is at most ``tol * ||y - mean(y)||^2 / n``
        (scikit-learn's rule).
    warm_start : bool, default=False
        Start from the previous ``coef_``.
    positive : bool, default=False
        Constrain the coefficients to be non-negative.
    random_state : int, RandomState instance or None, default=None
        Seed of the schedule's sampling.
    schedule : {"priority", "round_robin", "random", "shotgun"}, default="priority"
        How coordinates are chosen. ``"priority"`` is working-set coordinate descent:
        a duality-gap round on every worker ranks the coordinates by how far each is
        from its optimum; the top ones, with the current support, form a working set
        that is solved (cyclic sweeps with Anderson extrapolation) until the next gap
        round; the dependency check sends candidates whose columns are correlated
        across workers to one solver. ``"round_robin"`` and ``"random"`` sweep / sample
        uniformly; ``"shotgun"`` samples uniformly and updates all of a worker's
        coordinates from the same residual (no dependency check), which can diverge on
        correlated data.
    n_candidates : int or None, default=None
        With ``"priority"``: the smallest working set (coordinates over all workers);
        it then grows to twice the support. None: the ``dask-strads.cd.ws-min-size``
        setting (100). With the other schedules: coordinates per worker and round (one
        sweep); None: about ``4e6 / (2 * nnz per column)``, at least 32.
    rho : float, default=0.1
        Dependency threshold: working-set coordinates on different workers whose
        columns have ``|corr| >= rho`` are solved by one worker, never at once by two.
        Smaller is safer but serialises more; ``rho = 1`` only perfectly correlated
        pairs.
    staleness : int, default=0
        Rounds the plain schedules plan ahead of the last pull: hides latency, but
        workers see older residual changes. ``"priority"`` needs each pull before its
        next plan (a phase follows from its gap round) and is unaffected.
    client : distributed.Client or None, default=None
        Cluster to use; by default the current default client, else an embedded
        ``LocalCluster`` started for the fit.
    progress : bool, default=True
        Show a progress bar (rounds of the engine).
    checkpoint : path, optional
        Directory for atomic checkpoints of the fit (``.npz``, loaded without pickle);
        continue an interrupted fit with ``fit(X, y, resume=checkpoint)``.
    checkpoint_every : int, optional
        Rounds between checkpoints (default: about every 20 s). Without ``checkpoint`` the
        snapshots stay in memory, for recovery from lost workers.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    n_iter_ : int
        Coordinate updates performed, in passes over the features (rounded up).
    dual_gap_ : float
        Duality gap at the last check (scaled by ``1 / n`` as in scikit-learn). Once
        Gap Safe screening has dropped most of a sparse block's features, it is the gap
        of the problem over the features left (the same optimum; at most the gap over
        all features).
    history_ : pandas.DataFrame
        The engine's per-round history (time, objective on gap rounds, gap, ...).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from dask_strads import ElasticNet
    >>> from dask_strads._datasets.lasso import make_correlated_regression
    >>> X, y, _ = make_correlated_regression(100, 50, n_informative=5)
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster):
    ...     model = ElasticNet(alpha=0.1, l1_ratio=0.7).fit(X, y)
    >>> model.coef_.shape
    (50,)
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(numbers.Real, 0, None, closed="left")],
        "l1_ratio": [Interval(numbers.Real, 0, 1, closed="both")],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "positive": ["boolean"],
        "random_state": ["random_state"],
        "schedule": [StrOptions(set(SCHEDULES))],
        "n_candidates": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "rho": [Interval(numbers.Real, 0, 1, closed="right")],
        "staleness": [Interval(numbers.Integral, 0, None, closed="left")],
        "client": "no_validation",
        "progress": ["boolean"],
        "checkpoint": "no_validation",
        "checkpoint_every": [Interval(numbers.Integral, 1, None, closed="left"), None],
    }

    def __init__(self, alpha=1.0, *, l1_ratio=0.5, fit_intercept=True, max_iter=1000, tol=1e-4,
                 warm_start=False, positive=False, random_state=None, schedule="priority",
                 n_candidates=None, rho=0.1, staleness=0, client=None, progress=True,
                 checkpoint=None, checkpoint_every=None):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.positive = positive
        self.random_state = random_state
        self.schedule = schedule
        self.n_candidates = n_candidates
        self.rho = rho
        self.staleness = staleness
        self.client = client
        self.progress = progress
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def __sklearn_clone__(self):
        # a Client cannot be deep-copied: clones share it (as the data they run on)
        params = self.get_params(deep=False)
        client = params.pop("client")
        return type(self)(**{k: clone(v, safe=False) for k, v in params.items()},
                          client=client)

    # -------------------------------------------------------------- fit
    def _validate_input(self, X, y):
        """Local arrays through scikit-learn's checks; dask collections through ours."""
        if y is None:
            raise ValueError("y: requires y to be passed, but the target y is None")
        if _is_dask_collection(X):
            X, y, names = _validate_dask(self, X, y)
            self.n_features_in_ = X.shape[1]
            if names is not None and all(isinstance(c, str) for c in names):
                self.feature_names_in_ = names
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return X, y, True
        if _is_dask_collection(y):
            y = np.asarray(y.compute())
        if _is_pydata_sparse(X):
            X = X.to_scipy_sparse().tocsc()
        _reject_text(X, "X")
        _reject_text(y, "y")
        try:
            X, y = validate_data(self, X, y, accept_sparse=("csc", "csr", "coo"),
                                 dtype=np.float64, y_numeric=True, multi_output=False)
        except (ValueError, TypeError) as exc:
            # keep scikit-learn's words, say which argument they are about
            kind = ValueError if isinstance(exc, ValueError) else TypeError
            raise kind(f"{_blame(X, y, exc)}: {exc}") from exc
        return X, y, False

    def _per_round(self, prepared: _Prepared) -> int:
        """Coordinates per block and round of the plain schedules: enough work that the
        round trip stays a small share (``n_candidates`` when set)."""
        if self.n_candidates is not None:
            return int(self.n_candidates)
        per_col = (prepared.nnz / max(prepared.n_features, 1)) if prepared.nnz >= 0 \
            else prepared.n_samples
        return int(max(32, ROUND_FLOPS / (2.0 * per_col + 16.0)))

    def _program(self, prepared: _Prepared, coef_init):
        y = prepared.y
        n, p = prepared.n_samples, prepared.n_features
        y_offset = float(y.mean()) if self.fit_intercept else 0.0
        yc = y - y_offset
        common = dict(fit_intercept=self.fit_intercept, positive=self.positive,
                      max_updates=self.max_iter * p, coef_init=coef_init)
        args = (yc, prepared.starts, self.alpha * self.l1_ratio * n,
                self.alpha * (1.0 - self.l1_ratio) * n, self.tol * float(yc @ yc))
        if self.schedule == "priority":
            program = CDProgram(*args, ws_min_size=self.n_candidates, rho=self.rho, **common)
        else:
            seed = self.random_state
            if not isinstance(seed, numbers.Integral | type(None)):
                seed = check_random_state(seed).randint(2**31 - 1)
            program = PlainProgram(*args, schedule=self.schedule,
                                   per_round=self._per_round(prepared), random_state=seed,
                                   **common)
        program.y_offset = y_offset
        return program

    def _run(self, prepared: _Prepared, client, coef_init=None, resume=None):
        program = self._program(prepared, coef_init)
        # the real bound is max_iter passes of updates (max_updates); rounds update >= 1
        max_rounds = int(self.max_iter * prepared.n_features + 1000)
        result = run(program, prepared.shards, client, max_rounds=max_rounds,
                     staleness=int(self.staleness), progress=bool(self.progress),
                     time_limit=getattr(self, "_time_limit", None),
                     transport="direct", desc=f"dask_strads.{type(self).__name__}",
                     checkpoint=self.checkpoint, checkpoint_every=self.checkpoint_every,
                     resume=resume)
        return program, result

    def _set_fitted(self, program, result, prepared: _Prepared) -> None:
        state = result.state
        self.coef_ = state.coef.copy()
        if self.fit_intercept:
            mu = np.concatenate([result.block_results[b]["mu"]
                                 for b in range(program.n_blocks)])
            self.intercept_ = float(program.y_offset - mu @ self.coef_)
        else:
            self.intercept_ = 0.0
        self.n_iter_ = max(1, math.ceil(state.updates / max(prepared.n_features, 1)))
        self.dual_gap_ = float(state.gap / prepared.n_samples)
        self.history_ = result.history
        self.n_blocks_ = program.n_blocks
        if not state.converged:
            why = {"max_iter": f"it reached max_iter={self.max_iter} passes; increase "
                               "max_iter or tol",
                   "stalled": "no coefficient could move any more (the gap left is "
                              "rounding); increase tol",
                   "time_limit": "it reached its time limit",
                   "interrupted": "it was interrupted"}.get(
                       state.stop or result.stop_reason, f"it stopped ({result.stop_reason})")
            warnings.warn(
                f"Objective did not converge: duality gap {self.dual_gap_:.3e} after "
                f"{self.n_iter_} passes (tol={self.tol}): {why}.",
                ConvergenceWarning, stacklevel=3)

    def _n_blocks(self, X, client) -> int:
        """Column blocks: one per worker, fewer when the blocks' passes over their
        columns would be too short to pay for the rounds (priority schedule)."""
        workers = _n_workers(client)
        if self.schedule != "priority":
            return workers
        nnz = X.nnz if sp.issparse(X) else int(np.prod(X.shape))
        if _is_dask_collection(X) and getattr(X, "_meta", None) is not None and \
                (sp.issparse(X._meta) or _is_pydata_sparse(X._meta)):
            return workers  # the non-zeros are not known before the data is on the cluster
        return choose_n_blocks(nnz, workers, float(setting("min-block-nnz")))

    def _coef_init(self, p):
        if self.warm_start and hasattr(self, "coef_") and np.shape(self.coef_) == (p,):
            return np.asarray(self.coef_, dtype=np.float64)
        return None

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, *, resume=None):
        """Fit the model.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix, sparse.COO, dask.array or dask.dataframe
            of shape (n_samples, n_features). Dask collections stay on the cluster.
        y : array-like or dask.array / dask Series of shape (n_samples,), or, when
            ``X`` is a dask DataFrame, the name of its target column.
        resume : path, optional
            Continue from the checkpoint in this directory (written by a fit with the same
            data and ``checkpoint=``).

        Returns
        -------
        self
        """
        # A failed fit leaves the estimator as it was (validation sets n_features_in_ and
        # feature_names_in_ early, and dask inputs are checked on the cluster).
        fitted = {k: v for k, v in vars(self).items() if k.endswith("_") and not
                  k.startswith("_")}
        try:
            X, y, is_dask = self._validate_input(X, y)
            with cluster_client(self.client) as client:
                n_blocks = self._n_blocks(X, client)
                prepared = (_prepare_dask(X, y, client, n_blocks) if is_dask
                            else _prepare_local(X, y, n_blocks))
                coef_init = self._coef_init(prepared.n_features)
                program, result = self._run(prepared, client, coef_init, resume=resume)
        except BaseException:
            for k in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
                if k not in fitted:
                    delattr(self, k)
            vars(self).update(fitted)
            raise
        self._set_fitted(program, result, prepared)
        return self

    # -------------------------------------------------------------- predict
    def predict(self, X):
        """Predict with the linear model: ``X @ coef_ + intercept_``.

        Dask collections give a lazy dask array.
        """
        check_is_fitted(self)
        if _is_dask_collection(X):
            if _is_dataframe(X):
                X = X.to_dask_array(lengths=True)
            if X.ndim != 2 or X.shape[1] != self.n_features_in_:
                raise ValueError(f"X: expected {self.n_features_in_} features, got shape "
                                 f"{X.shape}")
            return X.astype(np.float64) @ self.coef_ + self.intercept_
        if _is_pydata_sparse(X):
            X = X.to_scipy_sparse()
        X = validate_data(self, X, accept_sparse=("csr", "csc", "coo"), dtype=np.float64,
                          reset=False)
        return np.asarray(X @ self.coef_).ravel() + self.intercept_

    @property
    def sparse_coef_(self):
        """``coef_`` as a scipy.sparse CSR row."""
        return sp.csr_matrix(self.coef_)


class Lasso(ElasticNet):
    """Linear regression with an L1 prior, fitted by STRADS coordinate descent.

    Minimises ``1 / (2 n) ||y - X b - b0||^2 + alpha ||b||_1``; see
    :class:`ElasticNet` for the parameters (``l1_ratio`` is fixed to 1).

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from dask_strads import Lasso
    >>> from dask_strads._datasets.lasso import make_correlated_regression
    >>> X, y, _ = make_correlated_regression(100, 50, n_informative=5)
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster):
    ...     model = Lasso(alpha=0.1).fit(X, y)
    >>> int((model.coef_ != 0).sum()) <= 50
    True
    """

    _parameter_constraints: dict = {
        k: v for k, v in ElasticNet._parameter_constraints.items() if k != "l1_ratio"
    }

    def __init__(self, alpha=1.0, *, fit_intercept=True, max_iter=1000, tol=1e-4,
                 warm_start=False, positive=False, random_state=None, schedule="priority",
                 n_candidates=None, rho=0.1, staleness=0, client=None, progress=True,
                 checkpoint=None, checkpoint_every=None):
        super().__init__(alpha=alpha, l1_ratio=1.0, fit_intercept=fit_intercept,
                         max_iter=max_iter, tol=tol, warm_start=warm_start, positive=positive,
                         random_state=random_state, schedule=schedule,
                         n_candidates=n_candidates, rho=rho, staleness=staleness,
                         client=client, progress=progress, checkpoint=checkpoint,
                         checkpoint_every=checkpoint_every)


# ---------------------------------------------------------------------- path
def enet_path(X, y, *, l1_ratio: float = 0.5, alphas=None, n_alphas: int = 100,
              eps: float = 1e-3, **params: Any):
    """Elastic-net regularisation path with warm starts, on the STRADS engine.

    The data are cut and sent to the workers once; each ``alpha`` (largest first)
    starts from the previous solution.

    Parameters
    ----------
    X, y
        As in :meth:`ElasticNet.fit` (numpy, scipy.sparse, sparse.COO or dask).
    l1_ratio : float
    alphas : array-like, optional
        The alphas (sorted decreasingly); default: ``n_alphas`` on a log grid from
        ``alpha_max`` down to ``eps * alpha_max``.
    n_alphas : int
    eps : float
    **params
        Other :class:`ElasticNet` parameters (``tol``, ``max_iter``, ``fit_intercept``,
        ``positive``, ``schedule``, ``client``, ...).

    Returns
    -------
    alphas : ndarray of shape (n_alphas,)
    coefs : ndarray of shape (n_features, n_alphas)
    dual_gaps : ndarray of shape (n_alphas,)
    intercepts : ndarray of shape (n_alphas,)

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from dask_strads.lasso import lasso_path
    >>> from dask_strads._datasets.lasso import make_correlated_regression
    >>> X, y, _ = make_correlated_regression(60, 30, n_informative=3)
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster):
    ...     alphas, coefs, gaps, _ = lasso_path(X, y, n_alphas=5)
    >>> coefs.shape
    (30, 5)
    """
    params = dict(params)
    params.pop("warm_start", None)
    est = ElasticNet(l1_ratio=l1_ratio, warm_start=True, **params)
    est._validate_params()
    X, y, is_dask = est._validate_input(X, y)
    with cluster_client(est.client) as client:
        n_blocks = est._n_blocks(X, client)
        if is_dask:
            prepared = _prepare_dask(X, y, client, n_blocks)
        else:
            prepared = _prepare_local(X, y, n_blocks)
            # send the blocks once; every alpha reuses them
            names = list(prepared.shards)
            futures = client.scatter([prepared.shards[b] for b in names], hash=False)
            prepared.shards = dict(zip(names, futures, strict=True))
        if alphas is None:
            yc = prepared.y - (prepared.y.mean() if est.fit_intercept else 0.0)
            amax = _alpha_max_prepared(client, prepared, yc, est.fit_intercept, l1_ratio)
            alphas = np.geomspace(amax, amax * eps, n_alphas) if amax > 0 else \
                np.zeros(n_alphas)
        alphas = np.sort(np.asarray(alphas, dtype=np.float64))[::-1]
        coefs = np.zeros((prepared.n_features, alphas.shape[0]))
        gaps = np.zeros(alphas.shape[0])
        intercepts = np.zeros(alphas.shape[0])
        coef = None
        for i, alpha in enumerate(alphas):
            est.set_params(alpha=float(alpha))
            program, result = est._run(prepared, client, coef)
            est._set_fitted(program, result, prepared)
            coef = est.coef_
            coefs[:, i] = est.coef_
            gaps[i] = est.dual_gap_
            intercepts[i] = est.intercept_
    return alphas, coefs, gaps, intercepts


def lasso_path(X, y, **params: Any):
    """Lasso regularisation path (:func:`enet_path` with ``l1_ratio=1``)."""
    params["l1_ratio"] = 1.0
    return enet_path(X, y, **params)


def _xt_y(block, yc, fit_intercept):
    import numpy as _np

    if _is_pydata_sparse(block):
        block = block.to_scipy_sparse()
    v = _np.asarray(block.T @ yc).ravel()
    return v


def _alpha_max_prepared(client, prepared: _Prepared, yc, fit_intercept, l1_ratio) -> float:
    """``max |X_c' y_c| / (n l1_ratio)`` computed where the blocks live."""
    # X_c' y_c = X' y_c because y_c sums to zero; without an intercept y_c = y.
    futs = [client.submit(_xt_y, s, yc, fit_intercept, pure=False)
            for s in prepared.shards.values()]
    xty = np.concatenate(client.gather(futs))
    if l1_ratio == 0:
        return float(np.abs(xty).max() / (prepared.n_samples * 1e-3))
    return float(np.abs(xty).max() / (prepared.n_samples * l1_ratio))
