"""Benchmark: recovery snapshots sent to the client against snapshots kept on the cluster.

LDA on a synthetic corpus (``make_lda_corpus``; the word-topic table and the token
assignments are the model state a snapshot copies) on N single-threaded worker processes,
one snapshot per iteration (``checkpoint_every`` = the rounds of an iteration, no
checkpoint file: the in-memory snapshots recovery uses). For each setting of
``dask-strads.engine.snapshots-on-cluster``:

- the fit's wall time and the seconds spent taking snapshots (per snapshot);
- the bytes the client received over TCP while taking them (per snapshot);
- the growth of the client's resident memory during the fit (sampled every 20 ms);
- with one worker killed after the third snapshot: the recovery's seconds, where its
  copies came from, and whether the fit ended with the undisturbed fit's
  log-likelihood.

Each fit runs in its own subprocess; the settings alternate within each repeat, and the
table gives medians over the repeats.

Usage::

    python bench/snapshots.py --workers 2 4 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one(args) -> dict:
    """One fit in this process (the subprocess's job)."""
    import dask
    import distributed.comm.tcp as tcp
    from distributed import Client, LocalCluster

    from dask_strads import LDA
    from dask_strads.datasets import make_lda_corpus
    from dask_strads.engine import snapshots

    counted = {"in": 0, "snap_in": 0, "snap_s": 0.0, "snaps": 0}
    read_rw = tcp.read_bytes_rw

    async def counted_read_rw(stream, n):
        counted["in"] += n
        return await read_rw(stream, n)

    tcp.read_bytes_rw = counted_read_rw
    take = snapshots._Snapshots._take_snapshot

    async def timed_take(self, number, state, on_cluster=True):
        before, t0 = counted["in"], time.perf_counter()
        snap = await take(self, number, state, on_cluster)
        counted["snap_s"] += time.perf_counter() - t0
        counted["snap_in"] += counted["in"] - before
        counted["snaps"] += 1
        return snap

    snapshots._Snapshots._take_snapshot = timed_take

    X, _ = make_lda_corpus(args.docs, args.words, args.topics, doc_length=args.doc_length,
                           zipf=1.0, random_state=0)
    cluster = LocalCluster(n_workers=args.n, threads_per_worker=1, host="127.0.0.1",
                           dashboard_address=":0", memory_limit="4GiB")
    client = Client(cluster)
    peak = {"rss": 0}
    stop = threading.Event()

    def sample():
        while not stop.wait(0.02):
            peak["rss"] = max(peak["rss"], _rss())

    killer = None
    if args.kill:
        victim = sorted(client.scheduler_info()["workers"])[1]

        def kill():
            while counted["snaps"] < 3:
                time.sleep(0.01)
            time.sleep(0.2)
            client.run(os._exit, 1, workers=[victim])

        killer = threading.Thread(target=kill, daemon=True)
    est = LDA(args.topics, max_iter=args.iters, random_state=0, n_blocks=args.n,
              client=client, progress=False, checkpoint_every=args.n, gather_model=False)
    with dask.config.set({"dask-strads.engine.snapshots-on-cluster": args.on_cluster}):
        base = _rss()
        peak["rss"] = base
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        if killer is not None:
            killer.start()
        t0 = time.perf_counter()
        est.fit(X)
        wall = time.perf_counter() - t0
        stop.set()
    rec = est.recoveries_
    out = {"wall": wall, "snaps": counted["snaps"], "snap_s": counted["snap_s"],
           "snap_in": counted["snap_in"], "rss_growth": peak["rss"] - base,
           "loglik": float(est.history_["loglikelihood"].iloc[-1]),
           "recovery_s": rec[0]["seconds"] if rec else None,
           "recovered_from": rec[0]["from"] if rec else None,
           "recovered_round": rec[0]["round"] if rec else None}
    client.close()
    cluster.close()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--docs", type=int, default=10000)
    p.add_argument("--words", type=int, default=50000)
    p.add_argument("--doc-length", type=int, default=150)
    p.add_argument("--iters", type=int, default=12)
    p.add_argument("--stem", default="snapshots")
    p.add_argument("--one", help=argparse.SUPPRESS)  # a subprocess's job, as JSON
    args = p.parse_args()
    if args.one:
        job = argparse.Namespace(**{**vars(args), **json.loads(args.one)})
        print("RESULT " + json.dumps(one(job)), flush=True)
        return
    runs = []
    for rep in range(args.repeats):
        for n in args.workers:
            for kill in (False, True):
                for on_cluster in ((True, False) if rep % 2 == 0 else (False, True)):
                    job = {"n": n, "kill": kill, "on_cluster": on_cluster}
                    proc = subprocess.run(
                        [sys.executable, __file__, "--one", json.dumps(job),
                         "--topics", str(args.topics), "--docs", str(args.docs),
                         "--words", str(args.words), "--doc-length", str(args.doc_length),
                         "--iters", str(args.iters)],
                        capture_output=True, text=True, cwd=HERE.parent)
                    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                    if not lines:
                        raise RuntimeError(f"run {job} failed:\n{proc.stderr[-3000:]}")
                    run = {**job, "repeat": rep, **json.loads(lines[-1][7:])}
                    print(run, flush=True)
                    runs.append(run)
    (RESULTS / f"{args.stem}.json").write_text(json.dumps(runs, indent=1))
    (RESULTS / f"{args.stem}.md").write_text(report(runs, args))


def report(runs, args) -> str:
    def med(rows, key):
        vals = [r[key] for r in rows if r[key] is not None]
        return float(np.median(vals)) if vals else float("nan")

    lines = [
        "# Recovery snapshots: sent to the client, or kept on the cluster", "",
        f"Command: `python bench/snapshots.py --workers {' '.join(map(str, args.workers))} "
        f"--repeats {args.repeats} --stem {args.stem}`. LDA, K = {args.topics}, "
        f"{args.docs} documents of about {args.doc_length} tokens, V = {args.words}, "
        f"{args.iters} iterations, one snapshot per iteration; N single-threaded worker "
        "processes. Medians over the repeats; the settings alternate within each repeat.",
        "",
        "| N | snapshots | fit s | snapshots' s (per snapshot) | client MB in per snapshot "
        "| client RSS growth MB | recovery s | recovered from | same log-likelihood |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in args.workers:
        for on_cluster in (False, True):
            calm = [r for r in runs if r["n"] == n and r["on_cluster"] == on_cluster
                    and not r["kill"]]
            killed = [r for r in runs if r["n"] == n and r["on_cluster"] == on_cluster
                      and r["kill"]]
            ref = {r["repeat"]: r["loglik"] for r in calm}
            same = sum(abs(r["loglik"] - ref[r["repeat"]]) <= 1e-9 * abs(ref[r["repeat"]])
                       for r in killed if r["repeat"] in ref)
            per = med([{"x": r["snap_s"] / max(r["snaps"], 1)} for r in calm], "x")
            mb_in = med([{"x": r["snap_in"] / max(r["snaps"], 1) / 1e6} for r in calm], "x")
            froms = sorted({str(r["recovered_from"]) for r in killed})
            lines.append(
                f"| {n} | {'cluster' if on_cluster else 'client'} | {med(calm, 'wall'):.2f} "
                f"| {med(calm, 'snap_s'):.2f} ({per:.3f}) | {mb_in:.2f} "
                f"| {med(calm, 'rss_growth') / 1e6:.0f} | {med(killed, 'recovery_s'):.2f} "
                f"| {', '.join(froms)} | {same} of {len(killed)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
