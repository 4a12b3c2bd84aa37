"""MatrixFactorization: fitted behaviour, inputs, and validation before any cluster work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sparse
from sklearn.exceptions import NotFittedError

from dask_strads import MatrixFactorization
from dask_strads.mf.shards import random_factor
from tests.mf._reference import ccdpp_reference


def _model(client, **kw):
    params = dict(n_components=4, alpha=0.05, max_iter=6, tol=0.0, random_state=3,
                  inner_iter=1, client=client, progress=False)
    params.update(kw)
    return MatrixFactorization(**params)


class _NoCluster:
    """A client that fails the test if anything touches it."""

    def __getattr__(self, name):
        raise AssertionError(f"cluster used before validation: client.{name}")


def test_fit_matches_serial_reference_and_scores(client, ratings):
    mf = _model(client, n_components=3, max_iter=4).fit(ratings.train, validation=ratings.test)
    A = ratings.train.tocoo()
    m, n = A.shape
    k = 3
    scale = 0.5 * (np.mean(A.data**2) / k) ** 0.25
    W0 = random_factor(3, "W", 0, m, 0, k, scale)
    H0 = random_factor(3, "H", 0, n, 0, k, scale)
    W, H, reference = ccdpp_reference(A.row, A.col, A.data, A.shape, W0, H0, 0.05, 1, 4)
    np.testing.assert_allclose(mf.W_, W, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(mf.H_, H, rtol=1e-8, atol=1e-10)
    per_rank = mf.history_["objective"].to_numpy()[:-1]  # inner_iter=1: one round per rank
    np.testing.assert_allclose(per_rank, reference[1:], rtol=1e-8)
    assert np.all(np.diff(mf.history_["objective"].to_numpy()) <= 1e-9 * per_rank[0])
    assert mf.objective_ == pytest.approx(reference[-1], rel=1e-8)
    assert mf.n_iter_ == 4 and mf.stop_reason_ == "done"
    assert (mf.n_rows_, mf.n_cols_) == A.shape
    # score is the negative RMSE, the history's last rmse is the same number
    pred = mf.predict(ratings.test_rows, ratings.test_cols)
    np.testing.assert_allclose(pred, np.sum(W[ratings.test_rows] * H[ratings.test_cols], 1),
                               rtol=1e-8)
    rmse = np.sqrt(np.mean((ratings.test_values - pred) ** 2))
    assert mf.score(ratings.test) == pytest.approx(-rmse, rel=1e-10)
    assert mf.history_["rmse"].iloc[-1] == pytest.approx(rmse, rel=1e-8)
    test_matrix = sp.csr_matrix((ratings.test_values, (ratings.test_rows, ratings.test_cols)),
                                shape=A.shape)
    assert mf.score(test_matrix) == pytest.approx(-rmse, rel=1e-10)


def test_fit_recovers_low_rank_truth(thread_client, ratings):
    mf = MatrixFactorization(n_components=3, alpha=0.05, max_iter=60, tol=1e-6, random_state=0,
                             client=thread_client, progress=False).fit(ratings.train)
    assert mf.inner_iter == 10 and mf.inner_tol == 0.05  # the defaults
    # noise sd 0.1: a good fit predicts held-out entries close to the noise level
    assert -mf.score(ratings.test) < 0.2
    assert mf.stop_reason_ in ("converged", "done")
    truth = ratings.row_factors @ ratings.col_factors.T
    assert np.sqrt(np.mean((mf.W_ @ mf.H_.T - truth) ** 2)) < 0.2


def test_recommend_returns_best_unseen_columns(client, ratings):
    mf = _model(client, max_iter=3).fit(ratings.train)
    row = 7
    seen = set(ratings.train[row].indices)
    top = mf.recommend(row, 5)
    assert len(top) == 5 and not seen & set(top.tolist())
    scores = mf.H_ @ mf.W_[row]
    unseen = np.array(sorted(set(range(mf.n_cols_)) - seen))
    expected = unseen[np.argsort(-scores[unseen], kind="stable")[:5]]
    np.testing.assert_array_equal(top, expected)
    everything = mf.recommend(row, 1000, exclude_seen=False)
    np.testing.assert_array_equal(everything, np.argsort(-scores, kind="stable"))
    assert len(mf.recommend(row, 1000)) == len(unseen)
    with pytest.raises(ValueError, match="row"):
        mf.recommend(mf.n_rows_, 3)
    with pytest.raises(ValueError, match="n: expected"):
        mf.recommend(0, 0)


def _input_forms(train):
    import dask.array as da
    import dask.dataframe as dd

    coo = train.tocoo()
    frame = pd.DataFrame({"row": coo.row, "col": coo.col, "value": coo.data})
    return {
        "csr": train,
        "coo": coo,
        "csc": train.tocsc(),
        "pydata": sparse.COO.from_scipy_sparse(train),
        "tuple": (coo.row, coo.col, coo.data),
        "pandas": frame,
        "dask_array": da.from_array(train, chunks=(100, 120), asarray=False),
        # slicing a sparse.COO inside dask compiles pydata's numba code (slow): convert chunks
        "dask_array_pydata": da.from_array(train, chunks=(150, 70), asarray=False).map_blocks(
            sparse.COO.from_scipy_sparse, dtype=np.float64),
        "dask_frame": dd.from_pandas(frame.sample(frac=1.0, random_state=0), npartitions=3),
        "dask_frame_unnamed": dd.from_pandas(frame.set_axis(["a1", "b1", "c1"], axis=1),
                                             npartitions=2),
    }


def test_every_input_form_gives_the_same_fit(client, ratings):
    train = ratings.train[:, :199]  # trailing empty column: shapes from matrices, not indices
    train = sp.csr_matrix(train)
    expected = _model(client, max_iter=2).fit(train)
    for name, X in _input_forms(train).items():
        mf = _model(client, max_iter=2).fit(X)
        if name in ("tuple", "pandas", "dask_frame", "dask_frame_unnamed"):
            # shape inferred from the largest indices
            assert mf.H_.shape[0] == train.tocoo().col.max() + 1, name
            continue
        np.testing.assert_allclose(mf.W_, expected.W_, rtol=1e-10, err_msg=name)
        np.testing.assert_allclose(mf.H_, expected.H_, rtol=1e-10, err_msg=name)
        assert mf.objective_ == pytest.approx(expected.objective_, rel=1e-10), name


def test_dask_inputs_without_a_distributed_client(ratings, monkeypatch):
    # no client: shards are computed locally and the engine gets in-memory data
    import dask.dataframe as dd

    import dask_strads.mf.estimator as est

    coo = ratings.train.tocoo()
    frame = dd.from_pandas(pd.DataFrame({"row": coo.row, "col": coo.col, "value": coo.data}),
                           npartitions=2)
    captured = {}

    def fake_run(program, shards, **kw):
        captured["shards"] = shards
        raise RuntimeError("stop here")

    monkeypatch.setattr(est.MatrixFactorization, "_get_client", lambda self: None)
    monkeypatch.setattr("dask_strads.engine.run", fake_run)
    with pytest.raises(RuntimeError, match="stop here"):
        MatrixFactorization(n_blocks=2, progress=False).fit(frame)
    shards = captured["shards"]
    assert sorted(shards) == [0, 1]
    assert sum(len(s["csr"][2]) for s in shards.values()) == coo.nnz
    assert [s["col_range"] for s in (shards[0], shards[1])] == [(0, 100), (100, 200)]


def test_parameter_validation_before_cluster_work(ratings):
    bad = [
        dict(n_components=0), dict(max_iter=-1), dict(inner_iter=1.5), dict(alpha=-0.1),
        dict(tol=np.nan), dict(staleness=1), dict(init="svd"), dict(n_blocks=0),
        dict(inner_tol=-0.1), dict(inner_tol=np.inf),
    ]
    for params in bad:
        name = next(iter(params))
        with pytest.raises(ValueError, match=name):
            MatrixFactorization(client=_NoCluster(), **params).fit(ratings.train)
    W0 = np.zeros((300, 2))
    with pytest.raises(ValueError, match="init: W0 must have shape"):
        MatrixFactorization(n_components=3, init=(W0, np.zeros((200, 3))),
                            client=_NoCluster()).fit(ratings.train)
    with pytest.raises(ValueError, match="random_state"):
        MatrixFactorization(random_state="seed", client=_NoCluster()).fit(ratings.train)


def test_entry_validation_before_cluster_work(ratings):
    mf = MatrixFactorization(client=_NoCluster())
    coo = ratings.train.tocoo()
    nan_data = coo.data.copy()
    nan_data[5] = np.nan
    with pytest.raises(ValueError, match=r"X: 1 non-finite value"):
        mf.fit(sp.csr_matrix((nan_data, (coo.row, coo.col)), shape=coo.shape))
    dup = sp.coo_matrix((np.r_[coo.data, 1.0], (np.r_[coo.row, coo.row[0]],
                                                 np.r_[coo.col, coo.col[0]])), shape=coo.shape)
    with pytest.raises(ValueError, match=rf"X: 1 duplicate entry, e.g. \({coo.row[0]}, "
                                         rf"{coo.col[0]}\)"):
        mf.fit(dup)
    with pytest.raises(ValueError, match="X: row index -1 out of range"):
        mf.fit((np.r_[coo.row, -1], np.r_[coo.col, 0], np.r_[coo.data, 1.0]))
    with pytest.raises(ValueError, match="X: column indices must be integers"):
        mf.fit((coo.row, coo.col + 0.5, coo.data))
    with pytest.raises(ValueError, match="equal-length"):
        mf.fit((coo.row, coo.col[:-1], coo.data))
    with pytest.raises(TypeError, match="dense numpy array"):
        mf.fit(ratings.train.toarray())
    with pytest.raises(TypeError, match="X: expected"):
        mf.fit([1, 2, 3])
    with pytest.raises(ValueError, match="row, column and value"):
        mf.fit(pd.DataFrame({"a": [0], "b": [1]}))
    with pytest.raises(ValueError, match=r"validation: column index 200 out of range, "
                                         r"expected \[0, 200\)"):
        mf.fit(ratings.train, validation=(np.array([0]), np.array([200]), np.array([1.0])))
    with pytest.raises(ValueError, match="validation: 1 non-finite"):
        mf.fit(ratings.train, validation=(np.array([0]), np.array([1]), np.array([np.inf])))
    with pytest.raises(ValueError, match="X: no observed entries"):
        mf.fit(sp.csr_matrix((3, 3)))


def test_dask_input_errors(client, ratings):
    import dask.dataframe as dd

    coo = ratings.train.tocoo()
    frame = pd.DataFrame({"row": coo.row, "col": coo.col, "value": coo.data})
    with_dup = pd.concat([frame, frame.iloc[:2]])
    with pytest.raises(ValueError, match="X: 2 duplicate entries"):
        _model(client).fit(dd.from_pandas(with_dup, npartitions=2))
    with_nan = frame.copy()
    with_nan.loc[3, "value"] = np.nan
    with pytest.raises(ValueError, match="X: 1 non-finite"):
        _model(client).fit(dd.from_pandas(with_nan, npartitions=2))
    negative = frame.copy()
    negative.loc[0, "col"] = -4
    with pytest.raises(ValueError, match="X: negative index -4"):
        _model(client).fit(dd.from_pandas(negative, npartitions=2))


def test_predict_and_score_validation(client, ratings):
    mf = MatrixFactorization()
    with pytest.raises(NotFittedError):
        mf.predict([0], [0])
    mf = _model(client, max_iter=1).fit(ratings.train)
    with pytest.raises(ValueError, match="cols: column index 200 out of range"):
        mf.predict([0], [200])
    with pytest.raises(ValueError, match="equal lengths"):
        mf.predict([0, 1], [0])
    with pytest.raises(ValueError, match="X: no entries"):
        mf.score(sp.csr_matrix((300, 200)))


def test_given_initialisation(client, ratings):
    k = 2
    rng = np.random.default_rng(0)
    W0, H0 = rng.standard_normal((300, k)) * 0.3, rng.standard_normal((200, k)) * 0.3
    mf = _model(client, n_components=k, max_iter=2, init=(W0, H0)).fit(ratings.train)
    A = ratings.train.tocoo()
    W, H, reference = ccdpp_reference(A.row, A.col, A.data, A.shape, W0, H0, 0.05, 1, 2)
    np.testing.assert_allclose(mf.W_, W, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(mf.objective_, reference[-1], rtol=1e-8)


def test_progress_bar_counts_rank_updates(thread_client, ratings, capsys):
    """Rounds per rank update vary (inner_tol, when the client reduces: more blocks than
    workers): the bar counts rank updates, and a fit that runs all its iterations fills
    it. With a block per worker, the blocks reduce and a round is a rank update."""
    mf = _model(thread_client, inner_iter=10, max_iter=3, progress=True,
                n_blocks=3).fit(ratings.train)
    err = capsys.readouterr().err.replace(" ", "")
    assert "12/12" in err and "rankupdate" in err
    assert len(mf.history_) > 12 + 1  # more rounds than rank updates: several sweeps
    on_workers = _model(thread_client, inner_iter=10, max_iter=3, progress=True).fit(
        ratings.train)
    err = capsys.readouterr().err.replace(" ", "")
    assert "12/12" in err and "rankupdate" in err
    assert len(on_workers.history_) == 12 + 1  # and the flush
    np.testing.assert_allclose(on_workers.W_, mf.W_, rtol=1e-8, atol=1e-10)


def test_inner_iter_and_block_count(thread_client, ratings):
    a = _model(thread_client, inner_iter=2, max_iter=2, n_blocks=3).fit(ratings.train)
    b = _model(thread_client, inner_iter=2, max_iter=2, n_blocks=1).fit(ratings.train)
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-9, atol=1e-12)
    assert len(a.history_) == 2 * 4 * 2 + 1


def _objective(X, W, H, alpha):
    coo = X.tocoo()
    r = coo.data - np.einsum("ij,ij->i", W[coo.row], H[coo.col])
    return float(r @ r + alpha * ((W**2).sum() + (H**2).sum()))


def test_time_limit_leaves_a_consistent_pair(client, ratings):
    mf = _model(client, n_components=6, max_iter=10_000, inner_iter=3,
                time_limit=1.0).fit(ratings.train)
    assert mf.stop_reason_ == "time_limit"
    # it stopped at the first pull past the limit: no row recorded after one past it
    times = mf.history_["time"].to_numpy()
    assert len(times) >= 1 and (times[:-1] < 1.0).all()
    # the factors are the iterate after the last pulled round: never worse than the last
    # objective recorded at a rank boundary
    assert _objective(ratings.train, mf.W_, mf.H_, 0.05) <= mf.objective_ * (1 + 1e-9)
    with pytest.raises(ValueError, match="time_limit"):
        _model(client, time_limit=0).fit(ratings.train)


def test_objective_of_fitted_factors(client, ratings):
    mf = _model(client, max_iter=3, inner_iter=2).fit(ratings.train)
    assert _objective(ratings.train, mf.W_, mf.H_, 0.05) == pytest.approx(mf.objective_,
                                                                         rel=1e-9)
