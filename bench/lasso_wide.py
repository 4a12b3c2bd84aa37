"""The client's work per round of a Lasso with many more features than non-zeros.

A sparse design of ``n`` rows and ``p`` columns with two entries per column, 200 true
non-zeros, alpha_max / 20, on 2 worker processes. Reported per fit: rounds, the median
and total of the client's schedule + pull time per round (from ``history_``), and the
wall time; two fits per run (the first one warms the workers up).

Usage::

    python bench/lasso_wide.py --p 5000000
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp


def wide_problem(n: int, p: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, n - 1, (p, 2)), axis=1)
    rows[:, 1] += rows[:, 0] == rows[:, 1]  # two distinct rows per column
    X = sp.csc_matrix((rng.standard_normal(2 * p), rows.ravel(), np.arange(0, 2 * p + 1, 2)),
                      shape=(n, p))
    beta = np.zeros(p)
    beta[rng.choice(p, 200, replace=False)] = 1.0
    return X, X @ beta + 0.1 * rng.standard_normal(n)


def main(argv=None) -> None:
    from distributed import Client, LocalCluster

    from dask_strads import Lasso
    from dask_strads._datasets.lasso import alpha_max

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--p", type=int, default=5_000_000)
    ap.add_argument("--fits", type=int, default=2)
    args = ap.parse_args(argv)
    X, y = wide_problem(args.n, args.p)
    alpha = alpha_max(X, y) / 20
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        for fit in range(args.fits):
            model = Lasso(alpha=alpha, tol=1e-8, client=client, progress=False).fit(X, y)
            h = model.history_
            client_s = h["schedule_s"] + h["pull_s"]
            print(f"p={args.p} fit {fit}: {len(h)} rounds, {np.count_nonzero(model.coef_)} "
                  f"non-zeros, client schedule + pull per round: median "
                  f"{1e3 * client_s.median():.2f} ms, total {1e3 * client_s.sum():.0f} ms; "
                  f"wall {h['time'].iloc[-1]:.2f} s", flush=True)


if __name__ == "__main__":
    main()
