"""L1 / elastic-net logistic regression by model-parallel coordinate descent (STRADS)."""

from __future__ import annotations

import importlib

__all__ = ["LogisticRegression"]


def __getattr__(name: str):
    # the estimator on first use: workers import this package to run its program and
    # should not load the estimator's scikit-learn
    if name in __all__:
        return getattr(importlib.import_module("dask_strads.logistic.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
