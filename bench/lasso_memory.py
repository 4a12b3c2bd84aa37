"""Lasso on a dense X larger than one worker's memory limit: does it train without spilling?

X (n x p, float64) is generated on the cluster in column chunks (``--chunk-mb`` each, or
one per worker), or with ``--rows`` persisted there in chunks of rows as a pipeline
leaves it, so it is never on the client; y = X beta + noise with 50 unit
coefficients. Workers have ``memory_limit`` each; the fit (alpha_max / 10, tol 1e-6,
with an intercept unless ``--no-intercept``) must finish with no byte spilled.
Reported: the wall time, the peak RSS of each worker (sampled every 0.2 s) and the bytes
Dask spilled, the duality gap, and with ``--check`` the relative objective difference to
scikit-learn's Lasso on the gathered X (which then must fit on the client).

Usage::

    python bench/lasso_memory.py                      # 2.4 GB on 8 workers of 1.5 GB
    python bench/lasso_memory.py --n 10000 --p 60000  # 4.8 GB
    python bench/lasso_memory.py --n 10000 --p 75000 --chunk-mb 64  # 6 GB, 64 MiB chunks
    python bench/lasso_memory.py --quick              # 0.6 GB on 4 workers of 1 GB
    python bench/lasso_memory.py --rows               # X persisted in chunks of rows
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from worker_memory import watch_workers

RESULTS = Path(__file__).resolve().parent / "results"


def make_problem(client, n: int, p: int, chunk_bytes: int, seed: int = 0,
                 rows: bool = False):
    import dask.array as da

    if rows:  # a pipeline's output: persisted in chunks of rows, spread over the workers
        height = max(1, min(n, chunk_bytes // (8 * p)))
        X = client.persist(da.random.default_rng(seed).standard_normal((n, p),
                                                                       chunks=(height, p)))
        client.rebalance(X)
    else:
        width = max(1, min(p, chunk_bytes // (8 * n)))
        X = da.random.default_rng(seed).standard_normal((n, p), chunks=(n, width))
    beta = np.zeros(p)
    beta[np.linspace(0, p - 1, 50).astype(int)] = 1.0
    noise = da.random.default_rng(seed + 1).standard_normal(n, chunks=n)
    y = client.compute(X @ beta + 0.5 * noise).result()
    return X, y


def run(args) -> dict:
    from distributed import Client, LocalCluster

    from dask_strads import Lasso

    with LocalCluster(n_workers=args.workers, threads_per_worker=1,
                      memory_limit=args.memory_limit, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        chunk_bytes = int(args.chunk_mb * 2**20) if args.chunk_mb else \
            -(-args.n * args.p * 8 // args.workers)
        X, y = make_problem(client, args.n, args.p, chunk_bytes, rows=args.rows)
        yc = y - y.mean() if args.intercept else y
        alpha = float(client.compute(abs(X.T @ yc).max()).result()) / args.n / 10
        model = Lasso(alpha=alpha, fit_intercept=args.intercept, tol=1e-6, client=client,
                      progress=False)
        with watch_workers(client) as seen:
            t0 = time.perf_counter()
            model.fit(X, y)
            wall = time.perf_counter() - t0
        out = dict(chunk_mb=args.chunk_mb, n=args.n, p=args.p, x_bytes=args.n * args.p * 8,
                   workers=args.workers, chunk_columns=int(X.chunks[1][0]),
                   rows=args.rows, chunk_rows=int(X.chunks[0][0]),
                   memory_limit=args.memory_limit, intercept=args.intercept, alpha=alpha,
                   wall_s=wall, n_iter=int(model.n_iter_), n_blocks=int(model.n_blocks_),
                   nnz=int(np.count_nonzero(model.coef_)), dual_gap=float(model.dual_gap_),
                   peak_rss=sorted(seen["peak_rss"].values()),
                   spilled=sorted(seen["spilled"].values()), load=os.getloadavg()[0])
        if args.check:
            from sklearn.linear_model import Lasso as SkLasso

            # the same draws, made on the client (a gather would concatenate on a worker)
            Xn = X.compute(scheduler="synchronous")
            ref = SkLasso(alpha=alpha, fit_intercept=args.intercept, tol=1e-10,
                          max_iter=100_000).fit(Xn, y)

            def objective(coef, intercept):
                r = y - Xn @ coef - intercept
                return r @ r / (2 * args.n) + alpha * np.abs(coef).sum()

            ours = objective(model.coef_, model.intercept_)
            theirs = objective(ref.coef_, ref.intercept_)
            out["objective_rel_diff"] = float((ours - theirs) / theirs)
        return out


def report(res: dict, stem: str) -> None:
    gb = 1e9
    lines = [
        "# Lasso with X larger than one worker's memory limit", "",
        f"`python bench/lasso_memory.py --n {res['n']} --p {res['p']} --workers "
        f"{res['workers']} --memory-limit {res['memory_limit']} --chunk-mb "
        f"{res['chunk_mb']}{' --rows' if res.get('rows') else ''}"
        f"{'' if res['intercept'] else ' --no-intercept'}`", "",
        f"X: {res['n']} x {res['p']} dense float64, {res['x_bytes'] / gb:.2f} GB "
        f"({res['x_bytes'] / res['workers'] / gb:.2f} GB per worker), "
        + (f"persisted on the cluster in chunks of {res['chunk_rows']} rows"
           if res.get("rows") else
           f"generated on the cluster in chunks of {res['chunk_columns']} columns")
        + f"; {res['workers']} workers "
        f"with memory_limit {res['memory_limit']}; "
        f"intercept {res['intercept']}; alpha = alpha_max / 10; {res['n_blocks']} blocks.", "",
        f"Fit: {res['wall_s']:.1f} s, {res['n_iter']} passes, {res['nnz']} non-zeros, "
        f"duality gap {res['dual_gap']:.2e} (load {res['load']:.1f}).", "",
        "Peak RSS per worker (GB): " + ", ".join(f"{v / gb:.2f}" for v in res["peak_rss"]),
        "",
        "Bytes spilled to disk per worker: " + ", ".join(str(v) for v in res["spilled"]), "",
    ]
    if "objective_rel_diff" in res:
        lines += [f"Objective against scikit-learn's (tol 1e-10) on the gathered X: relative "
                  f"difference {res['objective_rel_diff']:.1e}.", ""]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines))
    (RESULTS / f"{stem}.json").write_text(json.dumps(res, indent=1))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--p", type=int, default=30_000)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--memory-limit", default="1.5GB")
    p.add_argument("--no-intercept", dest="intercept", action="store_false")
    p.add_argument("--chunk-mb", type=float, default=0,
                   help="MiB per chunk of X (0: one chunk per worker)")
    p.add_argument("--rows", action="store_true",
                   help="X persisted in chunks of rows (else generated in column chunks)")
    p.add_argument("--check", action="store_true",
                   help="compare the objective with scikit-learn's on the gathered X")
    p.add_argument("--quick", action="store_true", help="0.6 GB on 4 workers of 1 GB")
    p.add_argument("--stem", default="lasso_memory")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.p, args.workers, args.memory_limit = 5_000, 15_000, 4, "1GB"
        args.stem = args.stem + "_quick"
    res = run(args)
    print(json.dumps(res, indent=1))
    report(res, args.stem)


if __name__ == "__main__":
    main()
