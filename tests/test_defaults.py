"""The estimators agree on the defaults of the knobs they share."""

from __future__ import annotations

import inspect

import pytest

from dask_strads import LDA, ElasticNet, Lasso, MatrixFactorization


@pytest.mark.parametrize("cls", [Lasso, ElasticNet, LDA, MatrixFactorization])
def test_progress_bar_on_and_no_client_by_default(cls):
    params = inspect.signature(cls).parameters
    assert params["progress"].default is True
    assert params["client"].default is None
    assert cls().get_params()["progress"] is True
