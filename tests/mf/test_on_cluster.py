"""MatrixFactorization(gather_model=False): the factors stay on the workers, as dask
arrays, and predict, score and recommend run there with the gathered fit's answers."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from distributed import futures_of

from dask_strads import MatrixFactorization
from tests.mf.test_estimator import _model as base_model
from tests.mf.test_estimator import _objective


def _model(client, **kw):
    return base_model(client, **{"max_iter": 3, "inner_iter": 2, **kw})


@pytest.mark.parametrize("blocks", [2, 3])
def test_factors_on_the_cluster_answer_as_the_gathered_ones(any_client, ratings, blocks):
    client = any_client
    gathered = _model(client, n_blocks=blocks).fit(ratings.train)
    kept = _model(client, n_blocks=blocks, gather_model=False).fit(ratings.train)
    assert isinstance(kept.W_, da.Array) and isinstance(kept.H_, da.Array)
    assert kept.W_.shape == gathered.W_.shape and kept.H_.shape == gathered.H_.shape
    # one chunk per block, each held by a worker (none computed on the client)
    assert kept.W_.numblocks == (blocks, 1) and kept.H_.numblocks == (blocks, 1)
    held = client.who_has(futures_of(kept.W_) + futures_of(kept.H_))
    assert len(held) == 2 * blocks and all(held.values())
    np.testing.assert_array_equal(client.compute(kept.W_).result(), gathered.W_)
    np.testing.assert_array_equal(client.compute(kept.H_).result(), gathered.H_)

    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, 300, 500), rng.integers(0, 200, 500)
    np.testing.assert_allclose(kept.predict(rows, cols), gathered.predict(rows, cols),
                               rtol=1e-12)
    assert kept.score(ratings.test) == pytest.approx(gathered.score(ratings.test), rel=1e-12)
    for row in (0, 7, 299):
        for n in (1, 5, 1000):
            np.testing.assert_array_equal(kept.recommend(row, n), gathered.recommend(row, n))
            np.testing.assert_array_equal(kept.recommend(row, n, exclude_seen=False),
                                          gathered.recommend(row, n, exclude_seen=False))
    assert kept.predict([], []).shape == (0,)
    with pytest.raises(ValueError, match="rows"):
        kept.predict([300], [0])
    with pytest.raises(ValueError, match="row"):
        kept.recommend(300, 3)


def test_dask_input_stays_on_the_cluster(client, ratings):
    import dask.dataframe as dd
    import pandas as pd

    coo = ratings.train.tocoo()
    frame = dd.from_pandas(pd.DataFrame({"row": coo.row, "col": coo.col, "value": coo.data}),
                           npartitions=3)
    kept = _model(client, gather_model=False).fit(frame)
    gathered = _model(client).fit(ratings.train)
    np.testing.assert_allclose(client.compute(kept.H_).result(), gathered.H_, rtol=1e-10)
    assert kept.score(ratings.test) == pytest.approx(gathered.score(ratings.test), rel=1e-9)


def test_a_fit_stopped_mid_component_keeps_a_consistent_pair(client, ratings):
    # the blocks have not stored the newest h of a fit stopped by its time limit: the
    # factors on the cluster get it, so they match the objective the fit reports
    mf = _model(client, n_components=6, max_iter=10_000, inner_iter=3, time_limit=1.0,
                gather_model=False).fit(ratings.train)
    assert mf.stop_reason_ == "time_limit"
    W, H = client.compute([mf.W_, mf.H_], sync=True)
    assert _objective(ratings.train, W, H, 0.05) <= mf.objective_ * (1 + 1e-9)


def test_gather_model_is_checked_before_cluster_work(ratings):
    with pytest.raises(ValueError, match="gather_model"):
        MatrixFactorization(gather_model="no", progress=False).fit(ratings.train)
    # without a client the embedded cluster of the call would take the factors with it
    with pytest.raises(ValueError, match="gather_model=False.*client"):
        MatrixFactorization(gather_model=False, progress=False).fit(ratings.train)
