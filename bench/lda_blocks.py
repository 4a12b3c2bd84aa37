"""LDA's coordination per iteration: the same sampling threads as many single-threaded
workers, or as fewer workers of several threads (``block_threads``).

With W workers of T threads an iteration is W rounds (one vocabulary block per worker),
each round a message to every worker; the T threads of a block rotate its vocabulary
pieces among themselves inside the push. So for W x T fixed, the client's messages per
iteration fall as W^2 (W rounds of W messages, fewer through relays above 8 workers).

For each layout, on a LocalCluster of W worker processes of T threads, two fits of the
same corpus differ only in ``max_iter`` (``--iters`` and 2 more than the short one):
their difference per iteration gives the client process's CPU, the wall time and the
rounds, with set-up and the final gather cancelling out. This machine has 2 cores, so
with 8 threads in all the wall times measure contention as much as coordination; the
client's CPU per iteration is the figure to read.

Run: ``python bench/lda_blocks.py [--layouts 8x1 4x2 2x4 1x8] [--iters 10] [--repeats 2]
[--stem lda_blocks]``; writes ``bench/results/<stem>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# this folder holds lda.py, which would shadow the `lda` package
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

RESULTS = HERE / "results"
SHORT = 2  # iterations of the short fit


def corpus():
    from dask_strads.datasets import make_lda_corpus

    counts, _ = make_lda_corpus(8000, 5000, 20, doc_length=100, zipf=1.0, random_state=0)
    return counts


def fit_pair(X, workers: int, threads: int, iters: int) -> dict:
    """The long fit's costs beyond the short one's, per extra iteration."""
    from distributed import Client, LocalCluster

    from dask_strads.lda import LDA

    out = {}
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.run(lambda: __import__("dask_strads.lda.kernels").lda.kernels.warm_up())
        # a first fit pays for imports and caches on the client and the workers
        LDA(20, max_iter=1, random_state=0, client=client, progress=False).fit(X)
        for n_iter in (SHORT, SHORT + iters):
            cpu0, t0 = time.process_time(), time.perf_counter()  # all the client's threads
            model = LDA(20, max_iter=n_iter, random_state=0, client=client,
                        progress=False).fit(X)
            out[n_iter] = dict(cpu=time.process_time() - cpu0,
                               wall=time.perf_counter() - t0, rounds=len(model.history_),
                               blocks=model.n_blocks_, threads=model.block_threads_)
    short, long = out[SHORT], out[SHORT + iters]
    return dict(layout=f"{workers}x{threads}", workers=workers, threads=threads,
                blocks=long["blocks"], block_threads=long["threads"],
                rounds_per_iter=(long["rounds"] - short["rounds"]) / iters,
                client_cpu_ms=1e3 * (long["cpu"] - short["cpu"]) / iters,
                wall_ms=1e3 * (long["wall"] - short["wall"]) / iters)


def report(rows: list[dict], started: str, command: str) -> str:
    lines = ["# LDA: coordination per iteration, workers against threads per block", "",
             f"Run {started}; `{command}`. Corpus: 8000 documents, V = 5000, K = 20, "
             "about 100 tokens per document. Per extra iteration of the long fit over the "
             "short one; medians over the repeats.", "",
             "| layout (workers x threads) | blocks x threads per block | rounds per "
             "iteration | client CPU per iteration (ms) | wall per iteration (ms) |",
             "|---|---|---|---|---|"]
    for layout in dict.fromkeys(r["layout"] for r in rows):
        rs = [r for r in rows if r["layout"] == layout]

        def med(key, rs=rs):
            return statistics.median(r[key] for r in rs)

        lines.append(f"| {layout} | {rs[0]['blocks']} x {rs[0]['block_threads']} | "
                     f"{med('rounds_per_iter'):.0f} | {med('client_cpu_ms'):.1f} | "
                     f"{med('wall_ms'):.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", nargs="+", default=["8x1", "4x2", "2x4", "1x8"])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--stem", default="lda_blocks")
    args = ap.parse_args(argv)
    layouts = []
    for text in args.layouts:
        try:
            w, t = (int(x) for x in text.split("x"))
        except ValueError:
            ap.error(f"--layouts: expected WORKERSxTHREADS such as 4x2, got {text!r}")
        if w < 1 or t < 1:
            ap.error(f"--layouts: expected positive counts, got {text!r}")
        layouts.append((w, t))
    if args.iters < 1 or args.repeats < 1:
        ap.error("--iters and --repeats must be at least 1")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    X = corpus()
    rows = []
    for rep in range(args.repeats):
        for w, t in layouts:  # the layouts take turns within each repeat
            print(f"{w}x{t} (repeat {rep + 1} of {args.repeats}) ...", flush=True)
            rows.append(fit_pair(X, w, t, args.iters))
    command = "python bench/lda_blocks.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = report(rows, started, command.strip())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.stem}.md").write_text(text)
    (RESULTS / f"{args.stem}.json").write_text(json.dumps({"rows": rows}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
