"""Time MatrixFactorization fits of a fixed number of outer iterations, for A/B runs of
two commits (each from its own worktree): the rank-20 problem of ``bench/mf.py``
(50000 x 10000, 2 M ratings), 2 worker processes, ``tol=0`` so that every fit does the
same work; a warm-up fit first (numba compilation, cluster start). Prints one JSON line
per fit.

Run, interleaved::

    for v in new old new old; do
        PYTHONPATH=<worktree of $v> python bench/mf_fixed_iterations.py $v 30
    done
"""

from __future__ import annotations

import json
import sys
import time


def main(label: str, iterations: int, repeats: int = 2) -> None:
    from distributed import Client, LocalCluster

    from dask_strads import MatrixFactorization
    from dask_strads._datasets.mf import make_ratings

    data = make_ratings(50000, 10000, rank=10, n_observed=2_000_000, random_state=0)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        MatrixFactorization(n_components=20, alpha=0.05, max_iter=1, random_state=0,
                            client=client, progress=False).fit(data.train)
        for _ in range(repeats):
            t0 = time.perf_counter()
            mf = MatrixFactorization(n_components=20, alpha=0.05, max_iter=iterations, tol=0.0,
                                     random_state=0, client=client, progress=False
                                     ).fit(data.train)
            print(json.dumps({"label": label, "seconds": round(time.perf_counter() - t0, 3),
                              "rounds": len(mf.history_), "objective": mf.objective_}),
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
