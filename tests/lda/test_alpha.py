"""Optimisation of an asymmetric alpha: Minka's update from the shards' histograms, and
the program's schedule of updates (deterministic, checkpointed)."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from scipy.special import digamma

from dask_strads.lda import kernels
from dask_strads.lda.alpha import MIN_ALPHA, minka_update, shard_histograms
from tests.lda.test_program import _program, _restore, _shards, _simulate, _snapshot


def _direct_minka(alpha, ndk, n_iter, floor=MIN_ALPHA):
    """The fixed point written on the doc-topic table itself (no histograms)."""
    alpha = np.array(alpha, dtype=float)
    nd = ndk.sum(axis=1)
    for _ in range(n_iter):
        den = (digamma(nd + alpha.sum()) - digamma(alpha.sum())).sum()
        num = (digamma(ndk + alpha) - digamma(alpha)).sum(axis=0)
        alpha = np.maximum(alpha * num / den, floor)
    return alpha


def _histograms(ndk, cuts):
    """The shards' histograms of ``ndk`` cut into row ranges."""
    out = []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        part = np.ascontiguousarray(ndk[lo:hi])
        hist = kernels.doc_topic_histogram(part, int(part.sum(axis=1).max(initial=0)))
        out.append(shard_histograms(hist, part.sum(axis=1)))
    return out


def test_minka_update_matches_a_direct_implementation():
    rng = np.random.default_rng(0)
    D, K = 60, 5
    theta = rng.dirichlet([2.0, 1.0, 0.5, 0.2, 0.1], size=D)
    ndk = np.stack([rng.multinomial(rng.integers(0, 40), t) for t in theta]).astype(np.int32)
    ndk[3] = 0  # an empty document adds nothing
    ndk[:, 4] = 0  # a topic no document uses: held at the floor
    alpha = np.full(K, 0.3)
    hists = _histograms(ndk, [0, 25, 60])
    for n_iter in (1, 10):
        np.testing.assert_allclose(minka_update(alpha, hists, n_iter=n_iter),
                                   _direct_minka(alpha, ndk, n_iter), rtol=1e-12)
    # iterated to its fixed point: the gradient of the Dirichlet-multinomial likelihood
    # vanishes for the topics above the floor
    fixed = minka_update(alpha, hists, n_iter=3000)
    nd = ndk.sum(axis=1)
    grad = ((digamma(fixed.sum()) - digamma(nd + fixed.sum()))[:, None]
            + digamma(ndk + fixed) - digamma(fixed)).sum(axis=0)
    np.testing.assert_allclose(grad[:4], 0.0, atol=1e-6)
    assert fixed[4] == MIN_ALPHA
    assert fixed[0] > fixed[1] > fixed[2] > fixed[3]  # ordered as the generating alpha
    # the shards' split does not change the update
    np.testing.assert_array_equal(minka_update(alpha, _histograms(ndk, [0, 60])),
                                  minka_update(alpha, _histograms(ndk, [0, 60])))
    np.testing.assert_allclose(minka_update(alpha, _histograms(ndk, [0, 10, 30, 60])),
                               minka_update(alpha, hists), rtol=1e-12)


@pytest.fixture(scope="module")
def corpus():
    from dask_strads._datasets.lda import make_lda_corpus

    X, _ = make_lda_corpus(240, 150, 5, doc_length=40, zipf=1.0, topic_word_prior=0.05,
                           doc_topic_prior=np.array([0.8, 0.4, 0.2, 0.1, 0.05]),
                           random_state=2)
    return X


OPT = dict(optimize_interval=2, optimize_burn_in=1)


@pytest.mark.parametrize("max_iter", [6, 7])  # the last iteration updates alpha, or not
@pytest.mark.parametrize("staleness", [0, 1, 4])
def test_alpha_updates_take_effect_at_an_iteration_start_after_the_rounds_in_flight(
        corpus, staleness, max_iter):
    P = 3
    data, _ = _shards(corpus, P)
    program = _program(corpus, P, max_iter=max_iter, sampler="sparse", **OPT)
    seen = []  # (round, alpha sent) of every part that carries one
    push = program.push

    def spy(block, part, carried=None):
        if part.get("alpha") is not None:
            seen.append((part["round"], np.array(part["alpha"])))
        return push(block, part, carried)

    program.push = spy
    state, blocks, _ = _simulate(program, data, staleness=staleness)
    # updates after iterations 2, 4, 6 (last sub-round r = 3 it + 2): each in effect from
    # the first iteration start >= r + 1 + staleness
    effective = [-(-(3 * it + 2 + 1 + staleness) // P) * P for it in (2, 4, 6)]
    changes = [r for i, (r, a) in enumerate(seen) if i == 0 or not np.array_equal(
        a, seen[i - 1][1])]
    assert changes[1:] == [e for e in effective if e < program.n_rounds]
    # the last state: the shards sampled with the alpha in effect in the last round
    last = program.alpha_at(state, program.n_rounds - 1)
    for block in blocks.values():
        for shard in block.shards:
            np.testing.assert_array_equal(shard.alpha, last)
    assert not np.array_equal(last, program.alpha)
    np.testing.assert_array_equal(last, [a for r, a in seen if r <= program.n_rounds - 1][-1])


@pytest.mark.parametrize("sampler", ["sparse", "mh", "dense", "gibbs"])
def test_loglikelihood_stays_exact_across_alpha_updates(corpus, sampler):
    """The running log-likelihood (samplers' deltas) is rebased by a full recount after an
    update: the same values as recounts after every iteration."""
    data, _ = _shards(corpus, 3)
    kw = dict(max_iter=9, sync_every=2, sampler=sampler, seed=4, **OPT)
    kept, _, _ = _simulate(_program(corpus, 3, **kw), data, staleness=1)
    recounted, _, _ = _simulate(_program(corpus, 3, check=True, **kw), data, staleness=1)
    np.testing.assert_allclose(kept["loglikelihoods"], recounted["loglikelihoods"],
                               rtol=1e-11)
    for c in recounted["checks"]:
        assert c["nk_matches_ndk"] and c["nwk_matches_recount"] and c["ndk_matches_recount"]
    with dask.config.set({"dask-strads.lda.full-loglik-every": 1}):
        every, _, _ = _simulate(_program(corpus, 3, **kw), data, staleness=1)
    np.testing.assert_allclose(kept["loglikelihoods"], every["loglikelihoods"], rtol=1e-11)


@pytest.mark.parametrize("staleness", [0, 2])
@pytest.mark.parametrize("stop_after", [5, 8, 14, 19])  # before / mid / after updates
def test_checkpoint_round_trip_keeps_the_learned_alpha(corpus, tmp_path, stop_after,
                                                        staleness):
    data, _ = _shards(corpus, 3)
    program = _program(corpus, 3, max_iter=7, sync_every=2, sampler="mh", seed=3, **OPT)
    expected, expected_blocks, _ = _simulate(program, data, staleness=staleness)
    state, blocks, carried = _simulate(program, data, stop_after=stop_after,
                                       staleness=staleness)
    snap = _snapshot(program, stop_after, state, blocks, carried, tmp_path)
    resumed, blocks, _ = _simulate(program, data, start=_restore(program, data, snap),
                                   staleness=staleness)
    assert resumed["loglikelihoods"] == expected["loglikelihoods"]
    np.testing.assert_array_equal(program.alpha_at(resumed, program.n_rounds - 1),
                                  program.alpha_at(expected, program.n_rounds - 1))
    for b in data:
        for shard, same in zip(blocks[b].shards, expected_blocks[b].shards, strict=True):
            np.testing.assert_array_equal(shard.zd, same.zd)


def test_a_checkpoint_without_alpha_resumes_with_the_fixed_prior(corpus, tmp_path):
    """Checkpoints written before alpha was kept (no ``alpha*`` arrays) still resume."""
    data, _ = _shards(corpus, 2)
    program = _program(corpus, 2, max_iter=4, sampler="sparse", seed=1)
    expected, _, _ = _simulate(program, data)
    state, blocks, carried = _simulate(program, data, stop_after=5)
    snap = _snapshot(program, 5, state, blocks, carried, tmp_path)
    for name in ("alpha_rounds", "alpha_values"):
        del snap.state[name]
    for arrays in snap.blocks.values():
        del arrays["alpha"]
    resumed, _, _ = _simulate(program, data, start=_restore(program, data, snap))
    assert resumed["loglikelihoods"] == expected["loglikelihoods"]


def test_a_symmetric_array_is_the_scalar_prior(corpus):
    data, _ = _shards(corpus, 2)
    scalar, _, _ = _simulate(_program(corpus, 2, max_iter=3, sampler="mh", seed=2), data)
    wb_program = _program(corpus, 2, max_iter=3, sampler="mh", seed=2)
    wb_program.alpha = np.full(5, 0.1)
    array, _, _ = _simulate(wb_program, data)
    assert scalar["loglikelihoods"] == array["loglikelihoods"]


def test_program_rejects_a_bad_alpha():
    from dask_strads.lda.program import LDAProgram, partition_vocabulary

    wb, wl, bw = partition_vocabulary(np.arange(1, 11), 2)
    for bad in (np.array([0.1, 0.2]), np.array([0.1, -1.0, 0.2]), np.array([0.1, np.nan, 1.0])):
        with pytest.raises(ValueError, match="alpha"):
            LDAProgram(3, bad, 0.01, wb, wl, bw, max_iter=1)
    with pytest.raises(ValueError, match="optimize_interval"):
        LDAProgram(3, 0.1, 0.01, wb, wl, bw, max_iter=1, optimize_interval=-1)
