"""The observed entries of a matrix factorisation: in-memory inputs (sparse matrices,
``(rows, cols, values)``, dataframes) as a validated CSR, and dask inputs as triples
checked on the workers, the ratings' shards made there. Errors name the argument."""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from dask_strads.mf.shards import build_shard

_ROW_NAMES = ("row", "rows", "user", "i")
_COL_NAMES = ("col", "cols", "column", "columns", "item", "j")
_VALUE_NAMES = ("value", "values", "rating", "data", "a")


def _is_dask_collection(X) -> bool:
    try:
        import dask

        return dask.is_dask_collection(X)
    except ImportError:  # pragma: no cover - dask is a dependency
        return False


def _frame_columns(columns, name: str) -> tuple:
    """(row, column, value) column names of a frame of observed entries."""
    cols = list(columns)
    lower = {str(c).lower(): c for c in cols}
    picked = []
    for options in (_ROW_NAMES, _COL_NAMES, _VALUE_NAMES):
        found = [lower[o] for o in options if o in lower]
        picked.append(found[0] if found else None)
    if all(p is not None for p in picked):
        return tuple(picked)
    if len(cols) == 3:
        return tuple(cols)
    raise ValueError(
        f"{name}: expected a dataframe with row, column and value columns (named e.g. "
        f"'row', 'col', 'value', or exactly three columns in that order), got columns {cols}"
    )


def _triple_from_frame(frame: pd.DataFrame, columns: tuple) -> tuple:
    r, c, v = columns
    return (frame[r].to_numpy(), frame[c].to_numpy(), frame[v].to_numpy())


def _triple_from_chunk(chunk, row_offset: int, col_offset: int) -> tuple:
    """Observed entries of one sparse chunk, in global coordinates."""
    if sp.issparse(chunk):
        coo = sp.coo_matrix(chunk)
        return (coo.row.astype(np.int64) + row_offset, coo.col.astype(np.int64) + col_offset,
                coo.data.astype(np.float64))
    coords = chunk.coords
    return (np.asarray(coords[0], dtype=np.int64) + row_offset,
            np.asarray(coords[1], dtype=np.int64) + col_offset,
            np.asarray(chunk.data, dtype=np.float64))


def _memory_triple(X, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple | None]:
    """``(rows, cols, values, shape or None)`` of an in-memory input of observed entries."""
    if sp.issparse(X):
        if X.ndim != 2:
            raise ValueError(f"{name}: expected a 2-d sparse matrix, got ndim={X.ndim}")
        coo = X.tocoo()
        return coo.row, coo.col, coo.data, tuple(X.shape)
    if type(X).__module__.startswith("sparse"):
        if X.ndim != 2:
            raise ValueError(f"{name}: expected a 2-d sparse array, got ndim={X.ndim}")
        if hasattr(X, "tocoo") and not hasattr(X, "coords"):
            X = X.tocoo()
        if X.fill_value != 0:
            raise ValueError(f"{name}: expected a sparse.COO with fill_value 0, got "
                             f"fill_value={X.fill_value!r}")
        r, c, v = _triple_from_chunk(X, 0, 0)
        return r, c, v, tuple(X.shape)
    if isinstance(X, pd.DataFrame):
        r, c, v = _triple_from_frame(X, _frame_columns(X.columns, name))
        return r, c, v, None
    if isinstance(X, tuple) and len(X) == 3:
        r, c, v = (np.asarray(a) for a in X)
        if not (r.ndim == c.ndim == v.ndim == 1 and len(r) == len(c) == len(v)):
            raise ValueError(f"{name}: expected (rows, cols, values) of equal-length 1-d arrays, "
                             f"got shapes {r.shape}, {c.shape}, {v.shape}")
        return r, c, v, None
    if isinstance(X, np.ndarray):
        raise TypeError(f"{name}: a dense numpy array does not say which entries are observed; "
                        "pass a scipy.sparse matrix, a sparse.COO, (rows, cols, values) or a "
                        "dataframe of (row, column, value)")
    raise TypeError(f"{name}: expected scipy.sparse, sparse.COO, dask.array with sparse chunks, "
                    f"(rows, cols, values) or a (dask) dataframe, got {type(X).__name__}")


def _check_value_dtype(dtype, name: str, what: str = "values") -> None:
    """Observed values must be real numbers: no strings, objects or complex numbers
    (a silent cast would drop the imaginary part or parse text)."""
    dtype = np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype
    if dtype.kind == "c":
        raise TypeError(f"{name}: complex {what} (dtype {dtype}) are not supported; expected "
                        "real numbers")
    if dtype.kind not in "biuf":
        raise TypeError(f"{name}: {what} must be numeric, got dtype {dtype}")


def _real_values(values, name: str, what: str = "values") -> np.ndarray:
    values = np.asarray(values)
    _check_value_dtype(values.dtype, name, what)
    return values.astype(np.float64, copy=False)


def _check_indices(idx: np.ndarray, size: int | None, name: str, what: str) -> np.ndarray:
    if idx.size and not np.issubdtype(idx.dtype, np.integer):
        as_int = idx.astype(np.int64)
        if not np.array_equal(as_int, idx):
            raise ValueError(f"{name}: {what} indices must be integers, got dtype {idx.dtype}")
        idx = as_int
    idx = idx.astype(np.int64, copy=False)
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or (size is not None and hi >= size):
            bad = lo if lo < 0 else hi
            bound = f"[0, {size})" if size is not None else ">= 0"
            raise ValueError(f"{name}: {what} index {bad} out of range, expected {bound}")
    return idx


def _check_entries(rows, cols, values, shape, name: str):
    """Validated int64 / float64 copies; the shape is inferred when not given."""
    n_rows, n_cols = (None, None) if shape is None else shape
    rows = _check_indices(np.asarray(rows).ravel(), n_rows, name, "row")
    cols = _check_indices(np.asarray(cols).ravel(), n_cols, name, "column")
    values = _real_values(values, name).ravel()
    bad = ~np.isfinite(values)
    if bad.any():
        e = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}: {int(bad.sum())} non-finite value(s), e.g. {values[e]!r} at "
                         f"({rows[e]}, {cols[e]}); expected finite observed values")
    if shape is None:
        shape = (int(rows.max()) + 1 if rows.size else 0, int(cols.max()) + 1 if cols.size else 0)
    return rows, cols, values, (int(shape[0]), int(shape[1]))


def _check_duplicates(rows, cols, shape, name: str) -> None:
    linear = np.sort(rows * np.int64(shape[1]) + cols)
    dup = np.flatnonzero(linear[1:] == linear[:-1])
    if dup.size:
        i, j = divmod(int(linear[dup[0]]), shape[1])
        raise ValueError(f"{name}: {dup.size} duplicate entr{'y' if dup.size == 1 else 'ies'}, "
                         f"e.g. ({i}, {j}); expected each observed entry once (sum or drop "
                         "duplicates first)")


def _observed_matrix(X, name: str) -> sp.csr_matrix:
    """Validated canonical CSR of an in-memory input (every stored entry observed)."""
    if sp.issparse(X) or type(X).__module__.startswith("sparse"):
        _check_value_dtype(X.dtype, name)
    if sp.issparse(X) and X.format in ("csr", "csc", "coo"):
        coo = X if X.format == "coo" else None
        if X.format != "coo" and X.has_canonical_format:
            if not np.all(np.isfinite(X.data)):
                coo = X.tocoo()  # for the error message
            else:
                csr = sp.csr_matrix(X, dtype=np.float64)
                csr.sort_indices()
                return csr
        if coo is None:
            coo = X.tocoo()
        r, c, v, shape = coo.row, coo.col, coo.data, coo.shape
    else:
        r, c, v, shape = _memory_triple(X, name)
    r, c, v, shape = _check_entries(r, c, v, shape, name)
    csr = sp.csr_matrix((v, (r, c)), shape=shape)  # sums duplicates: compare counts
    if csr.nnz != len(v):
        _check_duplicates(r, c, shape, name)
    csr.sort_indices()
    return csr


def _dask_triples(X, name: str) -> list:
    """Delayed ``(rows, cols, values)`` per partition / chunk of a dask input."""
    import dask
    import dask.array as da
    import dask.dataframe as dd

    if isinstance(X, dd.DataFrame):
        columns = _frame_columns(X.columns, name)
        try:
            value_dtype = np.dtype(X.dtypes[columns[2]])
        except TypeError:  # pandas extension dtypes (strings, ...)
            raise TypeError(f"{name}: values must be numeric, got column {columns[2]!r} of "
                            f"dtype {X.dtypes[columns[2]]}") from None
        _check_value_dtype(value_dtype, name)
        return [dask.delayed(_triple_from_frame)(p, columns) for p in X.to_delayed()]
    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise ValueError(f"{name}: expected a 2-d dask array, got ndim={X.ndim}")
        if any(np.isnan(c) for c in X.chunks[0] + X.chunks[1]):
            raise ValueError(f"{name}: dask array with unknown chunk sizes; call "
                             f"{name}.compute_chunk_sizes() first")
        _check_value_dtype(X.dtype, name)
        meta = X._meta
        if not (sp.issparse(meta) or type(meta).__module__.startswith("sparse")):
            raise TypeError(f"{name}: expected a dask array with sparse chunks (scipy.sparse or "
                            f"sparse.COO), got chunks of type {type(meta).__name__}")
        row_offsets = np.concatenate([[0], np.cumsum(X.chunks[0])])
        col_offsets = np.concatenate([[0], np.cumsum(X.chunks[1])])
        blocks = X.to_delayed()
        return [dask.delayed(_triple_from_chunk)(blocks[a, b], int(row_offsets[a]),
                                                 int(col_offsets[b]))
                for a in range(blocks.shape[0]) for b in range(blocks.shape[1])]
    raise TypeError(f"{name}: expected a dask.array or dask.dataframe, got {type(X).__name__}")


def _triple_stats(triple) -> np.ndarray:
    r, c, v = (np.asarray(a) for a in triple)
    n = len(v)
    finite = np.isfinite(v.astype(np.float64))
    integral = (np.issubdtype(r.dtype, np.integer) and np.issubdtype(c.dtype, np.integer)) or (
        np.array_equal(r, np.round(r)) and np.array_equal(c, np.round(c)))
    return np.array([
        n,
        r.min() if n else np.inf, r.max() if n else -np.inf,
        c.min() if n else np.inf, c.max() if n else -np.inf,
        n - finite.sum(), float(np.sum(v[finite].astype(np.float64) ** 2)), 0 if integral else 1,
    ], dtype=np.float64)


def _triple_counts(triple, shape) -> np.ndarray:
    return np.bincount(np.asarray(triple[0], dtype=np.int64), minlength=shape[0])


def _sum_counts(*counts) -> np.ndarray:
    return sum(counts)


def _shard_from_triples(shape, row_range, col_range, validation, init, *triples) -> dict:
    rows = np.concatenate([np.asarray(t[0], dtype=np.int64) for t in triples])
    cols = np.concatenate([np.asarray(t[1], dtype=np.int64) for t in triples])
    values = np.concatenate([np.asarray(t[2], dtype=np.float64) for t in triples])
    keep = (rows >= row_range[0]) & (rows < row_range[1])
    return build_shard(rows[keep], cols[keep], values[keep], shape, row_range, col_range,
                       validation, init)


def _shard_duplicates(shard: dict) -> int:
    indptr, indices, _ = shard["csr"]
    row_of = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    return int(np.sum((np.diff(indices) == 0) & (np.diff(row_of) == 0)))
