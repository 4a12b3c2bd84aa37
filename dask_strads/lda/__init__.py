"""LDA topic model by collapsed sampling (Gibbs or Metropolis-Hastings) with word rotation
(DESIGN.md §5)."""

from __future__ import annotations

from dask_strads.lda.estimator import LDA, LatentDirichletAllocation

__all__ = ["LDA", "LatentDirichletAllocation"]
