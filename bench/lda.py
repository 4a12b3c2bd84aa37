"""Benchmark: dask_strads.LDA (word rotation) against the `lda` package and tomotopy.

Corpora (issue 4): synthetic, drawn from a known LDA model (``make_lda_corpus``: Zipf-shaped
topic-word priors, Poisson(150) document lengths), about 4 M tokens, V = 50000; models
(a) K = 100 and (b) K = 1000, priors alpha = 0.1, beta = 0.01 for every method.

Methods
-------
``lda``             the `lda` package (Cython collapsed Gibbs, one thread, O(K) per token).
``tomotopy-1/-2``   tomotopy ``LDAModel`` with ``workers=1`` / ``2`` (``optim_interval=0``: the
                    priors stay symmetric and fixed, like ours).
``strads-1/-2``     dask_strads.LDA on a LocalCluster of 1 / 2 single-threaded worker processes
                    (``n_blocks`` = workers, the default ``sampler="auto"``, which is O(1)
                    MH on these corpora and sparse Gibbs on the memory run's). MH mixes less
                    per sweep than Gibbs: it runs more iterations than the peers (time to
                    the target log-likelihood is the fair comparison).
``strads-1-sparse`` the same on 1 worker with the exact sparse Gibbs sampler, as many
                    iterations as the peers (per-sweep mixing of an exact Gibbs sampler).
``strads-2t``       2 single-threaded workers in the client's process (``processes=False``):
                    the vocabulary blocks pass between workers by reference, not copied.
``strads-1x2``      1 worker process of 2 threads: one block of 2 threads (the default
                    ``block_threads``), which rotate the halves of the vocabulary between
                    them inside each push; no block moves between workers.
``strads-2-socket`` ``strads-2`` with ``dask-strads.engine.shared-carried`` off: the
                    vocabulary blocks go through a socket, not a file both processes map.

Reported per corpus: tokens sampled per second per core (median over iterations after the
first; wall clock / cores, and per CPU second of the sampling threads, which is steadier on a
shared machine), the complete-data log-likelihood per token (the `lda` package's
definition, computed from every method's own topic assignments), and the time to reach a
fixed per-token log-likelihood: the lowest final value among the methods that ran the full number of
iterations. Ours: the 1 -> 2 worker speed-up.

Memory run: a word-topic table larger than any worker's ``memory_limit`` (V = 200000, K = 2000:
1.6 GB of int32 counts; 8 workers with ``memory_limit`` 1.5 GB, ``n_blocks`` = 8): the fit must
finish; reported are the peak RSS per worker (sampled every 0.2 s) and the bytes Dask spilled.

Each measurement runs in its own subprocess. The machine has 2 cores shared with other jobs:
two-worker timings are noisy; the report gives the load average seen during each run. With
``--repeats N`` every method runs N times, the methods taking turns within each repeat, and
the table gives medians over the repeats (the machine's speed drifts between runs).

Usage::

    python bench/lda.py            # full problem (about 30-40 minutes on 2 cores)
    python bench/lda.py --quick    # small corpora (a few minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# this file is called lda.py: its folder goes last on the path, so that `import lda`
# finds the package and `worker_memory` is still found (also by the worker processes,
# which start with this path and import this file again)
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]
sys.path.insert(0, str(ROOT))

from worker_memory import watch_workers  # noqa: E402

os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))

ALPHA, BETA, SEED = 0.1, 0.01, 0
METHODS = ["lda", "tomotopy-1", "tomotopy-2", "strads-1", "strads-2", "strads-2t",
           "strads-1x2", "strads-2-socket",
           "strads-1-sparse"]
FULL = dict(n_docs=27_000, n_words=50_000, doc_length=150, topics=[100, 1000],
            iters={100: 20, 1000: 10}, strads_iters={100: 40, 1000: 30},
            # the `lda` package costs O(K) per token: a few iterations measure its speed
            lda_iters={100: 5, 1000: 2},
            # per worker: ~0.3 GB of Python + numba and, during a sub-round, two vocabulary
            # blocks (the one it receives and samples in place, and its previous output
            # until the next holder has used it): 0.3 + 2 x 0.2 GB, under Dask's 70% spill
            # threshold of a 1.5 GB limit, while the table is 1.6 GB
            memory=dict(n_docs=8_000, n_words=200_000, topics=2000, doc_length=100, iters=3,
                        workers=8, memory_limit="1.5GB"))
QUICK = dict(n_docs=4_000, n_words=50_000, doc_length=150, topics=[100, 1000],
             iters={100: 15, 1000: 8}, strads_iters={100: 30, 1000: 24},
             lda_iters={100: 15, 1000: 2},
             # too small to exceed a worker's limit (a worker alone takes ~0.3 GB): a smoke test
             memory=dict(n_docs=2_000, n_words=100_000, topics=1000, doc_length=50, iters=2,
                         workers=4, memory_limit="1GB"))


def corpus(cfg: dict, k: int):
    from dask_strads._datasets.lda import make_lda_corpus

    X, _ = make_lda_corpus(cfg["n_docs"], cfg["n_words"], k, doc_length=cfg["doc_length"],
                           doc_topic_prior=ALPHA, topic_word_prior=0.05, zipf=1.0,
                           random_state=SEED)
    return X


def complete_loglik(doc_of, word_of, topic_of, n_docs, n_words, k) -> float:
    """The `lda` package's log p(w, z) from flat token arrays."""
    from dask_strads.lda import kernels

    ndk = np.bincount(doc_of * k + topic_of, minlength=n_docs * k).reshape(n_docs, k)
    nwk = np.bincount(word_of.astype(np.int64) * k + topic_of,
                      minlength=n_words * k).reshape(n_words, k)
    doc_ptr = np.concatenate(([0], np.cumsum(ndk.sum(axis=1)))).astype(np.int64)
    return float(kernels.doc_loglik(ndk.astype(np.int32), doc_ptr, np.full(k, ALPHA))
                 + kernels.word_loglik(nwk.astype(np.int32), BETA)
                 + kernels.topic_loglik(nwk.sum(axis=0), n_words, BETA))


# ------------------------------------------------------------------------------ methods
def run_lda(X, k: int, n_iter: int) -> dict:
    import lda

    n = int(X.sum())
    refresh = max(1, n_iter // 10)
    model = lda.LDA(k, n_iter=n_iter, alpha=ALPHA, eta=BETA, random_state=SEED, refresh=refresh)
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(X)
    total = time.perf_counter() - t0
    cpu = time.process_time() - c0
    per_iter = total / n_iter
    # loglikelihoods_[i] is taken before iteration i * refresh; the final state's apart
    trace = [(i * refresh * per_iter, ll / n) for i, ll in enumerate(model.loglikelihoods_)]
    trace.append((total, model.loglikelihood() / n))
    return dict(tokens_per_s_core=[n / per_iter], tokens_per_cpu_s=[n * n_iter / cpu],
                trace=trace, iters=n_iter, cores=1)


def run_tomotopy(X, k: int, n_iter: int, workers: int) -> dict:
    import tomotopy as tp

    n_docs, n_words = X.shape
    model = tp.LDAModel(k=k, alpha=ALPHA, eta=BETA, seed=SEED)
    model.optim_interval = 0
    vocab = np.array([f"w{w}" for w in range(n_words)], dtype=object)
    for d in range(n_docs):
        row = X.indptr[d], X.indptr[d + 1]
        words = np.repeat(X.indices[row[0]:row[1]], X.data[row[0]:row[1]])
        model.add_doc(vocab[words].tolist())
    n = int(X.sum())
    model.train(0, workers=workers)  # initialise
    ids = np.array([int(v[1:]) for v in model.vocabs])

    def loglik():
        docs = list(model.docs)
        lengths = np.array([len(d.words) for d in docs])
        doc_of = np.repeat(np.arange(len(docs)), lengths)
        word_of = ids[np.concatenate([np.asarray(d.words) for d in docs])]
        topic_of = np.concatenate([np.asarray(d.topics) for d in docs]).astype(np.int64)
        return complete_loglik(doc_of, word_of, topic_of, len(docs), n_words, k) / n

    trace = [(0.0, loglik())]
    elapsed, speeds, cpu_speeds = 0.0, [], []
    step = max(1, n_iter // 10)
    done = 0
    while done < n_iter:
        m = min(step, n_iter - done)
        t0, c0 = time.perf_counter(), time.process_time()
        model.train(m, workers=workers)
        dt = time.perf_counter() - t0
        cpu_speeds.append(n * m / (time.process_time() - c0))
        elapsed += dt
        done += m
        speeds.append(n * m / dt / workers)
        trace.append((elapsed, loglik()))
    return dict(tokens_per_s_core=speeds[1:] or speeds,
                tokens_per_cpu_s=cpu_speeds[1:] or cpu_speeds, trace=trace, iters=n_iter,
                cores=workers)


def run_strads(X, k: int, n_iter: int, workers: int, memory_limit=None, n_blocks=None,
               sampler="auto", processes=True, shared_carried=True, threads=1) -> dict:
    import dask
    from distributed import Client, LocalCluster

    from dask_strads.lda import LDA

    n = int(X.sum())
    cores = workers * threads
    kwargs = dict(n_workers=workers, threads_per_worker=threads, processes=processes,
                  dashboard_address=":0", **({"host": "127.0.0.1"} if processes else {}))
    if memory_limit is not None:
        kwargs["memory_limit"] = memory_limit
    # the nannies hand the client's configuration to the worker processes they start
    with dask.config.set({"dask-strads.engine.shared-carried": shared_carried}), \
            LocalCluster(**kwargs) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("dask_strads.lda.kernels").lda.kernels.warm_up())
        with watch_workers(client) as seen:
            t0 = time.perf_counter()
            model = LDA(k, doc_topic_prior=ALPHA, topic_word_prior=BETA, max_iter=n_iter,
                        random_state=SEED, n_blocks=n_blocks, client=client,
                        gather_model=memory_limit is None, sampler=sampler)
            model.fit(X)
            wall = time.perf_counter() - t0
    hist = model.history_.set_index("round")
    h = hist["time"]
    P = model.n_blocks_
    start = float(h[P - 1])  # end of the counting rotation
    last = [P * (i + 1) - 1 for i in range(1, n_iter + 1)]
    ends = np.array([h[r] for r in last], dtype=float)
    it_times = np.diff(np.concatenate(([start], ends)))
    cpu = np.diff(np.concatenate(([0.0], hist["sample_cpu_s"].loc[last].to_numpy())))
    cpu_speeds = [n / c for c in cpu]
    speeds = [n / t / cores for t in it_times]
    trace = [(float(t - start), ll / n) for t, ll in zip(ends, model.loglikelihoods_,
                                                       strict=True)]
    return dict(tokens_per_s_core=speeds[1:] or speeds,
                tokens_per_cpu_s=cpu_speeds[1:] or cpu_speeds, trace=trace, iters=n_iter,
                cores=cores, init_s=start, wall_s=wall,
                peak_rss=sorted(seen["peak_rss"].values()),
                spilled=sorted(seen["spilled"].values()), n_blocks=model.n_blocks_,
                sampler=model.sampler_)


# ------------------------------------------------------------------------------ driver
def one(method: str, k: int, cfg: dict, out: str) -> None:
    X = corpus(cfg, k) if method != "memory" else None
    if method == "lda":
        res = run_lda(X, k, cfg["lda_iters"][k])
    elif method.startswith("tomotopy"):
        res = run_tomotopy(X, k, cfg["iters"][k], int(method[-1]))
    elif method == "memory":
        m = cfg["memory"]
        from dask_strads._datasets.lda import make_lda_corpus

        X, _ = make_lda_corpus(m["n_docs"], m["n_words"], m["topics"], doc_length=m["doc_length"],
                               topic_word_prior=0.05, zipf=1.0, random_state=SEED)
        res = run_strads(X, m["topics"], m["iters"], m["workers"], m["memory_limit"],
                         n_blocks=m["workers"])
        res["table_bytes"] = m["n_words"] * m["topics"] * 4
    elif method == "strads-1-sparse":
        res = run_strads(X, k, cfg["iters"][k], 1, sampler="sparse")
    elif method == "strads-2t":
        res = run_strads(X, k, cfg["strads_iters"][k], 2, processes=False)
    elif method == "strads-1x2":
        res = run_strads(X, k, cfg["strads_iters"][k], 1, threads=2)
    elif method == "strads-2-socket":
        res = run_strads(X, k, cfg["strads_iters"][k], 2, shared_carried=False)
    else:
        res = run_strads(X, k, cfg["strads_iters"][k], int(method[-1]))
    res["tokens"] = int(X.sum())
    res["load"] = os.getloadavg()[0]
    Path(out).write_text(json.dumps(res))


def measure(method: str, k: int, quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, __file__, "--one", method, "--k", str(k), "--out", out]
        if quick:
            cmd.append("--quick")
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
        res = json.loads(Path(out).read_text())
        res["process_s"] = time.perf_counter() - t0
        return res


def time_to(trace, target: float):
    for t, ll in trace:
        if ll >= target:
            return t
    return None


def _runs(entry) -> list:
    """A method's runs: a list (``--repeats``) or, in older results, one run."""
    return entry if isinstance(entry, list) else [entry]


def summarise(results: dict, cfg: dict) -> dict:
    """Per method, medians over its runs; the target is the lowest median final
    log-likelihood among the methods that ran the full number of iterations, and a
    method's time to it the median over the runs, when most of them reached it."""
    summary = {}
    for k in cfg["topics"]:
        runs = {m: [r for r in _runs(e) if "trace" in r] for m, e in results[str(k)].items()}
        finals = {m: float(np.median([r["trace"][-1][1] for r in rs]))
                  for m, rs in runs.items() if rs}
        full = [f for m, f in finals.items()
                if m != "lda" or cfg["lda_iters"][k] == cfg["iters"][k]]
        target = min(full) if full else None
        rows = {}
        for m, rs in runs.items():
            if not rs:
                rows[m] = {"error": _runs(results[str(k)][m])[0].get("error", "failed")}
                continue
            times = [time_to(r["trace"], target) if target is not None else None for r in rs]
            reached = [t for t in times if t is not None]
            rows[m] = {
                "tokens_per_s_core": float(np.median([np.median(r["tokens_per_s_core"])
                                                      for r in rs])),
                "tokens_per_cpu_s": float(np.median([np.median(r["tokens_per_cpu_s"])
                                                     for r in rs])),
                "final_ll": finals[m],
                "iters": rs[0]["iters"],
                "time_to_target": (float(np.median(reached))
                                   if 2 * len(reached) > len(times) else None),
                "load": float(np.median([r.get("load") or 0.0 for r in rs])),
                "repeats": len(rs),
            }
        summary[str(k)] = {"target": target, "rows": rows}
    return summary


def write_report(results: dict, summary: dict, cfg: dict, quick: bool, started: str,
                 stem: str | None = None) -> str:
    lines = [f"# LDA benchmark{' (quick)' if quick else ''}", "",
             f"Run {started}; `python bench/lda.py {' '.join(sys.argv[1:])}`. "
             f"Corpus: {cfg['n_docs']} documents, V = {cfg['n_words']}, Poisson("
             f"{cfg['doc_length']}) tokens per document, drawn from an LDA model with K topics; "
             f"alpha = {ALPHA}, beta = {BETA}. 2 cores shared with other jobs (load average in "
             "the table).", ""]
    for k in cfg["topics"]:
        s = summary[str(k)]
        runs = results[str(k)]
        tokens = next((r["tokens"] for e in runs.values() for r in _runs(e) if "tokens" in r),
                      None)
        lines += [f"## K = {k} ({tokens} tokens)", "",
                  f"Target per-token log-likelihood: {s['target']:.4f}" if s["target"] is not None
                  else "No target", "",
                  "| method | tokens/s/core, wall (median) | vs tomotopy-1 | tokens per CPU "
                  "second | vs tomotopy-1 | final ll/token | iters | time to target (s) | load |",
                  "|---|---|---|---|---|---|---|---|---|"]
        ref = s["rows"].get("tomotopy-1", {}).get("tokens_per_s_core")
        ref_cpu = s["rows"].get("tomotopy-1", {}).get("tokens_per_cpu_s")
        for m in METHODS:
            row = s["rows"].get(m)
            if row is None:
                continue
            if "error" in row:
                lines.append(f"| {m} | error: {row['error']} | | | | | | | |")
                continue
            ratio = f"{row['tokens_per_s_core'] / ref:.2f}x" if ref else ""
            ratio_cpu = f"{row['tokens_per_cpu_s'] / ref_cpu:.2f}x" if ref_cpu else ""
            ttt = row["time_to_target"]
            lines.append(f"| {m} | {row['tokens_per_s_core'] / 1e6:.2f} M | {ratio} | "
                         f"{row['tokens_per_cpu_s'] / 1e6:.2f} M | {ratio_cpu} | "
                         f"{row['final_ll']:.4f} | {row['iters']} | "
                         f"{'not reached' if ttt is None else f'{ttt:.1f}'} | "
                         f"{row['load']:.1f} |")
        r1 = s["rows"].get("strads-1", {})
        for name, label in (("strads-2", "2 worker processes"),
                            ("strads-2-socket", "2 worker processes, blocks through a socket"),
                            ("strads-2t", "2 workers in one process"),
                            ("strads-1x2", "1 worker of 2 threads")):
            r2 = s["rows"].get(name, {})
            if "tokens_per_s_core" in r1 and "tokens_per_s_core" in r2:
                speedup = 2 * r2["tokens_per_s_core"] / r1["tokens_per_s_core"]
                lines += ["", f"strads 1 worker -> {label}: {speedup:.2f}x tokens/s (wall)."]
        repeats = {row.get("repeats", 1) for row in s["rows"].values()}
        if repeats != {1}:
            lines += ["", f"Medians over {', '.join(map(str, sorted(repeats)))} runs per "
                      "method, the methods taking turns within each repeat."]
        lines.append("")
    mem = results.get("memory")
    if mem:
        lines += ["## Word-topic table larger than a worker's memory limit", ""]
        if "error" in mem:
            lines.append(f"Failed: {mem['error']}")
        else:
            m = cfg["memory"]
            gb = mem["table_bytes"] / 1e9
            lines += [f"V = {m['n_words']}, K = {m['topics']}: table {gb:.2f} GB of int32 "
                      f"counts; {m['workers']} workers with memory_limit {m['memory_limit']}, "
                      f"n_blocks = {mem['n_blocks']}, {mem['tokens']} tokens, "
                      f"{m['iters']} iterations: finished in {mem['wall_s']:.1f} s.", "",
                      "Peak RSS per worker (MB): " + ", ".join(f"{p / 1e6:.0f}"
                                                             for p in mem["peak_rss"]),
                      "", "Bytes spilled to disk per worker: "
                      + ", ".join(str(s) for s in mem["spilled"]), ""]
    text = "\n".join(lines)
    name = f"{stem or ('lda_quick' if quick else 'lda')}.md"
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / name).write_text(text)
    (HERE / "results" / name.replace(".md", ".json")).write_text(json.dumps(
        {"results": results, "summary": summary}, indent=1))
    return text


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small corpora")
    p.add_argument("--topics", type=int, nargs="*", help="override the K values")
    p.add_argument("--methods", nargs="*", default=METHODS, choices=METHODS)
    p.add_argument("--no-memory", action="store_true", help="skip the memory run")
    p.add_argument("--merge", action="store_true",
                   help="re-measure only the given methods, keep the other results of the last run")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs per method (the methods take turns); the table gives medians")
    p.add_argument("--stem", help="results in bench/results/STEM.md and .json "
                   "(default lda, or lda_quick)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--k", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.topics:
        cfg["topics"] = args.topics
    if args.one:
        one(args.one, args.k, cfg, args.out)
        return
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = {}
    stem = args.stem or ("lda_quick" if args.quick else "lda")
    previous = HERE / "results" / f"{stem}.json"
    if args.merge and previous.exists():
        results = json.loads(previous.read_text())["results"]
    for k in cfg["topics"]:
        results[str(k)] = {**results.get(str(k), {}), **{m: [] for m in args.methods}}
        for rep in range(args.repeats):
            for m in args.methods:
                print(f"K={k} {m} (run {rep + 1} of {args.repeats}) ...", flush=True)
                results[str(k)][m].append(measure(m, k, args.quick))
    if not args.no_memory:
        print("memory ...", flush=True)
        results["memory"] = measure("memory", 0, args.quick)
    summary = summarise(results, cfg)
    print(write_report(results, summary, cfg, args.quick, started, stem))


if __name__ == "__main__":
    main()
