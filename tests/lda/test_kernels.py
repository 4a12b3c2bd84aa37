"""LDA kernels: token layout, exactness of the samplers, counts, log-likelihood, fold-in."""

from __future__ import annotations

import itertools

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from dask_strads._datasets.lda import make_lda_corpus
from dask_strads.lda import kernels
from dask_strads.lda.program import partition_vocabulary


def _layout(X, n_blocks, n_topics, seed=0):
    X = sp.csr_matrix(X)
    wb, wl, bw = partition_vocabulary(np.asarray(X.sum(axis=0)).ravel(), n_blocks)
    offset = np.concatenate(([0], np.cumsum(bw))).astype(np.int64)
    doc_ptr, tok_doc, tok_pos, run_word, run_ptr, brp = kernels.build_tokens(
        X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data.astype(np.int64),
        wb, wl, offset)
    rng = np.random.default_rng(seed)
    zd = rng.integers(0, n_topics, doc_ptr[-1]).astype(np.int32)
    return dict(X=X, wb=wb, wl=wl, bw=bw, doc_ptr=doc_ptr, tok_doc=tok_doc, tok_pos=tok_pos,
                run_word=run_word, run_ptr=run_ptr, brp=brp, zd=zd)


def _global_word(L, b, local):
    words = np.flatnonzero(L["wb"] == b)
    return words[np.argsort(L["wl"][words])][local]


def test_build_tokens_layout():
    X, _ = make_lda_corpus(60, 40, 4, doc_length=30, random_state=3)
    L = _layout(X, 3, 4)
    Xc = L["X"]
    n = int(Xc.sum())
    assert L["doc_ptr"][-1] == n
    np.testing.assert_array_equal(np.diff(L["doc_ptr"]), np.asarray(Xc.sum(axis=1)).ravel())
    # tok_pos is a permutation of the doc-major slots, and each slot stays in its document
    np.testing.assert_array_equal(np.sort(L["tok_pos"]), np.arange(n))
    slot_doc = np.repeat(np.arange(Xc.shape[0]), np.diff(L["doc_ptr"]))
    np.testing.assert_array_equal(slot_doc[L["tok_pos"]], L["tok_doc"])
    # runs: one word each, grouped by block, docs increasing inside a run
    recount = np.zeros(Xc.shape, dtype=np.int64)
    assert L["brp"][0] == 0 and L["brp"][-1] == len(L["run_word"])
    for b in range(3):
        for r in range(L["brp"][b], L["brp"][b + 1]):
            w = _global_word(L, b, L["run_word"][r])
            docs = L["tok_doc"][L["run_ptr"][r]:L["run_ptr"][r + 1]]
            assert len(docs) > 0 and np.all(np.diff(docs) >= 0)
            np.add.at(recount[:, w], docs, 1)
    np.testing.assert_array_equal(recount, Xc.toarray())


def _rare_path(*args):
    """``sample_sparse`` with every word on the rare-word path."""
    return kernels.sparse_gibbs(*args[:8], *args[9:14], *args[15:], 10**9)


def _mixed_paths(*args):
    """``sample_sparse`` with words of fewer than 2 tokens on the rare-word path."""
    return kernels.sparse_gibbs(*args[:8], *args[9:14], *args[15:], 2)


VARIANTS = {"sparse-rare": _rare_path, "sparse-mixed": _mixed_paths}


@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("sampler", sorted(kernels.SAMPLERS) + sorted(VARIANTS))
def test_sampler_keeps_counts_consistent(sampler, asymmetric):
    K = 7
    alpha = np.linspace(0.02, 0.5, K) if asymmetric else np.full(K, 0.1)
    X, _ = make_lda_corpus(80, 50, K, doc_length=40, random_state=4)
    L = _layout(X, 2, K)
    V = X.shape[1]
    zd = L["zd"]
    ndk = kernels.count_doc_topic(L["doc_ptr"], zd, K)
    tables = [np.zeros((L["bw"][b], K), dtype=np.int32) for b in range(2)]
    for b in range(2):
        kernels.add_block_counts(L["brp"][b], L["brp"][b + 1], L["run_word"], L["run_ptr"],
                                 L["tok_pos"], zd, tables[b])
    nk = np.bincount(zd, minlength=K).astype(np.int64)
    lists = kernels.build_doc_lists(L["doc_ptr"], ndk)
    if sampler.startswith("sparse"):
        ndk = np.zeros((0, K), dtype=np.int32)  # unused: the lists hold the counts
    before = zd.copy()
    for it in range(3):
        for b in range(2):
            sample = VARIANTS.get(sampler, kernels.SAMPLERS.get(sampler))
            sample(L["brp"][b], L["brp"][b + 1], L["run_word"], L["run_ptr"],
                   L["tok_doc"], L["tok_pos"], zd, L["doc_ptr"], ndk, tables[b], nk, alpha,
                   0.01, V * 0.01, 2, 10 * it + b, *lists)
        dense = ndk if not sampler.startswith("sparse") else \
            kernels.doc_topic_from_lists(L["doc_ptr"], *lists, K)
        np.testing.assert_array_equal(dense, kernels.count_doc_topic(L["doc_ptr"], zd, K))
        for b in range(2):
            recount = np.zeros_like(tables[b])
            kernels.add_block_counts(L["brp"][b], L["brp"][b + 1], L["run_word"], L["run_ptr"],
                                     L["tok_pos"], zd, recount)
            np.testing.assert_array_equal(tables[b], recount)
        np.testing.assert_array_equal(nk, np.bincount(zd, minlength=K))
        assert tables[0].sum() + tables[1].sum() == dense.sum() == nk.sum() == zd.size
        if sampler.startswith("sparse"):  # no zero entries linger in the doc lists
            dl_topic, dl_count, dl_nnz = lists
            for d in range(dense.shape[0]):
                lo = L["doc_ptr"][d]
                assert np.all(dl_count[lo:lo + dl_nnz[d]] > 0)
                assert len(set(dl_topic[lo:lo + dl_nnz[d]])) == dl_nnz[d]
    assert (zd != before).mean() > 0.3  # it does move


def _joint_loglik(zd, doc_ptr, words, K, V, alpha, beta, frozen=None):
    """log p(w, z) (``alpha`` a number or K of them); ``frozen`` (V, K): word-topic counts
    of another shard's tokens, held fixed (the doc terms of their documents are
    constants)."""
    from scipy.special import gammaln

    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), (K,))

    D = len(doc_ptr) - 1
    ndk = np.zeros((D, K))
    nwk = np.zeros((V, K)) if frozen is None else frozen.astype(float)
    for d in range(D):
        for p in range(doc_ptr[d], doc_ptr[d + 1]):
            ndk[d, zd[p]] += 1
            nwk[words[p], zd[p]] += 1
    nk = nwk.sum(axis=0)
    nd = ndk.sum(axis=1)
    return (gammaln(ndk + alpha).sum() - D * gammaln(alpha).sum() + D * gammaln(alpha.sum())
            - gammaln(nd + alpha.sum()).sum() + gammaln(nwk + beta).sum() - V * K * gammaln(beta)
            + K * gammaln(V * beta) - gammaln(nk + V * beta).sum())


# an asymmetric alpha far enough from the symmetric one for the test to tell them apart
ASYMMETRIC = np.array([0.1, 1.5, 0.4])
CASES = [("sparse", 1, False), ("sparse-rare", 1, False), ("sparse-mixed", 1, False),
         ("mh", 1, False), ("mh", 2, False), ("gibbs", 1, False), ("dense", 1, False),
         ("sparse", 1, True), ("mh", 1, True), ("mh", 2, True), ("dense", 1, True)]


@pytest.mark.parametrize("sampler,mh_steps,frozen,asymmetric",
                         [(*c, False) for c in CASES] + [(*c, True) for c in CASES])
def test_sampler_stationary_distribution_is_the_posterior(sampler, mh_steps, frozen, asymmetric):
    """Enumerate all 3^5 topic assignments of a tiny corpus: the chain's visit
    frequencies must match the exact collapsed posterior p(z | w) ∝ p(w, z). With
    ``frozen``, the word-topic table and the totals also hold another shard's tokens
    (fixed): the shard's own counts of a word then differ from the table's, which the
    MH word proposal must correct for. ``asymmetric``: one alpha per topic."""
    K, V, beta = 3, 3, 0.3
    alpha = ASYMMETRIC.copy() if asymmetric else np.full(K, 0.5)
    X = sp.csr_matrix(np.array([[2, 1, 0], [0, 1, 1]]))
    L = _layout(X, 1, K, seed=1)
    doc_ptr = L["doc_ptr"]
    words = np.repeat(X.indices, X.data)  # doc-major word of every slot
    n = int(doc_ptr[-1])
    other = (np.array([[3, 0, 1], [0, 0, 2], [1, 1, 0]], dtype=np.int32) if frozen
             else np.zeros((V, K), dtype=np.int32))
    states = list(itertools.product(range(K), repeat=n))
    logp = np.array([_joint_loglik(np.array(s), doc_ptr, words, K, V, alpha, beta, other)
                     for s in states])
    exact = np.exp(logp - logp.max())
    exact /= exact.sum()
    zd = L["zd"]
    ndk = kernels.count_doc_topic(doc_ptr, zd, K)
    table = other.copy()
    kernels.add_block_counts(0, len(L["run_word"]), L["run_word"], L["run_ptr"], L["tok_pos"],
                             zd, table)
    nk = (np.bincount(zd, minlength=K) + other.sum(axis=0)).astype(np.int64)
    lists = kernels.build_doc_lists(doc_ptr, ndk)
    sweeps = 60000
    visits = np.zeros(len(states))
    code = K ** np.arange(n)[::-1]
    sample = VARIANTS.get(sampler, kernels.SAMPLERS.get(sampler))
    for i in range(sweeps):
        sample(0, len(L["run_word"]), L["run_word"], L["run_ptr"], L["tok_doc"], L["tok_pos"],
               zd, doc_ptr, ndk, table, nk, alpha, beta, V * beta, mh_steps, i, *lists)
        visits[int(zd @ code)] += 1
    visits /= sweeps
    tv = 0.5 * np.abs(visits - exact).sum()
    assert tv < 0.03, tv


def test_loglik_parts_match_lda_package():
    lda_ext = pytest.importorskip("lda._lda")
    rng = np.random.default_rng(0)
    D, V, K = 30, 40, 6
    ndk = rng.integers(0, 5, (D, K)).astype(np.int32)
    ndk[rng.random((D, K)) < 0.4] = 0
    nwk = rng.integers(0, 6, (V, K)).astype(np.int32)
    nwk[rng.random((V, K)) < 0.5] = 0
    nk = nwk.sum(axis=0).astype(np.int32)
    nd = ndk.sum(axis=1).astype(np.int32)
    doc_ptr = np.concatenate(([0], np.cumsum(nd))).astype(np.int64)
    alpha, beta = 0.1, 0.01
    ours = (kernels.doc_loglik(ndk, doc_ptr, np.full(K, alpha)) + kernels.word_loglik(nwk, beta)
            + kernels.topic_loglik(nk.astype(np.int64), V, beta))
    theirs = lda_ext._loglikelihood(np.asfortranarray(nwk.T), np.ascontiguousarray(ndk), nk, nd,
                                    alpha, beta)
    assert ours == pytest.approx(theirs, rel=1e-10)
    # the word part splits over vocabulary blocks
    halves = kernels.word_loglik(nwk[:17], beta) + kernels.word_loglik(nwk[17:], beta)
    assert halves == pytest.approx(kernels.word_loglik(nwk, beta), rel=1e-12)


@numba.njit
def _sums_find_after_update(values, k_upd, new_value, us):
    """Build two-level sums, change one value through ``_sums_add``, then draw each u."""
    shift = kernels._block_shift(values.shape[0])
    sums = np.empty(((values.shape[0] - 1) >> shift) + 1)
    kernels._sums_build(sums, values, shift)
    kernels._sums_add(sums, k_upd, new_value - values[k_upd], shift)
    values[k_upd] = new_value
    out = np.empty(us.shape[0], dtype=np.int64)
    for i in range(us.shape[0]):
        out[i] = kernels._sums_find(sums, values, us[i], shift)
    return out


def test_two_level_sums_find_matches_searchsorted():
    rng = np.random.default_rng(6)
    for K in (1, 2, 7, 64, 100, 257, 1000, 5000):
        values = rng.random(K) * (rng.random(K) < 0.7) + 1e-9
        k_upd = int(rng.integers(K))
        new_value = values[k_upd] + rng.random()
        us = rng.random(300)
        expected_values = values.copy()
        expected_values[k_upd] = new_value
        cum = np.cumsum(expected_values)
        us *= cum[-1]
        got = _sums_find_after_update(values, k_upd, new_value, us)
        np.testing.assert_array_equal(got, np.searchsorted(cum, us, side="right"))
    # blocks of about sqrt(K), at least 8
    assert [1 << kernels._block_shift(K) for K in (1, 64, 100, 1000, 5000)] == [8, 8, 16, 32, 128]


@numba.njit
def _prefetch_mixed(a, b, c):
    kernels._prefetch(a, 1)
    kernels._prefetch(b, 2)
    kernels._prefetch(c, 3)
    return a[1] + b[2] + c[3]


def test_prefetch_takes_arrays_of_any_dtype_in_one_function():
    # one LLVM declaration of the prefetch intrinsic serves every element type
    a = np.arange(4, dtype=np.int32)
    b = np.arange(4, dtype=np.int16)
    c = np.arange(4, dtype=np.float64)
    assert _prefetch_mixed(a, b, c) == 1 + 2 + 3.0


def test_fold_in_recovers_single_topic_documents():
    V, K = 30, 3
    phi = np.full((V, K), 1e-3)
    for k in range(K):
        phi[10 * k:10 * (k + 1), k] = 1.0
    phi /= phi.sum(axis=0, keepdims=True)
    rng = np.random.default_rng(0)
    rows = []
    for d in range(9):
        k = d % K
        counts = np.bincount(rng.integers(10 * k, 10 * (k + 1), 40), minlength=V)
        rows.append(counts)
    X = sp.csr_matrix(np.array(rows))
    theta = kernels.fold_in(X.indptr.astype(np.int64), X.indices.astype(np.int32),
                            X.data.astype(np.int64), np.ascontiguousarray(phi), np.full(K, 0.1),
                            30, 15, 7)
    np.testing.assert_allclose(theta.sum(axis=1), 1.0)
    np.testing.assert_array_equal(theta.argmax(axis=1), np.arange(9) % K)
    assert theta.max(axis=1).min() > 0.9


def test_doc_loglik_with_an_asymmetric_alpha_is_the_lgamma_formula():
    from scipy.special import gammaln

    rng = np.random.default_rng(3)
    D, K = 40, 9
    ndk = rng.integers(0, 6, (D, K)).astype(np.int32)
    ndk[rng.random((D, K)) < 0.5] = 0
    ndk[0, :] = 0  # an empty document
    ndk[1, 2] = 5000  # a count beyond the tables
    doc_ptr = np.concatenate(([0], np.cumsum(ndk.sum(axis=1)))).astype(np.int64)
    alpha = rng.uniform(0.01, 3.0, K)
    nd = ndk.sum(axis=1)
    direct = (D * gammaln(alpha.sum()) - gammaln(nd + alpha.sum()).sum()
              + (gammaln(ndk + alpha) - gammaln(alpha)).sum())
    assert kernels.doc_loglik(ndk, doc_ptr, alpha) == pytest.approx(direct, rel=1e-12)
    lists = kernels.build_doc_lists(doc_ptr, ndk)
    assert kernels.doc_loglik_lists(doc_ptr, *lists, alpha) == pytest.approx(direct, rel=1e-12)
    # a constant array is the symmetric prior, tabled
    sym = np.full(K, 0.3)
    direct = (D * gammaln(0.3 * K) - gammaln(nd + 0.3 * K).sum()
              + (gammaln(ndk + 0.3) - gammaln(0.3)).sum())
    assert kernels.doc_loglik(ndk, doc_ptr, sym) == pytest.approx(direct, rel=1e-12)
    assert kernels.doc_loglik_lists(doc_ptr, *lists, sym) == pytest.approx(direct, rel=1e-12)


@numba.njit
def _alias_draws(weights, xs):
    prob, alias = kernels.prior._alias_table(weights)
    out = np.empty(xs.shape[0], dtype=np.int64)
    for i in range(xs.shape[0]):
        out[i] = kernels.prior._alias_draw(prob, alias, xs[i])
    return out, prob, alias


def test_alias_table_draws_in_proportion_to_the_weights():
    rng = np.random.default_rng(5)
    for K in (1, 2, 5, 100):
        weights = rng.uniform(0.001, 2.0, K)
        weights[rng.random(K) < 0.2] *= 1e-3
        _, prob, alias = _alias_draws(weights, np.zeros(1))
        # the exact distribution the table encodes
        exact = prob.copy()
        np.add.at(exact, alias, 1.0 - prob)
        np.testing.assert_allclose(exact / K, weights / weights.sum(), rtol=1e-9, atol=1e-15)
        draws, _, _ = _alias_draws(weights, rng.random(200000) * K)
        freq = np.bincount(draws, minlength=K) / len(draws)
        assert 0.5 * np.abs(freq - weights / weights.sum()).sum() < 0.01


def test_doc_topic_histograms_count_documents_per_topic_and_count():
    rng = np.random.default_rng(2)
    D, K = 50, 6
    ndk = rng.integers(0, 8, (D, K)).astype(np.int32)
    ndk[rng.random((D, K)) < 0.4] = 0
    doc_ptr = np.concatenate(([0], np.cumsum(ndk.sum(axis=1)))).astype(np.int64)
    top = int(ndk.max())
    expected = np.zeros((K, top + 1), dtype=np.int64)
    for k in range(K):
        expected[k] = np.bincount(ndk[:, k], minlength=top + 1)
    expected[:, 0] = 0
    np.testing.assert_array_equal(kernels.doc_topic_histogram(ndk, top), expected)
    lists = kernels.build_doc_lists(doc_ptr, ndk)
    np.testing.assert_array_equal(
        kernels.doc_topic_histogram_lists(doc_ptr, *lists, K, top), expected)


def test_fold_in_with_an_asymmetric_alpha():
    V, K = 20, 2
    phi = np.full((V, K), 1.0 / V)  # the words say nothing: theta is the prior's mean
    X = sp.csr_matrix(np.array([[0] * V, [1] + [0] * (V - 1)]))
    alpha = np.array([3.0, 1.0])
    theta = kernels.fold_in(X.indptr.astype(np.int64), X.indices.astype(np.int32),
                            X.data.astype(np.int64), phi, alpha, 400, 50, 1)
    np.testing.assert_allclose(theta[0], [0.75, 0.25])  # the empty document: exactly
    np.testing.assert_allclose(theta[1], [0.75, 0.25], atol=0.03)
