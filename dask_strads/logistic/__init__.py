"""L1 / elastic-net logistic regression by model-parallel coordinate descent (STRADS)."""

from __future__ import annotations

from dask_strads.logistic.estimator import LogisticRegression

__all__ = ["LogisticRegression"]
