"""Column blocks from a dask X in chunks of rows: the bytes that move and the time.

X (n x p float64) is persisted on N worker processes (1 thread each) in chunks of
``--rows`` rows, rebalanced, then cut into N column blocks by
``cd.shards.dense_shards`` as a fit does. Reported per N: the bytes the workers
received while the blocks were made, against the least that must move (the columns of
each block in chunks that another worker holds), the wall time and the workers' CPU
time. With ``--lazy`` X stays a graph (random numbers drawn per chunk), as a pipeline
hands it over, and every block needs a cut of every chunk. Old against new code: run
once per version with ``PYTHONPATH=<worktree>``.

Usage::

    python bench/dask_blocks.py --workers 2 4 8 --repeats 3 --stem dask_blocks
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _received(dask_worker) -> int:
    return sum(e["total"] for e in dask_worker.transfer_incoming_log)


def _cpu() -> float:
    return time.process_time()


def measure(n_workers: int, n: int, p: int, rows: int, repeats: int,
            lazy: bool = False) -> list[dict]:
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    from dask_strads.cd.shards import dense_shards

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      memory_limit="4GiB", dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        X = da.random.default_rng(0).standard_normal((n, p), chunks=(rows, p))
        if not lazy:
            X = client.persist(X)
            wait(X)
            client.rebalance(X)
        starts = np.linspace(0, p, n_workers + 1).astype(int)
        holders = {key[1]: set(ws) for key, ws in client.who_has(X).items()}
        out = []
        for _ in range(repeats):
            before = sum(client.run(_received).values())
            cpu = sum(client.run(_cpu).values())
            t0 = time.perf_counter()
            shards = dense_shards(client, X, starts, False)
            wall = time.perf_counter() - t0
            cpu = sum(client.run(_cpu).values()) - cpu
            moved = sum(client.run(_received).values()) - before
            makers = {b: set(ws) for b, f in shards.items()
                      for ws in [client.who_has([f])[f.key]]}
            least = sum(X.chunks[0][i] * (starts[b + 1] - starts[b]) * 8
                        for b in shards for i in holders if not holders[i] & makers[b])
            out.append(dict(workers=n_workers, x_bytes=X.nbytes, moved_bytes=moved,
                            least_bytes=None if lazy else int(least), wall_s=wall,
                            workers_cpu_s=cpu, lazy=lazy))
            del shards
            time.sleep(1)
        return out


def report(rows: list[dict], args, stem: str) -> None:
    mb = 2**20
    held = "given as a graph" if args.lazy else "persisted"
    lines = [f"# Column blocks from a dask X {held} in chunks of rows", "",
             f"`python bench/dask_blocks.py --workers {' '.join(map(str, args.workers))} "
             f"--n {args.n} --p {args.p} --rows {args.rows} --repeats {args.repeats}"
             f"{' --lazy' if args.lazy else ''}`", "",
             "| workers | X (MB) | moved (MB) | least (MB) | wall (s), each repeat "
             "| workers' CPU (s) |", "|---|---|---|---|---|---|"]
    for n_workers in args.workers:
        runs = [r for r in rows if r["workers"] == n_workers]
        moved = ", ".join(f"{r['moved_bytes'] / mb:.0f}" for r in runs)
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in runs)
        cpus = ", ".join(f"{r['workers_cpu_s']:.2f}" for r in runs)
        least = runs[0]["least_bytes"]
        least = "" if least is None else f"{least / mb:.0f}"
        lines.append(f"| {n_workers} | {runs[0]['x_bytes'] / mb:.0f} | {moved} | "
                     f"{least} | {walls} | {cpus} |")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{stem}.json").write_text(json.dumps(rows, indent=1))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--p", type=int, default=16000)
    parser.add_argument("--rows", type=int, default=250, help="rows per chunk of X")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lazy", action="store_true",
                        help="X as a graph (not persisted): each chunk drawn when needed")
    parser.add_argument("--stem", default="dask_blocks")
    args = parser.parse_args(argv)
    rows = [r for n_workers in args.workers
            for r in measure(n_workers, args.n, args.p, args.rows, args.repeats,
                             args.lazy)]
    for r in rows:
        print(json.dumps(r))
    report(rows, args, args.stem)


if __name__ == "__main__":
    main()
