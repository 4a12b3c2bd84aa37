"""Sparse L1 logistic regression: time to 1e-6 relative suboptimality, ours on 2 workers
against scikit-learn (liblinear, saga), skglm and celer, in the same run.

Problems (no intercept: celer's logistic regression fits none, so every solver solves
the same problem):

(a) dense AR(1) design (correlation 0.5), 2,000 x 20,000;
(b) sparse, 50,000 x 500,000, 10 stored entries per column (5e6);
(c) sparse, 100,000 x 2,000,000, 25 stored entries per column (5e7).

``C`` is a multiple of ``C_min`` (below which every coefficient is zero) that keeps
0.1-1 % of the coefficients. The best objective any solver reached is ``F*``; a solver's
time is that of its first fit (peers: refitted with decreasing ``tol``) whose objective
is within ``1e-6 F*``; ours is read from its history (every gap round's objective) plus
its setup. ``--scale s`` shrinks every problem's rows and columns by ``s``.

    python bench/logistic.py                      # all three, full size
    python bench/logistic.py --problems a b --scale 0.25
    python bench/logistic.py --peers liblinear,skglm,celer   # without saga, the slowest
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import pathlib
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from dask_strads._datasets.logistic import C_min, make_classification  # noqa: E402

TARGET = 1e-6
TOLS = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10]
PEERS = ("liblinear", "saga", "skglm", "celer")
RESULTS = pathlib.Path(__file__).resolve().parent / "results"

PROBLEMS = {
    "a": dict(n=2_000, p=20_000, design="correlated", kw={"correlation": 0.5}, c=8.0),
    "b": dict(n=50_000, p=500_000, design="sparse", per_column=10, c=1.8),
    "c": dict(n=100_000, p=2_000_000, design="sparse", per_column=25, c=2.5),
}


def make_problem(key: str, scale: float):
    spec = PROBLEMS[key]
    n, p = int(spec["n"] * scale), int(spec["p"] * scale)
    kw = dict(spec.get("kw", {}))
    if spec["design"] == "sparse":
        kw["density"] = spec["per_column"] / n
    X, y = make_classification(n, p, n_informative=max(10, p // 1000), design=spec["design"],
                               random_state=0, **kw)
    if spec["design"] == "sparse":
        X = X.tocsc()
    C = spec["c"] * C_min(X, y, fit_intercept=False)
    return X, y, C


def objective(X, y, coef, C) -> float:
    z = np.asarray(X @ np.ravel(coef)).ravel()
    ys = np.where(y == 1, 1.0, -1.0)
    return float(C * np.logaddexp(0.0, -ys * z).sum() + np.abs(coef).sum())


def peer(name, C, tol):
    if name in ("liblinear", "saga"):
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=C, l1_ratio=1.0, solver=name, tol=tol,
                                  fit_intercept=False, max_iter=100_000)
    if name == "skglm":
        from skglm import SparseLogisticRegression

        return lambda n: SparseLogisticRegression(alpha=1.0 / (C * n), tol=tol,
                                                  fit_intercept=False, max_iter=1000)
    if name == "celer":
        from celer import LogisticRegression

        return LogisticRegression(C=C, tol=tol, fit_intercept=False, max_iter=1000)
    raise ValueError(name)


def _fit_in_child(est, X, y, timeout: float):
    """``(seconds, coef)`` of ``est.fit(X, y)`` run in a forked child, or ``None`` if it
    ran past ``timeout``: a slow peer (saga) must not hold the benchmark hostage."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            est.fit(X, y)
            send.send((time.perf_counter() - t0, np.ravel(est.coef_)))

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    got = recv.recv() if recv.poll(max(timeout, 1.0)) else None
    proc.kill()
    proc.join()
    return got


def run_peer(name, X, y, C, budget, stop_obj=None) -> list[dict]:
    out, spent = [], 0.0
    for tol in TOLS:
        est = peer(name, C, tol)
        if callable(est) and not hasattr(est, "fit"):
            est = est(X.shape[0])
        got = _fit_in_child(est, X, y, budget - spent)
        if got is None:
            print(f"    {name:9s} tol={tol:.0e} stopped at the budget of {budget:.0f} s",
                  flush=True)
            break
        t, coef = got
        spent += t
        obj = objective(X, y, coef, C)
        out.append({"tol": tol, "time": t, "objective": obj})
        print(f"    {name:9s} tol={tol:.0e} {t:8.2f} s  obj={obj:.12g}", flush=True)
        if (stop_obj is not None and obj <= stop_obj) or spent > budget:
            break
    return out


def run_ours(X, y, C, client) -> dict:
    from dask_strads import LogisticRegression

    est = LogisticRegression(C=C, tol=1e-10, fit_intercept=False, client=client,
                             max_iter=100_000, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    h = est.history_
    before_run = max(wall - float(h["time"].iloc[-1]), 0.0)
    gap_rounds = h.loc[h["objective"].notna()]
    # the history's objective is the loss plus the penalty / C, per sample
    points = [(float(t) + before_run, float(o) * X.shape[0] * C)
              for t, o in zip(gap_rounds["time"], gap_rounds["objective"])]
    return {"wall": wall, "points": points, "final": objective(X, y, est.coef_, C),
            "blocks": est.n_blocks_, "nnz": int(np.count_nonzero(est.coef_)),
            "rounds": len(h), "gap_rounds": len(gap_rounds)}


def time_to_target(points, best) -> float:
    for t, obj in points:
        if (obj - best) / abs(best) <= TARGET:
            return float(t)
    return float("nan")


def bench_problem(key, scale, client, budget, peers=PEERS) -> dict:
    t0 = time.perf_counter()
    X, y, C = make_problem(key, scale)
    print(f"({key}) {X.shape}, nnz {getattr(X, 'nnz', X.size):.3g}, C = {C:.4g} "
          f"(made in {time.perf_counter() - t0:.1f} s)", flush=True)
    ours = run_ours(X, y, C, client)
    print(f"    ours      {ours['wall']:8.2f} s  obj={ours['final']:.12g} "
          f"({ours['nnz']} non-zeros, {ours['blocks']} blocks, {ours['rounds']} rounds)",
          flush=True)
    stop = ours["final"] * (1 + 0.5 * TARGET)
    peers = {name: run_peer(name, X, y, C, budget, stop_obj=stop) for name in peers}
    best = min([ours["final"]] + [f["objective"] for fits in peers.values() for f in fits])
    times = dict.fromkeys(PEERS, float("nan"))
    times["ours"] = time_to_target(ours["points"], best)
    for name, fits in peers.items():
        times[name] = time_to_target([(f["time"], f["objective"]) for f in fits], best)
    return {"problem": key, "shape": list(X.shape), "nnz": int(getattr(X, "nnz", X.size)),
            "C": C, "best": best, "times": times, "ours": {k: v for k, v in ours.items()
                                                            if k != "points"},
            "ours_points": ours["points"],
            "peer_fits": peers, "nnz_share": ours["nnz"] / X.shape[1]}


def write_report(rows, stem: str, command: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(rows, indent=1, default=float))
    lines = [f"# Sparse logistic regression: time to {TARGET:g} relative suboptimality", "",
             f"`{command}`; ours on 2 worker processes of 1 thread; peers on 1 thread of "
             "the same machine in the same run. Times in seconds (ours includes checking "
             "and cutting the data and sending it to the workers).", "",
             "| problem | shape | nnz | non-zero coef | ours | liblinear | saga | skglm | "
             "celer | ours / best sklearn | ours / best of skglm, celer |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["times"]
        sk = np.nanmin([t["liblinear"], t["saga"]])
        other = np.nanmin([t["skglm"], t["celer"]])
        f = (lambda v: "-" if not np.isfinite(v) else f"{v:.2f}")
        lines.append(f"| ({r['problem']}) | {r['shape'][0]} x {r['shape'][1]} | {r['nnz']:.3g} "
                     f"| {100 * r['nnz_share']:.2f} % | {f(t['ours'])} | {f(t['liblinear'])} | "
                     f"{f(t['saga'])} | {f(t['skglm'])} | {f(t['celer'])} | "
                     f"{f(t['ours'] / sk)} | {f(t['ours'] / other)} |")
    lines += ["", "A dash: the solver did not reach the target within its budget.", ""]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, len(rows), figsize=(5 * len(rows), 4), squeeze=False)
    for ax, r in zip(axes[0], rows):
        best = r["best"]
        pts = np.array(r["ours_points"])
        ax.semilogy(pts[:, 0], np.maximum((pts[:, 1] - best) / best, 1e-12), "o-",
                    label="dask_strads (2 workers)")
        for name, fits in r["peer_fits"].items():
            if not fits:  # stopped at the budget before its first fit ended
                continue
            ts = np.array([(f["time"], max((f["objective"] - best) / best, 1e-12))
                           for f in fits])
            ax.semilogy(ts[:, 0], ts[:, 1], "s--", label=name)
        ax.axhline(TARGET, color="grey", lw=0.5)
        ax.set_title(f"({r['problem']}) {r['shape'][0]} x {r['shape'][1]}")
        ax.set_xlabel("seconds")
        ax.set_ylabel("relative suboptimality")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{stem}.png", dpi=110)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--budget", type=float, default=300.0,
                    help="seconds each peer may spend on its refits of one problem")
    ap.add_argument("--peers", default=",".join(PEERS),
                    help="comma-separated subset of " + ",".join(PEERS))
    ap.add_argument("--stem", default="logistic")
    args = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    from dask_strads.cd import kernels, logistic_kernels

    kernels.warm_up()
    logistic_kernels.warm_up()
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        peers = [p for p in args.peers.split(",") if p]
        # compile every solver's kernels, dense and sparse, before timing anything: ours
        # on the workers, the peers' in this process, which their timed fits fork from
        for key in ("a", "b"):
            Xw, yw, Cw = make_problem(key, 0.02)
            run_ours(Xw, yw, Cw, client)
            for name in peers:
                est = peer(name, Cw, 1e-4)
                est = est(Xw.shape[0]) if not hasattr(est, "fit") else est
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.fit(Xw, yw)
        rows = [bench_problem(k, args.scale, client, args.budget, peers) for k in args.problems]
    write_report(rows, args.stem, "python bench/logistic.py " + " ".join(sys.argv[1:]))
    print((RESULTS / f"{args.stem}.md").read_text())


if __name__ == "__main__":
    main()
