"""Direct rounds through relays against one message per worker (issue 35, item 3).

The engine with pushes that only sleep (10 ms, one block per worker, staleness 0, the
``sleep-direct`` case of ``bench/scaling.py``), at N = 2, 4, 8, 16 worker processes,
with ``dask-strads.engine.relay-above`` set to each value given (``null``: never
relay), the settings alternating on one cluster per N and repeated. Per round: the
client's CPU, the scheduler's, the busiest worker's (a relay forwards its group's
pushes) and the wall time. A round's coordination on the critical path is the client's
CPU plus the busiest worker's (the relays forward in parallel); with 10 ms of work per
round its share is ``cpu / (10 ms + cpu)``, what it would be with a core each.

``--case sleep-carry``: each push also takes a small carried block from the worker that
made it in the round before, as LDA's pushes take their vocabulary blocks.

Run: ``python bench/relay.py [--workers 2 4 8 16] [--relay-above null 8] [--repeats 3]
[--case sleep-carry] [--label NAME]``; writes ``bench/results/relay[_NAME].json`` and
``.md`` (medians over the repeats).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import dask

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scaling  # noqa: E402  (bench/ is not a package)

SLEEP_MS = scaling.SLEEP * 1e3


def _setting(text: str):
    return None if text.lower() in ("null", "none") else int(text)


def measure(args) -> list[dict]:
    scaling.prepare_workers_path()  # puts bench/ back on the path (scaling takes it off)
    from engine_overhead import RotatingSleep, TimedPush
    scaling.install([TimedPush, RotatingSleep])
    cfg = {"sleep_rounds": args.rounds}
    rows = []
    for n in args.workers:
        with scaling.subprocess_client(n) as client:
            for repeat in range(args.repeats):
                for relay in args.relay_above:
                    with dask.config.set({"dask-strads.engine.relay-above": relay}):
                        row = scaling.run_case(client, args.case, n, cfg)
                    row.update(relay_above=relay, repeat=repeat)
                    rows.append(row)
                    print(json.dumps({k: row[k] for k in ("workers", "relay_above", "round_ms",
                                                          "client_cpu_ms",
                                                          "busiest_worker_cpu_ms")}),
                          flush=True)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for key in sorted({(r["workers"], str(r["relay_above"])) for r in rows}):
        rs = [r for r in rows if (r["workers"], str(r["relay_above"])) == key]
        med = {m: statistics.median(r[m] for r in rs)
               for m in ("round_ms", "client_cpu_ms", "sched_cpu_ms", "busiest_worker_cpu_ms")}
        path = med["client_cpu_ms"] + med["busiest_worker_cpu_ms"]
        out.append(dict(workers=key[0], relay_above=key[1], runs=len(rs), **med,
                        path_cpu_ms=path, share=path / (SLEEP_MS + path)))
    return out


def report(rows: list[dict], command: str, path: Path) -> str:
    what = ("each taking a carried block from the worker that made it, as LDA's rounds do"
            if "sleep-carry" in command else "no carried blocks")
    lines = [
        "# Direct rounds through relays (issue 35)", "",
        f"Command: `{command}`. Sleep pushes of {SLEEP_MS:g} ms, one block per worker "
        f"({what}), staleness 0; medians over the repeats, settings alternating on one "
        "cluster per N. "
        "Relays are used when more than `relay-above` workers push in a round. "
        "Critical-path CPU = the client's + the busiest worker's; share = that / "
        f"({SLEEP_MS:g} ms + that).", "",
        "| N | relay-above | runs | ms/round (wall) | client CPU ms | scheduler CPU ms | "
        "busiest worker CPU ms | critical-path CPU ms | overhead share (CPU) |",
        "|---|---|---|---|---|---|---|---|---|"]
    for r in summary(rows):
        lines.append(f"| {r['workers']} | {r['relay_above']} | {r['runs']} | "
                     f"{r['round_ms']:.1f} | {r['client_cpu_ms']:.2f} | "
                     f"{r['sched_cpu_ms']:.2f} | {r['busiest_worker_cpu_ms']:.2f} | "
                     f"{r['path_cpu_ms']:.2f} | {r['share']:.1%} |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--relay-above", type=_setting, nargs="+", default=[None, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--label", default="")
    ap.add_argument("--case", default="sleep-direct", choices=["sleep-direct", "sleep-carry"],
                    help="sleep-carry: each push also takes a carried block from the worker "
                         "that made it (LDA's rounds)")
    args = ap.parse_args(argv)
    name = "relay" + (f"_{args.label}" if args.label else "")
    rows = measure(args)
    command = "python bench/relay.py " + " ".join(sys.argv[1:])
    (scaling.RESULTS / f"{name}.json").write_text(
        json.dumps({"command": command, "rows": rows}, indent=1))
    print(report(rows, command, scaling.RESULTS / f"{name}.md"))


if __name__ == "__main__":
    main()
