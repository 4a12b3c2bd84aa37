"""The working set: the coordinates a phase solves over, chosen by priority.

A coordinate's priority (its *score*) is the step an exact update of it would take now
(the fixed-point distance of coordinate descent): the gap round computes it for every
live coordinate. The working set holds the support and the highest-priority
coordinates outside it, ``growth`` times the support in all (at least ``min_size``), as
skglm sizes its working sets; it grows as the support does, so a cold start needs only
a few phases to reach a large support.
"""

from __future__ import annotations

import numpy as np


def target_size(n_support: int, n_live: int, min_size: int, growth: float) -> int:
    """How many coordinates the next working set holds (at most the live ones)."""
    return int(min(n_live, max(min_size, growth * n_support)))


def block_candidates(score: np.ndarray, coef: np.ndarray, k: int) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """A block's ``k`` best coordinates outside its support (local ids, scores), best
    first; only coordinates with a positive score (the others would not move)."""
    outside = np.flatnonzero((coef == 0.0) & (score > 0.0))
    if k <= 0:
        outside = outside[:0]
    elif outside.shape[0] > k:
        part = np.argpartition(score[outside], outside.shape[0] - k)[-k:]
        outside = outside[part]
    order = np.argsort(-score[outside], kind="stable")
    top = outside[order]
    return top, score[top]


def choose(support: list[np.ndarray], candidates: list[tuple[np.ndarray, np.ndarray]],
           size: int) -> list[np.ndarray]:
    """Each block's share of the working set (local ids, increasing): its support, and
    the best candidates over all blocks until ``size`` coordinates are in."""
    room = max(size - sum(s.shape[0] for s in support), 0)
    blocks = np.concatenate([np.full(c[0].shape[0], b) for b, c in enumerate(candidates)]
                            or [np.zeros(0, int)])
    ids = np.concatenate([c[0] for c in candidates] or [np.zeros(0, np.int64)])
    scores = np.concatenate([c[1] for c in candidates] or [np.zeros(0)])
    if room == 0:
        blocks, ids = blocks[:0], ids[:0]
    elif scores.shape[0] > room:
        keep = np.argpartition(scores, scores.shape[0] - room)[scores.shape[0] - room:]
        blocks, ids = blocks[keep], ids[keep]
    return [_sorted_union(support[b], ids[blocks == b]) for b in range(len(support))]


def _sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``union1d`` for arrays that rarely overlap (candidates lie outside the support):
    a sort, and a dedup only when the sort shows a repeat."""
    out = np.sort(np.concatenate([a, b]).astype(np.int64, copy=False))
    if out.shape[0] > 1 and np.any(out[1:] == out[:-1]):
        out = np.unique(out)
    return out
