"""Fit dask_strads models on SLURM worker jobs started with dask-jobqueue.

Run it on a machine that can submit jobs (a login node)::

    python examples/slurm_fit.py --jobs 2 --cores 1 --memory 2GB --walltime 00:20:00

On a single-machine SLURM (``sudo bash ci/slurm/start.sh``) add ``--interface lo``; on a
real cluster pass the interface of the fast network (``ib0``, ...) or leave the default,
plus ``--queue`` / ``--account`` as your site requires.

What it shows:

* the workers are SLURM jobs; the estimators only need a ``distributed.Client``;
* ``adapt(minimum_jobs=N, maximum_jobs=N)`` keeps N jobs running: a job that is cancelled
  or reaches its walltime is replaced, and the engine re-places the lost blocks;
* ``--lifetime`` makes workers retire *before* SLURM kills their job (walltime minus a
  margin, staggered so that they do not all leave at once).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from dask_jobqueue import SLURMCluster
from distributed import Client

from dask_strads import LDA, Lasso
from dask_strads.cli import lifetime_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--memory", default="2GB")
    parser.add_argument("--walltime", default="00:20:00")
    parser.add_argument("--interface", default=None, help="e.g. ib0; lo on one machine")
    parser.add_argument("--queue", default=None)
    parser.add_argument("--account", default=None)
    args = parser.parse_args()

    lifetime, stagger = lifetime_for(args.walltime)
    cluster = SLURMCluster(
        cores=args.cores, processes=1, memory=args.memory, walltime=args.walltime,
        queue=args.queue, account=args.account, interface=args.interface,
        scheduler_options={"dashboard_address": ":0"},
        worker_extra_args=["--lifetime", lifetime, "--lifetime-stagger", stagger],
    )
    print(cluster.job_script())
    # keep exactly --jobs jobs: replaces cancelled / retired jobs, never shrinks mid-fit
    cluster.adapt(minimum_jobs=args.jobs, maximum_jobs=args.jobs)

    with cluster, Client(cluster) as client:
        client.wait_for_workers(args.jobs, timeout=600)
        print("workers:", sorted(w["name"] for w in client.scheduler_info()["workers"].values()))

        rng = np.random.default_rng(0)
        X = rng.standard_normal((2000, 500))
        coef = np.zeros(500)
        coef[:20] = rng.standard_normal(20)
        y = X @ coef + 0.1 * rng.standard_normal(2000)
        start = time.perf_counter()
        lasso = Lasso(alpha=0.01, client=client).fit(X, y)
        print(f"Lasso: {np.count_nonzero(lasso.coef_)} non-zero coefficients, "
              f"{lasso.n_iter_} passes, {time.perf_counter() - start:.1f} s")

        from dask_strads._datasets.lda import make_lda_corpus

        counts, _ = make_lda_corpus(2000, 1000, 10, doc_length=100, random_state=0)
        start = time.perf_counter()
        lda = LDA(n_components=10, max_iter=50, random_state=0, client=client).fit(counts)
        print(f"LDA: log-likelihood {lda.loglikelihoods_[-1]:.4g} after {lda.n_iter_} "
              f"iterations, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
