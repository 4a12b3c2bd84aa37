"""LDA word-rotation program: partitions, rotation schedule, count consistency, engine runs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

from dask_strads._datasets.lda import make_lda_corpus
from dask_strads.engine import RoundContext, run
from dask_strads.engine import checkpoint as ckpt
from dask_strads.lda.program import (
    CountBlock,
    LDAProgram,
    partition_documents,
    partition_vocabulary,
)


def _shards(X, P, threads=1):
    """P blocks' data: a shard each, or with ``threads`` > 1 a list of that many."""
    X = sp.csr_matrix(X)
    S = P * threads
    bounds = partition_documents(np.asarray(X.sum(axis=1)).ravel(), S)
    pieces = [(X[bounds[i]:bounds[i + 1]].indptr, X[bounds[i]:bounds[i + 1]].indices,
               X[bounds[i]:bounds[i + 1]].data) for i in range(S)]
    if threads == 1:
        return dict(enumerate(pieces)), bounds
    return {p: pieces[p * threads:(p + 1) * threads] for p in range(P)}, bounds


def _program(X, P, K=5, threads=1, **kwargs):
    wb, wl, bw = partition_vocabulary(np.asarray(X.sum(axis=0)).ravel(), P * threads)
    return LDAProgram(K, 0.1, 0.01, wb, wl, bw, threads=threads, **kwargs)


def _simulate(program, data, stop_after=None, start=None, staleness=0):
    """The engine's contract, in process and in order (no cluster): from the start, or
    from ``start = (round, state, blocks, carried)``; stops before round ``stop_after``.
    ``staleness``: what every round's context says (the rounds still run one by one)."""
    if start is None:
        blocks = {b: program.init_block(b, s) for b, s in data.items()}
        state = program.init_state({b: program.block_summary(b, blk)
                                    for b, blk in blocks.items()})
        carried, r = {}, 0
    else:
        r, state, blocks, carried = start
    while r != stop_after:
        plan = program.schedule(state, RoundContext(r, staleness=staleness))
        if plan is None:
            break
        partials = {}
        for b, part in plan.parts.items():
            cid = plan.carry[b]
            value = carried[cid] if cid in carried else program.init_carried(cid)
            partials[b], carried[cid] = program.push(blocks[b], part, value)
        state = program.pull(state, partials, plan)
        r += 1
    return state, blocks, carried


def _snapshot(program, r, state, blocks, carried, directory):
    """What the engine checkpoints at the end of round ``r``, through the file format."""
    snap = ckpt.Snapshot(round=r, state=program.state_arrays(state),
                         blocks={b: program.block_arrays(blk) for b, blk in blocks.items()},
                         carried={c: v.copy() for c, v in carried.items()})
    ckpt.save(directory, snap)
    return ckpt.load(directory)


def _restore(program, data, snap):
    blocks = {b: program.restore_block(b, data[b], snap.state, snap.blocks[b]) for b in data}
    return snap.round, program.load_state(snap.state), blocks, dict(snap.carried)


@pytest.fixture(scope="module")
def corpus():
    X, topics = make_lda_corpus(240, 150, 5, doc_length=40, zipf=1.0, topic_word_prior=0.05,
                                random_state=2)
    return X, topics


def test_partition_vocabulary_balances_tokens_and_rows():
    rng = np.random.default_rng(0)
    counts = (1e5 / (np.arange(5000) + 1.0)).astype(np.int64)  # Zipf
    rng.shuffle(counts)
    wb, wl, bw = partition_vocabulary(counts, 4)
    assert bw.sum() == 5000 and set(np.unique(wb)) == {0, 1, 2, 3}
    tokens = np.bincount(wb, weights=counts, minlength=4)
    assert tokens.max() / tokens.min() < 1.05
    assert bw.max() / bw.min() < 1.2
    for b in range(4):  # local rows: a permutation of 0..V_b-1 in increasing word order
        words = np.flatnonzero(wb == b)
        np.testing.assert_array_equal(wl[words], np.arange(len(words)))


def test_partition_documents_contiguous_and_balanced():
    lengths = np.random.default_rng(1).poisson(50, 1000)
    bounds = partition_documents(lengths, 3)
    assert bounds[0] == 0 and bounds[-1] == 1000 and np.all(np.diff(bounds) > 0)
    tokens = np.add.reduceat(lengths, bounds[:-1])
    assert tokens.max() / tokens.min() < 1.05


def test_schedule_is_a_rotation():
    wb, wl, bw = partition_vocabulary(np.arange(1, 31), 3)
    program = LDAProgram(4, 0.1, 0.01, wb, wl, bw, max_iter=2, sync_every=2)
    state = {"nk": np.zeros(4, dtype=np.int64), "pulled": 0, "recent": {}}
    plans = [program.schedule(state, RoundContext(r)) for r in range(program.n_rounds)]
    assert program.schedule(state, RoundContext(program.n_rounds)) is None
    assert [p.info["mode"] for p in plans] == ["count"] * 3 + ["sample"] * 6
    for p in plans:
        assert sorted(p.carry.values()) == [0, 1, 2]  # each vocabulary block has one holder
    for it in range(3):
        for b in range(3):
            assert sorted(plans[3 * it + s].carry[b] for s in range(3)) == [0, 1, 2]
    # topic totals sent at sub-rounds 0 and 2 of each rotation (sync_every=2)
    assert [plans[r].parts[0]["nk"] is not None for r in range(3, 9)] == [True, False, True] * 2
    assert [p.info["last"] for p in plans] == [False] * 5 + [True] + [False] * 2 + [True]


@pytest.mark.parametrize("P, threads", [(3, 1), (2, 2), (1, 3)])
def test_rotation_counts_consistent_every_iteration(corpus, P, threads):
    X, _ = corpus
    data, _ = _shards(X, P, threads)
    program = _program(X, P, threads=threads, max_iter=6, check=True, sync_every=min(P, 2))
    state, _, _ = _simulate(program, data)
    assert len(state["checks"]) == 6 and len(state["loglikelihoods"]) == 6
    n = int(X.sum())
    for c in state["checks"]:
        assert c["n_tokens"] == c["expected_tokens"] == c["ndk_total"] == c["nwk_total"] == n
        assert c["nk_matches_ndk"] and c["nk_matches_nwk"]
        assert c["nwk_matches_recount"] and c["ndk_matches_recount"]


@pytest.mark.parametrize("threads", [1, 2])
def test_loglikelihood_equals_recomputed_from_final_state(corpus, threads):
    lda_ext = pytest.importorskip("lda._lda")
    X, _ = corpus
    data, _ = _shards(X, 2, threads)
    program = _program(X, 2, threads=threads, max_iter=4)
    state, blocks, carried = _simulate(program, data)
    ndk = np.concatenate([blocks[p].doc_topic() for p in range(2)])
    V, K = X.shape[1], 5
    nwk = np.zeros((V, K), dtype=np.int32)
    for b, table in carried.items():
        words = np.flatnonzero(program.carried_block == b)
        nwk[words[np.argsort(program.carried_local[words])]] = table
    # every word's row holds its tokens in the corpus: the rows are the right words
    np.testing.assert_array_equal(nwk.sum(axis=1), np.asarray(X.sum(axis=0)).ravel())
    nk = nwk.sum(axis=0).astype(np.int32)
    np.testing.assert_array_equal(nk, state["nk"])
    expected = lda_ext._loglikelihood(np.asfortranarray(nwk.T), ndk, nk,
                                      ndk.sum(axis=1).astype(np.int32), 0.1, 0.01)
    assert state["loglikelihoods"][-1] == pytest.approx(expected, rel=1e-10)
    assert state["loglikelihoods"][-1] > state["loglikelihoods"][0]


def test_same_seed_same_chain(corpus):
    X, _ = corpus
    data, _ = _shards(X, 2)
    a, _, _ = _simulate(_program(X, 2, max_iter=3, seed=4), data)
    b, _, _ = _simulate(_program(X, 2, max_iter=3, seed=4), data)
    c, _, _ = _simulate(_program(X, 2, max_iter=3, seed=5), data)
    assert a["loglikelihoods"] == b["loglikelihoods"] != c["loglikelihoods"]


@pytest.mark.parametrize("staleness", [0, 2])
@pytest.mark.parametrize("sampler", ["sparse", "gibbs", "mh", "dense"])
@pytest.mark.parametrize("stop_after", [0, 2, 3, 7, 11])  # counting, boundaries, mid-rotation
@pytest.mark.parametrize("threads", [1, 2])
def test_checkpoint_round_trip_continues_the_same_chain(corpus, tmp_path, sampler, stop_after,
                                                        staleness, threads):
    """Restored from a checkpoint (through the file), the chain goes on exactly as if never
    stopped, and every consistency check passes after the restore."""
    X, _ = corpus
    data, _ = _shards(X, 3, threads)
    program = _program(X, 3, threads=threads, max_iter=5, check=True, sync_every=2,
                       sampler=sampler, seed=3)
    expected, expected_blocks, expected_carried = _simulate(program, data, staleness=staleness)
    state, blocks, carried = _simulate(program, data, stop_after=stop_after,
                                       staleness=staleness)
    snap = _snapshot(program, stop_after, state, blocks, carried, tmp_path)
    # the blocks go on changing after the snapshot: it must not share their arrays
    _simulate(program, data, start=(stop_after, state, blocks, carried), staleness=staleness)
    resumed, blocks, carried = _simulate(program, data, start=_restore(program, data, snap),
                                         staleness=staleness)
    assert resumed["loglikelihoods"] == expected["loglikelihoods"]
    np.testing.assert_array_equal(resumed["nk"], expected["nk"])
    assert resumed["trace"] == expected["trace"] and resumed["sampled"] == expected["sampled"]
    assert resumed["checks"] == expected["checks"] and len(resumed["checks"]) == 5
    for c in resumed["checks"]:
        assert c["nk_matches_ndk"] and c["nk_matches_nwk"]
        assert c["nwk_matches_recount"] and c["ndk_matches_recount"]
    for b in data:
        for shard, same in zip(blocks[b].shards, expected_blocks[b].shards, strict=True):
            np.testing.assert_array_equal(shard.zd, same.zd)
            np.testing.assert_array_equal(shard.doc_topic(), same.doc_topic())
        np.testing.assert_array_equal(carried[b], expected_carried[b])


@pytest.mark.parametrize("sampler", ["sparse", "gibbs", "mh", "dense"])
def test_loglikelihood_from_the_samplers_deltas_matches_full_recounts(corpus, tmp_path,
                                                                     sampler):
    """Between full recounts (end of the counting rotation, every 10th and the last
    iteration) the log-likelihood is kept from the samplers' deltas: the same values as
    a recount after every iteration (``check``), also across a checkpoint round trip."""
    X, _ = corpus
    data, _ = _shards(X, 3)
    kw = dict(max_iter=13, sync_every=2, sampler=sampler, seed=4)
    kept, _, _ = _simulate(_program(X, 3, **kw), data, staleness=1)
    recounted, _, _ = _simulate(_program(X, 3, check=True, **kw), data, staleness=1)
    assert len(kept["loglikelihoods"]) == 13
    np.testing.assert_allclose(kept["loglikelihoods"], recounted["loglikelihoods"],
                               rtol=1e-12)
    assert kept["loglikelihoods"][-1] == recounted["loglikelihoods"][-1]  # recounted too
    program = _program(X, 3, **kw)
    state, blocks, carried = _simulate(program, data, stop_after=20,  # mid iteration 6
                                       staleness=1)
    snap = _snapshot(program, 20, state, blocks, carried, tmp_path)
    resumed, _, _ = _simulate(program, data, start=_restore(program, data, snap), staleness=1)
    assert resumed["loglikelihoods"] == kept["loglikelihoods"]


def test_totals_sent_do_not_depend_on_how_far_the_engine_pulled(corpus):
    """With staleness 1, round r gets the topic totals as of round r - 1 whether round
    r - 1 was still in flight when r was scheduled (the usual pipeline) or already pulled
    (a snapshot drained the pipeline): the chain does not depend on when snapshots ran."""
    X, _ = corpus
    data, _ = _shards(X, 3)
    program = _program(X, 3, max_iter=3)
    for k in (4, 5, 7):  # sample rounds
        ctx = RoundContext(k, staleness=1)
        behind, _, _ = _simulate(program, data, stop_after=k - 1, staleness=1)
        drained, _, _ = _simulate(program, data, stop_after=k, staleness=1)
        assert not np.array_equal(behind["nk"], drained["nk"])  # round k - 1 moved topics
        nk_behind, as_of_behind = program.schedule(behind, ctx).parts[0]["nk"]
        nk_drained, as_of_drained = program.schedule(drained, ctx).parts[0]["nk"]
        assert as_of_behind == as_of_drained == k - 1
        np.testing.assert_array_equal(nk_behind, nk_drained)
        np.testing.assert_array_equal(nk_drained, behind["nk"])


def test_restore_rejects_another_corpus_or_model(corpus, tmp_path):
    X, _ = corpus
    data, _ = _shards(X, 2)
    program = _program(X, 2, max_iter=1)
    state, blocks, carried = _simulate(program, data, stop_after=3)
    snap = _snapshot(program, 3, state, blocks, carried, tmp_path)
    with pytest.raises(ValueError, match="n_components"):
        _program(X, 2, K=6, max_iter=1).load_state(snap.state)
    with pytest.raises(ValueError, match="resume: the checkpoint's vocabulary"):
        _program(X, 3, max_iter=1).load_state(snap.state)
    other = sp.csr_matrix(X)[::-1]  # same words, documents in another order
    with pytest.raises(ValueError, match="not the same corpus"):
        program.restore_block(0, _shards(other[:50], 2)[0][0], snap.state, snap.blocks[0])
    with pytest.raises(ValueError, match="no saved arrays"):
        program.restore_block(0, data[0], snap.state, None)
    # the same corpus cut the same way, but in 2 threads per block
    pairs, _ = _shards(X, 1, 2)
    with pytest.raises(ValueError, match="block_threads: the checkpoint has 1 threads"):
        _program(X, 1, threads=2, max_iter=1).load_state(snap.state)
    with pytest.raises(ValueError, match="has fewer shards than the 2 threads"):
        _program(X, 1, threads=2, max_iter=1).restore_block(0, pairs[0], snap.state,
                                                            snap.blocks[0])
    two = _program(X, 1, threads=2, max_iter=1)
    state, blocks, carried = _simulate(two, pairs, stop_after=2)
    snap = _snapshot(two, 2, state, blocks, carried, tmp_path / "two")
    with pytest.raises(ValueError, match="has more shards than the 1 threads"):
        _program(X, 2, max_iter=1).restore_block(0, data[0], snap.state, snap.blocks[0])


def test_program_rejects_bad_arguments():
    wb, wl, bw = partition_vocabulary(np.arange(1, 11), 2)
    with pytest.raises(ValueError, match="sampler"):
        LDAProgram(3, 0.1, 0.01, wb, wl, bw, max_iter=1, sampler="nope")
    with pytest.raises(ValueError, match="sync_every"):
        LDAProgram(3, 0.1, 0.01, wb, wl, bw, max_iter=1, sync_every=3)
    with pytest.raises(ValueError, match="threads: expected a whole divisor of the 2"):
        LDAProgram(3, 0.1, 0.01, wb, wl, bw, max_iter=1, threads=3)
    two = LDAProgram(3, 0.1, 0.01, wb, wl, bw, max_iter=1, threads=2)
    shard = (np.array([0, 1]), np.array([0]), np.array([1]))
    with pytest.raises(ValueError, match="expected 2 shards"):
        two.init_block(0, [shard])


# ----------------------------------------------------------------------------- on the engine
@pytest.mark.parametrize("sync_every,staleness", [(1, 0), (2, 1)])
def test_engine_rotation_one_holder_per_block(client, corpus, sync_every, staleness):
    X, _ = corpus
    P = 2
    data, _ = _shards(X, P)
    program = _program(X, P, max_iter=4, check=True, sync_every=sync_every)
    result = run(program, data, client, max_rounds=program.n_rounds, staleness=staleness,
                 progress=False)
    state = result.state
    workers = set(result.placement.values())
    assert len(workers) == 2
    trace = state["trace"]  # (iteration, sub-round, vocabulary block, shard, worker)
    assert len(trace) == P * P * (program.max_iter + 1)
    by_round: dict = {}
    for it, sub, vblock, shard, worker in trace:
        assert worker == result.placement[shard]
        by_round.setdefault((it, sub), []).append((vblock, worker))
    for held in by_round.values():
        # every vocabulary block is held by exactly one shard (and worker) per sub-round
        assert sorted(v for v, _ in held) == list(range(P))
        assert len({w for _, w in held}) == P
    for it in range(program.max_iter + 1):
        for worker in workers:
            seen = sorted(v for (i, _), held in by_round.items() if i == it
                          for v, w in held if w == worker)
            assert seen == list(range(P))  # every worker sees every block once per rotation
    n = int(X.sum())
    assert len(state["checks"]) == program.max_iter
    for c in state["checks"]:
        assert c["n_tokens"] == c["ndk_total"] == c["nwk_total"] == n
        assert c["nk_matches_ndk"] and c["nk_matches_nwk"]
        assert c["nwk_matches_recount"] and c["ndk_matches_recount"]
    assert sum(t.sum() for t in result.carried.values()) == n


@pytest.mark.parametrize("K, threads", [(5, 1), (60, 1), (5, 2)])
def test_engine_matches_in_process_chain(client, corpus, K, threads):
    """Same seed, same shards: the distributed run reproduces the sequential chain (with
    2 threads per block too: their inner rotation does not depend on their timing). With
    K = 60 the count blocks are sparse enough to travel packed (both shards on their own
    worker: every hand-over crosses)."""
    X, _ = corpus
    data, _ = _shards(X, 2, threads)
    local, _, tables = _simulate(_program(X, 2, K=K, threads=threads, max_iter=3, seed=11),
                                 data)
    program = _program(X, 2, K=K, threads=threads, max_iter=3, seed=11)
    result = run(program, data, client, max_rounds=program.n_rounds, progress=False)
    np.testing.assert_allclose(result.state["loglikelihoods"], local["loglikelihoods"],
                               rtol=1e-12)
    for b, table in tables.items():
        np.testing.assert_array_equal(result.carried[b], table)
        packed = program.pack_carried(b, table)
        assert isinstance(packed, CountBlock) if K == 60 else packed is None


def _sparse_counts(rng, shape, nnz, high=50):
    out = np.zeros(shape, dtype=np.int32)
    rows, cols = rng.integers(0, shape[0], nnz), rng.integers(0, shape[1], nnz)
    np.add.at(out, (rows, cols), rng.integers(1, high, nnz).astype(np.int32))
    return out


def test_count_block_round_trip_in_the_smallest_types():
    rng = np.random.default_rng(0)
    nwk = _sparse_counts(rng, (300, 200), 2000)
    nwk[7] = 0  # an empty row
    packed = CountBlock.pack(nwk)
    assert (packed.topics.dtype, packed.counts.dtype) == (np.int16, np.uint16)
    assert packed.topics.shape == (np.count_nonzero(nwk),)
    assert packed.nbytes < nwk.nbytes / 5
    back = pickle.loads(pickle.dumps(packed, protocol=5)).unpack(None)
    assert back.dtype == np.int32 and back.flags.c_contiguous
    np.testing.assert_array_equal(back, nwk)
    # counts beyond uint16, topics beyond int16
    nwk[3, 5] = 70_000
    assert CountBlock.pack(nwk).counts.dtype == np.int32
    np.testing.assert_array_equal(CountBlock.pack(nwk).unpack(None), nwk)
    wide = _sparse_counts(rng, (4, 40_000), 500)
    assert CountBlock.pack(wide).topics.dtype == np.int32
    np.testing.assert_array_equal(CountBlock.pack(wide).unpack(None), wide)
    # dense blocks travel as they are
    assert CountBlock.pack(rng.integers(1, 9, (50, 8)).astype(np.int32)) is None


def test_unpack_reuses_the_memory_of_blocks_that_left(corpus):
    program = _program(corpus[0], 2, max_iter=1)
    rng = np.random.default_rng(1)
    scratch = {}
    first = _sparse_counts(rng, (400, 100), 3000)
    p_first = CountBlock.pack(first)
    value = p_first.unpack(scratch)  # nothing to reuse yet
    program.recycle_carried(0, value, p_first, scratch)
    # a smaller block lands in the larger buffer, whose old entries are cleared
    second = _sparse_counts(rng, (250, 100), 2000)
    reused = CountBlock.pack(second).unpack(scratch)
    assert np.shares_memory(reused, value)
    np.testing.assert_array_equal(reused, second)
    # a block recycled without its packed form (dropped unsent) is cleared in full
    program.recycle_carried(0, reused, None, scratch)
    third = _sparse_counts(rng, (400, 100), 500)
    again = CountBlock.pack(third).unpack(scratch)
    assert np.shares_memory(again, value)
    np.testing.assert_array_equal(again, third)
    # a buffer too small is not used
    program.recycle_carried(0, again, CountBlock.pack(third), scratch)
    big = _sparse_counts(rng, (500, 100), 100)
    fresh = CountBlock.pack(big).unpack(scratch)
    assert not np.shares_memory(fresh, value)
    np.testing.assert_array_equal(fresh, big)
    # views that do not start their buffer are never pooled
    pooled = len(scratch["buffers"])
    program.recycle_carried(0, fresh[1:], None, scratch)
    assert len(scratch["buffers"]) == pooled

