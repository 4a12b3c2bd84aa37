"""Command line: ``python -m dask_strads demo`` and ``python -m dask_strads fit MODEL ...``.

``fit`` loads a data file, starts (or joins) a Dask cluster, fits one of the estimators
and writes the fitted attributes to an ``.npz`` file (no pickles: ``numpy.load`` opens
it with ``allow_pickle=False``).

Clusters:

* ``--cluster local`` (default): a ``LocalCluster`` on 127.0.0.1, closed at the end;
* ``--cluster slurm``: a ``dask_jobqueue.SLURMCluster`` scaled to ``--jobs`` jobs; workers
  get ``--lifetime`` (walltime minus a margin) so they retire before SLURM kills the job,
  and the cluster keeps ``--jobs`` jobs running (replacing retired or cancelled ones);
* ``--scheduler-file F`` / ``--scheduler ADDRESS``: join a running cluster and leave it
  running.

Examples
--------
::

    python -m dask_strads fit lasso --data train.npz --alpha 0.01 --output lasso.npz
    python -m dask_strads fit lda --data counts.mtx --n-components 20 --max-iter 100
    python -m dask_strads fit mf --data ratings.parquet --coo user,item,rating \\
        --n-components 50 --alpha 0.1 --cluster slurm --jobs 4 --cores 8 --memory 32GB \\
        --walltime 02:00:00
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import math
import os
import shutil
import sys
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "MODELS",
    "Dataset",
    "build_parser",
    "check_before_cluster",
    "check_slurm",
    "lifetime_for",
    "load_data",
    "main",
    "make_cluster",
    "parse_duration",
    "prepare_fit",
    "program_name",
    "save_results",
]

# model name on the command line -> (module, class, needs a target y)
MODELS: dict[str, tuple[str, str, bool]] = {
    "lasso": ("dask_strads.lasso.estimator", "Lasso", True),
    "elasticnet": ("dask_strads.lasso.estimator", "ElasticNet", True),
    "lda": ("dask_strads.lda.estimator", "LDA", False),
    "mf": ("dask_strads.mf.estimator", "MatrixFactorization", False),
}
MODEL_ALIASES = {"elastic-net": "elasticnet", "matrix-factorization": "mf",
                 "matrixfactorization": "mf", "latentdirichletallocation": "lda"}

TABULAR = (".csv", ".parquet", ".pq", ".tsv")


# ============================================================================ durations
def parse_duration(text: str | float | int) -> float:
    """Seconds in a duration written as SLURM does (``[D-]HH:MM:SS``, ``MM:SS``, ``MM``) or
    with a unit (``90s``, ``55m``, ``2h``).

    >>> parse_duration("01:30:00"), parse_duration("1-00:00:00"), parse_duration("55m")
    (5400.0, 86400.0, 3300.0)
    """
    if isinstance(text, int | float):
        return float(text)
    s = str(text).strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if s and s[-1].lower() in units and ":" not in s:
            return float(s[:-1]) * units[s[-1].lower()]
        days = 0.0
        if "-" in s:
            d, s = s.split("-", 1)
            days = float(d)
        parts = [float(p) for p in s.split(":")]
    except ValueError:
        parts = []
    if not parts or len(parts) > 3 or any(p < 0 for p in parts):
        raise ValueError(f"duration: {text!r} is not a duration; expected [D-]HH:MM:SS, "
                         "MM:SS, minutes, or a number with a unit like 90s, 55m, 2h")
    if len(parts) == 1:  # SLURM: a bare number is minutes
        seconds = parts[0] * 60
    elif len(parts) == 2:  # MM:SS (or HH:MM after a day count, as SLURM reads it)
        seconds = parts[0] * 3600 + parts[1] * 60 if days else parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return days * 86400 + seconds


def _format_seconds(seconds: float) -> str:
    return f"{max(int(seconds), 1)}s"


def lifetime_for(walltime: str | float, margin: str | float | None = None,
                 stagger: str | float | None = None) -> tuple[str, str]:
    """``(--lifetime, --lifetime-stagger)`` worker arguments for a job of ``walltime``.

    Workers retire between ``walltime - margin - stagger`` and ``walltime - margin +
    stagger``. By default ``margin`` is 10% of the walltime, clamped to [20 s, 10 min],
    and ``stagger`` a third of the margin, so the latest retirement still comes a good
    while before SLURM kills the job and workers of one scale-up do not all leave at once.

    >>> lifetime_for("01:00:00")
    ('3240s', '120s')
    """
    wall = parse_duration(walltime)
    margin_s = (min(max(0.1 * wall, 20.0), 600.0) if margin is None
                else parse_duration(margin))
    stagger_s = margin_s / 3 if stagger is None else parse_duration(stagger)
    lifetime = wall - margin_s
    if lifetime <= stagger_s or lifetime - stagger_s < 5:
        raise ValueError(f"walltime: {walltime!r} is too short for a lifetime margin of "
                         f"{margin_s:.0f}s and stagger of {stagger_s:.0f}s; expected a "
                         "walltime longer than margin + stagger + 5s")
    if stagger_s >= margin_s:
        raise ValueError(f"lifetime_stagger: {stagger_s:.0f}s must be smaller than the "
                         f"margin {margin_s:.0f}s, or workers may outlive their job")
    return _format_seconds(lifetime), _format_seconds(stagger_s)


# ============================================================================ data
@dataclass
class Dataset:
    """A loaded data file: ``X`` (numpy, scipy.sparse or dask array) and optional ``y``."""

    X: Any
    y: Any = None
    source: str = ""

    @property
    def shape(self) -> tuple:
        return tuple(int(s) if not _isnan(s) else -1 for s in self.X.shape)


def _isnan(x) -> bool:
    try:
        return math.isnan(x)
    except TypeError:
        return False


def _column_index(target: str, n_cols: int) -> int:
    try:
        j = int(target)
    except ValueError:
        raise ValueError(f"target: {target!r} must be a column number for a matrix file "
                         f"(0..{n_cols - 1} or negative from the end)") from None
    if not -n_cols <= j < n_cols:
        raise ValueError(f"target: column {j} is out of range for {n_cols} columns")
    return j % n_cols


def _split_target_column(X, target: str):
    import scipy.sparse as sp

    j = _column_index(target, X.shape[1])
    keep = np.r_[0:j, j + 1:X.shape[1]]
    if sp.issparse(X):
        X = sp.csc_array(X)
        y = X[:, [j]].toarray().ravel()
        return sp.csr_array(X[:, keep]), y
    return np.ascontiguousarray(X[:, keep]), np.asarray(X[:, j]).copy()


_NPY_MAGIC = b"\x93NUMPY"


def _np_load(path: str, kind: str):
    """``numpy.load`` without pickles, with errors about the file rather than numpy's
    fallback (a file that is not .npy/.npz is tried as a pickle, and refused as one)."""
    with open(path, "rb") as fh:
        head = fh.read(len(_NPY_MAGIC))
    if kind == ".npz" and not zipfile.is_zipfile(path):
        raise ValueError(f"data: {path} is not a valid .npz file (not a zip archive: "
                         "truncated, or not written by numpy.savez)")
    if kind == ".npy" and head != _NPY_MAGIC:
        raise ValueError(f"data: {path} is not a valid .npy file (no numpy header: "
                         "truncated, or not written by numpy.save)")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"data: {path} could not be read as {kind}: {exc}") from None


def _npz_array(f, key: str, path: str) -> np.ndarray:
    try:
        return f[key]
    except ValueError as exc:  # object arrays are pickles, which are never loaded
        if "pickle" in str(exc):
            raise ValueError(f"data: array {key!r} in {path} holds Python objects, which are "
                             "not loaded (pickle); store it as numbers") from None
        raise ValueError(f"data: array {key!r} in {path} could not be read: {exc}") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"data: array {key!r} in {path} could not be read (corrupt "
                         f"file?): {exc}") from None


def _load_npz(path: str, target: str | None, need_target: bool) -> Dataset:
    import scipy.sparse as sp

    with _np_load(path, ".npz") as f:
        keys = list(f.keys())
        if {"format", "shape", "data"} <= set(keys):  # scipy.sparse.save_npz
            try:
                X = sp.load_npz(path)
            except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
                raise ValueError(f"data: {path} could not be read as a scipy.sparse .npz: "
                                 f"{exc}") from None
            if target is not None:
                X, y = _split_target_column(X, target)
                return Dataset(sp.csr_array(X), y, path)
            return Dataset(sp.csr_array(X), None, path)
        if "X" in keys:
            X = _npz_array(f, "X", path)
        elif len(keys) == 1 or (len(keys) == 2 and ("y" in keys or target in keys)):
            X = _npz_array(f, [k for k in keys if k not in ("y", target)][0], path)
        else:
            raise ValueError(f"data: {path} holds arrays {keys}; expected one named 'X' "
                             "(and 'y' or --target for the response)")
        y_key = target if target is not None else ("y" if "y" in keys else None)
        if y_key is not None and y_key not in keys:
            raise ValueError(f"target: {y_key!r} is not an array in {path} (it has {keys})")
        y = _npz_array(f, y_key, path) if y_key is not None else None
    if y is None and target is None and need_target:
        raise ValueError(f"data: {path} has no array 'y'; pass --target NAME")
    return Dataset(X, y, path)


def _load_tabular(path: str, target: str | None, coo: str | None):
    import dask.dataframe as dd

    lower = path.lower().rstrip("/")
    if lower.endswith((".csv", ".tsv")) or "*.csv" in lower:
        df = dd.read_csv(path, sep="\t" if lower.endswith(".tsv") else ",")
    else:
        df = dd.read_parquet(path)
    columns = list(df.columns)
    if coo is not None:
        names = [c.strip() for c in coo.split(",")]
        if len(names) != 3 or any(n not in columns for n in names):
            raise ValueError(f"coo: {coo!r} must name three columns ROW,COL,VALUE of {path} "
                             f"(it has {columns})")
        import scipy.sparse as sp

        frame = df[names].compute()
        rows = frame[names[0]].to_numpy()
        cols = frame[names[1]].to_numpy()
        if rows.size and (rows.min() < 0 or cols.min() < 0):
            raise ValueError(f"coo: row/column indices in {path} must be >= 0")
        shape = (int(rows.max()) + 1 if rows.size else 0, int(cols.max()) + 1 if cols.size else 0)
        X = sp.coo_array((frame[names[2]].to_numpy(dtype=np.float64),
                          (rows.astype(np.int64), cols.astype(np.int64))), shape=shape).tocsr()
        return Dataset(X, None, path)
    y = None
    if target is not None:
        if target not in columns:
            raise ValueError(f"target: {target!r} is not a column of {path} (it has {columns})")
        y = df[target].to_dask_array(lengths=True).astype(np.float64)
        df = df.drop(columns=[target])
    X = df.to_dask_array(lengths=True).astype(np.float64)
    return Dataset(X, y, path)


def load_data(path: str | os.PathLike, *, target: str | None = None, coo: str | None = None,
              need_target: bool = False) -> Dataset:
    """Load a data file for ``fit``.

    Parameters
    ----------
    path : str
        ``.npz`` (arrays ``X`` and ``y``, or a ``scipy.sparse.save_npz`` matrix), ``.npy``,
        Matrix Market ``.mtx`` (sparse), or ``.csv`` / ``.tsv`` / ``.parquet`` (files,
        globs or directories, read with ``dask.dataframe``; X becomes a dask array).
    target : str, optional
        The response: an array name in ``.npz``, a column name in tables, a column
        number in matrices (``-1``: the last column), removed from X.
    coo : str, optional
        For tables holding a sparse matrix as triplets: ``"ROW,COL,VALUE"`` column names
        (e.g. user, item, rating for matrix factorization).
    need_target : bool
        Whether the model needs ``y`` (regression).

    Returns
    -------
    Dataset
    """
    path = os.fspath(path)
    lower = path.lower().rstrip("/")
    is_table = lower.endswith(TABULAR) or os.path.isdir(path) or "*" in path
    if not is_table and not os.path.exists(path):
        raise FileNotFoundError(f"data: {path} does not exist")
    if coo is not None and not is_table:
        raise ValueError(f"coo: only applies to CSV/parquet tables, not {path}")
    if lower.endswith(".npz"):
        data = _load_npz(path, target, need_target)
    elif lower.endswith(".npy"):
        X = _np_load(path, ".npy")
        if X.ndim != 2:
            raise ValueError(f"data: {path} holds a {X.ndim}-d array; expected a 2-d matrix")
        data = Dataset(X, None, path)
        if target is not None:
            data = Dataset(*_split_target_column(X, target), path)
    elif lower.endswith((".mtx", ".mtx.gz")):
        import scipy.io
        import scipy.sparse as sp

        X = scipy.io.mmread(path)
        X = sp.csr_array(X) if sp.issparse(X) else np.asarray(X)
        data = Dataset(X, None, path)
        if target is not None:
            data = Dataset(*_split_target_column(X, target), path)
    elif is_table:
        data = _load_tabular(path, target, coo)
    else:
        raise ValueError(f"data: {path} has an unknown format; expected .npz, .npy, .mtx, "
                         ".csv, .tsv or .parquet")
    if need_target and data.y is None:
        raise ValueError(f"target: the model needs a response; {path} has none (pass "
                         "--target, or store an array 'y' in the .npz)")
    if data.y is not None and data.y.shape[0] != data.X.shape[0]:
        raise ValueError(f"target: {data.y.shape[0]} values for {data.X.shape[0]} rows of X")
    return data


# ============================================================================ clusters
@contextlib.contextmanager
def make_cluster(args: argparse.Namespace) -> Iterator[Any]:
    """A ``distributed.Client`` for the options in ``args`` (closed on exit; clusters that
    this function started are closed too, joined ones are left running)."""
    from distributed import Client, LocalCluster

    if args.scheduler_file or args.scheduler:
        kwargs = ({"scheduler_file": args.scheduler_file} if args.scheduler_file
                  else {"address": args.scheduler})
        with Client(**kwargs, timeout=args.wait_timeout) as client:
            if args.n_workers:
                client.wait_for_workers(args.n_workers, timeout=args.wait_timeout)
            yield client
        return
    if args.cluster == "local":
        n_workers = 2 if args.n_workers is None else args.n_workers
        with LocalCluster(n_workers=n_workers, threads_per_worker=args.cores or 1,
                          processes=True, host="127.0.0.1",
                          dashboard_address=args.dashboard_address,
                          memory_limit=args.memory or "auto") as cluster, \
                Client(cluster) as client:
            client.wait_for_workers(n_workers, timeout=args.wait_timeout)
            yield client
        return
    with slurm_cluster(args) as cluster, Client(cluster) as client:
        expected = args.jobs * args.processes
        print(f"waiting for {expected} worker(s) from {args.jobs} SLURM job(s)...",
              file=sys.stderr)
        client.wait_for_workers(expected, timeout=args.wait_timeout)
        yield client


def slurm_kwargs(args: argparse.Namespace) -> dict:
    """``SLURMCluster`` keyword arguments for the command line options."""
    worker_args = list(args.worker_extra_args or [])
    if args.lifetime != "none":
        if args.lifetime == "auto":
            lifetime, stagger = lifetime_for(args.walltime, args.lifetime_margin,
                                             args.lifetime_stagger)
        else:
            lifetime = _format_seconds(parse_duration(args.lifetime))
            stagger = _format_seconds(parse_duration(args.lifetime_stagger or 0))
        worker_args += ["--lifetime", lifetime, "--lifetime-stagger", stagger]
    kwargs: dict[str, Any] = {
        "cores": args.cores or 1,
        "processes": args.processes,
        "memory": args.memory or "4GB",
        "walltime": args.walltime,
        "worker_extra_args": worker_args,
        "scheduler_options": {"dashboard_address": args.dashboard_address},
    }
    if args.interface:
        kwargs["interface"] = args.interface
    for name in ("queue", "account", "log_directory", "local_directory", "python"):
        value = getattr(args, name)
        if value:
            kwargs[name] = value
    if args.job_extra:
        kwargs["job_extra_directives"] = list(args.job_extra)
    return kwargs


class SetupError(Exception):
    """This machine cannot run what the command line asks for (printed as one line)."""


def check_slurm(args: argparse.Namespace) -> dict:
    """The ``SLURMCluster`` arguments, once dask-jobqueue and SLURM's ``sbatch`` are known
    to be there: without them a cluster would submit nothing and wait ``--wait-timeout``
    seconds for workers that never come."""
    kwargs = slurm_kwargs(args)  # walltime / lifetime errors first: they are the user's
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError:
        raise SetupError("--cluster slurm needs dask-jobqueue: "
                         "pip install 'dask-strads[slurm]'") from None
    if shutil.which("sbatch") is None:
        raise SetupError("--cluster slurm: 'sbatch' is not on PATH; SLURM is not installed "
                         "on this machine (run on a SLURM login node, or use --cluster local)")
    return kwargs


@contextlib.contextmanager
def slurm_cluster(args: argparse.Namespace) -> Iterator[Any]:
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise SetupError("--cluster slurm needs dask-jobqueue: "
                         "pip install 'dask-strads[slurm]'") from None
    with SLURMCluster(**slurm_kwargs(args)) as cluster:
        # min = max: the job count is held at --jobs; retired (lifetime) or cancelled
        # jobs are replaced, and adapt never shrinks the cluster under a fit
        cluster.adapt(minimum_jobs=args.jobs, maximum_jobs=args.jobs)
        yield cluster


# ============================================================================ models
def _model_name(text: str) -> str:
    key = text.lower().replace("_", "")
    key = MODEL_ALIASES.get(key, key)
    if key not in MODELS:
        raise ValueError(f"model: {text!r} is not a model; expected one of {sorted(MODELS)}")
    return key


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def model_params(args: argparse.Namespace) -> dict:
    """Estimator parameters given on the command line (only those set)."""
    params = {}
    for name in ("alpha", "l1_ratio", "n_components", "max_iter", "tol", "random_state",
                 "staleness"):
        value = getattr(args, name)
        if value is not None:
            params[name] = value
    for item in args.set or []:
        if "=" not in item:
            raise ValueError(f"set: {item!r} must look like NAME=VALUE")
        key, value = item.split("=", 1)
        params[key.strip().replace("-", "_")] = _parse_value(value)
    return params


def make_estimator(model: str, params: dict, client: Any = None) -> Any:
    """Import the estimator class lazily and build it (errors name the bad parameter)."""
    module, cls_name, _ = MODELS[_model_name(model)]
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"model: {model!r} is not available in this installation "
                         f"({module}.{cls_name}: {exc})") from None
    accepted = inspect.signature(cls).parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    unknown = [k for k in params if k not in accepted and not takes_kwargs]
    if unknown:
        raise ValueError(f"{unknown[0]}: {cls_name} has no parameter {unknown[0]!r}; "
                         f"expected one of {sorted(accepted)}")
    kwargs = dict(params)
    if client is not None and "client" in accepted:
        kwargs["client"] = client
    if "progress" in accepted and "progress" not in kwargs:
        kwargs["progress"] = sys.stderr.isatty()
    return cls(**kwargs)


def _parameter_error(exc: Exception) -> str:
    """scikit-learn's "The 'alpha' parameter of Lasso must be ..." as "alpha: ..."."""
    import re

    text = str(exc)
    match = re.match(r"The '(\w+)' parameter of \w+ (.*)", text, re.S)
    return f"{match.group(1)}: {match.group(2)}" if match else text


def _check_values(values: Any, name: str) -> None:
    """Numbers, all finite, for data held in memory (dask arrays are checked by the
    estimator on the cluster, where their chunks are)."""
    import scipy.sparse as sp

    if values is None or hasattr(values, "dask"):
        return
    stored = values.data if sp.issparse(values) else np.asarray(values)
    if stored.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected numbers, got dtype {stored.dtype}")
    if stored.dtype.kind == "f" and not np.isfinite(stored).all():
        raise ValueError(f"{name}: contains NaN or infinity")


def check_before_cluster(model: str, estimator: Any, data: Dataset) -> None:
    """Everything about a fit that can fail without a cluster: the estimator's parameters
    and the values of in-memory data. ``fit`` calls it before it starts or joins one,
    so that a typo costs no cluster start (nor, on SLURM, a job queue).

    Raises
    ------
    ValueError, TypeError
        Naming the parameter or the array.
    """
    from sklearn.utils._param_validation import InvalidParameterError

    try:
        if hasattr(estimator, "_check_params"):
            estimator._check_params()
        elif hasattr(estimator, "_parameter_constraints"):
            estimator._validate_params()
    except InvalidParameterError as exc:
        raise ValueError(_parameter_error(exc)) from None
    _check_values(data.X, "X")
    _check_values(data.y, "y")
    if hasattr(data.X, "dask"):
        return
    # the models' own checks of in-memory data (counts, observed entries), as fit runs them
    model = _model_name(model)
    if model == "lda":
        from dask_strads.lda.estimator import _csr_counts

        _csr_counts(data.X, "X")
    elif model == "mf":
        from dask_strads.mf.estimator import _observed_matrix

        _observed_matrix(data.X, "X")


# ============================================================================ results
def _to_savable(name: str, value: Any) -> dict[str, np.ndarray]:
    import scipy.sparse as sp

    if isinstance(value, bool | int | float | np.number | np.bool_):
        return {name: np.asarray(value)}
    if isinstance(value, str):
        return {name: np.asarray(value)}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {name: value}
    if sp.issparse(value):
        coo = sp.coo_array(value)
        return {f"{name}.row": coo.row, f"{name}.col": coo.col, f"{name}.data": coo.data,
                f"{name}.shape": np.asarray(coo.shape)}
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover
        pd = None
    if pd is not None and isinstance(value, pd.DataFrame):
        out = {}
        for col in value.columns:
            arr = value[col].to_numpy()
            if arr.dtype == object:
                arr = arr.astype(str)
            out[f"{name}.{col}"] = arr
        return out
    if hasattr(value, "compute") and hasattr(value, "dtype"):  # a lazy dask array
        return _to_savable(name, np.asarray(value.compute()))
    return {}


def fitted_arrays(estimator: Any) -> dict[str, np.ndarray]:
    """Every public fitted attribute (``name_``) that can be stored without pickle."""
    out: dict[str, np.ndarray] = {}
    for name, value in sorted(vars(estimator).items()):
        if name.endswith("_") and not name.startswith("_"):
            out.update(_to_savable(name, value))
    return out


def save_results(path: str | os.PathLike, estimator: Any, meta: dict) -> str:
    """Write the fitted attributes and a JSON ``meta`` record to ``path`` (.npz, no pickle)."""
    arrays = fitted_arrays(estimator)
    arrays["meta"] = np.asarray(json.dumps(meta, default=str))
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)
    return path


def summary(model: str, estimator: Any, data: Dataset, seconds: float, n_workers: int) -> dict:
    """A small record of the fit, printed and stored as ``meta`` in the output."""
    info: dict[str, Any] = {
        "model": model,
        "estimator": type(estimator).__name__,
        "data": data.source,
        "shape": list(data.shape),
        "n_workers": n_workers,
        "fit_seconds": round(seconds, 3),
        "params": {k: v for k, v in estimator.get_params().items() if k != "client"}
        if hasattr(estimator, "get_params") else {},
    }
    for attr in ("n_iter_", "stop_reason_"):
        if hasattr(estimator, attr):
            value = getattr(estimator, attr)
            info[attr.rstrip("_")] = value.item() if hasattr(value, "item") else value
    history = getattr(estimator, "history_", None)
    if history is not None and "objective" in getattr(history, "columns", ()):
        obj = history["objective"].dropna()
        if len(obj):
            info["objective"] = float(obj.iloc[-1])
    coef = getattr(estimator, "coef_", None)
    if coef is not None:
        info["nonzero_coef"] = int(np.count_nonzero(np.asarray(coef)))
    return info


# ============================================================================ parser
DEFAULT_PROG = "python -m dask_strads"


def program_name(argv0: str | None = None) -> str:
    """How the user ran us: ``dask-strads`` (the script) or ``python -m dask_strads``."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else argv0
    name = os.path.basename(argv0 or "")
    return name if name.startswith("dask-strads") else DEFAULT_PROG


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line: ``fit``'s usage is long, and the error is what matters."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (options: {self.prog} --help)\n")


class _HelpFormatter(argparse.HelpFormatter):
    """Shows an option's default where it has one (no "(default: None)")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" in text or not action.option_strings
                or action.default in (None, False, argparse.SUPPRESS)):
            return text
        return f"{text} (default: %(default)s)"


class _CommandsHelpFormatter(argparse.RawDescriptionHelpFormatter, _HelpFormatter):
    """The top-level help keeps its examples' line breaks."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    prog = prog or program_name()
    parser = _Parser(
        prog=prog, formatter_class=_CommandsHelpFormatter,
        description="STRADS-style model-parallel fits on dask.distributed.",
        epilog=f"examples:\n  {prog} demo\n  {prog} fit lasso --data train.npz --alpha 0.01 "
               f"--output lasso.npz\n\n'{prog} COMMAND --help' shows a command's options.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands")

    demo = sub.add_parser("demo", help="run the demonstration on an embedded LocalCluster",
                          add_help=False)
    demo.add_argument("demo_args", nargs=argparse.REMAINDER,
                      help="arguments passed on to the demo (see `demo --help`)")

    fit = sub.add_parser(
        "fit", help="fit a model to a data file",
        description="Fit MODEL to a data file on a local or SLURM cluster and save the "
                    "fitted attributes to an .npz file. The data and the model's parameters "
                    "are checked before any cluster is started.",
        formatter_class=_HelpFormatter)
    fit.add_argument("model", help=f"one of {', '.join(MODELS)}")
    g = fit.add_argument_group("data")
    g.add_argument("--data", required=True,
                   help=".npz/.npy, Matrix Market .mtx, or CSV/parquet (dask.dataframe)")
    g.add_argument("--target", help="response: .npz array name, table column name, "
                                    "or matrix column number (-1 = last)")
    g.add_argument("--coo", metavar="ROW,COL,VALUE",
                   help="table columns holding a sparse matrix as triplets")
    g = fit.add_argument_group("model (only the options given are passed on; the "
                               "estimator's defaults hold for the rest)")
    g.add_argument("--alpha", type=float, help="regularisation (Lasso, ElasticNet, MF)")
    g.add_argument("--l1-ratio", type=float, help="ElasticNet mixing")
    g.add_argument("--n-components", type=int, help="topics (LDA) or rank (MF)")
    g.add_argument("--max-iter", type=int,
                   help="Lasso/ElasticNet: passes over the features; LDA: sampling sweeps; "
                        "MF: outer CCD++ iterations")
    g.add_argument("--tol", type=float,
                   help="stopping tolerance (Lasso/ElasticNet: duality gap; MF: relative "
                        "change of the objective)")
    g.add_argument("--random-state", type=int, help="seed, for a reproducible fit")
    g.add_argument("--staleness", type=int, help="rounds in flight beyond the first")
    g.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="any other estimator parameter (JSON value), repeatable")
    g = fit.add_argument_group("cluster")
    g.add_argument("--cluster", choices=("local", "slurm"), default="local",
                   help="start a LocalCluster on this machine, or workers as SLURM jobs "
                        "(ignored with --scheduler/--scheduler-file)")
    g.add_argument("--scheduler-file", help="join the cluster of this scheduler file")
    g.add_argument("--scheduler", help="join the cluster at this scheduler address")
    g.add_argument("--n-workers", type=_positive_int,
                   help="local: workers to start (default 2); joined: workers to wait for")
    g.add_argument("--jobs", type=_positive_int, default=2, help="slurm: jobs to keep running")
    g.add_argument("--cores", type=_positive_int,
                   help="slurm: cores per job (default 1); local: threads per worker "
                        "(default 1)")
    g.add_argument("--processes", type=_positive_int, default=1,
                   help="slurm: worker processes per job")
    g.add_argument("--memory", help="slurm: memory per job (e.g. 8GB, default 4GB); local: "
                                    "per worker (default: shared out)")
    g.add_argument("--walltime", default="01:00:00", help="slurm: job time limit")
    g.add_argument("--lifetime", default="auto",
                   help="slurm: worker --lifetime; 'auto' = walltime minus a margin, 'none'")
    g.add_argument("--lifetime-margin", help="slurm: margin before the walltime "
                                             "(default 10%% of it, within 20s..10min)")
    g.add_argument("--lifetime-stagger", help="slurm: --lifetime-stagger (default margin/3)")
    g.add_argument("--queue", help="slurm: partition (-p)")
    g.add_argument("--account", help="slurm: account (-A)")
    g.add_argument("--interface", help="network interface for scheduler and workers (site "
                                       "specific: e.g. ib0; lo for a single-machine SLURM)")
    g.add_argument("--job-extra", action="append",
                   help="extra #SBATCH directive, repeatable (--job-extra=--exclusive)")
    g.add_argument("--worker-extra-args", action="append", help="extra dask-worker argument")
    g.add_argument("--log-directory", help="slurm: directory for job stdout/stderr")
    g.add_argument("--local-directory", help="worker scratch directory")
    g.add_argument("--python", help="slurm: python executable on the compute nodes")
    g.add_argument("--dashboard-address", default=":0", help="dashboard (':0' = any port)")
    g.add_argument("--wait-timeout", type=_positive_float, default=600.0,
                   help="seconds to wait for workers to connect")
    g = fit.add_argument_group("output")
    g.add_argument("--output", "-o", help="write the fitted attributes here (.npz)")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


# ============================================================================ commands
def run_demo(argv: Sequence[str], prog: str = DEFAULT_PROG) -> int:
    from dask_strads.demo import main as demo_main

    result = (demo_main(list(argv)) if prog == DEFAULT_PROG
              else demo_main(list(argv), prog=f"{prog} demo"))
    return int(result or 0)


def prepare_fit(args: argparse.Namespace) -> tuple[str, Dataset, Any]:
    """``(model, data, estimator)``, every check that needs no cluster passed."""
    model = _model_name(args.model)
    _, _, needs_target = MODELS[model]
    params = model_params(args)
    # everything that can fail is checked before a cluster exists: a typo must not cost
    # a cluster start, nor on SLURM a wait in the queue for workers
    if args.cluster == "slurm" and not (args.scheduler or args.scheduler_file):
        check_slurm(args)
    data = load_data(args.data, target=args.target, coo=args.coo, need_target=needs_target)
    estimator = make_estimator(model, params)
    check_before_cluster(model, estimator, data)
    return model, data, estimator


def run_fit(args: argparse.Namespace, prepared: tuple[str, Dataset, Any] | None = None) -> int:
    model, data, estimator = prepared or prepare_fit(args)
    needs_target = MODELS[model][2]
    with make_cluster(args) as client:
        if "client" in inspect.signature(type(estimator)).parameters:
            estimator.set_params(client=client)
        from dask_strads.engine.cluster import workers_of

        n_workers = len(workers_of(client))
        print(f"fitting {type(estimator).__name__} on {data.source} {data.shape} with "
              f"{n_workers} worker(s)", file=sys.stderr)
        start = time.perf_counter()
        with _as_default(client):
            if needs_target:
                estimator.fit(data.X, data.y)
            else:
                estimator.fit(data.X)
        seconds = time.perf_counter() - start
    info = summary(model, estimator, data, seconds, n_workers)
    if args.output:
        info["output"] = save_results(args.output, estimator, info)
    if args.json:
        print(json.dumps(info, default=str))
    else:
        width = max(len(k) for k in info)
        for key, value in info.items():
            if key != "params":
                print(f"{key:<{width}}  {value}")
    return 0


@contextlib.contextmanager
def _as_default(client: Any) -> Iterator[None]:
    """Make ``client`` the default for estimators that take no ``client=`` argument."""
    with client.as_current():
        yield


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m dask_strads`` and of the ``dask-strads`` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = program_name()
    if argv and argv[0] == "demo":  # pass every demo argument through, --help included
        return run_demo(argv[1:], prog)
    parser = build_parser(prog)
    if not argv:  # the commands and examples, rather than "required: command"
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    error = f"{parser.prog} fit: error: {{}}\n"
    try:
        prepared = prepare_fit(args)
    except (ValueError, TypeError, FileNotFoundError) as exc:  # the user's input
        parser.exit(2, error.format(exc))
    except SetupError as exc:  # this machine
        parser.exit(1, error.format(exc))
    try:
        return run_fit(args, prepared)
    except (ValueError, FileNotFoundError) as exc:
        parser.exit(2, error.format(exc))
    return 1  # pragma: no cover
