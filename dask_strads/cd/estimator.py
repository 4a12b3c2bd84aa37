"""What the coordinate-descent estimators share: input checks, the choice of column
blocks, a fit that leaves the estimator as it was when it fails, and prediction of the
linear part ``X @ coef + intercept`` for every input type."""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import assert_all_finite
from sklearn.utils.validation import check_is_fitted, validate_data

from dask_strads.cd.column_stats import column_stats_in_parallel
from dask_strads.cd.datafits import Quadratic
from dask_strads.cd.finite import all_finite_in_parallel
from dask_strads.cd.inputs import (
    _blame,
    _is_dask_collection,
    _is_dataframe,
    _is_pydata_sparse,
    _prepare_dask,
    _prepare_local,
    _reject_text,
    _validate_dask,
    frame_to_array,
)
from dask_strads.cd.parallelism import n_blocks as choose_n_blocks
from dask_strads.cd.parallelism import setting
from dask_strads.cd.program import warm_up_kernels
from dask_strads.engine import checkpoint, run
from dask_strads.engine.cluster import PicklesWithoutClient, cluster_client, worker_count

# why a fit stopped short, in words for its ConvergenceWarning
_STOPPED = {
    "max_iter": "it reached max_iter={max_iter} passes; increase max_iter or tol",
    "stalled": "no coefficient could move any more (the gap left is rounding); increase tol",
    "time_limit": "it reached its time limit",
    "interrupted": "it was interrupted",
}


def _check_resumable(resume, shape) -> None:
    """The checkpoint in ``resume`` is of a fit to data of ``X``'s shape (before any
    cluster work: its blocks could not take the columns)."""
    arrays = checkpoint.read_state(resume)
    n, p = int(arrays["pending"].shape[1]), int(arrays["n_features"])
    if (n, p) != tuple(int(s) for s in shape):
        raise ValueError(f"resume: the checkpoint in {resume} is of a fit to {n} samples "
                         f"and {p} features; X has shape {tuple(shape)}")


def _warn_rho(rho) -> None:
    """``rho`` set by the user: a FutureWarning that it does nothing any more (the
    dependency check it tuned was removed: it never saved work in the benchmark)."""
    if not (isinstance(rho, str) and rho == "deprecated"):
        warnings.warn("'rho' was deprecated in version 0.1.0 and will be removed in 0.2.0: "
                      "it has no effect (the dependency check it tuned was removed).",
                      FutureWarning, stacklevel=5)  # the caller of fit


class CDEstimator(PicklesWithoutClient, BaseEstimator):
    """Base of the estimators fitted by :class:`~dask_strads.cd.program.CDProgram`.

    Subclasses provide ``_target(y)`` (the checked target on the client),
    ``_run(prepared, client, coef_init, resume)`` and ``_set_fitted(program, result,
    prepared)``."""

    # its datafit: whether the intercept is fitted by centring X (``centres``), and
    # the kernels its fits run
    _datafit_type = Quadratic

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

    # -------------------------------------------------------------- inputs
    def _validate_input(self, X, y):
        """Local arrays through scikit-learn's checks; dask collections through ours.
        Returns ``X, y, is_dask`` and, for dense local ``X`` that the fit does not
        centre, its columns' squared norms and ``X' y`` (the finite check's pass takes
        them: None otherwise)."""
        if y is None:
            raise ValueError("y: requires y to be passed, but the target y is None")
        if _is_dask_collection(X):
            X, y, names = _validate_dask(self, X, y)
            self.n_features_in_ = X.shape[1]
            if names is not None and all(isinstance(c, str) for c in names):
                self.feature_names_in_ = names
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return X, y, True, None
        if _is_dask_collection(y):
            y = np.asarray(y.compute())
        if _is_pydata_sparse(X):
            X = X.to_scipy_sparse().tocsc()
        _reject_text(X, "X")
        if self._numeric_target:
            _reject_text(y, "y")
        try:
            X, y = validate_data(self, X, y, accept_sparse=("csc", "csr", "coo"),
                                 dtype=np.float64, y_numeric=self._numeric_target,
                                 multi_output=False, ensure_all_finite=False)
            # what the blocks take of X as it is (not centred), in the pass that checks it
            stats = None
            if not sp.issparse(X) and not self._centres_columns():
                first = y if self._datafit_type.target_is_first_gradient else None
                stats = column_stats_in_parallel(X, first)
            # scikit-learn's check of X on one core, here on all; its words on failure
            if not _finite(X, None if stats is None else stats[0]):
                assert_all_finite(X, estimator_name=type(self).__name__, input_name="X")
        except (ValueError, TypeError) as exc:
            # keep scikit-learn's words, say which argument they are about
            kind = ValueError if isinstance(exc, ValueError) else TypeError
            raise kind(f"{_blame(X, y, exc)}: {exc}") from exc
        return X, y, False, stats

    _numeric_target = True

    def _target(self, y):
        """The target as the program takes it (checked before any cluster work)."""
        return y

    def _centres_columns(self) -> bool:
        """Whether the fit centres the columns of ``X`` (its datafit's intercept)."""
        return bool(self.fit_intercept) and self._datafit_type.centres

    def _n_blocks(self, X, client) -> int:
        """Column blocks: one per worker, fewer when the blocks' passes over their
        columns would be too short to pay for the rounds."""
        workers = worker_count(client)
        if getattr(self, "schedule", "priority") != "priority":
            return workers
        if _is_dask_collection(X) and getattr(X, "_meta", None) is not None and \
                (sp.issparse(X._meta) or _is_pydata_sparse(X._meta)):
            return workers  # the non-zeros are not known before the data is on the cluster
        nnz = X.nnz if sp.issparse(X) else int(np.prod(X.shape))
        return choose_n_blocks(nnz, workers, float(setting("min-block-nnz")))

    def _coef_init(self, p):
        if self.warm_start and hasattr(self, "coef_") and np.size(self.coef_) == p:
            return np.asarray(self.coef_, dtype=np.float64).ravel()
        return None

    # -------------------------------------------------------------- fit
    def _fit(self, X, y, resume):
        # A failed fit leaves the estimator as it was (validation sets n_features_in_ and
        # feature_names_in_ early, and dask inputs are checked on the cluster).
        _warn_rho(self.rho)
        fitted = {k: v for k, v in vars(self).items() if k.endswith("_") and not
                  k.startswith("_")}
        try:
            X, y, is_dask, stats = self._validate_input(X, y)
            if resume is not None:
                _check_resumable(resume, X.shape)
            if not _is_dask_collection(y):
                y = self._target(y)
            # The client runs these kernels too. Compiled here, before any block exists,
            # they are in numba's cache when workers that share this installation load
            # them: a worker that compiles them keeps part of the compiler's memory on
            # top of its block.
            warm_up_kernels(self._datafit_type)
            with cluster_client(self.client) as client:
                n_blocks = self._n_blocks(X, client)
                prepared = (_prepare_dask(X, y, client, n_blocks, self._target,
                                          centre=self._centres_columns()) if is_dask
                            else _prepare_local(X, y, n_blocks, centre=self._centres_columns(),
                                                stats=stats))
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

    def _run_program(self, program, prepared, client, max_rounds: int, resume,
                     staleness: int = 0):
        """The engine's run of ``program`` on the prepared shards, with the estimator's
        progress, checkpoint and time-limit settings."""
        return run(program, prepared.shards, client, max_rounds=max_rounds,
                   staleness=staleness, progress=bool(self.progress),
                   time_limit=getattr(self, "_time_limit", None), transport="direct",
                   desc=f"dask_strads.{type(self).__name__}", checkpoint=self.checkpoint,
                   checkpoint_every=self.checkpoint_every, resume=resume)

    def _passes(self, updates: int, n_features: int) -> int:
        """``n_iter_``: the passes over the features that ``updates`` coordinate updates
        make, at most ``max_iter`` (the last sweep may end a little past the budget)."""
        return min(self.max_iter, max(1, math.ceil(updates / max(n_features, 1))))

    def _warn_unconverged(self, state, result, measure: str) -> None:
        """A ConvergenceWarning that says why the fit stopped (``measure``: the gap)."""
        reason = state.stop or result.stop_reason
        why = _STOPPED.get(reason, "it stopped ({reason})").format(
            max_iter=self.max_iter, reason=reason)
        passes = int(np.max(self.n_iter_))  # the classifier's is one per class
        warnings.warn(f"Objective did not converge: {measure} after {passes} passes "
                      f"(tol={self.tol}): {why}.", ConvergenceWarning, stacklevel=4)

    # -------------------------------------------------------------- predict
    def _linear(self, X, coef, intercept):
        """``X @ coef + intercept`` (``coef`` of shape (p,) or (p, k)); a lazy dask
        array for dask input."""
        check_is_fitted(self)
        if _is_dask_collection(X):
            if _is_dataframe(X):
                self._check_column_names(X)
                X = frame_to_array(X)
            if X.ndim != 2 or X.shape[1] != self.n_features_in_:
                raise ValueError(f"X: expected {self.n_features_in_} features, got shape "
                                 f"{X.shape}")
            # blockwise: a matmul of dask's does not take scipy.sparse chunks
            X = X.rechunk({1: -1})
            if coef.ndim == 1:
                return X.map_blocks(_rows_times, coef, intercept, drop_axis=1,
                                    dtype=np.float64)
            return X.map_blocks(_rows_times, coef, intercept, dtype=np.float64,
                                chunks=(X.chunks[0], (coef.shape[1],)))
        if _is_pydata_sparse(X):
            X = X.to_scipy_sparse()
        X = validate_data(self, X, accept_sparse=("csr", "csc", "coo"), dtype=np.float64,
                          reset=False)
        return _rows_times(X, coef, intercept)

    def _check_column_names(self, frame) -> None:
        """A dask DataFrame's columns are the features seen in fit, in their order (as
        scikit-learn requires of a pandas one): another order would pair each
        coefficient with another column."""
        seen = getattr(self, "feature_names_in_", None)
        names = [str(c) for c in frame.columns]
        if seen is not None and names != list(seen):
            raise ValueError("X: the feature names should match those that were passed "
                             f"during fit, in the same order: expected {list(seen)}, "
                             f"got {names}")


def _finite(X, squares) -> bool:
    """Whether ``X`` (with its columns' ``squares``, if taken) is all finite."""
    if squares is None:
        return all_finite_in_parallel(X.data if sp.issparse(X) else X)
    with np.errstate(over="ignore", invalid="ignore"):
        total = squares.sum()
    # finite squares prove finite values; an overflow needs the exact check
    return bool(np.isfinite(total)) or all_finite_in_parallel(X)


def _rows_times(chunk, coef, intercept):
    if _is_pydata_sparse(chunk):
        chunk = chunk.to_scipy_sparse()
    z = chunk @ coef
    z = np.asarray(z.toarray() if sp.issparse(z) else z, dtype=np.float64)
    return (z.ravel() if coef.ndim == 1 else z) + intercept
