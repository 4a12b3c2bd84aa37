"""Inputs of the coordinate-descent estimators: validation that names the argument at
fault, and ``X`` cut into column blocks (shards) where it lives: on the client for
numpy / scipy / pydata sparse input, on the cluster for dask collections (never
gathered to the client)."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_array

from dask_strads.cd.finite import chunk_is_finite
from dask_strads.cd.shards import ColumnsAsGiven, column_means, dense_shards


def _is_dask_collection(x) -> bool:
    return hasattr(x, "__dask_graph__") and callable(x.__dask_graph__)


def _is_dataframe(x) -> bool:
    return _is_dask_collection(x) and hasattr(x, "columns") and hasattr(x, "to_dask_array")


def numeric_columns(frame, name: str):
    """``frame`` with real numbers in every column, as float64 where pandas' nullable
    types hold them (a missing value becomes NaN, which the fit reports as any NaN); a
    TypeError naming ``name`` and the columns that hold anything else (read from its
    dtypes, not its data)."""

    def numpy_real(t):
        try:
            return np.dtype(t).kind in "biuf"
        except TypeError:  # pandas extension dtypes: nullable numbers, strings, ...
            return False

    bad = [c for c, t in frame.dtypes.items() if not _real_numbers(t)]
    if bad:
        raise TypeError(f"{name}: columns {bad} are not real numeric (dtypes "
                        f"{[str(frame.dtypes[c]) for c in bad]})")
    nullable = [c for c, t in frame.dtypes.items() if not numpy_real(t)]
    return frame.astype({c: "float64" for c in nullable}) if nullable else frame


def _real_numbers(dtype) -> bool:
    """Whether a pandas column of ``dtype`` holds real numbers: numpy's, pandas' nullable
    ones (read as float64, a missing value as NaN) or booleans."""
    import pandas as pd

    return (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)) \
        and not pd.api.types.is_complex_dtype(dtype)


def frame_to_array(frame):
    """A dask DataFrame or Series as a dask array of known chunk sizes. dask may read a
    projection of a parquet dataset in fewer partitions than the frame has, and count
    the rows of other partitions than the array's (dask/dask#12411): counts that do not
    come from the frame's own partitions are taken from the array's blocks instead (a
    read of the projected columns)."""
    array = frame.to_dask_array()
    lengths = tuple(frame.map_partitions(len).compute())
    if len(lengths) == array.numblocks[0] == frame.npartitions:
        return frame.to_dask_array(lengths=lengths)
    return array.compute_chunk_sizes()


def _is_pydata_sparse(x) -> bool:
    return type(x).__module__.split(".")[0] == "sparse" and hasattr(x, "to_scipy_sparse")


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
    # where the client has them (else None): the squared norms of the blocks' columns
    # and X'y, as the blocks use them (not centred)
    col_sq: np.ndarray | None = None
    xty: np.ndarray | None = None


def _block_starts(n_features: int, n_blocks: int) -> np.ndarray:
    n_blocks = max(1, min(n_blocks, n_features))
    return np.linspace(0, n_features, n_blocks + 1).round().astype(np.int64)


def _local_shards(X, starts, centre: bool) -> dict:
    """Column blocks of ``X`` as the blocks use them: CSC, or dense Fortran, centred
    with ``centre`` (the means taken here, once, so that a block maps its shard where
    the client wrote it rather than centring a copy of its own); dense columns that are
    not Fortran float64, or centred, are laid out where they go."""
    blocks = range(len(starts) - 1)
    if sp.issparse(X):
        X = sp.csc_matrix(X)
        return {b: _csc_columns(X, starts[b], starts[b + 1]) for b in blocks}
    columns = [X[:, starts[b]:starts[b + 1]] for b in blocks]
    if not centre:
        if X.dtype == np.float64 and X.flags.f_contiguous:
            return dict(zip(blocks, columns))
        return {b: ColumnsAsGiven(cols) for b, cols in zip(blocks, columns)}
    # the blocks' means at once (numpy lets go of the GIL while it sums)
    with ThreadPoolExecutor(min(len(blocks), os.cpu_count() or 1)) as pool:
        means = pool.map(column_means, columns)
        return {b: ColumnsAsGiven(cols, m) for b, cols, m in zip(blocks, columns, means)}


def _csc_columns(X, start: int, stop: int):
    """Columns ``start:stop`` of a CSC matrix, cut from ``X``'s arrays (scipy's column
    slicing goes through a general submatrix routine, much slower; this is a slice, or a
    plain copy when scipy prunes a small view of a large array)."""
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
        import pandas as pd

        def numbers(i: int, dtype) -> bool:
            if pd.api.types.is_object_dtype(dtype):  # numbers scikit-learn converts
                return not any(isinstance(v, str | bytes) for v in data.iloc[:, i])
            return _real_numbers(dtype)

        bad = [col for i, (col, dtype) in enumerate(data.dtypes.items())
               if not numbers(i, dtype)]
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
    if "feature names" in str(exc).lower():  # X's column names
        return "X"
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
        X = frame_to_array(numeric_columns(X, "X"))
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
        y = frame_to_array(y)
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
        if getattr(est, "_numeric_target", True):  # class labels are the classifier's
            if y.dtype.kind not in "biuf":
                raise TypeError(f"y: expected a real numeric dtype, got {y.dtype}")
            y = y.astype(np.float64)
            if not np.isfinite(y).all():
                raise ValueError("y: contains NaN or infinity")
    return X, y, feature_names


def _prepare_dask(X, y, client, n_blocks, target=None, centre: bool = False) -> _Prepared:
    """Cut ``X`` into column blocks on the cluster: sparse chunks become the shards as
    they are, dense blocks are made Fortran (and centred with ``centre``) piece by piece
    (:func:`~dask_strads.cd.shards.dense_shards`). ``target`` checks and converts ``y``
    once it is on the client (before ``X`` moves)."""
    from distributed import futures_of

    n, p = X.shape
    if _is_dask_collection(y):
        y = np.asarray(client.compute(y).result())
        if y.shape[0] != n:
            raise ValueError(f"y: {y.shape[0]} samples, but X has {n}")
        if target is not None:
            y = target(y)
        y = np.asarray(y, dtype=np.float64)
        if not np.isfinite(y).all():
            raise ValueError("y: contains NaN or infinity")
    starts = _block_starts(p, n_blocks)
    if X.dtype != np.float64:
        X = X.astype(np.float64)
    meta = X._meta
    is_sparse = sp.issparse(meta) or _is_pydata_sparse(meta)
    if is_sparse:
        X = client.persist(X.rechunk({0: -1, 1: tuple(np.diff(starts).tolist())}))
        by_key = {f.key: f for f in futures_of(X)}
        keys = X.__dask_keys__()
        shards = {b: by_key[keys[0][b]] for b in range(len(starts) - 1)}
    else:
        shards = dense_shards(client, X, starts, centre)
    finite = client.gather([client.submit(chunk_is_finite, f, pure=False)
                            for f in shards.values()])
    if not all(finite):
        raise ValueError("X: contains NaN or infinity")
    return _Prepared(shards, starts, y, n, p, is_sparse, -1)


def _prepare_local(X, y, n_blocks, centre: bool = False,
                   stats: tuple | None = None) -> _Prepared:
    """``stats``: the squared norms of ``X``'s columns and ``X' y``, if known (of ``X``
    as it is: a fit that centres its columns has its blocks take their own)."""
    n, p = X.shape
    starts = _block_starts(p, n_blocks)
    nnz = X.nnz if sp.issparse(X) else n * p
    col_sq, xty = (None, None) if centre or stats is None else stats
    return _Prepared(_local_shards(X, starts, centre), starts,
                     np.asarray(y, dtype=np.float64), n, p, sp.issparse(X), nnz, col_sq, xty)
