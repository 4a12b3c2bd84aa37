"""The scheduler coroutine, proved on real programs (tests/engine/programs.py)."""

from __future__ import annotations

import _thread
import threading
import time

import dask
import numpy as np
import pandas as pd
import pytest
from distributed import Client

from dask_strads.engine import Plan, Program, run
from dask_strads.engine.cluster import workers_of
from dask_strads.engine.tasks import fit_ids_here

from . import programs
from .programs import BlockLeastSquares, RotationProbe

N_BLOCKS = 4


def lstsq_problem(n=240, p=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = X @ rng.standard_normal(p) + 0.1 * rng.standard_normal(n)
    width = p // N_BLOCKS
    data = {b: (X[:, b * width:(b + 1) * width], y) for b in range(N_BLOCKS)}
    return X, y, data


def coef_of(result):
    return np.concatenate([result.block_results[b] for b in range(N_BLOCKS)])


@pytest.mark.parametrize("transport", ["tasks", "direct"])
def test_block_least_squares_equals_lstsq(any_client, transport):
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y), data, any_client, max_rounds=3000, progress=False,
              transport=transport)
    assert res.stop_reason == "converged"
    assert res.transport == transport
    ref = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(coef_of(res), ref, rtol=0, atol=1e-8)
    # the program's objective is the least-squares loss at the solution
    assert res.history["objective"].iloc[-1] == pytest.approx(0.5 * np.sum((y - X @ ref) ** 2),
                                                              rel=1e-10)


@pytest.mark.parametrize("transport", ["tasks", "direct", "auto"])
def test_local_shards_skip_the_scheduler_when_the_client_calls_workers_anyway(
        client, monkeypatch, transport):
    # Through the scheduler every shard is received and sent again by its process. The direct
    # transport has the client call the workers, so its shards go straight, in the call
    # that builds each block (no task either); the others may have no route from client
    # to workers, and keep the scheduler's.
    calls, submitted = [], []
    scatter, submit = client.scatter, client.submit

    def recording(data, *args, **kwargs):
        calls.append(kwargs.get("direct"))
        return scatter(data, *args, **kwargs)

    def submitting(func, *args, **kwargs):
        submitted.append(func.__name__)
        return submit(func, *args, **kwargs)

    monkeypatch.setattr(client, "scatter", recording)
    monkeypatch.setattr(client, "submit", submitting)
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y), data, client, max_rounds=3000, progress=False,
              transport=transport)
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)
    direct = transport == "direct"
    assert calls == ([] if direct else [False] * N_BLOCKS)
    assert submitted.count("init_block_task") == (0 if direct else N_BLOCKS)


def test_blocks_built_by_direct_calls_are_built_one_at_a_time_on_each_worker(client):
    """Direct calls build a worker's blocks concurrently unless it serializes them;
    every block must end up in the fit's one store there, with its own shard."""
    n_blocks = 8
    res = run(programs.SlowInitProbe(n_blocks), {b: f"shard {b}" for b in range(n_blocks)},
              client, max_rounds=3, progress=False, transport="direct")
    reports = res.state["reports"]
    assert [r["id"] for r in reports] == list(range(n_blocks))
    assert [r["shard"] for r in reports] == [f"shard {b}" for b in range(n_blocks)]
    by_worker = {}
    for r in reports:
        by_worker.setdefault(r["worker"], []).append(r["built"])
    assert len(by_worker) == 2  # both workers held several
    for spans in by_worker.values():
        spans.sort()
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans


@pytest.mark.parametrize("staleness", [1, 3])
def test_stale_parallel_rounds_still_reach_lstsq(client, staleness):
    # Two blocks update in parallel per round, on residuals up to `staleness` rounds old.
    X, y, data = lstsq_problem(n=400, seed=1)
    res = run(BlockLeastSquares(y, parallel=2, staleness=staleness), data, client,
              max_rounds=5000, progress=False,
              staleness=staleness, transport="direct")
    assert res.stop_reason == "converged"
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_auto_transport_moves_tiny_rounds_to_the_direct_channel(client):
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y), data, client, max_rounds=3000, progress=False)
    h = res.history
    assert set(h["transport"].iloc[:4]) == {"tasks"}
    assert res.transport == "direct" and h["transport"].iloc[-1] == "direct"
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_auto_transport_chooses_on_the_latest_pushes_not_the_first(client):
    """Pushes slow in a fit's first rounds only (say, kernels loading) do not keep its
    rounds on tasks."""
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y, slow_pushes=3), data, client, max_rounds=3000,
              progress=False)
    h = res.history
    assert (h["push_s"].iloc[:8] > 0.1).all()  # more than the probed rounds were slow
    assert res.transport == "direct" and h["transport"].iloc[-1] == "direct"
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


def test_history_records_every_round(client):
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y), data, client, max_rounds=7, progress=False, transport="tasks")
    h = res.history
    assert isinstance(h, pd.DataFrame)
    assert list(h["round"]) == list(range(7))
    for col in ["time", "objective", "schedule_s", "push_s", "pull_s", "wait_s", "round_s",
                "sweep_step"]:
        assert col in h and h[col].notna().all(), col
    assert (h["time"].diff().dropna() > 0).all()
    assert (h["wait_s"] >= 0).all() and (h["push_s"] > 0).all()
    assert res.stop_reason == "max_rounds" and res.n_rounds == 7


def test_time_limit_stops_cleanly(client):
    X, y, data = lstsq_problem()
    t0 = time.perf_counter()
    res = run(BlockLeastSquares(y, tol=0, work_seconds=0.02), data, client, max_rounds=10**6,
              time_limit=1.0, progress=False, transport="direct")
    assert res.stop_reason == "time_limit"
    assert 1.0 <= res.elapsed < 5.0 and time.perf_counter() - t0 < 15
    assert 0 < res.n_rounds <= res.elapsed / 0.02  # a round takes a push's 0.02 s at least


@pytest.mark.timeout(120)
@pytest.mark.parametrize("staleness", [0, 1])
def test_keyboard_interrupt_returns_state_so_far(client, staleness):
    import signal

    X, y, data = lstsq_problem()
    # warm up the pull's numba kernel (the first call loads it), so rounds run at speed
    run(BlockLeastSquares(y), data, client, max_rounds=3, progress=False)
    # Ctrl-C as in a terminal or notebook: a process started in the background by a
    # non-interactive shell inherits SIGINT ignored, and interrupt_main() then does nothing
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, _thread.interrupt_main)
    try:
        timer.start()
        res = run(BlockLeastSquares(y, tol=0, work_seconds=0.01), data, client,
                  max_rounds=20000, progress=False, transport="direct", staleness=staleness)
        # the fit sets the stop flag from its own SIGINT handler only while it runs
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, inherited)
    assert res.stop_reason == "interrupted"
    assert res.n_rounds > 5
    assert len(res.history) == res.n_rounds
    # the state is usable: coefficients came back from every block
    assert coef_of(res).shape == (40,)


class _Done(Program):
    name = "done"
    transport = "direct"

    def schedule(self, state, ctx):
        return None if ctx.round == 3 else Plan(parts={0: ctx.round})

    def push(self, block, part, carried=None):
        return part * 2

    def pull(self, state, partials, plan):
        state.setdefault("seen", []).append(partials[0])
        return state


def test_schedule_none_ends_the_fit(client):
    res = run(_Done(), {0: None}, client, progress=False)
    assert res.stop_reason == "done" and res.state["seen"] == [0, 2, 4]


class _FreezeProbe(_Done):
    """Records the number of frozen objects while it runs."""

    def pull(self, state, partials, plan):
        import gc

        state.setdefault("frozen", []).append(gc.get_freeze_count())
        return super().pull(state, partials, plan)


def test_objects_held_before_a_fit_are_frozen_while_it_runs(client):
    import gc

    held = [[i] for i in range(1000)]  # containers the collector tracks
    assert gc.get_freeze_count() == 0
    res = run(_FreezeProbe(), {0: None}, client, progress=False)
    assert min(res.state["frozen"]) >= len(held)
    assert gc.get_freeze_count() == 0  # handed back when the fit ends
    # a process that froze objects itself keeps them frozen, and no more (a frozen
    # object that is freed leaves the count)
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        res = run(_FreezeProbe(), {0: None}, client, progress=False)
        assert max(res.state["frozen"]) <= before
        assert gc.get_freeze_count() > 0.9 * before
    finally:
        gc.unfreeze()
    # a failing fit hands the objects back too
    with pytest.raises(RuntimeError, match="boom"):
        run(_Boom(), {0: None}, client, progress=False)
    assert gc.get_freeze_count() == 0


class _AdviceProbe(_Done):
    """Records numpy's huge-page advice on the client while it runs."""

    def pull(self, state, partials, plan):
        from dask_strads.engine import allocator

        before = allocator.hugepage_advice(True)
        allocator.hugepage_advice(before)
        state.setdefault("advice", []).append(before)
        return super().pull(state, partials, plan)


def test_numpys_hugepage_advice_is_off_on_the_client_while_a_fit_runs(client):
    from dask_strads.engine import allocator

    if allocator._hugepage_switch() is None:
        pytest.skip("this numpy cannot switch its huge-page advice")
    before = allocator.hugepage_advice(True)
    try:
        res = run(_AdviceProbe(), {0: None}, client, progress=False)
        assert res.state["advice"] == [False] * 3
        assert allocator.hugepage_advice(True) is True  # back as it was
        with pytest.raises(RuntimeError, match="boom"):
            run(_Boom(), {0: None}, client, progress=False)
        assert allocator.hugepage_advice(True) is True
    finally:
        allocator.hugepage_advice(before)


class _Boom(_Done):
    def pull(self, state, partials, plan):
        raise RuntimeError("boom")


def test_progress_bar_is_on_by_default_and_can_be_silenced(client, capsys):
    run(_Done(), {0: None}, client)
    assert "dask_strads.done" in capsys.readouterr().err
    run(_Done(), {0: None}, client, progress=False)
    assert "dask_strads.done" not in capsys.readouterr().err


class _Units(_Done):
    """Three rounds that make two units of the program's own progress measure."""
    name = "units"

    def progress(self, state):
        return len(state.get("seen", [])) // 2, 2, "widget"


def test_progress_bar_counts_the_programs_own_units(client, capsys):
    run(_Units(), {0: None}, client)
    err = capsys.readouterr().err
    assert "1/2" in err.replace(" ", "") and "widget" in err  # 3 rounds, 1 unit done
    assert "/3" not in err.replace(" ", "")  # not rounds against the rounds' count
    run(_Done(), {0: None}, client, max_rounds=5)
    assert "3/5" in capsys.readouterr().err.replace(" ", "")  # the default: rounds


def test_task_keys_and_span_name_the_program(client):
    X, y, data = lstsq_problem()
    events = []

    def on_task(event):
        events.append(event)

    res = run(BlockLeastSquares(y), data, client, max_rounds=3, progress=False,
              transport="tasks")
    prefixes = client.run_on_scheduler(
        lambda dask_scheduler: sorted(dask_scheduler.task_prefixes))
    assert "strads-lstsq-push" in prefixes and "strads-lstsq-init" in prefixes
    names = client.run_on_scheduler(
        lambda dask_scheduler: sorted({s.name for s in
                                       dask_scheduler.extensions["spans"].spans.values()}))
    assert ("dask_strads.lstsq",) in names
    assert res.n_rounds == 3


def test_two_fits_on_one_cluster_do_not_interfere(client):
    X1, y1, data1 = lstsq_problem(seed=3)
    X2, y2, data2 = lstsq_problem(seed=4)
    out = {}

    def fit(tag, y, data):
        out[tag] = run(BlockLeastSquares(y), data, client, max_rounds=3000, progress=False,
                       transport="direct")

    threads = [threading.Thread(target=fit, args=("a", y1, data1)),
               threading.Thread(target=fit, args=("b", y2, data2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    np.testing.assert_allclose(coef_of(out["a"]), np.linalg.lstsq(X1, y1, rcond=None)[0], atol=1e-8)
    np.testing.assert_allclose(coef_of(out["b"]), np.linalg.lstsq(X2, y2, rcond=None)[0], atol=1e-8)


def test_default_client_is_used_when_client_is_none(cluster):
    X, y, data = lstsq_problem()
    with Client(cluster):  # becomes the default client
        res = run(BlockLeastSquares(y), data, max_rounds=5, progress=False)
    # (worker names alone would not tell: an embedded cluster names its workers 0, 1 too)
    assert res.scheduler_address == cluster.scheduler_address


@pytest.mark.slow
def test_embedded_cluster_when_there_is_no_client():
    X, y, data = lstsq_problem()
    res = run(BlockLeastSquares(y), data, max_rounds=3000, progress=False, n_workers=2)
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)
    assert set(res.placement.values()) == {0, 1}
    # the embedded cluster listens on the loopback interface only
    assert res.scheduler_address.startswith("tcp://127.0.0.1:")


def test_an_error_inside_cluster_client_on_the_default_client_reaches_the_caller(
        thread_cluster):
    """Estimators hold the default client through cluster_client while they fit: an
    error of the fit goes through as it is, not as a fall-back to an embedded cluster
    that fails with "generator didn't stop after throw()"."""
    from dask_strads.engine.cluster import cluster_client

    with Client(thread_cluster) as default:  # set as the default client
        with pytest.raises(ValueError, match="the fit's own error"):
            with cluster_client() as c:
                assert c is default
                raise ValueError("the fit's own error")


# ---------------------------------------------------------------- rotation
@pytest.mark.parametrize("transport", ["tasks", "direct"])
@pytest.mark.parametrize("n_blocks, inplace", [(2, False), (4, False), (4, True)])
def test_rotation_each_block_held_by_one_worker_at_a_time(any_client, n_blocks, inplace,
                                                          transport):
    # inplace: pushes update the carried value they own and hand it on (LDA's tables)
    rounds = 2 * n_blocks
    res = run(RotationProbe(n_blocks, inplace=inplace), {b: None for b in range(n_blocks)},
              any_client, max_rounds=rounds, progress=False, staleness=2,
              transport=transport)
    assert set(res.history["transport"]) == {transport}
    log = pd.DataFrame(res.state["log"], columns=["round", "block", "carried", "worker",
                                                  "start", "end", "version"])
    assert len(log) == rounds * n_blocks
    for r, g in log.groupby("round"):
        # every carried block is held by exactly one resident block in each sub-round
        assert sorted(g["carried"]) == list(range(n_blocks))
        assert list(g["version"]) == [r] * n_blocks
    for _c, g in log.groupby("carried"):
        g = g.sort_values("start")
        # never held by two pushes at once, anywhere on the cluster
        assert (g["start"].to_numpy()[1:] >= g["end"].to_numpy()[:-1]).all()
        # one rotation = n_blocks sub-rounds visits every resident block once
        for k in range(rounds // n_blocks):
            seen = g[(g["round"] >= k * n_blocks) & (g["round"] < (k + 1) * n_blocks)]
            assert sorted(seen["block"]) == list(range(n_blocks))
            assert set(seen["worker"]) == set(res.placement.values())
    # the version chain survived: each carried block was pushed exactly `rounds` times
    for _c, value in res.carried.items():
        assert value["version"] == rounds
        assert [t[0] for t in value["trail"]] == list(range(rounds))


@pytest.mark.parametrize("transport", ["tasks", "direct"])
@pytest.mark.parametrize("n_blocks", [2, 4])
def test_carried_blocks_travel_packed_only_between_workers(any_client, n_blocks, transport):
    """A block consumed where it was produced is handed over as it is; one that moves to
    another worker travels in its packed form, and its sender may recycle the value."""
    threads = str(any_client.scheduler.address).startswith("inproc://")
    any_client.run(programs.take_recycled)
    rounds = 3 * n_blocks
    names = sorted(w["name"] for w in workers_of(any_client).values())
    # contiguous halves: with 4 blocks, some hops stay on a worker and some cross
    placement = {b: names[b * len(names) // n_blocks] for b in range(n_blocks)}
    res = run(programs.PackingRotation(n_blocks, work_seconds=0.0),
              {b: None for b in range(n_blocks)}, any_client, max_rounds=rounds,
              progress=False, placement=placement, transport=transport)
    log = pd.DataFrame(res.state["arrivals"], columns=["round", "carried", "version", "worker",
                                                       "previous", "via"])
    moved = log[log["round"] > 0]
    crossed = moved["worker"] != moved["previous"]
    assert crossed.any() and ((~crossed).any() or n_blocks == 2)
    if threads:
        # one process: a task result is handed over as it is; a handler message is
        # pickled when small (direct), as between processes
        assert (moved.loc[~crossed, "via"] == "local").all()
        if transport == "tasks":
            assert (moved["via"] == "local").all()
    else:
        assert (moved.loc[crossed, "via"] == "packed").all()
        assert (moved.loc[~crossed, "via"] == "local").all()
    # the chain holds, and the client gets the values, unpacked
    for value in res.carried.values():
        assert value["version"] == rounds
    # recycled: only values that were sent packed, never one a local push consumed
    # (the finalizers run once the scheduler has released the sent values)
    recycled = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        recycled += [r for rs in any_client.run(programs.take_recycled).values() for r in rs]
        if recycled or threads:
            break
        time.sleep(0.05)
    local = {(c, v) for c, v, via in zip(moved["carried"], moved["version"], moved["via"],
                                         strict=True) if via == "local"}
    assert all(sent for _, _, sent in recycled)
    assert not local & {(c, v) for c, v, _ in recycled}
    if not threads:
        assert recycled


@pytest.mark.parametrize("transport", ["tasks", "direct"])
def test_carried_blocks_left_on_the_cluster_are_futures_of_their_final_values(
        client, transport):
    rounds = 5
    res = run(RotationProbe(2), {0: None, 1: None}, client, max_rounds=rounds,
              progress=False, transport=transport, gather_carried=False)
    values = client.gather(res.carried)
    assert sorted(values) == [0, 1]
    assert all(v["version"] == rounds for v in values.values())
    # the fit's state is gone from the workers, the futures hold the values
    assert all(res.fit_id not in ids for ids in client.run(fit_ids_here).values())


# ---------------------------------------------------------------- bad arguments
@pytest.mark.parametrize("kwargs, match", [
    (dict(max_rounds=0), "max_rounds"),
    (dict(staleness=-1), "staleness"),
    (dict(time_limit=0), "time_limit"),
    (dict(transport="carrier-pigeon"), "transport"),
    (dict(checkpoint_every=0), "checkpoint_every"),
])
def test_bad_arguments_fail_before_cluster_work(kwargs, match):
    X, y, data = lstsq_problem()
    with pytest.raises(ValueError, match=match):
        run(BlockLeastSquares(y), data, client=object(), **kwargs)  # no cluster is touched


def test_bad_program_and_data():
    with pytest.raises(TypeError, match="program"):
        run(object(), {0: 1}, client=object())
    with pytest.raises(ValueError, match="data"):
        run(_Done(), {}, client=object())


@pytest.mark.timeout(180)
@pytest.mark.parametrize("staleness", [0, 2])
def test_direct_rounds_are_sampled_onto_the_dashboard(client, monkeypatch, staleness):
    # the direct channel bypasses the scheduler: one round per dashboard-interval goes
    # through tasks, so the task stream and the fit's span still show the pushes. With
    # rounds in flight, task and direct pushes interleave on a worker and must keep
    # their order (a task waiting behind a direct call, or the reverse, once deadlocked).
    from distributed import get_task_stream

    X, y, data = lstsq_problem()

    def fit():
        program = BlockLeastSquares(y, parallel=2, staleness=staleness, work_seconds=0.005)
        return run(program, data, client, max_rounds=120, progress=False,
                   transport="direct", staleness=staleness)

    with dask.config.set({"dask-strads.engine.dashboard-interval": None}):
        direct = fit()
    assert set(direct.history["transport"]) == {"direct"}
    with dask.config.set({"dask-strads.engine.dashboard-interval": "100ms"}), \
            get_task_stream(client) as ts:
        res = fit()
    kinds = res.history["transport"].tolist()
    assert "direct" in kinds and 0 < kinds.count("tasks") < len(kinds) // 2
    pushes = [t for t in ts.data if str(t["key"]).startswith("strads-lstsq-push")]
    assert len(pushes) >= kinds.count("tasks")
    # sampled rounds keep the fit exact: same answer as an all-direct run
    coef = {k: np.concatenate([r.block_results[b] for b in sorted(r.block_results)])
            for k, r in (("sampled", res), ("direct", direct))}
    np.testing.assert_array_equal(coef["sampled"], coef["direct"])


@pytest.mark.timeout(180)
def test_a_sampled_round_sends_only_some_workers_pushes_as_tasks(client):
    # every task costs the scheduler and the client CPU: a sampled round sends the
    # pushes of dashboard-workers workers as tasks, taking turns, the rest directly
    from distributed import get_task_stream

    X, y, data = lstsq_problem()
    info = workers_of(client)
    names = sorted(w["name"] for w in info.values())
    placement = {b: names[b % len(names)] for b in data}

    def fit():
        program = BlockLeastSquares(y, parallel=N_BLOCKS)
        return run(program, data, client, max_rounds=30, progress=False, transport="direct",
                   placement=placement)

    with dask.config.set({"dask-strads.engine.dashboard-interval": None}):
        direct = fit()
    every_round_sampled = {"dask-strads.engine.dashboard-interval": 0,
                           "dask-strads.engine.dashboard-workers": 1}
    with dask.config.set(every_round_sampled), get_task_stream(client) as ts:
        res = fit()
    assert set(res.history["transport"]) == {"tasks"}
    pushes = [t for t in ts.data if str(t["key"]).startswith("strads-lstsq-push")]
    # one worker's push per round (not one per worker), every worker in turn
    assert len(pushes) == res.n_rounds
    assert {t["worker"] for t in pushes} == set(info)
    np.testing.assert_array_equal(coef_of(res), coef_of(direct))


class FailingPush(BlockLeastSquares):
    """Pushes fine until round ``fail_at``; then the push raises, or its part cannot be
    unpickled on the worker (a failure before the push runs), or its partial cannot be
    pickled for the way back (a failure after it ran)."""

    def __init__(self, y, fail_at, how):
        super().__init__(y)
        self.fail_at, self.how = fail_at, how

    def schedule(self, state, ctx):
        plan = super().schedule(state, ctx)
        if ctx.round == self.fail_at:
            bad = {"unpickle": _Unloadable, "raise": _Raise, "unsendable": _Unsendable}[
                self.how]()
            plan.parts = {b: (bad, part) for b, part in plan.parts.items()}
        return plan

    def push(self, block, part, carried=None):
        if isinstance(part, tuple):
            return part[0].boom()
        return super().push(block, part, carried)


class _Raise:
    def boom(self):
        raise ZeroDivisionError("push failed on purpose")


class _Unsendable:
    """Travels to the worker, but its push returns something that cannot be pickled."""

    def boom(self):
        return threading.Lock()


def _refuse_to_load():
    raise ZeroDivisionError("part cannot be loaded on the worker")


class _Unloadable:
    def __reduce__(self):
        return (_refuse_to_load, ())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["raise", "unpickle", "unsendable"])
@pytest.mark.parametrize("transport,staleness", [("tasks", 0), ("tasks", 1), ("direct", 0),
                                                 ("direct", 1)])
def test_push_failures_reach_the_caller(client, transport, staleness, how):
    """Also at staleness 1, where pushes wait for the worker's runner thread."""
    X, y, data = lstsq_problem()
    # (over tasks the scheduler unpickles the graph and reports its own RuntimeError)
    with pytest.raises((ZeroDivisionError, RuntimeError, TypeError),
                       match="on purpose|cannot be loaded|deserialization|pickle"):
        run(FailingPush(y, fail_at=3, how=how), data, client, max_rounds=20,
            progress=False, transport=transport, staleness=staleness)
    # the cluster is fine afterwards: a new fit runs to the answer
    res = run(BlockLeastSquares(y), data, client, max_rounds=5000, progress=False,
              transport=transport)
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)


class _NoReplyRoute:
    """A connection pool for a client that cannot open the reply handler's connections."""

    def __init__(self, pool):
        self.pool = pool

    def __call__(self, addr):
        inner = self.pool(addr)

        class Rpc:
            def __getattr__(self, op):
                if op == "strads_reply":
                    async def refused(**kwargs):
                        raise OSError("connection refused (test)")
                    return refused
                return getattr(inner, op)
        return Rpc()

    def __getattr__(self, name):
        return getattr(self.pool, name)


@pytest.mark.parametrize("how", ["disabled", "unreachable"])
def test_task_rounds_without_the_reply_handler(client, monkeypatch, caplog, how):
    # partials come back through the scheduler instead (a client that cannot reach the
    # workers finds out on the first round, says so, and goes on): same answer
    if how == "unreachable":
        monkeypatch.setattr(client, "rpc", _NoReplyRoute(client.rpc))
    X, y, data = lstsq_problem()
    with dask.config.set({"dask-strads.engine.reply-channel": how != "disabled"}):
        res = run(BlockLeastSquares(y), data, client, max_rounds=5000, progress=False,
                  transport="tasks")
    assert res.stop_reason == "converged"
    np.testing.assert_allclose(coef_of(res), np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-8)
    warned = "cannot reach worker" in caplog.text
    assert warned == (how == "unreachable")


class _BigPayloads(Program):
    """Parts and partials of 320 KB each (past FRAMES_BYTES: they travel as frames)."""

    name = "bigpayload"
    n = 40_000

    def init_block(self, block_id, shard):
        return {"scale": float(block_id) + 1.0}

    def init_state(self, summaries):
        return {"blocks": sorted(summaries), "v": np.arange(self.n, dtype=np.float64),
                "total": np.zeros(self.n)}

    def schedule(self, state, ctx):
        return Plan(parts={b: {"v": state["v"], "round": ctx.round} for b in state["blocks"]})

    def push(self, block, part, carried=None):
        return part["v"] * block["scale"] + part["round"]

    def pull(self, state, partials, plan):
        for value in partials.values():
            state["total"] += value
        state["v"] = state["v"] * 0.5
        return state


@pytest.mark.parametrize("transport", ["tasks", "direct"])
@pytest.mark.parametrize("staleness", [0, 1])
def test_large_parts_and_partials_cross_the_wire_intact(client, transport, staleness):
    from dask_strads.engine.wire import FRAMES_BYTES

    assert _BigPayloads.n * 8 >= FRAMES_BYTES
    rounds = 6
    res = run(_BigPayloads(), {0: None, 1: None}, client, max_rounds=rounds, progress=False,
              transport=transport, staleness=staleness)
    v = np.arange(_BigPayloads.n, dtype=np.float64)
    expected = np.zeros_like(v)
    for r in range(rounds):
        # with staleness s, round r is scheduled before the pulls of rounds r-s..r-1
        seen = v * 0.5 ** max(0, r - staleness)
        expected += seen * 1.0 + r + seen * 2.0 + r
    np.testing.assert_array_equal(res.state["total"], expected)


class _Sleeper(Program):
    """Each block counts its pushes; a push takes ``seconds``."""

    name = "sleeper"

    def __init__(self, seconds):
        self.seconds = seconds

    def init_block(self, block_id, shard):
        return {"pushes": 0}

    def push(self, block, part, carried=None):
        time.sleep(self.seconds)
        block["pushes"] += 1
        return block["pushes"]

    def init_state(self, summaries):
        return {"blocks": sorted(summaries), "seen": []}

    def schedule(self, state, ctx):
        return Plan(parts={b: None for b in state["blocks"]})

    def pull(self, state, partials, plan):
        state["seen"].append(dict(partials))
        return state

    def block_result(self, block_id, block):
        return block["pushes"]


@pytest.mark.parametrize("staleness", [0, 1])
def test_pipelined_push_tasks_end_once_their_push_is_queued(client, staleness):
    """At staleness >= 1 a push task ends as soon as its push is queued on the worker
    (the reply handler carries the partials), once that worker's reply handler has
    answered; synchronous rounds keep the task for the whole push."""
    from distributed import get_task_stream

    seconds, rounds = 0.05, 6
    with get_task_stream(client) as ts:
        res = run(_Sleeper(seconds), {0: None, 1: None}, client, max_rounds=rounds,
                  staleness=staleness, transport="tasks", progress=False,
                  placement={0: 0, 1: 1})
    assert res.block_results == {0: rounds, 1: rounds}
    assert res.state["seen"] == [{0: r, 1: r} for r in range(1, rounds + 1)]
    durations = [sum(s["stop"] - s["start"] for s in t["startstops"]
                     if s["action"] == "compute")
                 for t in ts.data if "-push-" in t["key"]]
    assert len(durations) == 2 * rounds
    long = sum(d >= seconds for d in durations)
    if staleness == 0:
        assert long == 2 * rounds
    else:  # rounds 0 and 1 go out before any reply came back
        assert long <= 2 * 2
        assert sum(d < seconds / 2 for d in durations) >= 2 * (rounds - 2)


class NoPull(Program):
    def push(self, block, part, carried=None):
        return part

    def schedule(self, state, ctx):
        return None


def test_run_refuses_a_program_without_its_hooks_before_any_work(tmp_path):
    class Boom:  # a client that fails when touched: the check comes first
        def __getattr__(self, name):
            raise AssertionError(f"cluster touched ({name})")

    with pytest.raises(TypeError, match="NoPull does not define pull"):
        run(NoPull(), {0: None}, Boom(), max_rounds=1, progress=False)

    class Complete(NoPull):
        def pull(self, state, partials, plan):
            return state

    with pytest.raises(TypeError, match="state_arrays, load_state, which checkpoints need"):
        run(Complete(), {0: None}, Boom(), max_rounds=1, progress=False, checkpoint=tmp_path)
