"""Workers that join or retire during a fit: do the rounds get faster once the blocks
spread, and what does a retirement cost?

Pushes that only sleep (so that more workers than cores still run them in parallel):
``--blocks`` blocks, each push sleeping ``--push-ms``; the blocks are snapshotted every
``--every`` rounds (where blocks can move). Joining: one fit stays on its 2 workers; in
the other, ``cluster.scale(--grow)`` is called ``--after`` seconds in. Reported per fit:
the median round time before the first spread and after the last one, and the wall time.
``--retire``: on 4 workers, one that holds blocks is retired (``client.retire_workers``)
``--after`` seconds in, once with the handover (the default) and once with
``dask-strads.engine.handover-timeout`` 0 (recovered from the last snapshot); reported:
wall time, rounds run again, the handover's or recovery's own time. The fits alternate
``--repeats`` times.

Usage::

    python bench/elastic.py                     # 8 blocks, 50 ms pushes, 2 -> 8 workers
    python bench/elastic.py --retire --every 40  # 4 workers, one retires
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


def timed_fit(args, client):
    """The sleeping fit on ``client``: its RunResult and wall time."""
    from dask_strads.engine import run

    t0 = time.perf_counter()
    res = run(SnapshottedPush(args.push_ms / 1e3), dict.fromkeys(range(args.blocks)), client,
              max_rounds=args.rounds, transport="direct", progress=False,
              checkpoint_every=args.every)
    return res, time.perf_counter() - t0


def one_fit(args, grow: bool) -> dict:
    from distributed import Client, LocalCluster


    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2)
        if grow:
            timer = threading.Timer(args.after, cluster.scale, (args.grow,))
            timer.start()
        res, wall = timed_fit(args, client)
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


def retire_fit(args, handover: bool) -> dict:
    import dask
    from distributed import Client, LocalCluster


    timeout = "30s" if handover else 0
    # the workers read the setting too: set before they start
    with dask.config.set({"dask-strads.engine.handover-timeout": timeout}), \
            LocalCluster(n_workers=4, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(4)
        victim = sorted(client.scheduler_info()["workers"])[0]
        timer = threading.Timer(args.after, client.retire_workers, ([victim],))
        timer.start()
        res, wall = timed_fit(args, client)
        timer.join()
    rounds = res.history["round"]
    events = res.handovers or res.recoveries
    return dict(handover=handover, wall_s=wall, rounds_run=len(rounds),
                run_again=len(rounds) - rounds.nunique(), handovers=res.handovers,
                recoveries=res.recoveries, at_round=events[0]["round"] if events else None,
                event_s=events[0]["seconds"] if events else float("nan"))


def main_retire(args) -> None:
    runs = []
    for _ in range(args.repeats):
        for handover in (True, False):
            runs.append(retire_fit(args, handover))
            print(json.dumps(runs[-1]), flush=True)
    med = statistics.median
    lines = [
        "# A worker retiring during a fit", "",
        f"`python bench/elastic.py --retire --blocks {args.blocks} --push-ms {args.push_ms:g} "
        f"--rounds {args.rounds} --every {args.every} --after {args.after:g} "
        f"--repeats {args.repeats}`", "",
        f"{args.blocks} blocks whose pushes sleep {args.push_ms:g} ms, {args.rounds} rounds, a "
        f"snapshot every {args.every} rounds, on 4 worker processes; "
        f"`client.retire_workers` takes one {args.after:g} s in. Medians of "
        f"{args.repeats} alternating runs.", "",
        "| retired worker | wall (s) | rounds run again | seconds of the handover or "
        "recovery | handovers / recoveries per fit |",
        "|---|---|---|---|---|",
    ]
    for handover, label in ((True, "hands its blocks over"),
                            (False, "is recovered from the snapshot (handover-timeout 0)")):
        rs = [r for r in runs if r["handover"] == handover]
        counts = ", ".join(f"{len(r['handovers'])} / {len(r['recoveries'])}" for r in rs)
        lines.append(
            f"| {label} | {med(r['wall_s'] for r in rs):.2f} | "
            f"{med(r['run_again'] for r in rs)} | {med(r['event_s'] for r in rs):.2f} | "
            f"{counts} |")
    (RESULTS / "elastic_retire.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "elastic_retire.json").write_text(json.dumps({"args": vars(args), "runs": runs},
                                                            indent=1))
    print("\n".join(lines))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--push-ms", type=float, default=50.0)
    p.add_argument("--rounds", type=int, default=150)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--grow", type=int, default=8)
    p.add_argument("--after", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--retire", action="store_true",
                   help="retire a worker of 4 instead of growing from 2")
    args = p.parse_args(argv)
    # the workers import the program from bench/ by reference
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(HERE)] + [q for q in os.environ.get("PYTHONPATH", "").split(os.pathsep) if q])
    if args.retire:
        main_retire(args)
        return
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
