"""The Lasso benchmark's problems (a)-(c) or grid cells on two versions of the code.

Each version is a checkout (``git worktree add --detach DIR COMMIT``); every fit runs in
a fresh process with that checkout first on the path, its own ``bench/lasso.py``
problems and ``run_ours`` (2-worker process LocalCluster, X in the client's memory, a
warm-up fit first), so the two versions fit the same data the same way. The versions
alternate within each repeat. Time to 1e-6 relative suboptimality is read against the
best objective any run of that problem reached (setup included, as in
``bench/lasso.py``).

Run: ``python bench/lasso_versions.py OLD_DIR NEW_DIR [--problems a,b,c] [--repeats 3]``;
writes ``bench/results/lasso_versions.json`` and ``.md`` (medians).
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
TARGET = 1e-6

CHILD = r"""
import json, sys
sys.path.insert(0, ".")
import dask
import numpy as np
from distributed import Client, LocalCluster
import lasso
try:
    from lasso_solvers import run_ours
except ImportError:  # older checkouts keep it in lasso.py
    from lasso import run_ours
from dask_strads._datasets.lasso import alpha_max

key, quick, budget, order = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3]), sys.argv[4]
intercept = sys.argv[5] == "1"
if key in ("a", "b", "c"):
    spec = lasso.problems(quick)[key]
else:  # a cell of the grid
    import lasso_grid
    spec = {**lasso_grid.cells(False), **lasso_grid.cells(True)}[key]
icpt = {"fit_intercept": True} if spec.get("intercept") or intercept else {}
X, y = spec["make"]()[:2]
if order == "C" and isinstance(X, np.ndarray):
    X = np.ascontiguousarray(X)
alpha = alpha_max(X, y, fit_intercept=bool(icpt)) / spec["ratio"]
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                  dashboard_address=":0", memory_limit="10GiB") as cluster, \
        Client(cluster) as client:
    with dask.config.set({"dask-strads.cd.min-block-nnz": 1}):
        run_ours(X[:, :200], y, alpha, client, tol=1e-3)
    ours = run_ours(X, y, alpha, client, tol=1e-8, time_limit=budget, **icpt)
traj = ours["trajectory"]
try:
    from lasso_solvers import profile
    phases = {k: profile(ours["est"])[k] for k in ("solo_phases", "peer_phases")}
except (ImportError, KeyError):  # older checkouts
    phases = {}
print("RESULT " + json.dumps({"wall": ours["wall"], "setup": ours["setup"],
                              "final": ours["final"], **phases,
                              "points": [[float(t), float(o)] for t, o in
                                         zip(traj["time"], traj["objective"])]}))
"""


def fit(checkout: Path, key: str, quick: bool, budget: float, order: str,
        intercept: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run([sys.executable, "-c", CHILD, key, "1" if quick else "0", str(budget),
                          order, "1" if intercept else "0"],
                         cwd=checkout / "bench", env=env, capture_output=True, text=True,
                         check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"{checkout} ({key}) failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def time_to_target(run: dict, best: float) -> float:
    for t, obj in run["points"]:
        if (obj - best) / abs(best) <= TARGET:
            return t
    return float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--problems", default="a,b,c",
                    help="(a)-(c) of bench/lasso.py or cells of bench/lasso_grid.py")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=300.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--order", choices=["as-made", "C"], default="as-made",
                    help="dense X as the generator makes it (Fortran) or C-ordered")
    ap.add_argument("--intercept", action="store_true",
                    help="fit an intercept on every problem (some cells always do)")
    ap.add_argument("--label", default="", help="results in lasso_versions_LABEL.*")
    args = ap.parse_args(argv)
    versions = {"old": args.old.resolve(), "new": args.new.resolve()}
    commits = {name: subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=path,
                                    capture_output=True, text=True).stdout.strip()
               for name, path in versions.items()}
    runs = {key: {name: [] for name in versions} for key in args.problems.split(",")}
    for repeat in range(args.repeats):
        for key in runs:
            order = list(versions) if repeat % 2 == 0 else list(versions)[::-1]
            for name in order:
                run = fit(versions[name], key, args.quick, args.budget, args.order,
                          args.intercept)
                runs[key][name].append(run)
                print(f"({key}) {name} repeat {repeat}: wall {run['wall']:.2f} s, "
                      f"final {run['final']:.10g}", flush=True)
    command = "python bench/lasso_versions.py " + " ".join(sys.argv[1:])
    lines = ["# Lasso: two versions of the code, interleaved", "",
             f"Command: `{command}`; old = {commits['old']}, new = {commits['new']}. "
             f"Time (s) to {TARGET:g} relative suboptimality against the best objective any "
             "run of the problem reached, setup included; medians over the repeats "
             "(each run in brackets). Phases: solo / peer phases of each run, where the "
             "checkout reports them.", "",
             "| problem | old | new | new / old | phases old | phases new |",
             "|---|---|---|---|---|---|"]
    for key, by_version in runs.items():
        best = min(min([r["final"]] + [o for _, o in r["points"]])
                   for rs in by_version.values() for r in rs)
        times = {name: [time_to_target(r, best) for r in rs] for name, rs in by_version.items()}
        med = {name: statistics.median(ts) for name, ts in times.items()}
        cells = {name: f"{med[name]:.2f} ({', '.join(f'{t:.2f}' for t in ts)})"
                 for name, ts in times.items()}
        phases = {name: ", ".join(f"{r['solo_phases']}/{r['peer_phases']}" for r in rs
                                  if "solo_phases" in r) or "-"
                  for name, rs in by_version.items()}
        lines.append(f"| ({key}) | {cells['old']} | {cells['new']} | "
                     f"{med['new'] / med['old']:.2f} | {phases['old']} | {phases['new']} |")
    stem = "lasso_versions" + ("_quick" if args.quick else "") + \
        (f"_{args.label}" if args.label else "")
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {"command": command, "commits": commits, "runs": runs}, indent=1))
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
