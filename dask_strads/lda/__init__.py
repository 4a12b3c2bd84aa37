"""LDA topic model by collapsed sampling (Gibbs or Metropolis-Hastings) with word rotation
(see docs/architecture.md)."""

from __future__ import annotations

from dask_strads.lda.estimator import LDA, LatentDirichletAllocation

__all__ = ["LDA", "LatentDirichletAllocation"]
