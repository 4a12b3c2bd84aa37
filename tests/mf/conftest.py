"""Shared data of the matrix factorisation tests."""

from __future__ import annotations

import pytest

from dask_strads._datasets.mf import make_ratings


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(300, 200, rank=3, n_observed=9000, noise=0.1, random_state=0)
