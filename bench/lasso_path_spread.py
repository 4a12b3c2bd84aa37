"""How much a Lasso fit's time to the target moves with its first working set alone.

The ill-conditioned cells of the grid (a support near ``n``, correlated columns) spend
most of their time in a tail of long phases whose length depends on the path the
working sets took, so any change to the early phases moves it. This refits one cell
with several ``dask-strads.cd.ws-min-size`` values (only the first working set
differs) on one 2-worker process LocalCluster, so that a change of the working-set
rule can be judged against the spread a different start alone gives.

Run: ``PYTHONPATH=CHECKOUT python bench/lasso_path_spread.py CELL --sizes 100,150,200,300``
(CELL a name of ``bench/lasso_grid.py``); prints the time to 1e-6 relative
suboptimality of each fit, against the best objective of any of them.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cell")
    ap.add_argument("--sizes", default="100,150,200,300")
    ap.add_argument("--budget", type=float, default=120.0, help="seconds per fit")
    args = ap.parse_args(argv)

    import dask
    import lasso_grid
    from distributed import Client, LocalCluster
    from lasso_solvers import TARGET, run_ours

    from dask_strads._datasets.lasso import alpha_max

    spec = {**lasso_grid.cells(False), **lasso_grid.cells(True)}[args.cell]
    X, y = spec["make"]()[:2]
    icpt = bool(spec.get("intercept"))
    alpha = alpha_max(X, y, fit_intercept=icpt) / spec["ratio"]
    points = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="10GiB") as cluster, \
            Client(cluster) as client:
        with dask.config.set({"dask-strads.cd.min-block-nnz": 1}):
            run_ours(X[:, :200], y, alpha, client, tol=1e-3)  # warm-up
        for size in (int(s) for s in args.sizes.split(",")):
            with dask.config.set({"dask-strads.cd.ws-min-size": size}):
                run = run_ours(X, y, alpha, client, tol=1e-8, time_limit=args.budget,
                               fit_intercept=icpt)
            traj = run["trajectory"]
            points[size] = list(zip(traj["time"], traj["objective"], strict=True))
    best = min(o for pts in points.values() for _, o in pts)
    for size, pts in points.items():
        t = next((t for t, o in pts if (o - best) / abs(best) <= TARGET), float("nan"))
        print(f"{args.cell} ws-min-size {size}: {t:.2f} s to {TARGET:g}, "
              f"{len(pts)} gap rounds", flush=True)


if __name__ == "__main__":
    main()
