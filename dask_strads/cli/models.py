"""The models ``fit`` knows, their parameters from the command line, and the checks
that need no cluster."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from typing import Any

import numpy as np

from dask_strads.cli.data import Dataset

# model name on the command line -> (module, class, needs a target y)
MODELS: dict[str, tuple[str, str, bool]] = {
    "lasso": ("dask_strads.lasso.estimator", "Lasso", True),
    "elasticnet": ("dask_strads.lasso.estimator", "ElasticNet", True),
    "logistic": ("dask_strads.logistic.estimator", "LogisticRegression", True),
    "lda": ("dask_strads.lda.estimator", "LDA", False),
    "mf": ("dask_strads.mf.estimator", "MatrixFactorization", False),
}
MODEL_ALIASES = {"elastic-net": "elasticnet", "matrix-factorization": "mf",
                 "logisticregression": "logistic", "logistic-regression": "logistic",
                 "matrixfactorization": "mf", "latentdirichletallocation": "lda"}

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
        from dask_strads.lda.inputs import _csr_counts

        _csr_counts(data.X, "X")
    elif model == "mf":
        from dask_strads.mf.inputs import _observed_matrix

        _observed_matrix(data.X, "X")
