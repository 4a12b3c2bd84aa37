"""Round order of pushes on one worker (``FitStore``), without a cluster.

Pushes reach a worker as direct calls (queued for the fit's runner thread when they
cannot run at once) and as tasks (threads that wait for their turn); whatever the
arrival order and mix, a worker's pushes must run one at a time in sequence order.
"""

from __future__ import annotations

import asyncio
import pickle
import random
import threading
import time

import numpy as np
import pytest

from dask_strads.engine import tasks
from dask_strads.engine.plugin import _make_push_handler
from dask_strads.engine.store import FitStore, store_of
from dask_strads.engine.wire import pack, unpack


class Recorder:
    """A program whose push records the order pushes ran in and catches overlaps."""

    def __init__(self, seconds: float = 0.0, fail_on: int | None = None):
        self.seconds = seconds
        self.fail_on = fail_on
        self.order: list[int] = []
        self.running = threading.Lock()

    def push(self, block, part):
        if not self.running.acquire(blocking=False):
            raise AssertionError("two pushes of one worker ran at once")
        try:
            if self.seconds:
                time.sleep(self.seconds)
            self.order.append(part)
            if part == self.fail_on:
                raise ValueError(f"push {part} failed")
            return part * 10
        finally:
            self.running.release()


class _Worker:
    """What the handlers use of a worker: its extensions (where the store lives)."""

    def __init__(self):
        self.extensions: dict = {}


def _store(program, monkeypatch=None) -> FitStore:
    """Fit ``"f"`` with block ``"b"`` in the store of a worker of its own; ``fit.handler``
    is that worker's ``strads_push`` handler. With ``monkeypatch``, :func:`push_task`
    runs as on that worker (leaving the thread pool is a no-op: there is none)."""
    fit = FitStore(program)
    fit.blocks["b"] = {}
    worker = _Worker()
    store_of(worker).add("f", fit, (False, False))  # no process tuning in the test process
    fit.handler = _make_push_handler(worker)
    if monkeypatch is not None:
        monkeypatch.setattr(tasks, "get_worker", lambda: worker)
        monkeypatch.setattr(tasks, "secede", lambda: None)
        monkeypatch.setattr(tasks, "rejoin", lambda: None)
    return fit


def _items(seq):
    return [("b", seq, None, None)]


async def _direct(fit, seq):
    """Push ``seq`` through the ``strads_push`` handler, as the client calls it."""
    partials, _ = unpack(await fit.handler(fit_id="f", seq=seq, payload=pack(_items(seq))))
    return partials["b"]


def _task(seq, out):
    """Push ``seq`` as a push task (the tasks transport, no reply handler)."""
    out[seq] = tasks.push_task("f", seq, _items(seq), reply=False)["partials"]["b"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mixed_pushes_run_one_at_a_time_in_sequence_order(seed, monkeypatch):
    rng = random.Random(seed)
    program = Recorder(seconds=0.002)
    fit = _store(program, monkeypatch)
    n = 30
    kinds = [rng.choice(["direct", "task"]) for _ in range(n)]
    arrival = list(range(n))
    rng.shuffle(arrival)  # later pushes may arrive first
    task_out: dict[int, int] = {}

    async def main():
        waiting = []
        threads = []
        for seq in arrival:
            if kinds[seq] == "direct":
                waiting.append((seq, asyncio.ensure_future(_direct(fit, seq))))
            else:
                t = threading.Thread(target=_task, args=(seq, task_out))
                t.start()
                threads.append(t)
            await asyncio.sleep(rng.random() * 0.002)
        results = {seq: await fut for seq, fut in waiting}
        for t in threads:
            t.join(timeout=30)
        return results

    direct_out = asyncio.run(main())
    fit.close()
    assert program.order == list(range(n))
    assert direct_out == {s: s * 10 for s in range(n) if kinds[s] == "direct"}
    assert task_out == {s: s * 10 for s in range(n) if kinds[s] == "task"}


def test_a_failed_push_reaches_its_caller_and_the_next_push_still_runs():
    program = Recorder(fail_on=1)
    fit = _store(program)

    async def main():
        jobs = [asyncio.ensure_future(_direct(fit, s)) for s in (2, 1, 0)]
        return await asyncio.gather(*jobs, return_exceptions=True)

    r2, r1, r0 = asyncio.run(main())
    fit.close()
    assert program.order == [0, 1, 2]
    assert (r0, r2) == (0, 20)
    assert isinstance(r1, ValueError) and "push 1 failed" in str(r1)


def test_a_push_that_arrives_twice_is_refused():
    fit = _store(Recorder())

    async def main():
        assert await _direct(fit, 0) == 0
        with pytest.raises(RuntimeError, match="push 0 of fit f arrived twice"):
            await _direct(fit, 0)
        blocker = asyncio.ensure_future(_direct(fit, 2))  # waits for push 1
        for _ in range(1000):  # once it is queued, push 2 arriving again is refused
            try:
                assert not fit.claim_now("f", 2)  # not due (push 1 has not run)
            except RuntimeError as exc:
                assert "push 2 of fit f arrived twice" in str(exc)
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("push 2, queued, was not refused when it arrived again")
        return blocker

    async def run_all():
        blocker = await main()
        fit.close()  # push 1 never comes: the queued push fails instead of hanging
        with pytest.raises(RuntimeError, match="push 2 never ran"):
            await blocker

    asyncio.run(run_all())


class _WatchedTurn(threading.Condition):
    """A condition that says when a thread has started waiting on it."""

    def __init__(self):
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()  # the lock is still held: a notifier runs after the wait began
        return super().wait(timeout)


def test_closing_the_fit_wakes_a_task_waiting_for_its_turn():
    fit = _store(Recorder())
    fit.turn = _WatchedTurn()
    errors = []

    def waiter():
        try:
            fit.claim_wait("f", 3, timeout=30)
        except RuntimeError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=waiter)
    t.start()
    assert fit.turn.waiting.wait(10)  # close a fit it already waits on, not one it finds closed
    fit.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert errors and "never ran" in errors[0]


def test_payloads_travel_in_band_when_small_and_as_frames_when_large():
    """Handler payloads: small ones are one pickled bytes object; ones holding large
    arrays go as distributed's frames (no copies into the message)."""
    from distributed.protocol.serialize import ToPickle

    from dask_strads.engine.wire import FRAMES_BYTES, pack, unpack

    small = [("b", {"x": np.arange(10.0)}, None, None)]
    packed = pack(small)
    assert isinstance(packed, bytes)
    out = unpack(packed)
    np.testing.assert_array_equal(out[0][1]["x"], small[0][1]["x"])

    big = ({0: (np.ones(FRAMES_BYTES // 8), np.zeros(3))}, 0.5)
    packed = pack(big)
    assert isinstance(packed, ToPickle)
    assert unpack(packed) is big  # in process: the wrapper's object itself
    assert unpack(big) is big  # over a network comm the frames arrive deserialized
    assert unpack(pack(("no", "arrays"))) == ("no", "arrays")
    empty = unpack(pack({"a": np.zeros(0), "b": np.zeros((3, 0))}))  # buffers of 0 bytes
    assert empty["a"].shape == (0,) and empty["b"].shape == (3, 0)
    # the size counts the arrays' bytes, in band or not: many small arrays, each under
    # the threshold, add up past it; a non-contiguous view is pickled in band
    many = [np.ones(FRAMES_BYTES // 80) for _ in range(12)]
    assert isinstance(pack(many), ToPickle)
    assert isinstance(pack(many[:5]), bytes)
    strided = np.ones((FRAMES_BYTES // 8, 2))[:, 0]
    assert isinstance(pack(strided), ToPickle) and isinstance(pack(strided[:100]), bytes)
    np.testing.assert_array_equal(unpack(pack(strided[:100])), strided[:100])
    with pytest.raises((pickle.PicklingError, AttributeError)):  # pickle's own error
        pack(lambda: 0)
