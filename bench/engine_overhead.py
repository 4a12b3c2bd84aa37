"""Round overhead of the STRADS engine.

Measures, on a LocalCluster of 2 and 4 single-threaded worker processes:

* rounds per second for an empty push, at staleness 0, 1 and 3, over both transports
  (``tasks``: one Dask future per worker and round; ``direct``: the engine's comm
  handler on each worker);
* the share of wall time lost to overhead for pushes of 1, 10 and 100 ms, i.e.
  ``1 - rounds * push_seconds / wall`` (pushes of one round run in parallel on the
  workers, so a perfect engine has share 0).

A push "computes" by sleeping (``--spin`` busy-waits instead), so the numbers measure
the engine, not CPU contention between workers. Each cell is the median of ``--repeat``
runs. Writes ``bench/results/engine_overhead.md``.

Run: ``python bench/engine_overhead.py [--quick] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from distributed import Client, LocalCluster

from dask_strads.engine import Plan, Program, run


class TimedPush(Program):
    """Every block pushes every round for ``seconds``; pulls do nothing."""

    name = "overhead"

    def __init__(self, seconds: float, spin: bool = False):
        self.seconds = seconds
        self.spin = spin

    def init_block(self, block_id, shard):
        return {"pushes": 0}

    def push(self, block, part, carried=None):
        if self.seconds:
            if self.spin:
                end = time.perf_counter() + self.seconds
                while time.perf_counter() < end:
                    pass
            else:
                time.sleep(self.seconds)
        block["pushes"] += 1
        return block["pushes"]

    def init_state(self, summaries):
        return {"blocks": sorted(summaries)}

    def schedule(self, state, ctx):
        return Plan(parts={b: None for b in state["blocks"]})

    def pull(self, state, partials, plan):
        return state


class ReducingSleep(TimedPush):
    """Pushes that sleep, then sum a ``(n, 2)`` array among themselves worker to worker
    as the matrix factorisation does (:func:`dask_strads.engine.all_reduce`)."""

    name = "reduce"
    transport = "direct"

    def __init__(self, seconds: float, n: int = 2000):
        super().__init__(seconds)
        self.n = n

    def push(self, block, part, carried=None):
        import numpy as np

        from dask_strads.engine import all_reduce

        super().push(block, part)
        return float(all_reduce(np.ones((self.n, 2)))[0, 0])

    def schedule(self, state, ctx):
        return Plan(parts=dict.fromkeys(state["blocks"]), exchange=True)


class RotatingSleep(TimedPush):
    """Pushes that sleep with a carried block, rotated over the blocks as LDA rotates its
    vocabulary blocks: each push takes its block from the worker that made it in the
    round before. The blocks are small: the coordination is what is measured."""

    name = "rotate"
    transport = "direct"

    def __init__(self, seconds: float, n: int = 256):
        super().__init__(seconds)
        self.n = n

    def init_carried(self, carried_id):
        import numpy as np

        return np.zeros(self.n, dtype=np.int64)

    def push(self, block, part, carried=None):
        super().push(block, part)
        carried[0] += 1
        return int(carried[0]), carried

    def schedule(self, state, ctx):
        P = len(state["blocks"])
        return Plan(parts=dict.fromkeys(state["blocks"]),
                    carry={b: (b + ctx.round) % P for b in state["blocks"]})


def measure(client, n_workers, seconds, staleness, transport, rounds, spin):
    res = run(TimedPush(seconds, spin), {b: None for b in range(n_workers)}, client,
              max_rounds=rounds, staleness=staleness, transport=transport, progress=False,
              placement={b: b for b in range(n_workers)})
    h = res.history
    # skip the first rounds (connection set-up, pipeline fill)
    skip = min(5, rounds // 5)
    wall = h["time"].iloc[-1] - h["time"].iloc[skip]
    n = len(h) - 1 - skip
    per_round = wall / n
    overhead = max(0.0, 1.0 - seconds / per_round) if seconds else float("nan")
    return per_round, overhead


def rounds_for(seconds, transport, quick):
    if seconds >= 0.1:
        r = 25
    elif seconds >= 0.01:
        r = 150
    elif transport == "direct":
        r = 1500
    else:
        r = 300
    return max(20, r // 3) if quick else r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spin", action="store_true", help="busy-wait instead of sleeping")
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "engine_overhead.md"))
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    rows = []
    for n_workers in args.workers:
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, host="127.0.0.1",
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            client.wait_for_workers(n_workers)
            for transport in ("tasks", "direct"):
                for seconds in (0.0, 0.001, 0.01, 0.1):
                    for staleness in (0, 1, 3):
                        if n_workers != 2 and seconds not in (0.0, 0.01):
                            continue
                        runs = [measure(client, n_workers, seconds, staleness, transport,
                                        rounds_for(seconds, transport, args.quick), args.spin)
                                for _ in range(repeat)]
                        per_round = statistics.median(r[0] for r in runs)
                        overhead = statistics.median(r[1] for r in runs)
                        row = dict(workers=n_workers, transport=transport,
                                   push_ms=seconds * 1e3, staleness=staleness,
                                   round_ms=per_round * 1e3, rounds_per_s=1 / per_round,
                                   overhead=overhead)
                        rows.append(row)
                        print(_fmt(row), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("# Engine round overhead\n\n")
        command = " ".join(sys.argv[1:] if argv is None else argv)
        f.write(f"Command: `python bench/engine_overhead.py {command}`"
                f"{' (spin)' if args.spin else ''}; median of {repeat} run(s); "
                f"{os.cpu_count()} cores.\n\n")
        f.write("| workers | transport | push ms | staleness | ms/round | rounds/s | "
                "overhead share |\n|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write("| " + " | ".join(_cells(r)) + " |\n")
    print(f"wrote {args.out}")


def _cells(r):
    ov = "-" if r["push_ms"] == 0 else f"{100 * r['overhead']:.1f}%"
    return [str(r["workers"]), r["transport"], f"{r['push_ms']:g}", str(r["staleness"]),
            f"{r['round_ms']:.2f}", f"{r['rounds_per_s']:.0f}", ov]


def _fmt(r):
    return "  ".join(_cells(r))


if __name__ == "__main__":
    main()
