"""Benchmark: dask_strads.LDA against tomotopy (and `lda`) on real text (issue 39).

Corpora: ``bench/corpora.py`` (``docs-1m``: Python docstrings, ~1 M tokens, short
documents; ``text-10m``: docstrings + shipped documentation + man pages, ~10 M tokens).
Priors alpha = 50 / K (``--alpha`` to change), beta = 0.01, fixed and symmetric for every
method (tomotopy's ``optim_interval = 0``).

Methods (each in its own subprocess, one after the other)
-------
``tomotopy-1``  tomotopy ``LDAModel``, ``workers=1`` (its default sampler, one thread).
``strads-1``    dask_strads.LDA on a LocalCluster of 1 single-threaded worker process.
``strads-2``    the same on 2 worker processes (``n_blocks`` = 2).
``lda``         the `lda` package (Cython collapsed Gibbs, O(K) per token): a few
                iterations, for its speed only (``--lda-iters``).

Speed: training tokens x iterations / wall seconds of the sampling iterations (ours: from the
end of the counting rotation to the end of the fit, from ``history_``; tomotopy: its
``train`` call), per core (divided by the workers). Quality, with the same code for every
method, from each method's topic-word distributions ``phi`` (its counts + beta, normalised):

* held-out perplexity by document completion: the tokens of every held-out document are
  shuffled (seeded) and cut in two halves; theta is fitted on the first half by fold-in
  Gibbs sampling with ``phi`` fixed (``dask_strads.lda.kernels.fold_in``, 50 sweeps, the
  second half averaged), and the perplexity is ``exp(-sum log sum_k theta_dk phi_kw / n)``
  over the second halves' ``n`` tokens;
* UMass coherence of each topic's 10 top words on the training documents
  (``sum_{i<j} log((D(w_i, w_j) + 1) / D(w_j))``, ``w_j`` the more frequent), averaged over
  topics.

Usage::

    python bench/lda_real.py --corpus docs-1m --topics 20 50 100 1000 --iters 100
    python bench/lda_real.py --corpus docs-1m --topics 50 --methods strads-1 tomotopy-1
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
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # `import lda`: the package
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE))
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))

BETA, SEED, TOP = 0.01, 0, 10
METHODS = ["tomotopy-1", "strads-1", "strads-2", "lda"]


def _corpus(name):
    import corpora

    return corpora.load(name)


# ------------------------------------------------------------------------------ methods
def run_tomotopy(X, k, alpha, n_iter, seed=SEED, optimize=0, burn_in=0):
    import tomotopy as tp

    model = tp.LDAModel(k=k, alpha=alpha, eta=BETA, seed=seed)
    model.optim_interval = optimize
    model.burn_in = burn_in
    names = np.array([str(w) for w in range(X.shape[1])], dtype=object)
    for d in range(X.shape[0]):
        lo, hi = X.indptr[d], X.indptr[d + 1]
        model.add_doc(names[np.repeat(X.indices[lo:hi], X.data[lo:hi])].tolist())
    model.train(0, workers=1)
    t0, c0 = time.perf_counter(), time.process_time()
    model.train(n_iter, workers=1)
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    ids = np.array([int(v) for v in model.vocabs])
    counts = np.zeros((k, X.shape[1]))
    for t in range(k):  # the topic-word counts back from tomotopy's distributions
        dist = np.asarray(model.get_topic_word_dist(t), dtype=np.float64)
        counts[t, ids] = dist
    # get_topic_word_dist is (n_kw + beta) / (n_k + V beta); n_k from its topic sizes
    nk = np.asarray(model.get_count_by_topics(), dtype=np.float64)
    components = counts * (nk + X.shape[1] * BETA)[:, None]
    return dict(seconds=seconds, cpu_s=cpu, components=components, workers=1,
                alpha=np.asarray(model.alpha, dtype=np.float64).tolist())


def run_lda(X, k, alpha, n_iter):
    import lda

    model = lda.LDA(k, n_iter=n_iter, alpha=alpha, eta=BETA, random_state=SEED,
                    refresh=n_iter + 1)
    t0, c0 = time.perf_counter(), time.process_time()
    model.fit(X)
    return dict(seconds=time.perf_counter() - t0, cpu_s=time.process_time() - c0,
                components=model.nzw_ + BETA, workers=1)


def run_strads(X, k, alpha, n_iter, workers, sampler="auto", seed=SEED, optimize=0,
               burn_in=0):
    from distributed import Client, LocalCluster

    from dask_strads.lda import LDA

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0", host="127.0.0.1") as cluster, \
            Client(cluster) as client:
        client.run(lambda: __import__("dask_strads.lda.kernels").lda.kernels.warm_up())
        import psutil

        procs = [psutil.Process(p) for p in client.run(os.getpid).values()]
        procs.append(psutil.Process())  # the client, with the scheduler in its process
        model = LDA(k, doc_topic_prior=alpha, topic_word_prior=BETA, max_iter=n_iter,
                    random_state=seed, client=client, sampler=sampler,
                    optimize_interval=optimize, optimize_burn_in=burn_in)
        c0 = [sum(p.cpu_times()[:2]) for p in procs]
        t0 = time.perf_counter()
        model.fit(X)
        wall = time.perf_counter() - t0
        cpu = sum(sum(p.cpu_times()[:2]) - c for p, c in zip(procs, c0, strict=True))
    hist = model.history_.set_index("round")
    P = model.n_blocks_
    start = float(hist["time"][P - 1])  # end of the counting rotation
    seconds = float(hist["time"].iloc[-1]) - start
    # cpu_s: every process of the cluster over the whole fit (setup and the counting
    # rotation included), so a slight overstatement of the sampling iterations' CPU
    return dict(seconds=seconds, cpu_s=cpu, components=model.components_, workers=workers,
                sampler=model.sampler_, fit_s=wall,
                alpha=np.asarray(model.doc_topic_prior_, dtype=np.float64).tolist(),
                push_s=float(hist["push_s"].sum()) if "push_s" in hist else None)


# ------------------------------------------------------------------------------ quality
def completion_perplexity(components, test, alpha, seed=SEED) -> float:
    """Held-out perplexity by document completion (see the module docstring)."""
    import scipy.sparse as sp

    from dask_strads.lda import kernels

    phi = components / components.sum(axis=1, keepdims=True)
    phi = np.ascontiguousarray(phi.T)
    rng = np.random.default_rng(seed)
    rows_a, cols_a, rows_b, cols_b = [], [], [], []
    for d in range(test.shape[0]):
        lo, hi = test.indptr[d], test.indptr[d + 1]
        toks = rng.permutation(np.repeat(test.indices[lo:hi], test.data[lo:hi]))
        h = len(toks) // 2
        rows_a.append(np.full(h, d))
        cols_a.append(toks[:h])
        rows_b.append(np.full(len(toks) - h, d))
        cols_b.append(toks[h:])

    def csr(rows, cols):
        r, c = np.concatenate(rows), np.concatenate(cols)
        m = sp.csr_matrix((np.ones(len(r), dtype=np.int64), (r, c)), shape=test.shape)
        m.sum_duplicates()
        return m

    first, second = csr(rows_a, cols_a), csr(rows_b, cols_b)
    theta = kernels.fold_in(first.indptr.astype(np.int64), first.indices.astype(np.int32),
                            first.data.astype(np.int64), phi,
                            np.broadcast_to(np.asarray(alpha, dtype=np.float64),
                                            (phi.shape[1],)).copy(), 50, 25, seed + 1)
    ll = kernels.doc_word_loglik(second.indptr.astype(np.int64),
                                 second.indices.astype(np.int32),
                                 second.data.astype(np.int64), theta, phi)
    return float(np.exp(-ll / second.data.sum()))


def umass_coherence(components, train, top=TOP) -> float:
    B = (train > 0).astype(np.float64).tocsc()
    df = np.asarray(B.sum(axis=0)).ravel()
    scores = []
    for row in components:
        words = np.argsort(-row)[:top]
        words = words[np.argsort(-df[words])]  # more frequent first
        sub = B[:, words]
        co = (sub.T @ sub).toarray()
        s = 0.0
        for i in range(1, len(words)):
            for j in range(i):
                s += np.log((co[i, j] + 1.0) / df[words[j]])
        scores.append(s)
    return float(np.mean(scores))


# ------------------------------------------------------------------------------ driver
def one(args) -> None:
    train, test, _ = _corpus(args.corpus)
    k, alpha = args.k, (args.alpha_num / args.k)
    n_iter = args.lda_iters if args.one == "lda" else args.iters
    if args.one == "tomotopy-1":
        res = run_tomotopy(train, k, alpha, n_iter, seed=args.seed,
                           optimize=args.optimize_interval, burn_in=args.burn_in)
    elif args.one == "lda":
        res = run_lda(train, k, alpha, n_iter)
    else:
        res = run_strads(train, k, alpha, n_iter, int(args.one.split("-")[1]),
                         sampler=args.sampler, seed=args.seed,
                         optimize=args.optimize_interval, burn_in=args.burn_in)
    comps = res.pop("components")
    n = int(train.sum())
    res.update(iters=n_iter, tokens=n,
               tokens_per_s_core=n * n_iter / res["seconds"] / res["workers"],
               tokens_per_cpu_s=n * n_iter / res["cpu_s"],
               # with the prior each method ended with (learned, with --optimize-interval)
               perplexity=completion_perplexity(comps, test, np.asarray(res.get("alpha", alpha))),
               coherence=umass_coherence(comps, train), load=os.getloadavg()[0])
    Path(args.out).write_text(json.dumps(res))


def measure(method, k, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, __file__, "--one", method, "--k", str(k), "--out", out,
               "--corpus", args.corpus, "--iters", str(args.iters), "--lda-iters",
               str(args.lda_iters), "--alpha-num", str(args.alpha_num), "--sampler",
               args.sampler, "--seed", str(args.seed), "--optimize-interval",
               str(args.optimize_interval), "--burn-in", str(args.burn_in)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
        return json.loads(Path(out).read_text())


def table(results: dict) -> str:
    lines = []
    for k, runs in results.items():
        ref = runs.get("tomotopy-1", {}).get("tokens_per_s_core")
        ref_cpu = runs.get("tomotopy-1", {}).get("tokens_per_cpu_s")
        lines += [f"\n### K = {k}\n",
                  "| method | iters | tokens/s/core (wall) | vs tomotopy-1 | tokens per CPU s "
                  "(all processes) | vs tomotopy-1 | held-out perplexity | UMass coherence | "
                  "sampler | load |", "|---|---|---|---|---|---|---|---|---|---|"]
        for m, r in runs.items():
            if "error" in r:
                lines.append(f"| {m} | error: {r['error']} |||||||||")
                continue
            rel = f"{r['tokens_per_s_core'] / ref:.2f}x" if ref else "-"
            rel_cpu = f"{r['tokens_per_cpu_s'] / ref_cpu:.2f}x" if ref_cpu else "-"
            lines.append(f"| {m} | {r['iters']} | {r['tokens_per_s_core'] / 1e6:.2f} M | {rel} | "
                         f"{r['tokens_per_cpu_s'] / 1e6:.2f} M | {rel_cpu} | "
                         f"{r['perplexity']:.1f} | {r['coherence']:.1f} | "
                         f"{r.get('sampler', '-')} | {r['load']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="docs-1m")
    ap.add_argument("--topics", type=int, nargs="+", default=[20, 50, 100, 1000])
    ap.add_argument("--methods", nargs="+", default=METHODS[:3])
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--lda-iters", type=int, default=5)
    ap.add_argument("--alpha-num", type=float, default=50.0, help="alpha = this / K")
    ap.add_argument("--sampler", default="auto")
    ap.add_argument("--optimize-interval", type=int, default=0,
                    help="learn alpha every this many iterations (tomotopy's optim_interval, "
                         "our optimize_interval); 0: fixed")
    ap.add_argument("--burn-in", type=int, default=10,
                    help="iterations before alpha is first learned")
    ap.add_argument("--seed", type=int, default=SEED,
                    help="the methods' seed (the held-out split and fold-in keep theirs)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per method (median speed)")
    ap.add_argument("--json", default=None, help="write the raw results here")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        one(args)
        return
    results = {}
    for k in args.topics:
        runs = {m: [] for m in args.methods}
        for _ in range(args.repeat):  # interleaved: a slow spell hits every method alike
            for m in args.methods:
                r = measure(m, k, args)
                runs[m].append(r)
                print(k, m, {a: b for a, b in r.items() if a != "components"}, flush=True)
        merged = {}
        for m, rs in runs.items():
            ok = [r for r in rs if "error" not in r]
            if not ok:
                merged[m] = rs[0]
                continue
            best = dict(ok[0])
            best["tokens_per_s_core"] = float(np.median([r["tokens_per_s_core"] for r in ok]))
            best["tokens_per_cpu_s"] = float(np.median([r["tokens_per_cpu_s"] for r in ok]))
            best["all_tokens_per_s_core"] = [r["tokens_per_s_core"] for r in ok]
            merged[m] = best
        results[str(k)] = merged
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
