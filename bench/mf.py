"""Benchmark: dask_strads.MatrixFactorization (CCD++ on 2 workers) against single-process peers.

Problem (issue 5): synthetic 50000 x 10000 matrix of rank 10, 2 M observed entries, noise sd
0.1, 90/10 train/test split, lambda = 0.05; model ranks 20, 200 and 1000. Every method starts
from the same initial factors (``dask_strads.mf.shards.random_factor``, the estimator's
``init="random"`` for the same seed) and minimises the same objective
``sum (a_ij - w_i'h_j)^2 + lambda (||W||^2 + ||H||^2)``.

Peers
-----
``numba-ccd++``  the same CCD++ in one process, numba ``parallel=True`` kernels over 2 threads
                 (rows / columns in ``prange``), residual kept in CSR and CSC, like LIBPMF.
``als``          exact alternating least squares: every row of W (then H) is the exact
                 ridge solution given the other factor, solved per row with numpy (batched
                 over rows of equal count; the k x k normal equations, or the n_i x n_i dual
                 system when a row has fewer than k entries), BLAS on 2 threads.
``dask-strads``  MatrixFactorization on a LocalCluster of 2 single-threaded worker processes.

Each measurement runs in its own subprocess (clean peak memory). Reported: time to a training
objective within 1% of the lowest that any method reached at that rank, the test RMSE curve,
peak memory (RSS: the process, plus the workers for dask-strads), medians over repeats.

Usage::

    python bench/mf.py            # full problem (about an hour on 2 cores)
    python bench/mf.py --quick    # small problem, one repeat (a few minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))

LAMBDA = 0.05
SEED = 0
THREADS = 2
# Most CCD++ inner sweeps per rank component, for ours and the numba peer (the estimator's
# default; a visit ends once h_t settles, see INNER_TOL)
INNER = 10
INNER_TOL = 0.05  # the estimator's default: a component's sweeps end once h_t settles

# Per rank: a common time budget (seconds; None = run ``iters`` outer iterations), an
# iteration cap, repeats, the methods skipped, and methods given a multiple of the budget.
FULL = dict(n_rows=50_000, n_cols=10_000, rank=10, n_observed=2_000_000, noise=0.1,
            ranks=[20, 200, 1000],
            budget={20: 60.0, 200: 300.0, 1000: None},
            iters={20: 1000, 200: 1000, 1000: 10},  # rank 1000: the estimator's max_iter
            repeats={20: 3, 200: 1, 1000: 1},
            # exact ALS at rank 1000 (50000 solves of 1000 x 1000 per sweep) is not
            # affordable; at rank 200 the target compares with ALS (the numba CCD++ computes
            # our iterates: rank 20 and 1000 compare implementations)
            skip={200: ["numba-ccd++"], 1000: ["als"]},
            # ALS runs twice as long at rank 200: if it cannot come within 1% of the lowest
            # objective in twice our budget, we took at most half its time
            budget_scale={200: {"als": 2.0}})
QUICK = dict(n_rows=5_000, n_cols=2_000, rank=10, n_observed=200_000, noise=0.1,
             ranks=[20, 100], budget={20: 10.0, 100: 20.0}, iters={20: 1000, 100: 1000},
             repeats={20: 1, 100: 1}, skip={}, budget_scale={})

METHODS = ["dask-strads", "numba-ccd++", "als"]
COLORS = {"dask-strads": "C0", "numba-ccd++": "C1", "als": "C2"}  # the same in every panel


# ----------------------------------------------------------------------------- data
def load_problem(cfg: dict):
    """The ratings (cached in the temp directory: each measurement process reloads them)."""
    from dask_strads._datasets.mf import make_ratings

    name = "dask_strads_bench_mf_{n_rows}_{n_cols}_{rank}_{n_observed}.npz".format(**cfg)
    path = Path(tempfile.gettempdir()) / name
    if not path.exists():
        data = make_ratings(cfg["n_rows"], cfg["n_cols"], rank=cfg["rank"],
                            n_observed=cfg["n_observed"], noise=cfg["noise"], test_size=0.1,
                            random_state=SEED)
        coo = data.train.tocoo()
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, rows=coo.row, cols=coo.col, values=coo.data, shape=coo.shape,
                 test_rows=data.test_rows, test_cols=data.test_cols,
                 test_values=data.test_values)
        os.replace(tmp, path)
    z = np.load(path)
    import scipy.sparse as sp

    train = sp.csr_matrix((z["values"], (z["rows"], z["cols"])), shape=tuple(z["shape"]))
    train.sort_indices()
    return train, (z["test_rows"], z["test_cols"], z["test_values"])


def init_scale(train, k: int) -> float:
    """The estimator's ``init="random"`` scale (kept in sync with MatrixFactorization)."""
    return 0.5 * (float(np.mean(train.data**2)) / k) ** 0.25


def initial_factors(train, k: int):
    from dask_strads.mf.shards import random_factor

    scale = init_scale(train, k)
    m, n = train.shape
    return (random_factor(SEED, "W", 0, m, 0, k, scale),
            random_factor(SEED, "H", 0, n, 0, k, scale))


# ----------------------------------------------------------------------------- peers
def run_numba_ccdpp(train, test, k: int, n_iter: int, time_limit: float) -> dict:
    """Single-process CCD++ with numba prange kernels (same algorithm and order as ours)."""
    import numba

    from dask_strads.mf import kernels

    numba.set_num_threads(THREADS)
    kernels.warm_up(parallel=True)
    t0 = time.perf_counter()
    W0, H0 = initial_factors(train, k)
    csr = train
    csc = train.tocsc()
    csc.sort_indices()
    csr_indptr, csr_indices = csr.indptr.astype(np.int64), csr.indices.astype(np.int64)
    csc_indptr, csc_indices = csc.indptr.astype(np.int64), csc.indices.astype(np.int64)
    r_csr, r_csc = csr.data.astype(np.float64), csc.data.astype(np.float64)
    kernels.subtract_products(csr_indptr, csr_indices, r_csr, W0, H0)
    kernels.subtract_products(csc_indptr, csc_indices, r_csc, H0, W0)
    t_rows, t_cols, t_vals = (np.asarray(a) for a in test)
    r_test = t_vals.astype(np.float64).copy()
    kernels.subtract_pair_products(t_rows.astype(np.int64), t_cols.astype(np.int64), r_test, W0, H0)
    t_rows, t_cols = t_rows.astype(np.int64), t_cols.astype(np.int64)
    W, H = np.asfortranarray(W0), np.asfortranarray(H0)
    del W0, H0
    w_norms = np.einsum("ij,ij->j", W, W)
    h_norms = np.einsum("ij,ij->j", H, H)
    sse = float(r_csc @ r_csc)
    trace = [(time.perf_counter() - t0, sse + LAMBDA * (w_norms.sum() + h_norms.sum()))]
    rmse = [(trace[0][0], 0, float(np.sqrt(np.mean(r_test**2))))]
    prev = -1
    for it in range(n_iter):
        for t in range(k):
            w_old = W[:, t].copy()
            h_old = H[:, t].copy()
            s = 0
            # with INNER_TOL any sweep may be the component's last, so each leaves the CSC
            # residual true (and the next adds its term back); else only the last does
            every = INNER_TOL > 0
            while s < INNER:
                first, last = s == 0, s == INNER - 1
                do_sub = first and prev >= 0
                sub = prev if do_sub else t
                h_before = H[:, t].copy()
                w_before = W[:, t].copy()
                kernels.rank_one_sweep_parallel(csr_indptr, csr_indices, r_csr, W[:, sub],
                                                H[:, sub], W[:, t], H[:, t], H[:, t], LAMBDA,
                                                W[:, t], do_sub, first, False)
                sse = kernels.rank_one_sweep_parallel(csc_indptr, csc_indices, r_csc, H[:, t],
                                                      W[:, t], H[:, t], w_before, W[:, t],
                                                      LAMBDA, H[:, t], False, first or every,
                                                      last or every)
                # the estimator's rule (inner_tol): a sweep that leaves h_t settled is the
                # component's last
                settled = every and (np.sum((H[:, t] - h_before) ** 2)
                                     <= INNER_TOL**2 * (H[:, t] @ H[:, t]))
                s = INNER if settled else s + 1
            kernels.pair_rank_one_update(t_rows, t_cols, r_test, w_old, h_old, W[:, t], H[:, t])
            w_norms[t] = W[:, t] @ W[:, t]
            h_norms[t] = H[:, t] @ H[:, t]
            prev = t
            trace.append((time.perf_counter() - t0, sse + LAMBDA * (w_norms.sum() + h_norms.sum())))
        rmse.append((time.perf_counter() - t0, it + 1, float(np.sqrt(np.mean(r_test**2)))))
        if time.perf_counter() - t0 > time_limit:
            break
    return {"trace": trace, "rmse": rmse, "total_s": time.perf_counter() - t0}


def _ridge_rows(indptr, indices, values, other, lam, out):
    """Exact ridge solution of every row: argmin ||a_i - other[idx_i] x||^2 + lam ||x||^2."""
    k = other.shape[1]
    counts = np.diff(indptr)
    out[counts == 0] = 0.0
    for n in np.unique(counts[counts > 0]):
        rows = np.flatnonzero(counts == n)
        batch = max(1, int(2e7 // (n * k + n * n + k * k)))
        for b0 in range(0, len(rows), batch):
            rb = rows[b0:b0 + batch]
            pos = indptr[rb][:, None] + np.arange(n)[None, :]
            Hb = other[indices[pos]]                      # (B, n, k)
            ab = values[pos]                              # (B, n)
            if n >= k:
                G = np.matmul(Hb.transpose(0, 2, 1), Hb)
                G[:, np.arange(k), np.arange(k)] += lam
                rhs = np.einsum("bnk,bn->bk", Hb, ab)
                out[rb] = np.linalg.solve(G, rhs[..., None])[..., 0]
            else:  # dual form: x = H'(H H' + lam I)^-1 a, an n x n system
                K = np.matmul(Hb, Hb.transpose(0, 2, 1))
                K[:, np.arange(n), np.arange(n)] += lam
                z = np.linalg.solve(K, ab[..., None])[..., 0]
                out[rb] = np.einsum("bnk,bn->bk", Hb, z)


def _objective(rows, cols, values, W, H, lam):
    sse = 0.0
    step = 200_000
    for s in range(0, len(values), step):
        r = values[s:s + step] - np.einsum("ij,ij->i", W[rows[s:s + step]], H[cols[s:s + step]])
        sse += float(r @ r)
    return sse + lam * (float(np.sum(W * W)) + float(np.sum(H * H)))


def run_als(train, test, k: int, n_iter: int, time_limit: float) -> dict:
    """Exact ALS; objective and test RMSE are evaluated off the clock after each sweep."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(THREADS):
        t0 = time.perf_counter()
        W, H = initial_factors(train, k)
        csc = train.tocsc()
        csc.sort_indices()
        coo = train.tocoo()
        t_rows, t_cols, t_vals = test
        paused = time.perf_counter()
        obj0 = _objective(coo.row, coo.col, coo.data, W, H, LAMBDA)
        rm0 = float(np.sqrt(np.mean((t_vals - np.einsum("ij,ij->i", W[t_rows], H[t_cols]))**2)))
        offset = time.perf_counter() - paused
        trace = [(time.perf_counter() - t0 - offset, obj0)]
        rmse = [(trace[0][0], 0, rm0)]
        for it in range(n_iter):
            _ridge_rows(train.indptr, train.indices, train.data, H, LAMBDA, W)
            _ridge_rows(csc.indptr, csc.indices, csc.data, W, LAMBDA, H)
            now = time.perf_counter()
            solver_s = now - t0 - offset
            obj = _objective(coo.row, coo.col, coo.data, W, H, LAMBDA)
            rm = float(np.sqrt(np.mean((t_vals - np.einsum("ij,ij->i", W[t_rows], H[t_cols]))**2)))
            offset += time.perf_counter() - now
            trace.append((solver_s, obj))
            rmse.append((solver_s, it + 1, rm))
            if trace[-1][0] > time_limit:
                break
        return {"trace": trace, "rmse": rmse, "total_s": time.perf_counter() - t0 - offset}


def run_dask_strads(train, test, k: int, n_iter: int, time_limit: float) -> dict:
    """MatrixFactorization on 2 single-threaded worker processes; worker RSS is sampled."""
    import psutil
    from distributed import Client, LocalCluster

    from dask_strads import MatrixFactorization
    from dask_strads.mf import kernels

    with LocalCluster(n_workers=THREADS, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=":0", memory_limit="10GiB") as cluster, \
            Client(cluster) as client:
        client.run(kernels.warm_up)
        pids = list(client.run(os.getpid).values())
        procs = [psutil.Process(p) for p in pids]
        peak = {"workers": 0, "per_worker": [0] * len(procs)}
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    rss = [p.memory_info().rss for p in procs]
                except psutil.Error:
                    break
                peak["workers"] = max(peak["workers"], sum(rss))
                peak["per_worker"] = [max(a, b) for a, b in zip(peak["per_worker"], rss)]
                stop.wait(0.05)

        base = sum(p.memory_info().rss for p in procs)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        mf = MatrixFactorization(n_components=k, alpha=LAMBDA, max_iter=n_iter, tol=0.0,
                                 random_state=SEED, inner_iter=INNER, inner_tol=INNER_TOL,
                                 client=client,
                                 progress=False, time_limit=time_limit)
        t0 = time.perf_counter()
        mf.fit(train, validation=test)
        total = time.perf_counter() - t0
        stop.set()
        sampler.join()
    h = mf.history_
    # history times run from the engine's start; shift them so that they count from the
    # call to fit (input checks, shard building and scattering included), conservatively
    # also charging the final gathering of W and H to every point
    shift = total - float(h["time"].iloc[-1])
    # the rounds that complete a rank component: the next component (or iteration)
    # starts after them (inner sweeps end early once h_t settles: no fixed stride)
    rank, it = h["rank"].to_numpy(), h["iteration"].to_numpy()
    done = (rank != np.r_[0, rank[:-1]]) | (it != np.r_[0, it[:-1]])
    rows = h.iloc[:-1][done[:-1]]
    trace = [(shift + float(t), float(o)) for t, o in zip(rows["time"], rows["objective"])]
    # the validation error arrives one round later, counted by rmse_ranks
    ranks = h["rmse_ranks"].to_numpy()
    ends = h.iloc[np.flatnonzero((ranks > 0) & (ranks % k == 0)
                                 & (np.diff(np.r_[0, ranks]) != 0))]
    rmse = [(shift + float(t), int(r) // k, float(e))
            for t, r, e in zip(ends["time"], ends["rmse_ranks"], ends["rmse"])]
    return {"trace": trace, "rmse": rmse, "total_s": total,
            "worker_peak_bytes": peak["workers"], "worker_base_bytes": base,
            "worker_peak_per_worker": peak["per_worker"],
            "round_ms_median": float(h["round_s"].median() * 1e3),
            "push_ms_median": float(h["push_s"].median() * 1e3),
            "n_rounds": len(h), "final_objective": mf.objective_}


RUNNERS = {"numba-ccd++": run_numba_ccdpp, "als": run_als, "dask-strads": run_dask_strads}


def method_budget(cfg: dict, k: int, method: str) -> float | None:
    """The time budget of ``method`` at rank ``k`` (None: a fixed number of iterations)."""
    budget = cfg["budget"][k]
    return budget * cfg["budget_scale"].get(k, {}).get(method, 1.0) if budget else None


def one(method: str, k: int, cfg: dict, out: str) -> None:
    train, test = load_problem(cfg)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    budget = method_budget(cfg, k, method)
    res = RUNNERS[method](train, test, k, cfg["iters"][k], budget if budget else 1e9)
    res.update(method=method, rank=k, base_bytes=base,
               peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    Path(out).write_text(json.dumps(res))


# ----------------------------------------------------------------------------- orchestration
def measure(method: str, k: int, quick: bool, budget: float | None = None) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, __file__, "--one", method, "--rank", str(k), "--out", out] + (
        ["--quick"] if quick else []) + (["--budget", str(budget)] if budget else [])
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if method == "als":
        env.update(OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS),
                   MKL_NUM_THREADS=str(THREADS))
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} rank {k} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    print(f"  {method:12s} rank {k:5d}: {res['total_s']:7.1f} s total "
          f"(process {time.perf_counter() - t:.0f} s), final objective {res['trace'][-1][1]:.6g}",
          flush=True)
    return res


def time_to(trace, target: float) -> float | None:
    for t, obj in trace:
        if obj is not None and obj <= target:
            return t
    return None


def summarise(results: dict, cfg: dict) -> tuple[str, dict]:
    lines = []
    summary = {}
    for k in cfg["ranks"]:
        runs = results[k]
        if cfg["budget"][k]:  # points past a method's budget (a last long iteration) do not
            # count
            runs = {m: [dict(r, trace=[x for x in r["trace"] if x[0] <= method_budget(cfg, k, m)]
                             or r["trace"][:1]) for r in rs] for m, rs in runs.items()}
        best = min(min(o for _, o in r["trace"]) for rs in runs.values() for r in rs)
        target = best * 1.01
        # a level that every run of the CCD++ methods (identical iterates) reached: their
        # time to it compares implementations even when noisy runs end far apart
        common = 1.01 * max(min(o for _, o in r["trace"]) for m, rs in runs.items()
                            for r in rs if m != "als")
        summary[k] = {"best": best, "target": target, "common_target": common, "methods": {},
                      "at_peer_best": {}}
        # the lowest objective a peer reached (median over repeats), and how long ours took
        # to reach it: a comparison at the peer's best, budget or no budget
        for peer in ("numba-ccd++", "als"):
            if peer in runs and "dask-strads" in runs:
                level = float(np.median([min(o for _, o in r["trace"]) for r in runs[peer]]))
                theirs = [time_to(r["trace"], level) for r in runs[peer]]
                ours = [time_to(r["trace"], level) for r in runs["dask-strads"]]
                summary[k]["at_peer_best"][peer] = {
                    "objective": level,
                    "peer_s": float(np.median([t for t in theirs if t is not None])),
                    "ours_s": float(np.median(ours)) if None not in ours else None}
        for method, rs in runs.items():
            times = [time_to(r["trace"], target) for r in rs]
            reached = [t for t in times if t is not None]
            common_times = [time_to(r["trace"], common) for r in rs]
            peak = [r["peak_bytes"] + r.get("worker_peak_bytes", 0) for r in rs]
            summary[k]["methods"][method] = {
                "time_to_target_s": float(np.median(reached)) if len(reached) == len(rs) else None,
                "times": times,
                "time_to_common_s": (float(np.median(common_times))
                                     if None not in common_times else None),
                "common_times": common_times,
                "best_objective": float(np.median([min(o for _, o in r["trace"]) for r in rs])),
                "final_objective": float(np.median([r["trace"][-1][1] for r in rs])),
                "best_test_rmse": float(np.median([min(x[2] for x in r["rmse"]) for r in rs])),
                "final_test_rmse": float(np.median([r["rmse"][-1][2] for r in rs])),
                "peak_gb": float(np.median(peak)) / 2**30,
                "total_s": float(np.median([r["total_s"] for r in rs])),
                "round_ms": (float(np.median([r["round_ms_median"] for r in rs]))
                             if "round_ms_median" in rs[0] else None),
            }
    return "\n".join(lines), summary


def write_report(results: dict, summary: dict, cfg: dict, quick: bool, started: str,
                 stem: str) -> None:
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps({"config": cfg, "results": {
        str(k): v for k, v in results.items()}, "summary": {str(k): v for k, v in summary.items()}},
        default=float))
    fmt = lambda x, f="{:.1f}": "not reached" if x is None else f.format(x)  # noqa: E731
    md = [f"# Matrix factorisation benchmark{' (quick)' if quick else ''}", "",
          f"Run started {started} with `python bench/mf.py {' '.join(sys.argv[1:])}` on "
          f"{os.cpu_count()} cores (load average at the end: "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}).", "",
          f"Problem: {cfg['n_rows']} x {cfg['n_cols']}, rank-{cfg['rank']} truth, "
          f"{cfg['n_observed']:,} observed entries (90% train / 10% test), noise sd "
          f"{cfg['noise']}, lambda = {LAMBDA}. All methods start from the same factors and "
          f"minimise the same objective; CCD++ runs up to {INNER} inner sweeps per rank "
          f"component, ending them once a sweep moves h_t by at most {INNER_TOL} of its norm "
          "(dask-strads and numba-ccd++ alike). "
          f"Repeats per rank: {cfg['repeats']} (medians quoted); time budget per run: "
          f"{cfg['budget']} seconds (None: a fixed number of outer iterations, {cfg['iters']}); "
          f"budget multiples {cfg['budget_scale']}; methods skipped {cfg['skip']}; "
          "each measurement runs in its own process.", "",
          "Time to target = wall time from the start of the fit (data layout and initial "
          "residual included; cluster start-up and numba compilation excluded) until the "
          "training objective is within 1% of the lowest any method reached at that rank. "
          "Peak memory = peak RSS of the measuring process, plus the two worker processes' "
          "peak for dask-strads.", ""]
    for k in cfg["ranks"]:
        s = summary[k]
        md += [f"## Rank {k}", "",
               f"Lowest objective {s['best']:.6g}; target (+1%) {s['target']:.6g}. Common "
               f"target (+1% over the worst run of the CCD++ methods) {s['common_target']:.6g}.",
               "", "| method | time to target (s) | all repeats (s) | time to common target "
               "(s) | all repeats (s) | objective reached (median) | best test RMSE | "
               "final test RMSE | peak memory (GB) | round (ms) |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        for method, m in s["methods"].items():
            md.append(f"| {method} | {fmt(m['time_to_target_s'])} | "
                      f"{', '.join(fmt(t) for t in m['times'])} | "
                      f"{fmt(m['time_to_common_s'])} | "
                      f"{', '.join(fmt(t) for t in m['common_times'])} | "
                      f"{m['best_objective']:.6g} | "
                      f"{m['best_test_rmse']:.4f} | {m['final_test_rmse']:.4f} | "
                      f"{m['peak_gb']:.2f} | {fmt(m['round_ms'], '{:.2f}')} |")
        for key, label in (("time_to_target_s", "target"), ("time_to_common_s", "common target")):
            ours = s["methods"].get("dask-strads", {}).get(key)
            for peer in ("numba-ccd++", "als"):
                theirs = s["methods"].get(peer, {}).get(key)
                if ours and theirs:
                    md.append(f"\ndask-strads / {peer}, time to {label}: {ours / theirs:.2f}")
        for peer, a in s["at_peer_best"].items():
            ours = f"{a['ours_s']:.1f} s, ratio {a['ours_s'] / a['peer_s']:.2f}" \
                if a["ours_s"] else "not reached"
            md.append(f"\nTime to {peer}'s lowest objective ({a['objective']:.6g}): {peer} "
                      f"{a['peer_s']:.1f} s, dask-strads {ours}")
        iters = sorted({x[1] for m in results[k] for x in results[k][m][0]["rmse"]})
        md += ["", "Test RMSE after each outer iteration (first repeat; iteration 0 = start):",
               "", "| method | " + " | ".join(str(i) for i in iters) + " |",
               "|---" * (len(iters) + 1) + "|"]
        for method in results[k]:
            by_it = {x[1]: f"{x[2]:.4f}" for x in results[k][method][0]["rmse"]}
            md.append(f"| {method} | " + " | ".join(by_it.get(i, "") for i in iters) + " |")
        md.append("")
    (out_dir / f"{stem}.md").write_text("\n".join(md) + "\n")
    plot(results, summary, cfg, out_dir / f"{stem}.png")


def plot(results, summary, cfg, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = cfg["ranks"]
    fig, axes = plt.subplots(2, len(ranks), figsize=(5 * len(ranks), 8), squeeze=False)
    for col, k in enumerate(ranks):
        best = summary[k]["best"]
        for method, rs in results[k].items():
            r = rs[0]
            t = [x[0] for x in r["trace"]]
            gap = [max(x[1] / best - 1, 1e-6) for x in r["trace"]]
            axes[0, col].plot(t, gap, label=method, color=COLORS[method])
            axes[1, col].plot([x[0] for x in r["rmse"]], [x[2] for x in r["rmse"]], "o-",
                              label=method, markersize=3, color=COLORS[method])
        axes[0, col].axhline(0.01, color="grey", lw=0.8, ls="--")
        axes[0, col].set(yscale="log", xlabel="seconds", title=f"rank {k}",
                         ylabel="objective / lowest - 1")
        axes[1, col].set(xlabel="seconds", ylabel="test RMSE")
        axes[0, col].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small problem, one repeat")
    p.add_argument("--ranks", type=int, nargs="*",
                   help="measure only these of the configured ranks")
    p.add_argument("--repeats", type=int, help="override the number of repeats")
    p.add_argument("--methods", nargs="*", default=METHODS, choices=METHODS)
    p.add_argument("--budget", type=float,
                   help="override the time budget (seconds) of every measured rank")
    p.add_argument("--stem", help="name of the report files in bench/results (default mf, "
                   "or mf_quick)")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite the report from the saved (possibly partial) measurements")
    p.add_argument("--one", choices=METHODS, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.budget:
        cfg["budget"] = dict.fromkeys(cfg["ranks"], args.budget)
    if args.one:
        one(args.one, args.rank, cfg, args.out)
        return
    if args.ranks:
        unknown = set(args.ranks) - set(cfg["ranks"])
        if unknown:
            p.error(f"--ranks: {sorted(unknown)} not among the configured {cfg['ranks']}")
        cfg["ranks"] = args.ranks
    if args.repeats:
        cfg["repeats"] = dict.fromkeys(cfg["ranks"], args.repeats)
    stem = args.stem or ("mf_quick" if args.quick else "mf")
    partial = HERE / "results" / f"{stem}_partial.json"
    if args.report_only:
        saved = json.loads(partial.read_text())
        started = saved["started"]
        results = {int(k): v for k, v in saved["results"].items() if v}
        cfg["ranks"] = [k for k in cfg["ranks"] if k in results]
    else:
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        load_problem(cfg)
        partial.parent.mkdir(exist_ok=True)
        results = {}
        for k in cfg["ranks"]:
            results[k] = {}
            methods = [m for m in args.methods if m not in cfg["skip"].get(k, [])]
            for _ in range(cfg["repeats"][k]):
                for method in methods:
                    results[k].setdefault(method, []).append(
                        measure(method, k, args.quick, args.budget))
                    partial.write_text(json.dumps({"started": started, "results": results}))
    _, summary = summarise(results, cfg)
    write_report(results, summary, cfg, args.quick, started, stem)
    print((HERE / "results" / f"{stem}.md").read_text())


if __name__ == "__main__":
    main()
