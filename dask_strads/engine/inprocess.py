"""A program run in this process, without Dask: for unit tests of programs and for
debugging a schedule.

The contract is the engine's: blocks are built by ``init_block``, up to ``staleness +
1`` rounds are scheduled ahead of their pulls, the pushes of an ``exchange`` plan run in
threads of their own and meet in :func:`dask_strads.engine.exchange`, carried blocks
move between pushes as the plan says. What it leaves out: placement, transports,
snapshots and recovery.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from dask_strads.engine import exchanges
from dask_strads.engine.program import Plan, Program, RoundContext

# seconds an exchange waits for the round's other pushes
EXCHANGE_WAIT = 120.0


@dataclass
class InProcessResult:
    state: Any
    blocks: dict
    rounds: int
    stop_reason: str  # "converged", "done" or "max_rounds"


def run_in_process(program: Program, data: Mapping[Hashable, Any], *,
                   max_rounds: int = 100_000, staleness: int = 0, can_exchange: bool = True,
                   on_plan=None) -> InProcessResult:
    """Run ``program`` on the shards ``data`` in this process.

    ``can_exchange``: what every round's context says (False: as when blocks share a
    worker). ``on_plan(plan, state)`` sees every plan before its pushes run."""
    blocks = {b: program.init_block(b, shard) for b, shard in data.items()}
    carried: dict = {}
    state = program.init_state({b: program.block_summary(b, blk)
                                for b, blk in blocks.items()})
    inflight: deque = deque()
    next_round, done, stop = 0, False, None
    while True:
        while not done and len(inflight) < staleness + 1 and next_round < max_rounds:
            plan = program.schedule(state, RoundContext(next_round, can_exchange, staleness))
            if plan is None:
                done, stop = True, "done"
                break
            if not isinstance(plan, Plan):
                raise TypeError(f"schedule: expected a Plan or None, got "
                                f"{type(plan).__name__}")
            if plan.exchange and not can_exchange:
                raise ValueError(f"round {next_round}: the plan asks for exchange but "
                                 "ctx.can_exchange was False")
            if on_plan is not None:
                on_plan(plan, state)
            inflight.append((plan, _pushes(program, blocks, carried, plan)))
            next_round += 1
        if not inflight:
            break
        plan, partials = inflight.popleft()
        state = program.pull(state, partials, plan)
        if not done and program.converged(state):
            done, stop = True, "converged"
    return InProcessResult(state, blocks, next_round, stop or "max_rounds")


def _pushes(program, blocks, carried, plan: Plan) -> dict:
    """The pushes of one round, in the plan's order (threads for an exchange plan)."""
    if plan.exchange:
        return _exchange_round(program, blocks, plan)
    out = {}
    moved = {}
    for b, part in plan.parts.items():
        c = (plan.carry or {}).get(b)
        if c is None:
            out[b] = program.push(blocks[b], part)
            continue
        value = carried.pop(c) if c in carried else program.init_carried(c)
        out[b], moved[c] = program.push(blocks[b], part, value)
    carried.update(moved)
    return out


def _exchange_round(program, blocks, plan: Plan) -> dict:
    order = list(plan.parts)
    mail: dict = {}
    errors: dict = {}
    results: dict = {}
    cond = threading.Condition()

    class Exchange:
        """Block ``b``'s side of the round's exchanges (see engine.exchanges)."""

        def __init__(self, b):
            self.block = b
            self.order = order
            self.step = 0

        def __call__(self, value):
            return self.swap(dict.fromkeys(order, value), order)

        def swap(self, sends, expect):
            """Post ``sends``; return what each push of ``expect`` posted for this one."""
            key, self.step = self.step, self.step + 1
            with cond:
                mail[key, self.block] = sends
                cond.notify_all()
                arrived = cond.wait_for(
                    lambda: errors or all((key, o) in mail for o in expect),
                    timeout=EXCHANGE_WAIT)
                if errors or not arrived:
                    raise RuntimeError(f"exchange of block {self.block}: another push failed")
                return {o: mail[key, o][self.block] for o in expect}

    def run(b):
        exchanges._current.exchange = Exchange(b)
        try:
            results[b] = program.push(blocks[b], plan.parts[b])
        except BaseException as exc:
            with cond:
                errors[b] = exc
                cond.notify_all()
        finally:
            exchanges._current.exchange = None

    threads = [threading.Thread(target=run, args=(b,)) for b in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise next(iter(errors.values()))
    return results
