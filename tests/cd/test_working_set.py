"""The working-set rule: its size, the blocks' candidates, the choice over blocks."""

from __future__ import annotations

import numpy as np

from dask_strads.cd import working_set


def test_working_set_size_follows_the_support():
    assert working_set.target_size(0, 10_000, 100, 2.0) == 100
    assert working_set.target_size(300, 10_000, 100, 2.0) == 600
    assert working_set.target_size(300, 450, 100, 2.0) == 450  # at most the live ones


def test_block_candidates_are_the_best_outside_the_support():
    score = np.array([0.5, 0.0, 2.0, 1.0, 3.0, 0.2])
    coef = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 0.0])  # 4 is in the support
    ids, scores = working_set.block_candidates(score, coef, 2)
    np.testing.assert_array_equal(ids, [2, 3])
    np.testing.assert_array_equal(scores, [2.0, 1.0])
    ids, _ = working_set.block_candidates(score, coef, 10)
    np.testing.assert_array_equal(ids, [2, 3, 0, 5])  # never a zero score
    assert working_set.block_candidates(score, coef, 0)[0].shape == (0,)


def test_choose_keeps_the_support_and_the_best_candidates_over_all_blocks():
    support = [np.array([1]), np.array([], dtype=np.int64)]
    candidates = [(np.array([5, 2]), np.array([0.9, 0.1])),
                  (np.array([0, 7]), np.array([0.5, 0.3]))]
    ws = working_set.choose(support, candidates, size=3)
    np.testing.assert_array_equal(ws[0], [1, 5])
    np.testing.assert_array_equal(ws[1], [0])
    ws = working_set.choose(support, candidates, size=1)  # the support alone
    np.testing.assert_array_equal(ws[0], [1])
    assert ws[1].shape == (0,)
