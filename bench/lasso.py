"""Lasso benchmark: dask_strads (2-worker LocalCluster) against scikit-learn, skglm, celer.

For every problem each solver is timed to 1e-6 relative suboptimality
``(F - F*) / F*`` against the best objective ``F*`` any solver reached in this run.
The peers are refitted from scratch with decreasing ``tol`` (1e-3 ... 1e-10) and the
first fit below the target counts; dask_strads runs once with a tight ``tol`` and its
time to the target is read from its history (objective on every duality-gap round),
plus the fit's setup time (cutting the data and sending it to the workers).
dask_strads is timed twice: with ``X`` in the client's memory, as the peers get it
(the fit ships it to the workers: 150-600 MB here), and with ``X`` already on the
cluster as a persisted ``dask.array`` whose chunks are the column blocks, as data
from a Dask pipeline arrives (the fit then moves no data).

Problems (issue 3), all with ``fit_intercept=False`` so that every solver solves the
same problem the same way (scikit-learn's implicit centering of sparse X would cost it
O(n) per update and make the comparison meaningless):

(a) dense 4000 x 40000, AR(1) correlation 0.7, 100 true non-zeros, alpha_max / 500;
(b) sparse CSC 50000 x 500000, density 5e-4, alpha_max / 100;
(c) sparse CSC 100000 x 2000000, about 5e7 non-zeros, alpha_max / 100.

Also the scheduling question on (a): objective versus time for the priority,
round_robin, random and shotgun schedules (plot: bench/results/lasso_schedules.png).

The grid (issue 38, ``bench/lasso_grid.py``): dense and sparse designs x alpha_max / 10,
/ 100, / 1000, ours on 2 and 1 workers against the peers, a heat map and curves.

Usage::

    python bench/lasso.py [--quick] [--problems a,b,c]
    python bench/lasso.py --grid [--quick] [--cells NAME,...] [--budget 120]

Not run in CI. Timings on a 2-core machine shared with other jobs are noisy.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import dask
import numpy as np
from lasso_solvers import TARGET, on_cluster, profile, run_ours, run_peer, time_to_target

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def problems(quick: bool) -> dict:
    from dask_strads._datasets.lasso import make_correlated_regression, make_sparse_regression

    if quick:
        return {
            "a": dict(make=lambda: make_correlated_regression(
                1000, 8000, n_informative=50, correlation=0.7, random_state=0), ratio=500,
                desc="dense 1000 x 8000, AR(1) 0.7, 50 true non-zeros, alpha_max/500"),
            "b": dict(make=lambda: make_sparse_regression(
                10000, 100000, density=5e-4, n_informative=100, random_state=0), ratio=100,
                desc="sparse 10000 x 100000, density 5e-4, alpha_max/100"),
            "c": dict(make=lambda: make_sparse_regression(
                20000, 400000, density=2.5e-4 * 5, n_informative=200, random_state=0),
                ratio=100, desc="sparse 20000 x 400000, 25 nnz/col, alpha_max/100"),
        }
    return {
        "a": dict(make=lambda: make_correlated_regression(
            4000, 40000, n_informative=100, correlation=0.7, random_state=0), ratio=500,
            desc="dense 4000 x 40000, AR(1) 0.7, 100 true non-zeros, alpha_max/500"),
        "b": dict(make=lambda: make_sparse_regression(
            50000, 500000, density=5e-4, n_informative=500, random_state=0), ratio=100,
            desc="sparse CSC 50000 x 500000, density 5e-4, alpha_max/100"),
        "c": dict(make=lambda: make_sparse_regression(
            100000, 2000000, density=2.5e-4, n_informative=1000, random_state=0), ratio=100,
            desc="sparse CSC 100000 x 2000000, 5e7 non-zeros, alpha_max/100"),
    }


def replot(tag: str = "_quick") -> None:
    """Redraw the schedule plot from a saved JSON result."""
    with open(os.path.join(RESULTS, f"lasso{tag}.json")) as fh:
        sched = json.load(fh)["schedules"]
    plot_schedules(sched, os.path.join(RESULTS, f"lasso_schedules{tag}.png"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller problems")
    ap.add_argument("--problems", default="a,b,c")
    ap.add_argument("--peers", default="sklearn,skglm,celer")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds per peer and problem")
    ap.add_argument("--no-schedules", action="store_true")
    ap.add_argument("--stem", default="lasso",
                    help="results file names (bench/results/STEM.md, .json): a run of some "
                         "problems only can keep the full table")
    ap.add_argument("--grid", action="store_true", help="the grid of bench/lasso_grid.py")
    ap.add_argument("--cells", default=None,
                    help="grid cells to run (comma-separated names, or substrings)")
    ap.add_argument("--order", choices=["as-made", "C"], default="as-made",
                    help="grid: dense X as the generator makes it (Fortran) or C-ordered, "
                         "as most arrays are; every solver gets the same array")
    ap.add_argument("--intercept", action="store_true",
                    help="grid: every solver fits an intercept (some cells always do)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="grid: fits of ours per worker count and cell (2 and 1 alternate; "
                         "the median counts)")
    args = ap.parse_args(argv)

    from distributed import Client, LocalCluster

    if args.grid:
        return main_grid(args)

    os.makedirs(RESULTS, exist_ok=True)
    tag = "_quick" if args.quick else ""
    rows = []
    profiles = {}
    sched = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0", memory_limit="10GiB") as cluster, \
            Client(cluster) as client:
        from dask_strads._datasets.lasso import alpha_max

        for key in args.problems.split(","):
            spec = problems(args.quick)[key]
            print(f"== problem ({key}): {spec['desc']}", flush=True)
            t0 = time.perf_counter()
            X, y, _ = spec["make"]()
            alpha = alpha_max(X, y, fit_intercept=False) / spec["ratio"]
            print(f"   generated in {time.perf_counter() - t0:.1f} s", flush=True)
            # warm-up fit on every worker (numba compilation, not timed)
            with dask.config.set({"dask-strads.cd.min-block-nnz": 1}):
                run_ours(X[:, :200], y, alpha, client, tol=1e-3)
            ours = run_ours(X, y, alpha, client, tol=1e-8, time_limit=args.budget)
            print(f"    dask_strads wall {ours['wall']:.2f} s (setup {ours['setup']:.2f} s), "
                  f"final obj {ours['final']:.10g}", flush=True)
            profiles[key] = profile(ours["est"])
            Xd = on_cluster(X, client)
            ours_c = run_ours(Xd, y, alpha, client, tol=1e-8, time_limit=args.budget,
                              X_local=X)
            print(f"    dask_strads, X on the cluster: wall {ours_c['wall']:.2f} s "
                  f"(setup {ours_c['setup']:.2f} s), final obj {ours_c['final']:.10g}",
                  flush=True)
            del Xd
            peers = {}
            for name in args.peers.split(","):
                peers[name] = run_peer(name, X, y, alpha, args.budget)
            best = min([ours["final"], *ours["trajectory"]["objective"].tolist(),
                        ours_c["final"], *ours_c["trajectory"]["objective"].tolist()]
                       + [r["objective"] for runs in peers.values() for r in runs])
            t_ours = time_to_target(ours["trajectory"].itertuples(index=False), best)
            row = {"problem": key, "desc": spec["desc"], "best": best,
                   "dask_strads": t_ours, "setup": ours["setup"],
                   "dask_strads_on_cluster": time_to_target(
                       ours_c["trajectory"].itertuples(index=False), best),
                   "setup_on_cluster": ours_c["setup"]}
            for name, runs in peers.items():
                row[name] = time_to_target([(r["time"], r["objective"]) for r in runs], best)
            rows.append(row)
            print("   ", json.dumps(row), flush=True)
            if key == "a" and not args.no_schedules:
                for schedule in ("priority", "round_robin", "random", "shotgun"):
                    limit = min(max(1.5 * (t_ours if np.isfinite(t_ours) else ours["wall"]),
                                    10.0), args.budget)
                    try:
                        res = run_ours(X, y, alpha, client, schedule=schedule, tol=1e-10,
                                       time_limit=limit)
                    except FloatingPointError as exc:  # the fit says it diverged
                        print(f"    schedule {schedule:11s} {exc}", flush=True)
                        sched[schedule] = {"time": [], "subopt": [], "t_target": np.inf,
                                           "diverged": True}
                        continue
                    traj = res["trajectory"]
                    sched[schedule] = {
                        "time": traj["time"].tolist(),
                        "subopt": ((traj["objective"] - best) / abs(best)).tolist(),
                        "t_target": time_to_target(traj.itertuples(index=False), best),
                    }
                    print(f"    schedule {schedule:11s} t_target={sched[schedule]['t_target']}",
                          flush=True)
            del X, y
            gc.collect()

    write_report(rows, profiles, sched, tag, args)


def main_grid(args):
    import lasso_grid
    from distributed import Client, LocalCluster

    os.makedirs(RESULTS, exist_ok=True)
    grid = lasso_grid.cells(args.quick)
    if args.cells:
        wanted = args.cells.split(",")
        # a cell's full name picks that cell; any other text, every cell it is part of
        grid = {k: v for k, v in grid.items()
                if any(w == k or (w not in grid and w in k) for w in wanted)}
    stem = args.stem if args.stem != "lasso" else "lasso_grid"
    path = os.path.join(RESULTS, stem + ("_quick" if args.quick else ""))
    command = "python bench/lasso.py " + " ".join(sys.argv[1:])
    budget = args.budget if args.budget != 600.0 else (30.0 if args.quick else 120.0)
    kw = dict(threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0",
              memory_limit="10GiB")
    rows, cache = [], {}
    lasso_grid.warm_up_peers(args.peers.split(","))
    with LocalCluster(n_workers=2, **kw) as c2, Client(c2) as client2, \
            LocalCluster(n_workers=1, **kw) as c1, Client(c1) as client1:
        for name, cell in grid.items():
            rows.append(lasso_grid.run_cell(name, cell, {2: client2, 1: client1},
                                            args.peers.split(","), budget, cache,
                                            repeats=args.repeats, order=args.order,
                                            intercept=args.intercept))
            lasso_grid.write_report(rows, path, command)
    return rows


def write_report(rows, profiles, sched, tag, args):
    lines = [f"# Lasso benchmark{' (quick)' if tag else ''}", "",
             f"Command: `python bench/lasso.py {' '.join(sys.argv[1:])}`; dask_strads on a "
             "2-worker process LocalCluster (1 thread each) on a 2-core machine; peers "
             "single-process. Time (s) to reach 1e-6 relative suboptimality against the best "
             "objective any solver reached. Ratios < 1 mean dask_strads is faster. "
             "'X local': X in the client's memory, shipped by the fit (in brackets its "
             "setup time, included: from the call to the first round); 'X on cluster': X "
             "a persisted dask array of column blocks on the workers.", "",
             "| problem | dask_strads, X local (setup) | dask_strads, X on cluster (setup) "
             "| sklearn | skglm | celer | ours/sklearn (local / on cluster) | ours/skglm "
             "(local / on cluster) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def f(v):
            return "n/a" if v is None or not np.isfinite(v) else f"{v:.2f}"

        def ratio(ours, peer, r=r):
            return ours / r[peer] if r.get(peer) and np.isfinite(r[peer]) else np.nan
        local, clus = r["dask_strads"], r.get("dask_strads_on_cluster", np.nan)
        lines.append(f"| ({r['problem']}) {r['desc']} | {f(local)} ({f(r.get('setup'))}) | "
                     f"{f(clus)} ({f(r.get('setup_on_cluster'))}) | {f(r.get('sklearn'))} | "
                     f"{f(r.get('skglm'))} | "
                     f"{f(r.get('celer'))} | {f(ratio(local, 'sklearn'))} / "
                     f"{f(ratio(clus, 'sklearn'))} | {f(ratio(local, 'skglm'))} / "
                     f"{f(ratio(clus, 'skglm'))} |")
    lines += ["", "## Where dask_strads' time goes", "",
              "Rounds are engine rounds: a gap round or a phase (in brackets: the phases,"
              " and how many of them one worker solved for several (solo) or several"
              " solved together (peer); the others ran on one block alone).", "",
              "| problem | rounds (phases, solo, peer) | gap rounds | updates |"
              " median round (ms) | push s (gap) | schedule s | pull s | comm+idle s | run s |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for key, p in profiles.items():
        lines.append(f"| ({key}) | {p['rounds']} ({p.get('phases', '-')}, "
                     f"{p.get('solo_phases', '-')}, {p.get('peer_phases', '-')}) | "
                     f"{p['gap_rounds']} | {p['updates']} | "
                     f"{p['median_round_ms']:.2f} | {p['push_s_total']:.2f} "
                     f"({p['push_s_gap_rounds']:.2f}) | {p['schedule_s_total']:.2f} | "
                     f"{p['pull_s_total']:.2f} | {p['wait_minus_push_s']:.2f} | "
                     f"{p['run_s']:.2f} |")
    if sched:
        lines += ["", "## Schedules on (a)", "",
                  f"Plot: `bench/results/lasso_schedules{tag}.png`", "",
                  "| schedule | time to 1e-6 (s) | final suboptimality |", "|---|---|---|"]
        for s, d in sched.items():
            final = "diverged" if d.get("diverged") else \
                f"{d['subopt'][-1]:.2e}" if d["subopt"] else "n/a"
            lines.append(f"| {s} | {d['t_target']:.2f} | {final} |")
        plot_schedules(sched, os.path.join(RESULTS, f"lasso_schedules{tag}.png"))
    path = os.path.join(RESULTS, f"{args.stem}{tag}.md")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(os.path.join(RESULTS, f"{args.stem}{tag}.json"), "w") as fh:
        json.dump({"rows": rows, "profiles": profiles, "schedules": sched}, fh, indent=1,
                  default=float)
    print("\n".join(lines))


def plot_schedules(sched, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for s, d in sched.items():
        # diverging runs (shotgun) are clipped at 1e3 so the others stay readable
        sub = np.clip(np.nan_to_num(np.asarray(d["subopt"], dtype=float), nan=1e3,
                                    posinf=1e3), 1e-10, 1e3)
        ax.semilogy(d["time"], sub, marker=".", ms=3, label=s)
    ax.set_ylim(1e-10, 2e3)
    ax.axhline(TARGET, color="grey", ls=":", lw=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("relative suboptimality")
    ax.set_title("Lasso (a): schedules, 2 workers")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
