"""Lasso and ElasticNet by priority-scheduled, model-parallel coordinate descent (STRADS)."""

from __future__ import annotations

from dask_strads.lasso.estimator import ElasticNet, Lasso, enet_path, lasso_path

__all__ = ["ElasticNet", "Lasso", "enet_path", "lasso_path"]
