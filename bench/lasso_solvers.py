"""The solvers the Lasso benchmarks time, and how a time to the target is read.

Every solver is timed to ``TARGET`` relative suboptimality ``(F - F*) / F*`` against the
best objective ``F*`` any solver reached in the run. The peers (scikit-learn, skglm,
celer) are refitted from scratch with decreasing ``tol`` and the first fit below the
target counts; dask_strads runs once with a tight ``tol`` and its time to the target
is read from its history (the objective of every duality-gap round), plus the fit's
setup (from the call to the first round: checking and cutting the data, sending it).
"""

from __future__ import annotations

import time
import warnings

import numpy as np

TARGET = 1e-6
TOLS = [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10]
PEERS = ("sklearn", "skglm", "celer")


def objective(X, y, coef, intercept, alpha) -> float:
    r = y - np.asarray(X @ coef).ravel() - intercept
    return float(r @ r / (2 * len(y)) + alpha * np.abs(coef).sum())


def peer_factory(name, fit_intercept):
    if name == "sklearn":
        from sklearn.linear_model import Lasso

        return lambda alpha, tol: Lasso(alpha=alpha, tol=tol, fit_intercept=fit_intercept,
                                        max_iter=100_000)
    if name == "skglm":
        from skglm import Lasso

        return lambda alpha, tol: Lasso(alpha=alpha, tol=tol, fit_intercept=fit_intercept,
                                        max_iter=1000)
    if name == "celer":
        from celer import Lasso

        return lambda alpha, tol: Lasso(alpha=alpha, tol=tol, fit_intercept=fit_intercept,
                                        max_iter=1000)
    raise ValueError(name)


def run_peer(name, X, y, alpha, budget: float, fit_intercept=False, stop_obj=None,
             verbose=True, warm=True) -> list[dict]:
    """Fits with decreasing tol until the objective reaches ``stop_obj``, the tols run
    out or the fits spent ``budget`` seconds. ``warm``: first one untimed fit at the
    loosest tol, so that the first timed fit does not alone pay for memory the machine
    has taken back (on a VM, memory freed a second earlier is slow to touch again)."""
    make = peer_factory(name, fit_intercept)
    if warm:
        _timed_fit(make(alpha, TOLS[0]), X, y)
    out = []
    spent = 0.0
    for tol in TOLS:
        est = make(alpha, tol)
        t = _timed_fit(est, X, y)
        spent += t
        obj = objective(X, y, np.ravel(est.coef_), float(np.ravel(est.intercept_)[0])
                        if np.ndim(est.intercept_) else float(est.intercept_), alpha)
        out.append({"tol": tol, "time": t, "objective": obj})
        if verbose:
            print(f"    {name:8s} tol={tol:.0e}  {t:8.2f} s  obj={obj:.12g}", flush=True)
        if stop_obj is not None and obj <= stop_obj:
            break
        if spent > budget:
            break
    return out


def _timed_fit(est, X, y) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est.fit(X, y)
        return time.perf_counter() - t0


def run_ours(X, y, alpha, client, *, schedule="priority", tol=1e-9, time_limit=None,
             n_candidates=None, X_local=None, fit_intercept=False) -> dict:
    from dask_strads import Lasso

    est = Lasso(alpha=alpha, tol=tol, fit_intercept=fit_intercept, client=client,
                schedule=schedule, n_candidates=n_candidates, max_iter=100_000,
                random_state=0, progress=False)
    est._time_limit = time_limit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    h = est.history_
    run_elapsed = float(h["time"].iloc[-1]) if len(h) else 0.0
    before_run = max(wall - run_elapsed, 0.0)
    traj = h.loc[h["objective"].notna(), ["time", "objective"]].copy()
    traj["time"] += before_run
    setup = before_run + (float(h["time"].iloc[0] - h["round_s"].iloc[0]) if len(h) else 0.0)
    final = objective(X if X_local is None else X_local, y, est.coef_, est.intercept_, alpha)
    return {"wall": wall, "setup": setup, "trajectory": traj, "final": final, "est": est}


def time_to_target(points, best) -> float:
    for t, obj in points:
        if (obj - best) / abs(best) <= TARGET:
            return float(t)
    return float("nan")


def profile(est) -> dict:
    """Where a dask_strads fit's time went, from its history."""
    h = est.history_
    gap_rounds = h["objective"].notna()
    last = h.iloc[-1] if len(h) else {}
    solo = int(last.get("solo_phases", 0))
    peer = int(last.get("peer_phases", 0))
    phases = int(last.get("phases", 0))
    return {
        "blocks": getattr(est, "n_blocks_", None),
        "rounds": int(len(h)),
        "gap_rounds": int(gap_rounds.sum()),
        "phases": phases,
        "peer_phases": peer,
        "solo_phases": solo,
        "gram_phases": int(last.get("gram_phases", 0)),
        "updates": int(h["updates"].iloc[-1]) if len(h) else 0,
        "median_round_ms": 1e3 * float(h["round_s"].median()) if len(h) else 0.0,
        "push_s_total": float(h["push_s"].sum()),
        "push_s_gap_rounds": float(h.loc[gap_rounds, "push_s"].sum()),
        "schedule_s_total": float(h["schedule_s"].sum()),
        "pull_s_total": float(h["pull_s"].sum()),
        "wait_minus_push_s": float((h["wait_s"] - h["push_s"]).sum()),
        "run_s": float(h["time"].iloc[-1]) if len(h) else 0.0,
        "nnz": int(np.count_nonzero(est.coef_)),
    }


def on_cluster(X, client):
    """``X`` as a persisted dask array whose chunks are the fit's column blocks, each
    scattered to one worker (not embedded in a graph through the scheduler)."""
    import dask
    import dask.array as da
    from distributed import wait

    from dask_strads.cd.inputs import _block_starts

    workers = sorted(client.scheduler_info()["workers"])
    starts = _block_starts(X.shape[1], len(workers))
    blocks = []
    for i, w in enumerate(workers):
        part = X[:, starts[i]:starts[i + 1]]
        [fut] = client.scatter([part], workers=[w], hash=False)
        blocks.append(da.from_delayed(dask.delayed(fut), shape=part.shape, dtype=X.dtype,
                                      meta=part[:0, :0]))
    Xd = client.persist(da.concatenate(blocks, axis=1))
    wait(Xd)
    return Xd
