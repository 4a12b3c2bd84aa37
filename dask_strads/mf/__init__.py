"""Matrix factorisation by CCD++ with partitioned factors."""

from __future__ import annotations

import importlib

__all__ = ["MatrixFactorization"]


def __getattr__(name: str):
    # the estimator on first use: workers import this package to run its program and
    # should not load the estimator's scikit-learn
    if name in __all__:
        return getattr(importlib.import_module("dask_strads.mf.estimator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
