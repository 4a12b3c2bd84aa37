"""Direct rounds through relays: the client sends one message per group of workers."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_strads.engine import run
from dask_strads.engine.arguments import _engine_settings
from dask_strads.engine.cluster import workers_of
from dask_strads.engine.transport import _Transports

from .programs import BlockLeastSquares, RotationProbe
from .test_loop import N_BLOCKS, FailingPush, coef_of, lstsq_problem

RELAY_ALWAYS = {"dask-strads.engine.relay-above": 1,
                "dask-strads.engine.dashboard-interval": None}


@pytest.fixture(scope="module")
def four_workers():
    with LocalCluster(n_workers=N_BLOCKS, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(N_BLOCKS)
        yield client


def _one_block_per_worker(client):
    names = sorted(w["name"] for w in workers_of(client).values())
    return {b: names[b] for b in range(N_BLOCKS)}


@pytest.fixture
def messages(monkeypatch):
    """The client's calls per round: to relays, and to single workers."""
    counts = {"relayed": 0, "direct": 0}
    for name in counts:
        method = getattr(_Transports, f"_{name}")

        async def counted(self, *args, _method=method, _name=name, **kwargs):
            counts[_name] += 1
            return await _method(self, *args, **kwargs)

        monkeypatch.setattr(_Transports, f"_{name}", counted)
    return counts


@pytest.mark.parametrize("staleness", [0, 1])
def test_rounds_that_carry_blocks_go_through_relays(four_workers, messages, staleness):
    """LDA's kind of round: each push takes a carried block from the worker that made
    it. Relayed, every block's version chain holds (a push that got a stale or doubled
    copy fails), with one message a round to each group's relay."""
    rounds = 12
    with dask.config.set(RELAY_ALWAYS):
        res = run(RotationProbe(N_BLOCKS, work_seconds=0.002), dict.fromkeys(range(N_BLOCKS)),
                  four_workers, max_rounds=rounds, progress=False, transport="direct",
                  staleness=staleness, placement=_one_block_per_worker(four_workers))
    assert messages == {"relayed": rounds * 2, "direct": 0}
    for value in res.carried.values():
        assert [t[0] for t in value["trail"]] == list(range(rounds))


@pytest.mark.parametrize("staleness", [0, 1])
def test_relayed_rounds_reach_the_same_answer_with_sqrt_n_messages(four_workers, messages,
                                                                   staleness):
    X, y, data = lstsq_problem()
    placement = _one_block_per_worker(four_workers)

    def fit():
        program = BlockLeastSquares(y, parallel=N_BLOCKS, staleness=staleness)
        return run(program, data, four_workers, max_rounds=40, progress=False,
                   transport="direct", staleness=staleness, placement=placement)

    with dask.config.set({"dask-strads.engine.dashboard-interval": None}):
        flat = fit()
    assert messages == {"relayed": 0, "direct": flat.n_rounds * N_BLOCKS}
    messages["direct"] = 0
    with dask.config.set(RELAY_ALWAYS):
        relayed = fit()
    # four pushing workers: two groups of two, one message to each group's relay
    assert messages == {"relayed": relayed.n_rounds * 2, "direct": 0}
    np.testing.assert_array_equal(coef_of(relayed), coef_of(flat))


def test_exchange_rounds_go_through_relays(four_workers, messages):
    """The pushes of an exchange round reach their workers through relays and still meet
    each other worker to worker: the same sums, with sqrt(N) messages from the client."""
    from .programs import SumAmongPushes

    rng = np.random.default_rng(4)
    data = {b: rng.standard_normal(9) for b in range(N_BLOCKS)}

    def fit():
        return run(SumAmongPushes(rounds=3), data, four_workers, max_rounds=10,
                   progress=False, placement=_one_block_per_worker(four_workers))

    with dask.config.set({"dask-strads.engine.dashboard-interval": None}):
        flat = fit()
    messages["direct"] = 0
    with dask.config.set(RELAY_ALWAYS):
        relayed = fit()
    assert messages == {"relayed": relayed.n_rounds * 2, "direct": 0}
    want = np.sum(list(data.values()), axis=0)
    for res in (flat, relayed):
        for rnd, partials in enumerate(res.state["pulls"]):
            for out in partials.values():
                np.testing.assert_allclose(out["total"], want * 2.0 ** rnd, rtol=1e-12)


def test_relays_wait_for_more_workers_than_relay_above(four_workers, messages):
    X, y, data = lstsq_problem()
    with dask.config.set({"dask-strads.engine.relay-above": N_BLOCKS,
                          "dask-strads.engine.dashboard-interval": None}):
        res = run(BlockLeastSquares(y, parallel=N_BLOCKS), data, four_workers,
                  max_rounds=10, progress=False, transport="direct",
                  placement=_one_block_per_worker(four_workers))
    assert messages == {"relayed": 0, "direct": res.n_rounds * N_BLOCKS}


@pytest.mark.parametrize("how", ["raise", "unpickle", "unsendable"])
def test_a_push_failure_behind_a_relay_reaches_the_caller(four_workers, how):
    X, y, data = lstsq_problem()
    with dask.config.set(RELAY_ALWAYS):
        with pytest.raises((ZeroDivisionError, TypeError),
                           match="on purpose|cannot be loaded|pickle"):
            run(FailingPush(y, fail_at=3, how=how), data, four_workers, max_rounds=20,
                progress=False, transport="direct",
                placement=_one_block_per_worker(four_workers))
        # the cluster is fine afterwards
        res = run(BlockLeastSquares(y), data, four_workers, max_rounds=5000,
                  progress=False, transport="direct")
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8"])
def test_relay_above_must_be_a_positive_integer(value):
    with dask.config.set({"dask-strads.engine.relay-above": value}), \
            pytest.raises(ValueError, match="relay-above"):
        _engine_settings()


def test_lda_through_relays_draws_the_same_chain(four_workers, messages):
    """LDA's rounds (a vocabulary block per push, fetched from the worker that made it)
    through relays: the same draws, so the same model, as one message per worker."""
    from dask_strads._datasets.lda import make_lda_corpus
    from dask_strads.lda import LDA

    X, _ = make_lda_corpus(200, 120, 4, doc_length=40, random_state=5)
    kw = dict(n_components=4, max_iter=3, random_state=3, n_blocks=N_BLOCKS,
              client=four_workers, progress=False)
    with dask.config.set({"dask-strads.engine.relay-above": None}):
        flat = LDA(**kw).fit(X)
    assert messages["relayed"] == 0
    with dask.config.set(RELAY_ALWAYS):
        relayed = LDA(**kw).fit(X)
    assert messages["relayed"] > 0
    np.testing.assert_array_equal(relayed.components_, flat.components_)
    np.testing.assert_allclose(relayed.loglikelihoods_, flat.loglikelihoods_, rtol=1e-12)
