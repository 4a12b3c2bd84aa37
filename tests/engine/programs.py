"""Proof programs for the engine tests: real algorithms, small enough to check exactly."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
from distributed import get_worker

from dask_strads.engine import Plan, Program
from dask_strads.engine.reduce import sum_dense
from dask_strads.engine.shared_carried import mapped


class BlockLeastSquares(Program):
    """Block coordinate descent for min ||y - X b||^2 / 2 with column blocks on workers.

    Each resident block holds its columns X_b, its coefficients b_b and its own copy of
    the residual. Round t updates the blocks the schedule names (Gauss-Seidel over
    ``parallel`` blocks at a time) by an exact block solve; the residual change of a
    block reaches the others with their next push (automatic sync).
    """

    name = "lstsq"

    def __init__(self, y, parallel: int = 1, tol: float = 1e-13, transport="auto",
                 work_seconds: float = 0.0, staleness: int = 0, slow_pushes: int = 0):
        self.y = np.asarray(y, dtype=float)
        self.n_rows = len(self.y)
        self.work_seconds = work_seconds
        # a block's first pushes are slower (a kernel loading, a cache warming)
        self.slow_pushes = slow_pushes
        # With s rounds in flight a push may not yet see the last s rounds' changes: a
        # small step only proves convergence over a window that covers them.
        self.window = staleness + 1
        self.parallel = parallel
        self.tol = tol
        self.transport = transport

    # worker side
    def init_block(self, block_id, shard):
        X_b, y = shard
        return {"X": np.asfortranarray(X_b), "coef": np.zeros(X_b.shape[1]),
                "residual": np.array(y, dtype=float), "pinv": np.linalg.pinv(X_b),
                "pushes": 0}

    def block_summary(self, block_id, block):
        residual = block["residual"]
        return {"n_coef": block["X"].shape[1], "y_norm2": float(residual @ residual)}

    def push(self, block, part, carried=None):
        pending = part
        block["pushes"] += 1
        if self.work_seconds:
            time.sleep(self.work_seconds)
        if block["pushes"] <= self.slow_pushes:
            time.sleep(0.1)
        block["residual"] += pending
        step = block["pinv"] @ block["residual"]
        block["coef"] += step
        delta_r = -(block["X"] @ step)
        block["residual"] += delta_r
        return {"delta_residual": delta_r, "step": float(np.max(np.abs(step), initial=0.0)),
                "loss": 0.5 * float(block["residual"] @ block["residual"])}

    def block_result(self, block_id, block):
        return block["coef"].copy()

    def block_arrays(self, block):
        return {"coef": block["coef"]}

    def restore_block(self, block_id, shard, state_arrays, block_arrays):
        block = self.init_block(block_id, shard)
        block["coef"] = np.array(block_arrays["coef"])
        # residual from the checkpointed full residual
        block["residual"] = np.array(state_arrays["residual"])
        return block

    # client side
    def init_state(self, summaries):
        blocks = sorted(summaries)
        return {"blocks": blocks, "pending": {b: np.zeros(self.n_rows) for b in blocks},
                "residual_changes": np.zeros(self.n_rows),
                "y_norm2": summaries[blocks[0]]["y_norm2"],
                "sweep_step": 0.0, "last_sweep_step": np.inf, "updates": 0, "loss": None}

    def schedule(self, state, ctx):
        blocks = state["blocks"]
        start = (ctx.round * self.parallel) % len(blocks)
        chosen = [blocks[(start + i) % len(blocks)] for i in range(self.parallel)]
        parts = {}
        for b in chosen:
            parts[b] = state["pending"][b]
            state["pending"][b] = np.zeros(self.n_rows)
        return Plan(parts=parts)

    def pull(self, state, partials, plan):
        for b, p in partials.items():
            for o in state["blocks"]:
                if o != b:
                    sum_dense([p["delta_residual"]], out=state["pending"][o])
            state["residual_changes"] += p["delta_residual"]
            state["sweep_step"] = max(state["sweep_step"], p["step"])
            state["loss"] = p["loss"]
            state["updates"] += 1
            if state["updates"] % (self.window * len(state["blocks"])) == 0:
                state["last_sweep_step"] = state["sweep_step"]
                state["sweep_step"] = 0.0
        return state

    def objective(self, state):
        return state["loss"]

    def converged(self, state):
        return state["last_sweep_step"] < self.tol

    def metrics(self, state):
        return {"sweep_step": state["last_sweep_step"]}

    def state_arrays(self, state):
        # Snapshots are taken with no round in flight: every delta has been pulled.
        return {"residual": self.y + state["residual_changes"], "blocks": np.array(state["blocks"]),
                "updates": state["updates"], "last_sweep_step": state["last_sweep_step"]}

    def load_state(self, arrays):
        blocks = [int(b) for b in arrays["blocks"]]
        state = self.init_state({b: {"y_norm2": float(self.y @ self.y)} for b in blocks})
        state["residual_changes"] = np.array(arrays["residual"]) - self.y
        state["updates"] = int(arrays["updates"])
        state["last_sweep_step"] = float(arrays["last_sweep_step"])
        return state


class RotationProbe(Program):
    """Carried blocks rotate over resident blocks; every push records who held what, when.

    Each carried block carries a version counter; a push checks it received the version
    it expects (the one the previous holder produced) and returns version + 1. Two
    holders updating one block at once, or a stale copy, would break the chain.
    """

    name = "rotation"
    transport = "tasks"

    def __init__(self, n_blocks: int, work_seconds: float = 0.01, inplace: bool = False):
        self.n_blocks = n_blocks
        self.work_seconds = work_seconds
        self.inplace = inplace  # update the carried value in place and hand it on

    def init_block(self, block_id, shard):
        return {"id": block_id, "lock": threading.Lock(), "seen": []}

    def init_carried(self, carried_id):
        return {"id": carried_id, "version": 0, "trail": []}

    def push(self, block, part, carried=None):
        if not block["lock"].acquire(blocking=False):
            raise AssertionError("two pushes ran on one resident block at once")
        try:
            t0 = time.time()
            expected = part["expected_version"]
            if carried["version"] != expected:
                raise AssertionError(f"carried block {carried['id']} arrived at version "
                                     f"{carried['version']}, expected {expected}")
            time.sleep(self.work_seconds)
            worker = get_worker().name
            version = carried["version"]
            if self.inplace:
                new = carried
                new["version"] += 1
                new["trail"].append((part["round"], block["id"], worker))
            else:
                new = {"id": carried["id"], "version": version + 1,
                       "trail": carried["trail"] + [(part["round"], block["id"], worker)]}
            block["seen"].append(carried["id"])
            return {"carried": carried["id"], "worker": worker, "start": t0, "end": time.time(),
                    "version": version}, new
        finally:
            block["lock"].release()

    def block_result(self, block_id, block):
        return list(block["seen"])

    def init_state(self, summaries):
        return {"log": [], "versions": {c: 0 for c in range(self.n_blocks)}}

    def schedule(self, state, ctx):
        P = self.n_blocks
        carry = {b: (b + ctx.round) % P for b in range(P)}
        # version expected = number of pushes the carried block has had = the round
        parts = {b: {"round": ctx.round, "expected_version": ctx.round} for b in range(P)}
        return Plan(parts=parts, carry=carry)

    def pull(self, state, partials, plan):
        for b, p in partials.items():
            state["log"].append((plan.parts[b]["round"], b, p["carried"], p["worker"], p["start"],
                                 p["end"], p["version"]))
        return state


# (carried id, version, sent packed) of every value a worker of this process recycled
RECYCLED: list = []


def take_recycled() -> list:
    """This worker process's RECYCLED entries, emptied (run with ``client.run``)."""
    out = list(RECYCLED)
    RECYCLED.clear()
    return out


class _Packed:
    """The wire form of a RotationProbe value: the same dict, marked as having travelled."""

    def __init__(self, value):
        self.value = value

    def unpack(self, scratch):
        if scratch is not None:
            scratch["unpacked"] = scratch.get("unpacked", 0) + 1
        return {**self.value, "via": "packed"}


class PackingRotation(RotationProbe):
    """A rotation whose carried blocks have a wire form: each push records whether its
    block arrived packed, and from which worker."""

    def pack_carried(self, carried_id, value):
        return _Packed(dict(value))

    def recycle_carried(self, carried_id, value, packed, scratch):
        RECYCLED.append((carried_id, value["version"], packed is not None))

    def push(self, block, part, carried=None):
        via = carried.pop("via", "local")
        previous = carried["trail"][-1][2] if carried["trail"] else None
        partial, new = super().push(block, part, carried)
        return {**partial, "via": via, "previous": previous}, new

    def init_state(self, summaries):
        return {**super().init_state(summaries), "arrivals": []}

    def pull(self, state, partials, plan):
        for b, p in partials.items():
            state["arrivals"].append((plan.parts[b]["round"], p["carried"], p["version"],
                                      p["worker"], p["previous"], p["via"]))
        return super().pull(state, partials, plan)


class ArrayRotation(RotationProbe):
    """A rotation whose carried blocks are arrays (as LDA's): ``[version, pid of the
    last holder, padding]``, updated in place. Each push records whether its block is in
    shared memory and whether the previous holder was another process; a recycled value
    goes to RECYCLED with whether it was shared."""

    transport = "direct"

    def init_carried(self, carried_id):
        return np.zeros(64 * 1024, dtype=np.int64)

    def recycle_carried(self, carried_id, value, packed, scratch):
        RECYCLED.append((carried_id, int(value[0]), mapped(value)))

    def push(self, block, part, carried=None):
        if carried[0] != part["expected_version"]:
            raise AssertionError(f"a carried block arrived at version {carried[0]}, "
                                 f"expected {part['expected_version']}")
        moved = bool(carried[1]) and int(carried[1]) != os.getpid()
        carried[0] += 1
        carried[1] = os.getpid()
        return {"version": int(carried[0]), "shared": mapped(carried), "moved": moved}, carried

    def init_state(self, summaries):
        return {"arrivals": []}

    def pull(self, state, partials, plan):
        state["arrivals"] += [(p["version"], p["shared"], p["moved"]) for p in partials.values()]
        return state


class CheckpointedRotation(RotationProbe):
    """A rotation probe with snapshots: its client state is the rounds pulled, and its
    carried blocks hold their version chain (restored from the engine's snapshot)."""

    def init_state(self, summaries):
        return {**super().init_state(summaries), "pulled": 0}

    def pull(self, state, partials, plan):
        state = super().pull(state, partials, plan)
        state["pulled"] += 1
        return state

    def state_arrays(self, state):
        return {"pulled": np.asarray(state["pulled"])}

    def load_state(self, arrays):
        return {**self.init_state({}), "pulled": int(arrays["pulled"])}


class PeerJacobi(Program):
    """Least squares by averaged block Jacobi whose steps reduce worker to worker.

    Each push runs ``inner`` steps: every block solves its columns exactly against the
    common residual, and the blocks' residual changes, each scaled by 1/B (the mean of
    the block solves: never an increase, by convexity), go to every other block through
    :func:`dask_strads.engine.exchange`. Every block then holds the same residual, so
    the client only counts. ``fail_block``/``fail_step``: that push raises there;
    ``pause``: seconds each step sleeps.
    """

    name = "peerjacobi"
    transport = "direct"

    def __init__(self, y, inner: int = 5, tol: float = 1e-12, ask_always: bool = False,
                 fail_block=None, fail_step: int = 0, pause: float = 0.0):
        self.y = np.asarray(y, dtype=float)
        self.pause = pause
        self.inner = inner
        self.tol = tol
        self.ask_always = ask_always
        self.fail_block = fail_block
        self.fail_step = fail_step

    def init_block(self, block_id, shard):
        X_b, y = shard
        return {"id": block_id, "X": np.asfortranarray(X_b), "coef": np.zeros(X_b.shape[1]),
                "residual": np.array(y, dtype=float), "pinv": np.linalg.pinv(X_b)}

    def push(self, block, part, carried=None):
        from dask_strads.engine import exchange

        n_blocks, order = part
        seen, step_max = [], 0.0
        for k in range(self.inner):
            if block["id"] == self.fail_block and k == self.fail_step:
                raise ValueError(f"block {block['id']} fails at step {k}")
            step = block["pinv"] @ block["residual"] / n_blocks
            block["coef"] += step
            time.sleep(self.pause)
            values = exchange(-(block["X"] @ step))
            seen.append(list(values))
            for change in values.values():
                block["residual"] += change
            step_max = max(step_max, float(np.max(np.abs(step), initial=0.0)))
        r = block["residual"]
        return {"step": step_max, "seen": seen, "order": order, "loss": 0.5 * float(r @ r),
                "thread": threading.current_thread().name}

    def block_result(self, block_id, block):
        return block["coef"].copy()

    def init_state(self, summaries):
        return {"blocks": sorted(summaries), "step": np.inf, "loss": None, "pushes": []}

    def schedule(self, state, ctx):
        if state["step"] < self.tol:
            return None
        exchange = ctx.can_exchange or self.ask_always
        blocks = state["blocks"][::-1] if ctx.round % 2 else state["blocks"]  # order varies
        parts = {b: (len(blocks), list(blocks)) for b in blocks} if exchange else {}
        return Plan(parts=parts, exchange=exchange)

    def pull(self, state, partials, plan):
        if not partials:
            state["step"] = 0.0  # no exchange possible here: the test says so
            return state
        state["step"] = max(p["step"] for p in partials.values())
        state["loss"] = next(iter(partials.values()))["loss"]
        state["pushes"].append(partials)
        return state

    def objective(self, state):
        return state["loss"]


class SumAmongPushes(Program):
    """Every block holds a vector; each round sums them among the pushes with
    :func:`dask_strads.engine.all_reduce` and returns the sum it got, then scales its
    vector by 2."""

    name = "sumamong"
    transport = "direct"

    def __init__(self, rounds: int = 3):
        self.rounds = rounds

    def init_block(self, block_id, shard):
        return {"id": block_id, "v": np.array(shard, dtype=float)}

    def push(self, block, part, carried=None):
        from dask_strads.engine import all_reduce

        before = block["v"].copy()
        total = all_reduce(block["v"])
        unchanged = bool(np.array_equal(block["v"], before))
        block["v"] *= 2.0
        return {"total": total, "input_unchanged": unchanged}

    def init_state(self, summaries):
        return {"blocks": sorted(summaries), "pulls": []}

    def schedule(self, state, ctx):
        if len(state["pulls"]) >= self.rounds:
            return None
        return Plan(parts=dict.fromkeys(state["blocks"]), exchange=True)

    def pull(self, state, partials, plan):
        state["pulls"].append(partials)
        return state


class SlowInitProbe(Program):
    """Blocks whose building takes ``init_seconds``; one round in which every block
    reports its id, its shard, its worker and when it was built. Blocks built at once on
    one worker could each make the fit's store there, all but the last then lost."""

    name = "slowinit"
    transport = "direct"

    def __init__(self, n_blocks: int, init_seconds: float = 0.02):
        self.n_blocks = n_blocks
        self.init_seconds = init_seconds

    def init_block(self, block_id, shard):
        start = time.monotonic()
        time.sleep(self.init_seconds)
        return {"id": block_id, "shard": shard, "built": (start, time.monotonic())}

    def push(self, block, part, carried=None):
        return {"id": block["id"], "shard": block["shard"], "built": block["built"],
                "worker": get_worker().name}

    def init_state(self, summaries):
        return {"reports": None}

    def schedule(self, state, ctx):
        return None if state["reports"] is not None else \
            Plan(parts={b: None for b in range(self.n_blocks)})

    def pull(self, state, partials, plan):
        state["reports"] = sorted(partials.values(), key=lambda r: r["id"])
        return state
