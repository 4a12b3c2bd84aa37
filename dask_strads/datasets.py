"""Seeded synthetic problems for demos, tests and benchmarks (no downloads).

- :func:`make_correlated_regression`: dense design with AR(1)-correlated columns (Lasso).
- :func:`make_sparse_regression`: sparse CSC design of a given density (Lasso).
- :func:`alpha_max`: the smallest alpha giving an all-zero Lasso / ElasticNet solution.
- :func:`make_lda_corpus`: document-term counts drawn from a known LDA model.
- :func:`make_ratings`: observed entries of a noisy low-rank matrix (factorisation).
"""

from __future__ import annotations

from dask_strads._datasets.lasso import (
    alpha_max,
    make_correlated_regression,
    make_sparse_regression,
)
from dask_strads._datasets.lda import make_lda_corpus
from dask_strads._datasets.mf import make_ratings

__all__ = [
    "alpha_max",
    "make_correlated_regression",
    "make_lda_corpus",
    "make_ratings",
    "make_sparse_regression",
]
