"""dask_strads's settings are checked before a fit touches a cluster."""

from __future__ import annotations

import dask
import numpy as np
import pytest

from dask_strads import Lasso, config


class _NoCluster:
    def __getattr__(self, name):
        raise AssertionError(f"cluster work before the settings were checked ({name})")


@pytest.mark.parametrize("key, value, message", [
    ("engine.snapshot-interval", "soon", "'soon' is not a duration like '20s'"),
    ("cd.min-block-nnz", "lots", "'lots' is not a number >= 0"),
    ("cd.anderson", -1, "-1 is not a number >= 0"),
    ("engine.shared-memory-above", "big", "'big' is not a size like '4MiB'"),
    ("engine.reply-channel", "yes", "'yes' is not true or false"),
])
def test_a_setting_of_the_wrong_kind_fails_before_cluster_work(key, value, message):
    X = np.random.default_rng(0).standard_normal((20, 3))
    with dask.config.set({f"dask-strads.{key}": value}), \
            pytest.raises(ValueError, match=f"dask-strads.{key}: {message}"):
        Lasso(alpha=0.1, client=_NoCluster()).fit(X, X[:, 0])


@pytest.mark.parametrize("key, value", [
    ("engine.dashboard-interval", None), ("engine.dashboard-interval", 0),
    ("engine.snapshot-interval", "500ms"), ("engine.shared-memory-above", 2**20),
    ("cd.ws-growth", 1.5), ("lda.transport", "tasks"), ("engine.shared-carried", False),
])
def test_settings_of_their_kind_pass(key, value):
    with dask.config.set({f"dask-strads.{key}": value}):
        config.check()


def test_a_misspelt_setting_warns_with_the_near_name():
    with dask.config.set({"dask-strads.cd.min-blok-nnz": 100}), \
            pytest.warns(UserWarning, match="dask-strads.cd.min-blok-nnz: no such dask_strads "
                                            "setting, ignored \\(did you mean "
                                            "dask-strads.cd.min-block-nnz\\?\\)"):
        config.check()
