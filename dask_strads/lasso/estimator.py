"""scikit-learn estimators ``Lasso`` and ``ElasticNet`` on the STRADS engine.

The estimators validate their inputs, cut ``X`` into column blocks (one per worker),
build a :class:`~dask_strads.cd.program.CDProgram` and run it; the fitted
attributes are plain numpy values, as in scikit-learn.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import RegressorMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Hidden, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dask_strads.cd.estimator import CDEstimator
from dask_strads.cd.inputs import _is_pydata_sparse, _prepare_dask, _prepare_local, _Prepared
from dask_strads.cd.plain import PlainProgram
from dask_strads.cd.program import CDProgram
from dask_strads.cd.shards import CentredColumns, ColumnsAsGiven
from dask_strads.engine.cluster import cluster_client

SCHEDULES = ("priority", "round_robin", "random", "shotgun")

__all__ = ["ElasticNet", "Lasso", "lasso_path", "enet_path"]

# Work per block and round: enough coordinate updates that a round's fixed cost (the
# round trip through the client) stays a small share of it.
ROUND_FLOPS = 4e6


# ---------------------------------------------------------------------- estimator
class ElasticNet(RegressorMixin, CDEstimator):
    """Linear regression with combined L1 and L2 priors, fitted by STRADS coordinate descent.

    Minimises scikit-learn's objective::

        1 / (2 n) ||y - X b - b0||^2 + alpha l1_ratio ||b||_1
            + alpha (1 - l1_ratio) / 2 ||b||^2

    Column blocks of ``X`` and their coefficients live on the Dask workers (model
    parallelism); each round a priority schedule picks the coordinates to update,
    and the workers update them by exact coordinate descent.

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
        round, by one worker or by peers that exchange their residual changes after
        every sweep and take the same step lengths. ``"round_robin"`` and ``"random"``
        sweep / sample uniformly; ``"shotgun"`` samples uniformly and updates all of a
        worker's coordinates from the same residual. These three check no
        dependencies: on correlated columns and several blocks they can diverge, and
        the fit then raises ``FloatingPointError``.
    n_candidates : int or None, default=None
        With ``"priority"``: the smallest working set (coordinates over all workers);
        it then grows to twice the support. None: the ``dask-strads.cd.ws-min-size``
        setting (100). With the other schedules: coordinates per worker and round (one
        sweep); None: about ``4e6 / (2 * nnz per column)``, at least 32.
    rho : float, default="deprecated"
        Has no effect; setting it warns.

        .. deprecated:: 0.1.0
           ``rho`` was the threshold of a dependency check that was removed (it never
           saved work); it will be removed in 0.2.0.
    staleness : int, default=0
        Rounds the plain schedules plan ahead of the last pull: hides latency, but
        workers see older residual changes. ``"priority"`` needs each pull before its
        next plan (a phase follows from its gap round) and is unaffected.
    client : distributed.Client or None, default=None
        Cluster to use; by default the current default client, else an embedded
        ``LocalCluster`` started for the fit.
    progress : bool, default=True
        Show a progress bar (rounds of the engine).
    gather_model : bool, default=True
        Set ``coef_`` as a dense ndarray. With False, ``coef_`` is a lazy dask array
        made on the cluster from the non-zeros, and ``sparse_coef_`` and ``predict``
        use the non-zeros only: the client never holds a vector of ``n_features``
        (during the fit it keeps only the non-zero coefficients either way).
    checkpoint : path, optional
        Directory for atomic checkpoints of the fit (``.npz``, loaded without pickle);
        continue an interrupted fit with ``fit(X, y, resume=checkpoint)``.
    checkpoint_every : int, optional
        Rounds between checkpoints (default: about every 20 s). Without ``checkpoint`` the
        snapshots stay in memory, for recovery from lost workers.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        A dask array with ``gather_model=False``.
    sparse_coef_ : scipy.sparse CSR matrix of shape (1, n_features)
        The non-zero coefficients.
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
        "rho": [Interval(numbers.Real, 0, 1, closed="right"),
                Hidden(StrOptions({"deprecated"}))],
        "staleness": [Interval(numbers.Integral, 0, None, closed="left")],
        "client": "no_validation",
        "progress": ["boolean"],
        "gather_model": ["boolean"],
        "checkpoint": "no_validation",
        "checkpoint_every": [Interval(numbers.Integral, 1, None, closed="left"), None],
    }

    def __init__(self, alpha=1.0, *, l1_ratio=0.5, fit_intercept=True, max_iter=1000, tol=1e-4,
                 warm_start=False, positive=False, random_state=None, schedule="priority",
                 n_candidates=None, rho="deprecated", staleness=0, client=None,
                 progress=True, gather_model=True, checkpoint=None, checkpoint_every=None):
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
        self.gather_model = gather_model
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

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
            program = CDProgram(*args, ws_min_size=self.n_candidates, col_sq=prepared.col_sq,
                                xty=prepared.xty, **common)
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
        return program, self._run_program(program, prepared, client, max_rounds, resume,
                                          staleness=int(self.staleness))

    def _set_fitted(self, program, result, prepared: _Prepared) -> None:
        state = result.state
        if state.stop == "diverged":
            raise FloatingPointError(
                f"the fit diverged: schedule={self.schedule!r} updates coordinates on "
                f"{program.n_blocks} blocks at once without checking their dependencies, "
                "and X's columns are too correlated for that; use schedule='priority' "
                "(the default), or one worker")
        self._sparse_coef = state.coef.sparse()
        self.coef_ = state.coef.dense() if self.gather_model else state.coef.to_dask()
        if self.fit_intercept:
            mu = np.concatenate([result.block_results[b]["mu"]
                                 for b in range(program.n_blocks)])
            self.intercept_ = float(program.y_offset - mu[state.coef.ids] @ state.coef.values)
        else:
            self.intercept_ = 0.0
        self.n_iter_ = self._passes(state.updates, prepared.n_features)
        self.dual_gap_ = float(state.gap / prepared.n_samples)
        self.history_ = result.history
        self.n_blocks_ = program.n_blocks
        if not state.converged:
            self._warn_unconverged(state, result, f"duality gap {self.dual_gap_:.3e}")

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, *, resume=None):
        """Fit the model.

        Parameters
        ----------
        X : array-like, scipy.sparse matrix, sparse.COO, dask.array or dask.dataframe
            of shape (n_samples, n_features). Dask collections stay on the cluster; a
            dense one is made into column blocks a piece at a time (a worker holds its
            block and about 64 MiB of X's column chunks), so chunk it by columns
            narrower than a block when X is large for the workers' memory.
        y : array-like or dask.array / dask Series of shape (n_samples,), or, when
            ``X`` is a dask DataFrame, the name of its target column.
        resume : path, optional
            Continue from the checkpoint in this directory (written by a fit with the same
            data and ``checkpoint=``).

        Returns
        -------
        self
        """
        return self._fit(X, y, resume)

    # -------------------------------------------------------------- predict
    def predict(self, X):
        """Predict with the linear model: ``X @ coef_ + intercept_``.

        Dask collections give a lazy dask array.
        """
        check_is_fitted(self)
        if isinstance(self.coef_, np.ndarray):
            return self._linear(X, self.coef_, self.intercept_)
        # coef_ on the cluster: the non-zeros only, as a (n_features, 1) column
        return self._linear(X, self.sparse_coef_.T.tocsc(), self.intercept_)[:, 0]

    @property
    def sparse_coef_(self):
        """``coef_`` as a scipy.sparse CSR row."""
        if isinstance(getattr(self, "coef_", None), np.ndarray) or \
                not hasattr(self, "_sparse_coef"):
            return sp.csr_matrix(self.coef_)
        return self._sparse_coef


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
                 n_candidates=None, rho="deprecated", staleness=0, client=None,
                 progress=True, gather_model=True, checkpoint=None, checkpoint_every=None):
        super().__init__(alpha=alpha, l1_ratio=1.0, fit_intercept=fit_intercept,
                         max_iter=max_iter, tol=tol, warm_start=warm_start, positive=positive,
                         random_state=random_state, schedule=schedule,
                         n_candidates=n_candidates, rho=rho, staleness=staleness,
                         client=client, progress=progress, gather_model=gather_model,
                         checkpoint=checkpoint, checkpoint_every=checkpoint_every)


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
    X, y, is_dask, stats = est._validate_input(X, y)
    with cluster_client(est.client) as client:
        n_blocks = est._n_blocks(X, client)
        if is_dask:
            prepared = _prepare_dask(X, y, client, n_blocks, centre=est._centres_columns())
        else:
            prepared = _prepare_local(X, y, n_blocks, centre=est._centres_columns(),
                                      stats=stats)
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
    if isinstance(block, CentredColumns):  # X_c' y_c, as X' y_c (see below)
        block = block.values
    if isinstance(block, ColumnsAsGiven):  # handed over in this process
        block = block.source
    if _is_pydata_sparse(block):
        block = block.to_scipy_sparse()
    return np.asarray(block.T @ yc).ravel()


def _alpha_max_prepared(client, prepared: _Prepared, yc, fit_intercept, l1_ratio) -> float:
    """``max |X_c' y_c| / (n l1_ratio)`` computed where the blocks live."""
    # X_c' y_c = X' y_c because y_c sums to zero; without an intercept y_c = y.
    futs = [client.submit(_xt_y, s, yc, fit_intercept, pure=False)
            for s in prepared.shards.values()]
    xty = np.concatenate(client.gather(futs))
    if l1_ratio == 0:
        return float(np.abs(xty).max() / (prepared.n_samples * 1e-3))
    return float(np.abs(xty).max() / (prepared.n_samples * l1_ratio))
