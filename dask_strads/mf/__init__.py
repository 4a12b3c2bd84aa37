"""Matrix factorisation by CCD++ with partitioned factors."""

from __future__ import annotations

from dask_strads.mf.estimator import MatrixFactorization

__all__ = ["MatrixFactorization"]
