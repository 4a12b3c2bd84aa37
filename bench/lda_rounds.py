"""Where a round of LDA goes: 2 worker processes against 2 workers in one process.

Same corpus as ``bench/lda.py`` (27,000 documents, V = 50,000, Poisson(150) tokens),
the same fit on a LocalCluster of 2 single-threaded worker processes (vocabulary
blocks handed over through shared memory, and through a socket:
``dask-strads.engine.shared-carried`` off) and of 2 workers in the client's process,
alternating. From each fit's history, after the counting
rotation and the first iteration, the medians per round of: the round's wall time, the
slowest worker's push, a worker's sampling (wall and CPU), and the client's schedule
and pull. A push's time beyond its sampling is mostly taking the vocabulary block from
the worker that sampled it last.

Run: ``python bench/lda_rounds.py [--topics 100] [--iters 12] [--repeats 2] [--stem
lda_rounds]``; writes ``bench/results/<stem>.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


MODES = {"processes": (True, True), "processes-socket": (True, False),
         "threads": (False, True)}


def fit(X, k: int, iters: int, processes: bool, shared_carried: bool) -> dict:
    import dask
    from distributed import Client, LocalCluster

    from dask_strads.lda import LDA

    kw = dict(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0",
              **({"host": "127.0.0.1"} if processes else {}))
    # the nannies hand the client's configuration to the worker processes they start
    with dask.config.set({"dask-strads.engine.shared-carried": shared_carried}), \
            LocalCluster(**kw) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("dask_strads.lda.kernels").lda.kernels.warm_up())
        t0 = time.perf_counter()
        model = LDA(k, doc_topic_prior=0.1, topic_word_prior=0.01, max_iter=iters,
                    random_state=0, client=client, progress=False).fit(X)
        wall = time.perf_counter() - t0
    P = model.n_blocks_
    h = model.history_.iloc[2 * P:]  # after the counting rotation and the first iteration
    ms = 1e3
    sample = np.diff(h["sample_s"].to_numpy()) / 2  # per worker: 2 pushes a round
    cpu = np.diff(h["sample_cpu_s"].to_numpy()) / 2
    return {"fit_s": wall, "rounds": len(h), "round_ms": ms * h["round_s"].median(),
            "push_ms": ms * h["push_s"].median(), "sample_ms": ms * np.median(sample),
            "sample_cpu_ms": ms * np.median(cpu),
            "client_ms": ms * (h["schedule_s"] + h["pull_s"]).median()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--stem", default="lda_rounds")
    args = ap.parse_args()
    from dask_strads._datasets.lda import make_lda_corpus

    X, _ = make_lda_corpus(27_000, 50_000, args.topics, doc_length=150, doc_topic_prior=0.1,
                           topic_word_prior=0.05, zipf=1.0, random_state=0)
    runs: dict = {name: [] for name in MODES}
    for _ in range(args.repeats):
        for name, (processes, shared_carried) in MODES.items():
            runs[name].append(fit(X, args.topics, args.iters, processes, shared_carried))
            print(name, {k: round(v, 2) for k, v in runs[name][-1].items()}, flush=True)
    cols = ["round_ms", "push_ms", "sample_ms", "sample_cpu_ms", "client_ms"]
    lines = ["# LDA rounds: 2 worker processes against 2 workers in one process", "",
             f"Command: `python {' '.join(sys.argv)}`. K = {args.topics}, {args.iters} "
             f"iterations, {args.repeats} fits of each, alternating. Medians per round "
             "(ms) after the first iteration; `push - sample`: the slowest push beyond a "
             "worker's sampling (taking the vocabulary block, the log-likelihood terms).",
             "", "| workers | fit | " + " | ".join(cols) + " | push - sample |",
             "|---" * (len(cols) + 3) + "|"]
    for name, rs in runs.items():
        for i, r in enumerate(rs):
            vals = " | ".join(f"{r[c]:.1f}" for c in cols)
            lines.append(f"| {name} | {i + 1} | {vals} | {r['push_ms'] - r['sample_ms']:.1f} |")
    gap = {n: statistics.median(r["push_ms"] - r["sample_ms"] for r in rs)
           for n, rs in runs.items()}
    rounds = {n: statistics.median(r["round_ms"] for r in rs) for n, rs in runs.items()}
    lines += ["", "Rounds per second against threads: " + ", ".join(
        f"{n} {rounds['threads'] / rounds[n]:.3f}" for n in MODES if n != "threads")
        + ". Push beyond sampling, median: " + ", ".join(
        f"{n} {gap[n]:.1f} ms" for n in MODES) + ".", ""]
    (RESULTS / f"{args.stem}.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
