"""Matrix factorisation by CCD++ with partitioned factors (DESIGN.md section 5)."""

from __future__ import annotations

from dask_strads.mf.estimator import MatrixFactorization

__all__ = ["MatrixFactorization"]
