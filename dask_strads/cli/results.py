"""What ``fit`` prints and saves: a summary, and the fitted attributes in an ``.npz``
(no pickles)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from dask_strads.cli.data import Dataset


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
