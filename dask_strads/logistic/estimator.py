"""scikit-learn's ``LogisticRegression`` with an L1 (or elastic-net) penalty, fitted by
the same working-set coordinate descent as Lasso, with the logistic datafit
(:class:`~dask_strads.cd.datafits.Logistic`)."""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import pandas as pd
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Hidden, Interval, StrOptions
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted

from dask_strads.cd.datafits import Logistic
from dask_strads.cd.estimator import CDEstimator
from dask_strads.cd.inputs import _Prepared
from dask_strads.cd.program import CDProgram

__all__ = ["LogisticRegression"]


class LogisticRegression(ClassifierMixin, CDEstimator):
    """Logistic regression with an L1 or elastic-net penalty, model-parallel.

    Minimises scikit-learn's objective::

        C sum_i log(1 + exp(-y_i (x_i' b + b0))) + l1_ratio ||b||_1
            + (1 - l1_ratio) / 2 ||b||^2

    with ``y_i = +-1`` and ``l1_ratio = 1`` for ``penalty="l1"``. Column blocks of ``X``
    and their coefficients live on the Dask workers; the workers keep the margins
    ``X b + b0``. Coordinates are solved on working sets chosen by duality-gap rounds
    (as :class:`~dask_strads.Lasso`'s), each by a proximal Newton step; the intercept
    (not penalised) by Newton steps.

    More than two classes are fitted one-vs-rest: one binary fit per class, one after
    the other on the same cluster (dask input is cut and placed once for all of them).

    Parameters
    ----------
    penalty : {"l1", "elasticnet"}, default="l1"
    C : float, default=1.0
        Inverse of the penalty's strength.
    l1_ratio : float or None, default=None
        The L1 share of an ``"elasticnet"`` penalty (required then; ignored for
        ``"l1"``).
    fit_intercept : bool, default=True
    tol : float, default=1e-4
        Stop once the duality gap is at most ``tol`` times the loss of the model with no
        features (``n log 2`` without an intercept).
    max_iter : int, default=1000
        Maximum number of coordinate updates, in passes over the features.
    warm_start : bool, default=False
        Start from the previous ``coef_`` and ``intercept_``.
    rho : float, default="deprecated"
        Has no effect; setting it warns.

        .. deprecated:: 0.1.0
           As for :class:`~dask_strads.Lasso`; it will be removed in 0.2.0.
    client, progress, checkpoint, checkpoint_every
        As for :class:`~dask_strads.Lasso`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        One row for two classes (positive for ``classes_[1]``), else one per class.
    intercept_ : ndarray of shape (1,) or (n_classes,)
    n_iter_ : ndarray of shape (1,) or (n_classes,)
        Passes over the features.
    dual_gap_ : float or ndarray of shape (n_classes,)
        The duality gap at the end, on the scale of the objective above.
    history_ : pandas.DataFrame
        One row per round; with more than two classes, a ``class`` column says whose.
    n_blocks_ : int
        Column blocks (workers) the fit used.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from dask_strads import LogisticRegression
    >>> from dask_strads._datasets.logistic import make_classification
    >>> X, y = make_classification(200, 50, n_informative=5)
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster):
    ...     model = LogisticRegression(C=0.5).fit(X, y)
    >>> model.coef_.shape
    (1, 50)
    """

    _parameter_constraints: dict = {
        "penalty": [StrOptions({"l1", "elasticnet"})],
        "C": [Interval(numbers.Real, 0, None, closed="neither")],
        "l1_ratio": [Interval(numbers.Real, 0, 1, closed="both"), None],
        "fit_intercept": ["boolean"],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "warm_start": ["boolean"],
        "rho": [Interval(numbers.Real, 0, 1, closed="right"),
                Hidden(StrOptions({"deprecated"}))],
        "client": "no_validation",
        "progress": ["boolean"],
        "checkpoint": "no_validation",
        "checkpoint_every": [Interval(numbers.Integral, 1, None, closed="left"), None],
    }

    _numeric_target = False
    _datafit_type = Logistic

    def __init__(self, penalty="l1", *, C=1.0, l1_ratio=None, fit_intercept=True, tol=1e-4,
                 max_iter=1000, warm_start=False, rho="deprecated", client=None, progress=True,
                 checkpoint=None, checkpoint_every=None):
        self.penalty = penalty
        self.C = C
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.tol = tol
        self.max_iter = max_iter
        self.warm_start = warm_start
        self.rho = rho
        self.client = client
        self.progress = progress
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags

    # -------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, *, resume=None):
        """Fit the model.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix, sparse.COO, dask.array or dask.dataframe
            of shape (n_samples, n_features). Dask collections stay on the cluster.
        y : array-like or dask.array / dask Series of shape (n_samples,): class labels.
        resume : path, optional
            Continue from the checkpoint in this directory (two classes only).

        Returns
        -------
        self
        """
        self._ratio()  # before any data work
        self._resuming = resume is not None
        return self._fit(X, y, resume)

    def _ratio(self) -> float:
        if self.penalty == "l1":
            if self.l1_ratio is not None and self.l1_ratio != 1:
                # scikit-learn >= 1.8 mixes the penalties from l1_ratio alone
                warnings.warn(f"l1_ratio={self.l1_ratio} has no effect with penalty='l1' "
                              "(a pure L1 penalty); pass penalty='elasticnet' to mix",
                              UserWarning, stacklevel=3)
            return 1.0
        if self.l1_ratio is None:
            raise ValueError("l1_ratio: required with penalty='elasticnet' (a float in "
                             "[0, 1])")
        return float(self.l1_ratio)

    def _target(self, y):
        """Two classes: labels as +-1 (``classes_[1]`` is +1); more: class indices."""
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        kind = type_of_target(y, input_name="y")
        if kind == "unknown":  # scikit-learn's words (its estimator checks look for them)
            raise ValueError("y: Unknown label type: expected class labels")
        if kind not in ("binary", "multiclass"):
            raise ValueError(f"y: expected class labels, got a {kind!r} target")
        if y.dtype.kind == "f" and not np.isfinite(y).all():
            raise ValueError("y: contains NaN or infinity")
        classes = np.unique(y)
        if classes.shape[0] == 1:
            raise ValueError(f"y: expected 2 classes, got 1 class ({classes[0]!r})")
        if classes.shape[0] > 2 and (self.checkpoint is not None or self._resuming):
            raise ValueError(f"checkpoint: a fit of {classes.shape[0]} classes runs one "
                             "fit per class, which one checkpoint cannot hold; checkpoints "
                             "and resume need two classes")
        self.classes_ = classes
        if classes.shape[0] == 2:
            return np.where(y == classes[1], 1.0, -1.0)
        return np.searchsorted(classes, y).astype(np.float64)

    def _problems(self, y):
        """The +-1 labels of each binary fit, one at a time: one, or one per class
        (one-vs-rest)."""
        if self.classes_.shape[0] == 2:
            yield y
            return
        for k in range(self.classes_.shape[0]):
            yield np.where(y == k, 1.0, -1.0)

    def _coef_init(self, p):
        k = 1 if self.classes_.shape[0] == 2 else self.classes_.shape[0]
        if self.warm_start and np.shape(getattr(self, "coef_", None)) == (k, p):
            self._intercept_init = (np.ravel(self.intercept_).astype(np.float64)
                                    if self.fit_intercept else np.zeros(k))
            return np.asarray(self.coef_, dtype=np.float64)
        self._intercept_init = np.zeros(k)
        return None

    def _run(self, prepared: _Prepared, client, coef_init=None, resume=None):
        """One program per binary problem, run in turn: lists of programs and results."""
        programs, results = [], []
        for k, labels in enumerate(self._problems(prepared.y)):
            init = None if coef_init is None else coef_init[k]
            program = self._program(prepared, labels, init, self._intercept_init[k])
            programs.append(program)
            results.append(self._run_program(program, prepared, client,
                                             int(self.max_iter * prepared.n_features + 1000),
                                             resume))
        return programs, results

    def _program(self, prepared: _Prepared, labels, coef_init, intercept_init) -> CDProgram:
        n, p = prepared.n_samples, prepared.n_features
        ratio = self._ratio()
        # the objective divided by C: the loss summed, penalties 1 / C
        l1, l2 = ratio / self.C, (1.0 - ratio) / self.C
        if self.fit_intercept:
            share = float(np.mean(labels > 0))
            null_loss = -n * (share * math.log(share) + (1 - share) * math.log(1 - share))
        else:
            null_loss = n * math.log(2.0)
        datafit = Logistic(labels, self.fit_intercept, l1, intercept=float(intercept_init))
        program = CDProgram(None, prepared.starts, l1, l2, self.tol * null_loss,
                            fit_intercept=self.fit_intercept, max_updates=self.max_iter * p,
                            coef_init=coef_init, col_sq=prepared.col_sq, datafit=datafit)
        program.name = "logistic"
        return program

    def _set_fitted(self, programs, results, prepared: _Prepared) -> None:
        states = [r.state for r in results]
        self.coef_ = np.vstack([s.coef.dense() for s in states])
        self.intercept_ = np.array([s.intercept if self.fit_intercept else 0.0
                                    for s in states])
        self.n_iter_ = np.array([self._passes(s.updates, prepared.n_features)
                                 for s in states])
        gaps = np.array([s.gap * self.C for s in states])
        binary = len(states) == 1
        self.dual_gap_ = float(gaps[0]) if binary else gaps
        self.history_ = results[0].history if binary else pd.concat(
            [r.history.assign(**{"class": c}) for r, c in zip(results, self.classes_)],
            ignore_index=True)
        self.n_blocks_ = programs[0].n_blocks
        for k, (state, result) in enumerate(zip(states, results)):
            if not state.converged:
                whose = "" if binary else f" (class {self.classes_[k]!r} against the rest)"
                self._warn_unconverged(state, result, f"duality gap {gaps[k]:.3e}{whose}")

    # -------------------------------------------------------------- predict
    def decision_function(self, X):
        """``X @ coef_.T + intercept_``: shape (n,), positive for ``classes_[1]``, for
        two classes; shape (n, n_classes) for more."""
        check_is_fitted(self)
        if self.coef_.shape[0] == 1:
            return self._linear(X, self.coef_[0], self.intercept_[0])
        return self._linear(X, self.coef_.T, self.intercept_)

    def predict_proba(self, X):
        """Probabilities of each class, shape (n, n_classes); one-vs-rest's are each
        class's logistic probability against the rest, normalised to sum to one."""
        z = self.decision_function(X)
        if hasattr(z, "map_blocks"):
            import dask.array as da

            stack = da.stack
        else:
            stack = np.stack
        p = 1.0 / (1.0 + np.exp(-z))
        if z.ndim == 1:
            return stack([1.0 - p, p], axis=1)
        return p / p.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        proba = self.predict_proba(X)
        return np.log(proba) if isinstance(proba, np.ndarray) else proba.map_blocks(np.log)

    def predict(self, X):
        """The class of each row: of two, ``classes_[1]`` where the decision function is
        > 0; of more, the class whose decision function is largest."""
        z = self.decision_function(X)
        index = (z > 0).astype(int) if z.ndim == 1 else z.argmax(axis=1)
        if hasattr(index, "map_blocks"):
            return index.map_blocks(lambda b: self.classes_[b], dtype=self.classes_.dtype)
        return self.classes_[index]
