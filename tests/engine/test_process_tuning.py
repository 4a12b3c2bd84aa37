"""What a fit changes in the client and worker processes (``dask-strads.process.*``):
each change holds during the fit only, and each switch turns its change off."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import dask
import pytest
import yaml
from distributed import get_worker

import dask_strads.config
from dask_strads.engine import Plan, Program, allocator, run
from dask_strads.engine.store import store_of

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
_CLIENTS: dict = {}


def _hugepage_advice():
    """numpy's huge-page advice in this process (None: this numpy cannot switch it)."""
    before = allocator.hugepage_advice(True)
    if before is not None:
        allocator.hugepage_advice(before)
    return before


def _worker_process_state(dask_worker=None):
    worker = dask_worker or get_worker()
    return {"malloc_tuned": store_of(worker).allocator_tuned,
            "malloc_applies": allocator.applies(),
            "hugepage_advice": _hugepage_advice()}


class _ProcessProbe(Program):
    """Two blocks; every push reports its worker's process state, every schedule the
    client's."""

    name = "processprobe"

    def __init__(self, client_ref):
        self.client_ref = client_ref

    def init_block(self, block_id, shard):
        return {}

    def push(self, block, part, carried=None):
        return _worker_process_state()

    def init_state(self, summaries):
        return {"blocks": sorted(summaries), "client": [], "workers": []}

    def schedule(self, state, ctx):
        client = _CLIENTS[self.client_ref]
        state["client"].append({"frozen": gc.get_freeze_count(),
                                "interval": client.scheduler_comm.interval,
                                "hugepage_advice": _hugepage_advice()})
        return Plan(parts={b: None for b in state["blocks"]})

    def pull(self, state, partials, plan):
        state["workers"].extend(partials.values())
        return state


def _client_state(client):
    return {"frozen": gc.get_freeze_count(), "interval": client.scheduler_comm.interval,
            "hugepage_advice": _hugepage_advice()}


def _fit(client):
    _CLIENTS["c"] = client
    try:
        res = run(_ProcessProbe("c"), {0: None, 1: None}, client, max_rounds=3,
                  transport="tasks", progress=False)
    finally:
        _CLIENTS.clear()
    assert res.n_rounds == 3
    return res.state


def _workers_state(client):
    return list(client.run(_worker_process_state).values())


def _baseline(client):
    """Both processes' state before a fit. A fit first frees the blocks that fits of
    dead clients (earlier tests) may have left on the workers."""
    _fit(client)
    return _client_state(client), _workers_state(client)


def test_a_fit_tunes_both_processes_and_undoes_it_when_it_ends(client):
    assert gc.get_freeze_count() == 0  # nothing else in this test process froze objects
    before, workers_before = _baseline(client)
    state = _fit(client)

    target = dask_strads.config.seconds("process.submit-interval")
    assert before["interval"] > target  # distributed's 10 ms
    for seen in state["client"]:
        assert seen["frozen"] > 0
        assert seen["interval"] == target
        assert seen["hugepage_advice"] in (False, None)
    for seen in state["workers"]:
        # the nanny starts workers with MALLOC_TRIM_THRESHOLD_: on glibc, tuning applies
        assert seen["malloc_applies"] == (allocator._glibc() is not None)
        assert seen["malloc_tuned"] == seen["malloc_applies"]
        assert seen["hugepage_advice"] in (False, None)

    assert _client_state(client) == before
    assert _workers_state(client) == workers_before
    assert not any(w["malloc_tuned"] for w in workers_before)


class _FailingProbe(_ProcessProbe):
    def pull(self, state, partials, plan):
        raise RuntimeError("boom")


def test_a_failing_fit_undoes_its_changes_too(client):
    before, workers_before = _baseline(client)
    _CLIENTS["c"] = client
    try:
        with pytest.raises(RuntimeError, match="boom"):
            run(_FailingProbe("c"), {0: None, 1: None}, client, max_rounds=3,
                transport="tasks", progress=False)
    finally:
        _CLIENTS.clear()
    assert _client_state(client) == before
    assert _workers_state(client) == workers_before


def test_each_switch_turns_its_change_off(client):
    before, workers_before = _baseline(client)
    with dask.config.set({"dask-strads.process.gc-freeze": False,
                          "dask-strads.process.submit-interval": None,
                          "dask-strads.process.hugepage-advice-off": False,
                          "dask-strads.process.malloc-reuse": False}):
        state = _fit(client)
    for seen in state["client"]:
        assert seen == before
    for seen in state["workers"]:
        assert not seen["malloc_tuned"]
        assert seen["hugepage_advice"] == workers_before[0]["hugepage_advice"]
    assert _client_state(client) == before


def test_a_fit_can_ask_for_a_different_batching_interval(client):
    original = client.scheduler_comm.interval
    with dask.config.set({"dask-strads.process.submit-interval": "3ms"}):
        state = _fit(client)
    assert {seen["interval"] for seen in state["client"]} == {0.003}
    assert client.scheduler_comm.interval == original


@pytest.mark.parametrize("key, value", [("engine.snapshot-budget", 0),
                                        ("engine.snapshot-budget", 2),
                                        ("engine.auto-probe-rounds", 0),
                                        ("engine.handover-timeout", -1),
                                        ("engine.handover-timeout", "soon"),
                                        ("engine.handover-timeout", None)])
def test_a_bad_engine_setting_is_refused_before_any_cluster_work(key, value):
    # client=None: a check that came too late would start an embedded cluster
    with dask.config.set({f"dask-strads.{key}": value}), \
            pytest.raises(ValueError, match=key.split(".")[1]):
        run(_ProcessProbe("c"), {0: None}, client=None)


def _keys(tree, prefix):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _keys(value, f"{prefix}.{key}")
        else:
            yield f"{prefix}.{key}"


def test_every_shipped_setting_is_documented_and_read_by_the_code():
    shipped = set(_keys(yaml.safe_load(Path(dask_strads.config.fn).read_text()), ""))
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(dask-strads\.[a-z.-]+)` \|", section, re.M))
    shipped = {"dask-strads" + k.removeprefix(".dask-strads") for k in shipped}
    assert shipped <= documented
    source = "\n".join(p.read_text() for p in
                       Path(dask_strads.config.fn).parent.rglob("*.py"))
    for key in shipped:
        short = key.removeprefix("dask-strads.")
        # coordinate descent reads its own section through parallelism.setting(name)
        read_as = f'setting("{short[3:]}")' if short.startswith("cd.") else f'"{short}"'
        assert read_as in source, f"{key} is shipped but nothing reads it"
