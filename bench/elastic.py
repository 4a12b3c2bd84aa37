"""Workers that join during a fit: do the rounds get faster once the blocks spread?

Pushes that only sleep (so that more workers than cores still run them in parallel):
``--blocks`` blocks on 2 workers, each push sleeping ``--push-ms``; the blocks are
snapshotted every ``--every`` rounds (where blocks can move). One fit stays on its 2
workers; in the other, ``cluster.scale(--grow)`` is called ``--after`` seconds in. Reported
per fit: the median round time before the first spread and after the last one, and the
wall time; the fits alternate ``--repeats`` times.

Usage::

    python bench/elastic.py                     # 8 blocks, 50 ms pushes, 2 -> 8 workers
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

from engine_overhead import TimedPush  # noqa: E402


class SnapshottedPush(TimedPush):
    """Sleeping pushes whose (trivial) state can be snapshotted, so blocks can move."""

    def state_arrays(self, state):
        return {"blocks": np.asarray(state["blocks"])}

    def load_state(self, arrays):
        return {"blocks": [int(b) for b in arrays["blocks"]]}


def one_fit(args, grow: bool) -> dict:
    from distributed import Client, LocalCluster

    from dask_strads.engine import run

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2)
        if grow:
            timer = threading.Timer(args.after, cluster.scale, (args.grow,))
            timer.start()
        t0 = time.perf_counter()
        res = run(SnapshottedPush(args.push_ms / 1e3), dict.fromkeys(range(args.blocks)), client,
                  max_rounds=args.rounds, transport="direct", progress=False,
                  checkpoint_every=args.every)
        wall = time.perf_counter() - t0
        if grow:
            timer.join()
    h = res.history.set_index("round")["round_s"]
    first = res.spreads[0]["round"] if res.spreads else args.rounds
    last = res.spreads[-1]["round"] if res.spreads else args.rounds
    return dict(grow=grow, wall_s=wall, spreads=res.spreads,
                workers_at_end=len(set(res.placement.values())),
                before_ms=1e3 * float(h.loc[2:first - 1].median()),
                after_ms=1e3 * float(h.loc[last + 1:].median()) if last < args.rounds - 2
                else float("nan"))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--push-ms", type=float, default=50.0)
    p.add_argument("--rounds", type=int, default=150)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--grow", type=int, default=8)
    p.add_argument("--after", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    # the workers import the program from bench/ by reference
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(HERE)] + [q for q in os.environ.get("PYTHONPATH", "").split(os.pathsep) if q])
    runs = []
    for _ in range(args.repeats):
        for grow in (False, True):
            runs.append(one_fit(args, grow))
            print(json.dumps(runs[-1]), flush=True)
    stay = [r for r in runs if not r["grow"]]
    grew = [r for r in runs if r["grow"]]
    med = statistics.median
    lines = [
        "# Workers joining a fit", "",
        f"`python bench/elastic.py --blocks {args.blocks} --push-ms {args.push_ms:g} --rounds "
        f"{args.rounds} --every {args.every} --grow {args.grow} --after {args.after:g} "
        f"--repeats {args.repeats}`", "",
        f"{args.blocks} blocks whose pushes sleep {args.push_ms:g} ms, {args.rounds} rounds, a "
        f"snapshot every {args.every} rounds, on 2 worker processes; in the growing fits "
        f"`cluster.scale({args.grow})` is called {args.after:g} s in. Medians of "
        f"{args.repeats} alternating runs.", "",
        "| fit | wall (s) | ms per round before the spread | after | workers at the end |",
        "|---|---|---|---|---|",
        f"| stays on 2 | {med(r['wall_s'] for r in stay):.2f} | "
        f"{med(r['before_ms'] for r in stay):.1f} | - | "
        f"{med(r['workers_at_end'] for r in stay)} |",
        f"| grows to {args.grow} | {med(r['wall_s'] for r in grew):.2f} | "
        f"{med(r['before_ms'] for r in grew):.1f} | {med(r['after_ms'] for r in grew):.1f} | "
        f"{med(r['workers_at_end'] for r in grew)} |", "",
        "Spreads of the growing fits (round, workers that took blocks, seconds):", "",
    ]
    lines += [f"- {[(s['round'], s['workers'], round(s['seconds'], 2)) for s in r['spreads']]}"
              for r in grew]
    (RESULTS / "elastic.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "elastic.json").write_text(json.dumps({"args": vars(args), "runs": runs},
                                                     indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
