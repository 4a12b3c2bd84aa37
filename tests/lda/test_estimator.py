"""LDA estimator: inputs, validation, topic recovery, transform / score, Reuters vs `lda`."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

from dask_strads._datasets.lda import make_lda_corpus
from dask_strads.lda import LDA, LatentDirichletAllocation


@pytest.fixture(scope="module")
def small():
    X, topics = make_lda_corpus(200, 120, 4, doc_length=40, random_state=5)
    return X, topics


def _mean_cosine(est, true):
    est = est / np.linalg.norm(est, axis=1, keepdims=True)
    true = true / np.linalg.norm(true, axis=1, keepdims=True)
    cos = est @ true.T
    rows, cols = linear_sum_assignment(-cos)
    return cos[rows, cols].mean()


def test_alias_and_public_name():
    import dask_strads

    assert LatentDirichletAllocation is LDA
    assert dask_strads.LDA is LDA and dask_strads.LatentDirichletAllocation is LDA


def test_recovers_true_topics(client):
    X, topics = make_lda_corpus(1000, 500, 8, doc_length=100, topic_word_prior=0.05,
                                random_state=0)
    # seed 1: with seed 0 the exact Gibbs chains ("dense" and "gibbs" alike) still hold two
    # true topics merged after 60 iterations (a local mode, cosine 0.86)
    model = LDA(8, max_iter=60, random_state=1, client=client).fit(X)
    assert model.sampler_ == "dense"
    assert model.components_.shape == (8, 500)
    assert _mean_cosine(model.components_, topics) >= 0.9
    # components_ are counts + prior: they add up to the corpus
    total = model.components_.sum() - 8 * 500 * model.topic_word_prior
    assert total == pytest.approx(X.sum())
    assert model.n_iter_ == 60 and model.loglikelihoods_.shape == (60,)
    assert model.loglikelihoods_[-1] > model.loglikelihoods_[0]
    assert {"loglikelihood", "push_s", "round"} <= set(model.history_.columns)


def test_local_input_types_give_the_same_chain(client, small):
    import sparse

    X, _ = small
    kw = dict(n_components=4, max_iter=3, random_state=1, client=client)
    ref = LDA(**kw).fit(X).loglikelihoods_
    for variant in (X.toarray(), sp.coo_matrix(X), X.tocsc(), sparse.COO.from_scipy_sparse(X),
                    X.toarray().astype(np.float32)):
        np.testing.assert_allclose(LDA(**kw).fit(variant).loglikelihoods_, ref, rtol=1e-12)


def test_output_features_are_named_for_pandas_output(client, small):
    X, _ = small
    model = LDA(3, max_iter=2, client=client, random_state=0).fit(X)
    assert list(model.get_feature_names_out()) == ["lda0", "lda1", "lda2"]
    frame = model.set_output(transform="pandas").transform(X[:4])
    assert list(frame.columns) == ["lda0", "lda1", "lda2"] and frame.shape == (4, 3)


def test_dask_inputs(client, small):
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd
    import sparse

    X, _ = small
    n = X.sum()
    dense = da.from_array(X.toarray(), chunks=(50, 60))
    sparse_chunks = dense.map_blocks(sparse.COO.from_numpy, dtype=dense.dtype)
    coo = X.tocoo()
    frame = dd.from_pandas(pd.DataFrame({"doc": coo.row, "word": coo.col, "count": coo.data}),
                           npartitions=3)
    in_memory = LDA(4, max_iter=3, random_state=1, client=client).fit(X)
    for data in (dense, sparse_chunks, frame):
        model = LDA(4, max_iter=3, random_state=1, client=client).fit(data)
        assert model.n_tokens_ == n
        assert model.components_.shape == (4, 120)
        assert model.components_.sum() - 4 * 120 * 0.01 == pytest.approx(n)
    # blocks cut at the same documents whatever the chunks (50 rows: not at 100): the
    # same draws as the corpus in memory
    np.testing.assert_array_equal(
        LDA(4, max_iter=3, random_state=1, client=client).fit(dense).components_,
        in_memory.components_)
    # blocks of 2 threads: each block's shards grouped on the cluster, every word's row right
    model = LDA(4, max_iter=3, random_state=1, block_threads=2, client=client).fit(dense)
    assert model.block_threads_ == 2 and model.n_blocks_ == 2
    np.testing.assert_allclose(model.components_.sum(axis=0) - 4 * 0.01,
                               np.asarray(X.sum(axis=0)).ravel())


class _NoCluster:
    """A stand-in client that fails the test if anything touches it."""

    def __getattr__(self, name):
        raise AssertionError(f"cluster work before validation (client.{name})")


@pytest.mark.parametrize("X,match", [
    (np.array([[1, -1], [0, 2]]), "negative"),
    (np.array([[1.5, 0], [0, 2]]), "non-integer"),
    (np.array([[np.nan, 0], [0, 2]]), "NaN"),
    (sp.csr_matrix(np.array([[1, 0], [0, -3]])), "negative"),
    (np.zeros((3, 4)), "no tokens"),
    (np.array([1, 2, 3]), "2-d"),
])
def test_invalid_counts_rejected_before_cluster_work(X, match):
    with pytest.raises(ValueError, match=match) as info:
        LDA(2, max_iter=1, client=_NoCluster()).fit(X)
    assert str(info.value).startswith("X")


def test_invalid_dtype_and_frame_columns():
    import pandas as pd

    with pytest.raises(TypeError, match="X: expected non-negative integer counts"):
        LDA(2, client=_NoCluster()).fit(np.array([["a", "b"]]))
    with pytest.raises(TypeError, match="X: expected word counts .* got 2 texts; .*"
                                        "CountVectorizer"):
        LDA(2, client=_NoCluster()).fit(["the cat sat", "a dog"])
    with pytest.raises(ValueError, match="missing \\['count'\\]"):
        LDA(2, client=_NoCluster()).fit(pd.DataFrame({"doc": [0], "word": [1]}))
    wide = pd.DataFrame(np.ones((2, 50), dtype=int), columns=[f"w{i}" for i in range(50)])
    with pytest.raises(ValueError, match="'w7', '... 50 in all'.*pass it as an array"):
        LDA(2, client=_NoCluster()).fit(wide)  # a documents x words table
    with pytest.raises(ValueError, match="X\\['count'\\].*negative"):
        LDA(2, client=_NoCluster()).fit(pd.DataFrame({"doc": [0], "word": [1], "count": [-2]}))


def test_invalid_parameters():
    X = np.ones((3, 4), dtype=int)
    with pytest.raises(ValueError, match="n_components"):
        LDA(0, client=_NoCluster()).fit(X)
    with pytest.raises(ValueError, match="sampler"):
        LDA(2, sampler="vb", client=_NoCluster()).fit(X)
    with pytest.raises(ValueError, match="doc_topic_prior"):
        LDA(2, doc_topic_prior=0.0, client=_NoCluster()).fit(X)
    for bad in (0, -2, 1.5, "3"):
        with pytest.raises(ValueError, match="checkpoint_every"):
            LDA(2, checkpoint_every=bad, client=_NoCluster()).fit(X)
    with pytest.raises(FileNotFoundError, match="resume"):
        LDA(2, client=_NoCluster()).fit(X, resume="/nonexistent/checkpoint/dir")


def test_transform_score_perplexity(client):
    X, topics = make_lda_corpus(600, 200, 5, doc_length=100, random_state=3)
    model = LDA(5, max_iter=40, random_state=2, client=client)
    doc_topic = model.fit_transform(X)
    assert doc_topic.shape == (600, 5)
    np.testing.assert_allclose(doc_topic.sum(axis=1), 1.0)
    theta = model.transform(X[:100])
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    # fold-in agrees with the training assignments on the dominant topic
    assert (theta.argmax(axis=1) == doc_topic[:100].argmax(axis=1)).mean() > 0.9
    # a short fit explains the documents worse than a longer one
    rough = LDA(5, max_iter=1, random_state=2, client=client).fit(X)
    assert model.score(X[:100]) > rough.score(X[:100])
    assert model.perplexity(X[:100]) < rough.perplexity(X[:100])
    with pytest.raises(ValueError, match="features"):
        model.transform(X[:5, :50])


def test_word_topic_dask_matches_components(client, small):
    X, _ = small
    model = LDA(4, max_iter=3, random_state=0, client=client).fit(X)
    table = model.word_topic_dask().compute()
    np.testing.assert_array_equal(table.T + 0.01, model.components_)


def test_word_topic_stays_on_cluster(client, small):
    X, _ = small
    gathered = LDA(4, max_iter=3, random_state=0, client=client).fit(X)
    model = LDA(4, max_iter=3, random_state=0, gather_model=False, client=client).fit(X)
    assert not hasattr(model, "components_")
    table = model.word_topic_dask()
    assert table.shape == (120, 4)
    np.testing.assert_array_equal(client.compute(table).result().T + 0.01,
                                  gathered.components_)
    with pytest.raises(AttributeError, match="gather_model=False"):
        model.transform(X)


def test_both_transports_give_the_same_chain(client, small):
    """Blocks moving worker to worker (direct) or as task results (tasks): the same
    draws, so the same model, also with more blocks than workers and rounds in flight."""
    import dask

    X, _ = small
    kw = dict(n_components=4, max_iter=4, random_state=3, n_blocks=3, staleness=1,
              client=client)
    fits = {}
    for transport in ("direct", "tasks"):
        with dask.config.set({"dask-strads.lda.transport": transport}):
            fits[transport] = LDA(**kw).fit(X)
        assert set(fits[transport].history_["transport"]) == {transport}
    np.testing.assert_array_equal(fits["direct"].components_, fits["tasks"].components_)
    np.testing.assert_allclose(fits["direct"].loglikelihoods_, fits["tasks"].loglikelihoods_,
                               rtol=1e-12)


def test_an_unknown_transport_setting_fails_before_cluster_work(small):
    import dask

    X, _ = small
    with dask.config.set({"dask-strads.lda.transport": "pigeon"}):
        with pytest.raises(ValueError, match="dask-strads.lda.transport"):
            LDA(4, max_iter=2, client="not a client").fit(X)


def test_threads_per_block_give_the_same_chain_on_any_cluster(client, small):
    """Blocks of 2 threads: the same draws whether the block's worker has 2 threads
    (where they are the default) or 1, and every word's row of the model holds its
    tokens."""
    from distributed import Client, LocalCluster

    X, _ = small
    kw = dict(n_components=4, max_iter=4, random_state=2, n_blocks=1, progress=False)
    one_thread = LDA(**kw, block_threads=2, client=client).fit(X)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as two:
        default = LDA(**kw, client=two).fit(X)
        kept = LDA(**kw, gather_model=False, client=two).fit(X)
        table = two.compute(kept.word_topic_dask()).result()
    assert one_thread.block_threads_ == default.block_threads_ == 2
    np.testing.assert_allclose(default.loglikelihoods_, one_thread.loglikelihoods_,
                               rtol=1e-12)
    np.testing.assert_array_equal(default.components_, one_thread.components_)
    np.testing.assert_array_equal(table.T + 0.01, default.components_)
    np.testing.assert_allclose(default.components_.sum(axis=0) - 4 * 0.01,
                               np.asarray(X.sum(axis=0)).ravel())
    single = LDA(**kw, block_threads=1, client=client).fit(X)
    assert single.block_threads_ == 1
    assert not np.array_equal(single.components_, default.components_)  # another chain


def test_more_blocks_than_workers_and_sync_every(client, small):
    X, _ = small
    model = LDA(4, max_iter=4, random_state=0, n_blocks=3, sync_every=3, staleness=1,
                client=client).fit(X)
    assert model.n_blocks_ == 3
    assert model.components_.sum() - 4 * 120 * 0.01 == pytest.approx(X.sum())
    assert np.all(np.diff(model.loglikelihoods_[:2]) > 0)


class _Limits:
    """A stand-in client whose workers have the given memory limits (0: none)."""

    def __init__(self, *limits):
        self.limits = limits

    def sync(self, func, n_workers=None):
        return {"workers": {f"w{i}": {"memory_limit": m} for i, m in enumerate(self.limits)}}

    scheduler = type("Scheduler", (), {"identity": None})


def test_auto_sampler_picks_the_cheapest_by_topics_and_document_length():
    shard_docs = np.array([10_000, 9_000])  # 19,000 documents
    short, long_ = 19_000 * 50 / 2, 19_000 * 400 / 2  # tokens per shard: 50 / 400 per doc
    # few topics: dense Gibbs, whatever the document length
    assert LDA(20)._choose_sampler(_Limits(0), shard_docs, short) == "dense"
    assert LDA(50)._choose_sampler(_Limits(0), shard_docs, long_) == "dense"
    # many topics: sparse Gibbs on short documents (few non-zero topics each), MH on long
    # ones (O(1) per token), whatever the size of the shards
    assert LDA(1000)._choose_sampler(_Limits(0), shard_docs, short) == "sparse"
    assert LDA(1000)._choose_sampler(_Limits(0), shard_docs, long_) == "mh"
    assert LDA(1000)._choose_sampler(_Limits(0), shard_docs / 100, long_ / 100) == "mh"
    # the costs agree with the choices
    from dask_strads.lda.estimator import _sampler_costs

    assert min(_sampler_costs(20, 50.0).items(), key=lambda kv: kv[1])[0] == "dense"
    assert _sampler_costs(1000, 400.0)["mh"] < _sampler_costs(1000, 400.0)["sparse"]


def test_the_sampler_cost_model_orders_samplers_as_their_measured_time_to_quality():
    """bench/results/lda_mixing.md, text-10m (91 tokens per document): seconds to the
    exact samplers' log-likelihood after 30 iterations were dense < sparse < MH at
    K = 100 and sparse < MH < dense at K = 1000; MH needs more sweeps per exact-Gibbs
    sweep at larger K (2.0x at K = 100, 2.8x at K = 1000)."""
    from dask_strads.lda.estimator import _sampler_costs

    def order(k):
        costs = _sampler_costs(k, 91.0)
        return sorted(costs, key=costs.get)

    assert order(100) == ["dense", "sparse", "mh"]
    assert order(1000) == ["sparse", "mh", "dense"]
    assert _sampler_costs(10_000, 91.0)["mh"] > _sampler_costs(1000, 91.0)["mh"]


def test_auto_sampler_keeps_to_sparse_when_dense_doc_counts_are_too_large():
    shard_docs, tokens = np.array([10_000, 9_000]), 19_000 * 400 / 2  # 4 MB at K = 100
    assert LDA(1000)._choose_sampler(_Limits(4 * 2**30, 4 * 2**30), shard_docs,
                                     tokens) == "mh"
    assert LDA(1000)._choose_sampler(_Limits(0, 0), shard_docs, tokens) == "mh"  # 1 GB
    # the smallest worker decides: 4 MB > a tenth of 30 MB
    assert LDA(100)._choose_sampler(_Limits(4 * 2**30, 30 * 2**20), shard_docs,
                                    tokens) == "sparse"
    assert LDA(100_000)._choose_sampler(_Limits(0), shard_docs, tokens) == "sparse"  # 4 GB
    for name in ("mh", "sparse", "gibbs", "dense"):  # an explicit choice is kept
        assert LDA(100_000, sampler=name)._choose_sampler(_Limits(2**20), shard_docs,
                                                          10.0) == name


def test_fit_records_the_sampler_it_used(client, small):
    X, _ = small
    kw = dict(n_components=4, max_iter=2, random_state=0, client=client)
    assert LDA(**kw).fit(X).sampler_ == "dense"  # K = 4
    assert LDA(sampler="mh", **kw).fit(X).sampler_ == "mh"


def test_doc_topic_prior_none_is_one_over_k(client, small):
    X, _ = small
    kw = dict(n_components=4, max_iter=3, random_state=0, client=client)
    a = LDA(doc_topic_prior=None, **kw).fit(X)
    b = LDA(doc_topic_prior=0.25, **kw).fit(X)
    np.testing.assert_array_equal(a.components_, b.components_)  # the same chain
    np.testing.assert_allclose(a.transform(X[:20]), b.transform(X[:20]))
    assert a.doc_topic_prior is None  # the parameter is left as given


def test_top_words_and_perplexity(client, small):
    X, _ = small
    model = LDA(4, max_iter=20, random_state=0, client=client).fit(X)
    vocab = np.array([f"w{j}" for j in range(X.shape[1])])
    top = model.top_words(vocab, n_words=5)
    assert len(top) == 4 and all(len(t) == 5 for t in top)
    for k, words in enumerate(top):
        idx = [int(w[1:]) for w in words]
        assert idx == model.top_words(n_words=5)[k]
        counts = model.components_[k]
        assert list(counts[idx]) == sorted(counts[idx], reverse=True)
        assert counts[idx[-1]] >= np.delete(counts, idx).max()
    assert len(model.top_words(n_words=10 ** 6)[0]) == X.shape[1]
    with pytest.raises(ValueError, match="vocabulary"):
        model.top_words(vocab[:-1])
    with pytest.raises(ValueError, match="n_words"):
        model.top_words(vocab, n_words=0)
    # perplexity: exp(-score / tokens), lower for the fitted model than for a barely fitted one
    Xs = sp.csr_matrix(X)
    ppl = model.perplexity(Xs)
    assert ppl == pytest.approx(np.exp(-model.score(Xs) / Xs.sum()))
    early = LDA(4, max_iter=1, random_state=0, client=client).fit(X)
    assert ppl < early.perplexity(Xs)


@pytest.fixture(scope="module")
def reuters():
    """The Reuters corpus shipped by the `lda` package and that package's per-token
    complete-data log-likelihood after 500 iterations (K = 20, priors 0.1 / 0.01)."""
    lda = pytest.importorskip("lda")
    # read as lda.datasets.load_reuters does, but closing the file (it leaves it open)
    with open(os.path.join(os.path.dirname(lda.datasets.__file__), "tests",
                           "reuters.ldac")) as fh:
        X = lda.utils.ldac2dtm(fh, offset=0)
    reference = lda.LDA(20, n_iter=500, alpha=0.1, eta=0.01, random_state=0, refresh=500)
    reference.fit(X)
    return X, reference.loglikelihood() / X.sum()  # its loglikelihoods_ stop a sweep early


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["mh", "sparse"])
def test_reuters_loglikelihood_matches_lda_package(client, reuters, sampler):
    """Per-token complete-data log-likelihood after 500 iterations within 1% of the `lda`
    package's (MH, which mixes less per sweep, ends a little below the Gibbs samplers)."""
    X, theirs = reuters
    model = LDA(20, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=500, random_state=0,
                staleness=1, sampler=sampler, client=client).fit(X)
    ours = model.loglikelihoods_[-1] / X.sum()
    assert abs(ours - theirs) <= 0.01 * abs(theirs), (ours, theirs)


def test_invalid_alpha_settings_fail_before_cluster_work():
    X = np.ones((3, 4), dtype=int)
    for bad in ([0.1, 0.2], [0.1, -0.1, 0.2], [0.1, np.nan, 0.3], [0.1, np.inf, 0.3],
                [[0.1, 0.2, 0.3]], ["a", "b", "c"], np.zeros(3)):
        with pytest.raises(ValueError, match="doc_topic_prior"):
            LDA(3, doc_topic_prior=bad, client=_NoCluster()).fit(X)
    for bad in (-1, 1.5, "2", None):
        with pytest.raises(ValueError, match="optimize_interval"):
            LDA(3, optimize_interval=bad, client=_NoCluster()).fit(X)
    with pytest.raises(ValueError, match="optimize_burn_in"):
        LDA(3, optimize_interval=2, optimize_burn_in=-1, client=_NoCluster()).fit(X)


def test_an_array_prior_is_used_as_given(client, small):
    X, _ = small
    kw = dict(n_components=4, max_iter=3, random_state=0, client=client)
    a = LDA(doc_topic_prior=0.25, **kw).fit(X)
    b = LDA(doc_topic_prior=np.full(4, 0.25), **kw).fit(X)
    np.testing.assert_array_equal(a.components_, b.components_)  # the same chain
    np.testing.assert_array_equal(a.doc_topic_prior_, np.full(4, 0.25))
    np.testing.assert_array_equal(b.doc_topic_prior_, np.full(4, 0.25))
    prior = [0.5, 0.3, 0.2, 0.1]
    c = LDA(doc_topic_prior=prior, **kw)
    theta = c.fit_transform(X)
    np.testing.assert_array_equal(c.doc_topic_prior_, prior)  # not optimised: as given
    assert c.doc_topic_prior == prior  # the parameter is left as given
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    np.testing.assert_allclose(c.transform(X[:5]).sum(axis=1), 1.0)
    assert not np.array_equal(c.components_, a.components_)


def test_optimize_interval_learns_the_asymmetric_alpha_of_the_corpus(client):
    true = np.array([1.0, 0.4, 0.15, 0.06])
    X, topics = make_lda_corpus(600, 400, 4, doc_length=80, doc_topic_prior=true,
                                topic_word_prior=0.005, random_state=3)
    kw = dict(n_components=4, max_iter=100, random_state=1, n_blocks=2, sampler="sparse",
              client=client)
    fixed = LDA(**kw).fit(X)
    learned = LDA(optimize_interval=5, **kw).fit(X)
    np.testing.assert_array_equal(fixed.doc_topic_prior_, np.full(4, 0.1))
    # the learned alpha of each true topic (topics matched by their words)
    cos = ((learned.components_ / np.linalg.norm(learned.components_, axis=1, keepdims=True))
           @ (topics / np.linalg.norm(topics, axis=1, keepdims=True)).T)
    rows, cols = linear_sum_assignment(-cos)
    assert cos[rows, cols].min() > 0.95
    alpha = np.empty(4)
    alpha[cols] = learned.doc_topic_prior_[rows]
    assert np.all(np.diff(alpha) < 0)  # ordered as the true alpha
    np.testing.assert_allclose(alpha, true, rtol=0.3)
    assert learned.perplexity(X) <= fixed.perplexity(X)
    assert learned.loglikelihoods_[-1] >= fixed.loglikelihoods_[-1]
