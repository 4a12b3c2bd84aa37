"""scikit-learn face of CCD++ matrix factorisation on the STRADS engine."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from dask_strads.engine.cluster import PicklesWithoutClient
from dask_strads.mf.inputs import (
    _check_duplicates,
    _check_entries,
    _check_indices,
    _dask_triples,
    _is_dask_collection,
    _memory_triple,
    _observed_matrix,
    _real_values,
    _shard_duplicates,
    _shard_from_triples,
    _sum_counts,
    _triple_counts,
    _triple_stats,
)
from dask_strads.mf.on_cluster import ClusterFactors, top_columns
from dask_strads.mf.program import MFProgram
from dask_strads.mf.shards import balanced_bounds, build_shard, shard_from_matrices

__all__ = ["MatrixFactorization"]


class MatrixFactorization(PicklesWithoutClient, BaseEstimator):
    """Low-rank matrix factorisation of observed entries by CCD++ on the STRADS engine.

    Minimises ``sum_{(i,j) observed} (a_ij - w_i'h_j)^2 + alpha (||W||_F^2 + ||H||_F^2)``
    by coordinate descent over rank-one components in round-robin order (CCD++, Yu et
    al. 2012). ``W`` (rows) and ``H`` (columns) are partitioned over the workers together
    with the observed entries (each worker holds its rows of ``A`` as CSR with the
    residual on them); one round per (rank component, inner sweep), in which only
    length-``n`` vectors travel: the current ``h_t`` to the workers, partial column sums
    back (see :mod:`dask_strads.mf.program`). Memory per worker is
    ``O(nnz / P + (m + n) k / P + n)``, so ranks in the thousands stay affordable. Put
    the smaller dimension in the columns: its length is what travels each round.

    Parameters
    ----------
    n_components : int, default=10
        Rank ``k`` of the factorisation.
    alpha : float, default=0.1
        L2 weight ``lambda`` on both factors (the objective is not divided by the
        number of entries).
    max_iter : int, default=10
        Maximum number of outer iterations; each visits every rank component once.
    tol : float, default=1e-4
        Stop when an outer iteration lowers the objective by less than ``tol`` times its
        value; 0 runs all ``max_iter`` iterations.
    init : "random" or (W0, H0), default="random"
        ``"random"``: entries ``N(0, s^2)`` with ``s = 0.5 (mean(a^2) / k)^(1/4)`` (so
        ``W H'`` starts at about a quarter of the data's scale), drawn from
        ``random_state`` tile by tile on the workers (the same for any number of
        workers). Or arrays of shapes ``(n_rows, k)`` and ``(n_cols, k)``.
    random_state : int, RandomState or None, default=None
        Seed of the random initialisation.
    inner_iter : int, default=10
        Most CCD++ inner sweeps (``w_t``, ``h_t`` alternations) per visit of a rank
        component. More solve each rank-one subproblem more exactly per visit; 1 is
        plain cyclic coordinate descent. With ``inner_tol`` a visit ends as soon as its
        subproblem settles, so this caps the early visits only. A visit is one round
        when every block has a worker of its own (the workers then reduce among
        themselves), else one round per sweep.
    inner_tol : float, default=0.05
        End a rank component's visit at the sweep that changes ``h_t`` by at most
        ``inner_tol`` times its norm; 0 runs all ``inner_iter`` sweeps (LIBPMF's CCD++
        with ``inner_iter`` 5). Most subproblems settle at once after the first outer
        iterations, so the rounds go where they still gain.
    staleness : int, default=0
        Rounds in flight. CCD++ is sequential (every round needs the previous one's
        vector), so only 0 is supported; other values raise ``ValueError``.
    client : distributed.Client, optional
        Cluster to fit on; defaults to the current client, else an embedded
        ``LocalCluster`` for the call.
    progress : bool, default=True
        Show a progress bar of rounds.
    gather_model : bool, default=True
        Gather ``W_`` and ``H_`` to the client at the end of ``fit``. With False they stay
        on the cluster, in the blocks where they were fitted, as dask arrays;
        :meth:`predict`, :meth:`score` and :meth:`recommend` then run on the cluster
        (for factors larger than the client should hold). Needs a client, and keeps its
        data on that client's cluster while the estimator (or the arrays) lives.
    n_blocks : int, optional
        Number of resident blocks (row ranges and column ranges); default: one per
        worker.
    time_limit : float, optional
        Stop after this many seconds of fitting (checked between rounds); the fitted
        factors are then those of the last completed round (``stop_reason_`` is
        ``"time_limit"``).
    checkpoint : path, optional
        Directory for atomic checkpoints of the fit (``.npz``, loaded without pickle);
        continue an interrupted fit with ``fit(X, resume=checkpoint)``.
    checkpoint_every : int, optional
        Rounds between checkpoints (default: about every
        ``dask-strads.engine.snapshot-interval``, 20 s). Without ``checkpoint`` the
        snapshots stay in memory, for recovery from lost workers.

    Attributes
    ----------
    W_ : ndarray of shape (n_rows, n_components)
        Row factors (a dask array with ``gather_model=False``).
    H_ : ndarray of shape (n_cols, n_components)
        Column factors; predictions are ``W_ @ H_.T`` (a dask array with
        ``gather_model=False``).
    n_iter_ : int
        Outer iterations run.
    objective_ : float
        Final training objective.
    history_ : pandas.DataFrame
        The engine's per-round history (one round per rank component, or per rank
        component and inner sweep when blocks share workers, plus a final one):
        ``round``, ``time``, ``objective`` (updated after every rank component),
        ``iteration``, ``rank`` (the next component), ``train_rmse`` and,
        when ``validation`` was given to :meth:`fit`, ``rmse`` on it (one round behind:
        ``rmse_ranks`` counts the rank updates it includes), plus the engine's timings.
    n_rows_, n_cols_ : int
        Shape of the factorised matrix.

    Notes
    -----
    Input policy: every stored entry of a sparse input is an observed entry, explicit
    zeros included; duplicate coordinates, indices out of range and non-finite values
    are rejected with ``ValueError`` before any cluster work (for dask inputs, after a
    pass over the data on the cluster and before fitting).

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> from dask_strads import MatrixFactorization
    >>> from dask_strads._datasets.mf import make_ratings
    >>> data = make_ratings(300, 200, rank=3, n_observed=12000, random_state=0)
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     mf = MatrixFactorization(n_components=3, alpha=0.05, max_iter=30, random_state=0,
    ...                              client=client, progress=False)
    ...     mf = mf.fit(data.train, validation=data.test)
    >>> round(-mf.score(data.test), 1) <= 0.2
    True
    """

    def __init__(self, n_components: int = 10, alpha: float = 0.1, max_iter: int = 10,
                 tol: float = 1e-4, init: Any = "random", random_state: Any = None, *,
                 inner_iter: int = 10, inner_tol: float = 0.05, staleness: int = 0,
                 client: Any = None, progress: bool = True, gather_model: bool = True,
                 n_blocks: int | None = None,
                 time_limit: float | None = None, checkpoint: Any = None,
                 checkpoint_every: int | None = None):
        self.n_components = n_components
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.random_state = random_state
        self.inner_iter = inner_iter
        self.inner_tol = inner_tol
        self.staleness = staleness
        self.client = client
        self.progress = progress
        self.gather_model = gather_model
        self.n_blocks = n_blocks
        self.time_limit = time_limit
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every

    # ------------------------------------------------------------- validation
    def _check_params(self) -> None:
        def positive_int(name):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")

        for name in ("n_components", "max_iter", "inner_iter"):
            positive_int(name)
        if self.n_blocks is not None:
            positive_int("n_blocks")
        for name in ("alpha", "tol", "inner_tol"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or not np.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        if self.time_limit is not None and not (
                isinstance(self.time_limit, numbers.Real) and self.time_limit > 0):
            raise ValueError(f"time_limit: expected seconds > 0 or None, got {self.time_limit!r}")
        if self.checkpoint_every is not None and (
                not isinstance(self.checkpoint_every, numbers.Integral)
                or isinstance(self.checkpoint_every, bool) or self.checkpoint_every < 1):
            raise ValueError(f"checkpoint_every: expected an integer >= 1 or None, got "
                             f"{self.checkpoint_every!r}")
        if self.staleness != 0:
            raise ValueError(f"staleness: MatrixFactorization supports only 0 (each CCD++ round "
                             f"needs the previous round's vector), got {self.staleness!r}")
        if not (isinstance(self.init, str) and self.init == "random") and not (
                isinstance(self.init, tuple | list) and len(self.init) == 2):
            raise ValueError(f"init: expected 'random' or a pair (W0, H0), got {self.init!r}")
        if not isinstance(self.gather_model, bool | np.bool_):
            raise ValueError(f"gather_model: expected True or False, got {self.gather_model!r}")

    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            return int(np.random.default_rng().integers(2**31))
        if isinstance(rs, numbers.Integral):
            return int(rs)
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(2**31))
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(2**31))
        raise ValueError(f"random_state: expected an int, RandomState, Generator or None, "
                         f"got {rs!r}")

    def _init_spec(self, shape, mean_square: float) -> tuple:
        k = self.n_components
        if isinstance(self.init, str):
            scale = 0.5 * (max(mean_square, 1e-12) / k) ** 0.25
            return ("random", self._seed(), scale)
        W0, H0 = (_real_values(a, "init", "initial factors") for a in self.init)
        for label, arr, rows in (("W0", W0, shape[0]), ("H0", H0, shape[1])):
            if arr.shape != (rows, k):
                raise ValueError(f"init: {label} must have shape ({rows}, {k}), got {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"init: {label} contains non-finite values")
        return ("given", W0, H0)

    def _validation(self, validation, shape):
        if validation is None:
            return None
        r, c, v, _ = _memory_triple(validation, "validation")
        r, c, v, _ = _check_entries(r, c, v, shape, "validation")
        return r, c, v

    def _get_client(self):
        if self.client is not None:
            return self.client
        try:
            from distributed import default_client

            return default_client()
        except ValueError:
            return None

    def _n_blocks(self, client) -> int:
        if self.n_blocks is not None:
            return int(self.n_blocks)
        if client is None:
            import os

            return min(os.cpu_count() or 2, 4)
        from dask_strads.engine.cluster import worker_count

        return worker_count(client)

    # ------------------------------------------------------------- fit
    def fit(self, X, y=None, *, validation=None, resume=None) -> MatrixFactorization:
        """Factorise the observed entries of ``X``.

        Parameters
        ----------
        X : sparse matrix, sparse.COO, dask array with sparse chunks, (rows, cols, values), \
or (dask) dataframe of (row, column, value)
            Observed entries; every stored entry counts, explicit zeros included. Data
            from dask collections is converted to shards on the cluster.
        y : None
            Ignored.
        validation : sparse matrix, (rows, cols, values) or dataframe, optional
            Held-out entries whose RMSE is tracked in ``history_["rmse"]``.
        resume : path, optional
            Continue from the checkpoint in this directory (written by a fit of the same
            data with ``checkpoint=``).

        Returns
        -------
        self
        """
        from dask_strads.engine import run

        self._check_params()
        client = self._get_client()
        if not self.gather_model and client is None:
            raise ValueError("gather_model=False: the factors stay on a cluster; pass client= "
                             "or create a distributed.Client first")
        k = self.n_components
        if _is_dask_collection(X):
            shards, shape, init, bounds = self._dask_shards(X, validation, client)
        else:
            csr = _observed_matrix(X, "X")
            shape = csr.shape
            if csr.nnz == 0:
                raise ValueError("X: no observed entries")
            val = self._validation(validation, shape)
            init = self._init_spec(shape, float(np.mean(csr.data**2)))
            P = min(self._n_blocks(client), shape[0], shape[1])
            rb = balanced_bounds(np.diff(csr.indptr), P)
            cb = balanced_bounds(np.ones(shape[1]), P)
            given = init if init[0] == "given" else None
            shards = {p: shard_from_matrices(csr, (rb[p], rb[p + 1]), (cb[p], cb[p + 1]),
                                             val, given) for p in range(P)}
            bounds = (rb, cb)
        program = MFProgram(k, self.alpha, self.max_iter, self.tol, inner_iter=self.inner_iter,
                            init=init, inner_tol=float(self.inner_tol))
        # one spare round: the program ends the fit itself (stop_reason "done" or "converged")
        max_rounds = program.n_rounds() + 1
        result = run(program, shards, client=client, max_rounds=max_rounds, staleness=0,
                     time_limit=self.time_limit, progress=self.progress,
                     desc="dask_strads.MatrixFactorization", checkpoint=self.checkpoint,
                     checkpoint_every=self.checkpoint_every, resume=resume,
                     gather_results=bool(self.gather_model))
        self._set_fitted(result, shape, bounds, client)
        return self

    def _dask_shards(self, X, validation, client):
        import dask.array as da

        triples = _dask_triples(X, "X")
        array_shape = tuple(int(s) for s in X.shape) if isinstance(X, da.Array) else None
        if client is None:
            import dask

            computed = dask.compute(*triples)
            r, c, v = (np.concatenate([np.asarray(t[i]) for t in computed]) for i in range(3))
            r, c, v, shape = _check_entries(r, c, v, array_shape, "X")
            _check_duplicates(r, c, shape, "X")
            val = self._validation(validation, shape)
            init = self._init_spec(shape, float(np.mean(v**2)))
            P = min(self._n_blocks(client), shape[0], shape[1])
            rb = balanced_bounds(np.bincount(r, minlength=shape[0]), P)
            cb = balanced_bounds(np.ones(shape[1]), P)
            given = init if init[0] == "given" else None
            return ({p: build_shard(r, c, v, shape, (rb[p], rb[p + 1]), (cb[p], cb[p + 1]),
                                    val, given) for p in range(P)}, shape, init, (rb, cb))
        futures = client.compute(triples)
        stats = np.array(client.gather([client.submit(_triple_stats, f, pure=False)
                                        for f in futures]))
        n, rmin, rmax, cmin, cmax = (stats[:, 0].sum(), stats[:, 1].min(), stats[:, 2].max(),
                                     stats[:, 3].min(), stats[:, 4].max())
        if n == 0:
            raise ValueError("X: no observed entries")
        if stats[:, 7].sum():
            raise ValueError("X: row and column indices must be integers")
        if stats[:, 5].sum():
            raise ValueError(f"X: {int(stats[:, 5].sum())} non-finite value(s); expected finite "
                             "observed values")
        if array_shape is not None:
            shape = array_shape
        else:
            if rmin < 0 or cmin < 0:
                raise ValueError(f"X: negative index {int(min(rmin, cmin))}, expected >= 0")
            shape = (int(rmax) + 1, int(cmax) + 1)
        val = self._validation(validation, shape)
        init = self._init_spec(shape, float(stats[:, 6].sum() / n))
        counts = client.submit(_sum_counts, *[client.submit(_triple_counts, f, shape, pure=False)
                                              for f in futures], pure=False).result()
        P = min(self._n_blocks(client), shape[0], shape[1])
        rb = balanced_bounds(counts, P)
        cb = balanced_bounds(np.ones(shape[1]), P)
        given = init if init[0] == "given" else None
        shards = {p: client.submit(_shard_from_triples, shape, (int(rb[p]), int(rb[p + 1])),
                                   (int(cb[p]), int(cb[p + 1])), val, given, *futures,
                                   pure=False) for p in range(P)}
        dups = sum(client.gather([client.submit(_shard_duplicates, s, pure=False)
                                  for s in shards.values()]))
        del futures
        if dups:
            raise ValueError(f"X: {dups} duplicate entr{'y' if dups == 1 else 'ies'}; expected "
                             "each observed entry once (sum or drop duplicates first)")
        return shards, shape, init, (rb, cb)

    def _set_fitted(self, result, shape, bounds, client) -> None:
        state = result.state
        # stopped early (time limit, interrupt): the blocks have not stored the newest h
        h_column = None
        if not state["done"]:
            if state["s"] == 0 and state["h_prev"] is not None:
                h_column = (state["prev_t"], state["h_prev"])
            elif state["s"] > 0:
                h_column = (state["t"], state["h"])
        if self.gather_model:
            self._set_gathered(result.block_results, shape, h_column)
        else:
            self._on_cluster = ClusterFactors(client, result.block_results, *bounds,
                                              self.n_components, h_column)
            self.W_, self.H_ = self._on_cluster.W, self._on_cluster.H
        self.n_iter_ = int(state["iteration"])
        self.objective_ = float(state["objective"])
        self.history_ = result.history
        self.n_rows_, self.n_cols_ = int(shape[0]), int(shape[1])
        self.stop_reason_ = result.stop_reason

    def _set_gathered(self, blocks, shape, h_column) -> None:
        self._on_cluster = None
        by_rows = sorted(blocks.values(), key=lambda b: b["row_range"])
        by_cols = sorted(blocks.values(), key=lambda b: b["col_range"])
        self.W_ = np.concatenate([b["W"] for b in by_rows])
        self.H_ = np.concatenate([b["H"] for b in by_cols])
        if h_column is not None:
            self.H_[:, h_column[0]] = h_column[1]
        indptr = np.concatenate([[0]] + [b["seen_indptr"][1:] for b in by_rows])
        offsets = np.repeat(np.cumsum([0] + [b["seen_indptr"][-1] for b in by_rows[:-1]]),
                            [len(b["seen_indptr"]) - 1 for b in by_rows])
        indptr[1:] += offsets
        self.seen_ = sp.csr_matrix(
            (np.ones(indptr[-1], dtype=bool),
             np.concatenate([b["seen_indices"] for b in by_rows]), indptr), shape=shape)

    # ------------------------------------------------------------- use
    def _check_fitted(self) -> None:
        if not hasattr(self, "W_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("MatrixFactorization is not fitted yet; call fit first")

    def predict(self, rows, cols) -> np.ndarray:
        """Predicted values ``w_i'h_j`` at the given coordinates.

        Parameters
        ----------
        rows, cols : array-like of int
            Row and column indices of equal length.

        Returns
        -------
        ndarray of float64
        """
        self._check_fitted()
        rows = _check_indices(np.asarray(rows).ravel(), self.n_rows_, "rows", "row")
        cols = _check_indices(np.asarray(cols).ravel(), self.n_cols_, "cols", "column")
        if rows.shape != cols.shape:
            raise ValueError(f"rows, cols: expected equal lengths, got {len(rows)} and {len(cols)}")
        return self._predicted(rows, cols)

    def _predicted(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        if getattr(self, "_on_cluster", None) is not None:
            return self._on_cluster.predict(rows, cols)
        return np.einsum("ij,ij->i", self.W_[rows], self.H_[cols])

    def score(self, X, y=None) -> float:
        """Negative root mean squared error on the entries of ``X`` (higher is better).

        Parameters
        ----------
        X : sparse matrix, sparse.COO, (rows, cols, values), dataframe or dask collection
            Entries to evaluate.
        y : None
            Ignored.

        Returns
        -------
        float
        """
        self._check_fitted()
        if _is_dask_collection(X):
            X = X.compute()
        r, c, v, _ = _memory_triple(X, "X")
        r, c, v, _ = _check_entries(r, c, v, (self.n_rows_, self.n_cols_), "X")
        if v.size == 0:
            raise ValueError("X: no entries to score")
        err = v - self._predicted(r, c)
        return -float(np.sqrt(np.mean(err * err)))

    def recommend(self, row: int, n: int = 10, *, exclude_seen: bool = True) -> np.ndarray:
        """The ``n`` columns with the highest predicted value for ``row``.

        Parameters
        ----------
        row : int
            Row index.
        n : int, default=10
            How many columns (fewer if fewer are unseen).
        exclude_seen : bool, default=True
            Leave out columns observed for ``row`` in the training data.

        Returns
        -------
        ndarray of int64
            Column indices, best first.
        """
        self._check_fitted()
        if not isinstance(row, numbers.Integral) or not 0 <= row < self.n_rows_:
            raise ValueError(f"row: expected an integer in [0, {self.n_rows_}), got {row!r}")
        if not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"n: expected an integer >= 1, got {n!r}")
        if getattr(self, "_on_cluster", None) is not None:
            return self._on_cluster.recommend(row, n, exclude_seen)
        seen = (self.seen_.indices[self.seen_.indptr[row]:self.seen_.indptr[row + 1]]
                if exclude_seen else np.empty(0, dtype=np.int64))
        return top_columns(self.H_, self.W_[row], 0, seen, n)[0]
