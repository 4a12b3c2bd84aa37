"""A Lasso fit's setup with its shards sent over sockets or mapped from shared memory.

The 4,000 x 40,000 dense design of the grid (1.28 GB, Fortran, AR(1) 0.5) and the
sparse problem (c) of ``bench/lasso.py`` at alpha_max / 10, X in the client's memory,
on a 2-worker process LocalCluster; ``dask-strads.engine.shared-memory-above`` null (every
shard through a socket) and the default alternate, fits repeated. Per fit: the wall time,
the setup (call to first round) and the final objective.

Run: ``python bench/shared_memory.py [--repeats 3] [--problems dense,sparse]``; writes
``bench/results/shared_memory.json`` and ``.md`` (medians).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import dask
from lasso_solvers import run_ours

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SETTINGS = {"socket": None, "shared memory": "32MiB"}


def problem(name: str):
    from dask_strads._datasets.lasso import (
        alpha_max,
        make_correlated_regression,
        make_sparse_regression,
    )

    if name == "dense":
        X, y, _ = make_correlated_regression(4000, 40000, n_informative=100, correlation=0.5,
                                             random_state=0)
        desc = "dense 4000 x 40000 (1.28 GB, Fortran), AR(1) 0.5"
    else:
        X, y, _ = make_sparse_regression(100000, 2000000, density=2.5e-4, n_informative=1000,
                                         random_state=0)
        desc = "sparse CSC 100000 x 2000000, 5e7 non-zeros (0.6 GB)"
    return X, y, alpha_max(X, y, fit_intercept=False) / 10, desc


def fit(X, y, alpha, client) -> dict:
    ours = run_ours(X, y, alpha, client, tol=1e-6)
    return {"wall": ours["wall"], "setup": ours["setup"], "objective": ours["final"],
            "blocks": int(ours["est"].n_blocks_)}


def main(argv=None):
    from distributed import Client, LocalCluster

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--problems", default="dense,sparse")
    args = ap.parse_args(argv)
    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="10GiB") as cluster, \
            Client(cluster) as client:
        for name in args.problems.split(","):
            X, y, alpha, desc = problem(name)
            with dask.config.set({"dask-strads.cd.min-block-nnz": 1}):
                fit(X[:, :200], y, alpha, client)  # compiles the kernels, not timed
            for repeat in range(args.repeats):
                order = list(SETTINGS) if repeat % 2 == 0 else list(SETTINGS)[::-1]
                for how in order:
                    with dask.config.set({"dask-strads.engine.shared-memory-above":
                                          SETTINGS[how]}):
                        row = fit(X, y, alpha, client)
                    row.update(problem=name, desc=desc, how=how, repeat=repeat)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            del X
    command = "python bench/shared_memory.py " + " ".join(sys.argv[1:])
    lines = ["# Lasso setup: shards through sockets or shared memory", "",
             f"Command: `{command}`. 2-worker process LocalCluster on this machine, X in the "
             "client's memory, alpha_max / 10, tol 1e-6; the two settings alternate; "
             "medians (each run in brackets). Setup: from the call to the first round.", "",
             "| problem | shards | blocks | wall s | setup s | objective |",
             "|---|---|---|---|---|---|"]
    for name in args.problems.split(","):
        for how in SETTINGS:
            rs = [r for r in rows if r["problem"] == name and r["how"] == how]
            cell = {k: f"{statistics.median(r[k] for r in rs):.2f} "
                       f"({', '.join(f'{r[k]:.2f}' for r in rs)})" for k in ("wall", "setup")}
            lines.append(f"| {rs[0]['desc']} | {how} | {rs[0]['blocks']} | {cell['wall']} | "
                         f"{cell['setup']} | {rs[0]['objective']:.10g} |")
    (RESULTS / "shared_memory.json").write_text(json.dumps({"command": command, "rows": rows},
                                                           indent=1))
    (RESULTS / "shared_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
