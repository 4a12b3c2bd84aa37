"""Benchmark: how much each LDA sampler gains per sweep, and per second (issue 39).

``LDA(sampler="auto")`` weighs each sampler's cost per token by how many more sweeps it
needs than exact Gibbs to reach the same model. This measures that factor on a corpus:
every sampler runs on one worker for ``--iters`` iterations (Metropolis-Hastings for
``--mh-factor`` times as many), and the table gives, per sampler, the training
log-likelihood per token after ``--iters`` iterations, the iterations and seconds it
took to reach the exact samplers' log-likelihood at ``--iters`` (the lower of dense and
sparse), and the ratio of those iterations to ``--iters``: the sampler's mixing factor.

Usage::

    python bench/lda_mixing.py --corpus text-10m --topics 100 1000 --iters 30
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(HERE))
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))

BETA, SEED = 0.01, 0


def trajectory(X, k, alpha, sampler, n_iter) -> dict:
    """Log-likelihood per token and elapsed seconds after each iteration, 1 worker."""
    from distributed import Client, LocalCluster

    from dask_strads.lda import LDA

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0", host="127.0.0.1") as cluster, \
            Client(cluster) as client:
        client.run(lambda: __import__("dask_strads.lda.kernels").lda.kernels.warm_up())
        model = LDA(k, doc_topic_prior=alpha, topic_word_prior=BETA, max_iter=n_iter,
                    random_state=SEED, client=client, sampler=sampler, progress=False)
        t0 = time.perf_counter()
        model.fit(X)
        wall = time.perf_counter() - t0
    hist = model.history_
    # one round per iteration on one worker; round 0 is the counting rotation, and
    # loglikelihoods_[i] is the model after iteration i + 1
    times = hist["time"].to_numpy()
    return dict(ll=(model.loglikelihoods_ / X.sum()).tolist(),
                seconds=(times[1:] - times[0]).tolist(), fit_s=wall)


def reach(run: dict, target: float) -> tuple[int | None, float | None]:
    """The first iteration (and its second) whose log-likelihood reaches ``target``."""
    for i, (ll, s) in enumerate(zip(run["ll"], run["seconds"], strict=False)):
        if ll >= target:
            return i + 1, s
    return None, None


def main(argv=None) -> None:
    import corpora

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="text-10m")
    ap.add_argument("--topics", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--mh-factor", type=int, default=3)
    ap.add_argument("--alpha-num", type=float, default=50.0, help="alpha = this / K")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    train, _, _ = corpora.load(args.corpus)
    out, lines = {}, []
    for k in args.topics:
        alpha = args.alpha_num / k
        runs = {s: trajectory(train, k, alpha, s, args.iters * (args.mh_factor if s == "mh"
                                                                else 1))
                for s in ("dense", "sparse", "mh")}
        n = args.iters - 1  # the model after args.iters iterations
        target = min(runs["dense"]["ll"][n], runs["sparse"]["ll"][n])
        out[k] = dict(runs=runs, target=target)
        lines += [f"### K = {k}", "",
                  f"Target: {target:.4f} per token (the exact samplers' lower value after "
                  f"{args.iters} iterations).", "",
                  f"| sampler | iters run | ll/token after {args.iters} iters | iters to "
                  "target | seconds to target | mixing factor |", "|---|---|---|---|---|---|"]
        for s, run in runs.items():
            it, sec = reach(run, target)
            ran = len(run["ll"])
            factor = f"> {ran / args.iters:.1f}" if it is None else f"{it / args.iters:.2f}"
            lines.append(f"| {s} | {ran} | {run['ll'][n]:.4f} | "
                         f"{'not reached' if it is None else it} | "
                         f"{'-' if sec is None else f'{sec:.1f}'} | {factor} |")
        lines.append("")
        print("\n".join(lines[-(len(runs) + 6):]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
