"""Data files for ``fit``: ``.npz``, ``.npy``, Matrix Market and tables (CSV, parquet)."""

from __future__ import annotations

import glob
import math
import os
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

TABULAR = (".csv", ".parquet", ".pq", ".tsv")

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


def _table_kind(path: str) -> str:
    lower = path.lower().rstrip("/")
    if lower.endswith(".tsv"):
        return "tsv"
    return "csv" if lower.endswith(".csv") else "parquet"


def _load_tabular(path: str | list[str], target: str | None, coo: str | None):
    """A table read with dask.dataframe from ``path``: a file, glob or directory, or a
    list of files of one kind (read as one table)."""
    import dask.dataframe as dd

    from dask_strads.cd.inputs import frame_to_array

    paths = [path] if isinstance(path, str) else path
    kinds = {_table_kind(p) for p in paths}
    if len(kinds) > 1:
        raise ValueError(f"data: {len(paths)} files are read as one table only when they "
                         f"are of one kind (CSV, TSV or parquet); got {sorted(kinds)}")
    kind = kinds.pop()
    if kind == "parquet":
        df = dd.read_parquet(path)
    else:
        df = dd.read_csv(path, sep="\t" if kind == "tsv" else ",")
    path = _source(path)
    columns = list(df.columns)
    if coo is not None:
        names = [c.strip() for c in coo.split(",")]
        if len(names) != 3 or any(n not in columns for n in names):
            raise ValueError(f"coo: {coo!r} must name three columns ROW,COL,VALUE of {path} "
                             f"(it has {columns})")
        import scipy.sparse as sp

        frame = df[names].compute()
        rows = _coo_indices(frame[names[0]], path)
        cols = _coo_indices(frame[names[1]], path)
        shape = (int(rows.max()) + 1 if rows.size else 0, int(cols.max()) + 1 if cols.size else 0)
        # COO, duplicates kept: the model sums them (counts) or rejects them (ratings)
        X = sp.coo_array((frame[names[2]].to_numpy(dtype=np.float64), (rows, cols)),
                         shape=shape)
        return Dataset(X, None, path)
    y = None
    if target is not None:
        if target not in columns:
            raise ValueError(f"target: {target!r} is not a column of {path} (it has {columns})")
        column = _numeric(df[[target]], "target", path)[target]
        y = frame_to_array(column).astype(np.float64)
        df = df.drop(columns=[target])
    X = frame_to_array(_numeric(df, "data", path)).astype(np.float64)
    return Dataset(X, y, path)


def _numeric(frame, name: str, path: str):
    """``numeric_columns``, but a table with no rows (whose columns read as text) says
    that instead."""
    from dask_strads.cd.inputs import numeric_columns

    try:
        return numeric_columns(frame, name)
    except TypeError:
        if len(frame) == 0:
            raise ValueError(f"data: {path} has no rows") from None
        raise


def _files_in_folder(folder: str) -> str:
    """A folder of CSV or TSV files as a glob of them; any other folder as it is (a
    parquet dataset)."""
    names = [n for n in os.listdir(folder) if not n.startswith((".", "_"))]
    for suffix in (".csv", ".tsv"):
        if names and all(n.lower().endswith(suffix) for n in names):
            return os.path.join(folder, "*" + suffix)
    return folder


def _coo_indices(column, path: str) -> np.ndarray:
    """A --coo row or column index column as int64: whole numbers >= 0."""
    values = column.to_numpy()
    if values.dtype.kind not in "iuf":
        raise TypeError(f"coo: column {column.name!r} of {path} holds {values.dtype} values; "
                        "expected whole-number indices")
    whole = np.isfinite(values) & (values == np.floor(values)) & (values >= 0)
    if not whole.all():
        bad = values[~whole][0].item()
        raise ValueError(f"coo: column {column.name!r} of {path} holds {bad!r}; expected "
                         "whole-number indices >= 0")
    return values.astype(np.int64)


def _source(path: str | list[str]) -> str:
    """How messages name the data: a path, or the first of several and their number."""
    if isinstance(path, str):
        return path
    return path[0] if len(path) == 1 else f"{path[0]} and {len(path) - 1} more"


def load_data(path, *, target: str | None = None, coo: str | None = None,
              need_target: bool = False) -> Dataset:
    """Load a data file for ``fit``.

    Parameters
    ----------
    path : str, os.PathLike or a list of them
        ``.npz`` (arrays ``X`` and ``y``, or a ``scipy.sparse.save_npz`` matrix), ``.npy``,
        Matrix Market ``.mtx`` (sparse), or ``.csv`` / ``.tsv`` / ``.parquet`` (files,
        globs or directories, read with ``dask.dataframe``; X becomes a dask array). A
        list of several paths (a glob the shell expanded) is read as one table.
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
    paths = [os.fspath(p) for p in
             ([path] if isinstance(path, (str, os.PathLike)) else path)]
    if not paths:
        raise ValueError("data: no path given")
    if len(paths) > 1:
        data = _load_tables(paths, target, coo)
    else:
        data = _load_file(paths[0], target, coo, need_target)
    if need_target and data.y is None:
        raise ValueError(f"target: the model needs a response; {data.source} has none "
                         "(pass --target, or store an array 'y' in the .npz)")
    if data.y is not None and data.y.shape[0] != data.X.shape[0]:
        raise ValueError(f"target: {data.y.shape[0]} values for {data.X.shape[0]} rows of X")
    return data


def _load_tables(paths: list[str], target: str | None, coo: str | None) -> Dataset:
    """Several files (a glob the shell expanded) read as one table."""
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"data: {missing[0]} does not exist")
    if not all(p.lower().rstrip("/").endswith(TABULAR) for p in paths):
        raise ValueError(f"data: {len(paths)} paths given; several are read as one table "
                         "only when all are CSV, TSV or parquet files")
    return _load_tabular(paths, target, coo)


def _load_file(path: str, target: str | None, coo: str | None,
               need_target: bool) -> Dataset:
    lower = path.lower().rstrip("/")
    is_table = lower.endswith(TABULAR) or os.path.isdir(path) or "*" in path
    if "*" in path:
        matches = sorted(glob.glob(path))
        if not matches:
            raise FileNotFoundError(f"data: no file matches {path}")
        if all(_table_kind(m) != "parquet" for m in matches):
            return _load_tabular(matches, target, coo)  # CSV files, however named
    elif not os.path.exists(path):
        raise FileNotFoundError(f"data: {path} does not exist")
    if os.path.isdir(path):
        path = _files_in_folder(path)
    if coo is not None and not is_table:
        raise ValueError(f"coo: only applies to CSV/parquet tables, not {path}")
    if lower.endswith(".npz"):
        return _load_npz(path, target, need_target)
    if lower.endswith(".npy"):
        X = _np_load(path, ".npy")
        if X.ndim != 2:
            raise ValueError(f"data: {path} holds a {X.ndim}-d array; expected a 2-d matrix")
    elif lower.endswith((".mtx", ".mtx.gz")):
        import scipy.io
        import scipy.sparse as sp

        try:
            X = scipy.io.mmread(path)
        except ValueError as exc:
            raise ValueError(f"data: {path} is not a valid Matrix Market file ({exc})") from None
        X = sp.csr_array(X) if sp.issparse(X) else np.asarray(X)
    elif is_table:
        return _load_tabular(path, target, coo)
    else:
        raise ValueError(f"data: {path} has an unknown format; expected .npz, .npy, .mtx, "
                         ".csv, .tsv or .parquet")
    if target is not None:
        return Dataset(*_split_target_column(X, target), path)
    return Dataset(X, None, path)
