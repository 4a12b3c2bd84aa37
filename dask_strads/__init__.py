"""dask_strads: STRADS-style dynamic model parallelism on dask.distributed.

Public names: the estimators ``Lasso``, ``ElasticNet``, ``LogisticRegression``, ``LDA`` (also
``LatentDirichletAllocation``) and ``MatrixFactorization``, and the engine's
``Program``, ``Plan`` and ``run`` for writing your own schedule / push / pull programs.
"""

from __future__ import annotations

import importlib

from dask_strads import config  # noqa: F401  (merges dask_strads.yaml into dask.config)
from dask_strads.engine import Plan, Program, RunResult, run

__all__ = [
    "ElasticNet",
    "LDA",
    "Lasso",
    "LatentDirichletAllocation",
    "LogisticRegression",
    "MatrixFactorization",
    "Plan",
    "Program",
    "RunResult",
    "run",
]
__version__ = "0.1.0"

# Estimators are imported on first use so that ``import dask_strads`` stays cheap and
# does not compile numba kernels.
_LAZY = {
    "Lasso": "dask_strads.lasso.estimator",
    "ElasticNet": "dask_strads.lasso.estimator",
    "LogisticRegression": "dask_strads.logistic.estimator",
    "LDA": "dask_strads.lda.estimator",
    "LatentDirichletAllocation": "dask_strads.lda.estimator",
    "MatrixFactorization": "dask_strads.mf.estimator",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dask_strads' has no attribute {name!r}")
