"""Small fits, as a grid search makes them: wall time per fit on two versions of the code.

Each version is a checkout (``git worktree add --detach DIR COMMIT``); each run starts a
fresh process with that checkout first on the path, a 2-worker process LocalCluster,
three untimed fits, then ``--fits`` timed ones of each problem; the versions alternate
over ``--repeats``. The fits are short enough that what a fit costs besides its rounds
(checking the data, placing the blocks, releasing them) shows.

Run: ``python bench/small_fits.py OLD_DIR NEW_DIR [--repeats 3] [--fits 30]``; writes
``bench/results/small_fits.md`` (medians of the runs' medians).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

PROBLEMS = {  # name -> (n_samples, n_features, alpha, sparse density or None)
    "dense 500 x 100": (500, 100, 1.0, None),
    "dense 2000 x 1000": (2000, 1000, 1.0, None),
    "sparse 5000 x 20000, density 1e-3": (5000, 20000, 0.05, 1e-3),
}

CHILD = r"""
import json, sys, time
import numpy as np
import scipy.sparse as sp
from distributed import Client, LocalCluster
from dask_strads import Lasso

problems, fits = json.loads(sys.argv[1]), int(sys.argv[2])
out = {}
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                  dashboard_address=":0") as cluster, Client(cluster) as client:
    for name, (n, p, alpha, density) in problems.items():
        rng = np.random.default_rng(0)
        X = (sp.random(n, p, density=density, format="csc", random_state=0) if density
             else rng.standard_normal((n, p)))
        y = X[:, :10] @ rng.standard_normal(10) + 0.1 * rng.standard_normal(n)
        y = np.asarray(y).ravel()
        est = Lasso(alpha=alpha, client=client, progress=False)
        for _ in range(3):
            est.fit(X, y)
        walls = []
        for _ in range(fits):
            t0 = time.perf_counter()
            est.fit(X, y)
            walls.append(time.perf_counter() - t0)
        out[name] = {"median": float(np.median(walls)), "rounds": int(len(est.history_))}
print("RESULT " + json.dumps(out))
"""


def run(checkout: Path, fits: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(PROBLEMS), str(fits)],
                         cwd=checkout, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"{checkout} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fits", type=int, default=30)
    args = ap.parse_args(argv)
    versions = {"old": args.old.resolve(), "new": args.new.resolve()}
    commits = {name: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=path,
                                    capture_output=True, text=True).stdout.strip()
               for name, path in versions.items()}
    runs = {name: [] for name in versions}
    for repeat in range(args.repeats):
        for name in (list(versions) if repeat % 2 == 0 else list(versions)[::-1]):
            runs[name].append(run(versions[name], args.fits))
            print(f"{name} repeat {repeat}: " + ", ".join(
                f"{k} {1e3 * v['median']:.1f} ms" for k, v in runs[name][-1].items()),
                flush=True)
    command = "python bench/small_fits.py " + " ".join(sys.argv[1:])
    lines = ["# Small fits: wall time per fit, two versions of the code", "",
             f"Command: `{command}`; old = {commits['old']}, new = {commits['new']}. "
             "Lasso (default intercept) on a 2-worker process LocalCluster, X in the "
             f"client's memory; each run's median of {args.fits} fits, then the median over "
             "the runs (each run in brackets), in ms.", "",
             "| problem | rounds | old | new | new / old |", "|---|---|---|---|---|"]
    for name in PROBLEMS:
        ms = {v: [1e3 * r[name]["median"] for r in runs[v]] for v in versions}
        med = {v: statistics.median(ts) for v, ts in ms.items()}
        cells = {v: f"{med[v]:.1f} ({', '.join(f'{t:.1f}' for t in ms[v])})" for v in versions}
        lines.append(f"| {name} | {runs['new'][0][name]['rounds']} | {cells['old']} | "
                     f"{cells['new']} | {med['new'] / med['old']:.2f} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "small_fits.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "small_fits.json").write_text(json.dumps({"commits": commits, "runs": runs},
                                                        indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
