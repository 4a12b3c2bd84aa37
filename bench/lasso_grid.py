"""The Lasso grid: benchopt-style designs x regularisations, ours against the peers.

Cells (``cells(quick)``): dense Gaussian designs with AR(1) correlation 0, 0.5 and 0.9
between neighbouring columns at four shapes (500 x 5,000; 2,000 x 20,000; 10,000 x
2,000, more samples than features; 4,000 x 40,000); sparse designs with uniform column
densities 1e-3 and 1e-2; text-like TF-IDF designs whose word frequencies follow Zipf's
law; each at alpha_max / 10, / 100 and / 1000; a few with an intercept. dask_strads
runs on 2 workers and on 1 worker (2 and 1 process LocalClusters, 1 thread each, X in
the client's memory, setup included; ``repeats`` fits each, alternating, the median
counting); the peers on one thread.

Each cell records the time to 1e-6 relative suboptimality of every solver and the
ratios: ours (2 workers) / scikit-learn, ours / the fastest of skglm and celer, and
2 workers / 1 worker. Targets, on cells where scikit-learn needs at least a second:
ours <= 0.5x scikit-learn and <= 1.0x the fastest of skglm and celer.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import time

import dask
import numpy as np
from lasso_solvers import PEERS, profile, run_ours, run_peer, time_to_target

SHAPES = [(500, 5000), (2000, 20000), (10000, 2000), (4000, 40000)]
CORRELATIONS = [0.0, 0.5, 0.9]
RATIOS = [10, 100, 1000]


def _dense(n, p, rho):
    from dask_strads._datasets.lasso import make_correlated_regression

    return lambda: make_correlated_regression(n, p, n_informative=max(10, p // 400),
                                              correlation=rho, random_state=0)


def _sparse(n, p, density):
    from dask_strads._datasets.lasso import make_sparse_regression

    return lambda: make_sparse_regression(n, p, density=density,
                                          n_informative=max(10, p // 1000), random_state=0)


def _text(n, p, doc_length):
    from dask_strads._datasets.lasso import make_text_regression

    return lambda: make_text_regression(n, p, doc_length=doc_length,
                                        n_informative=max(10, p // 1000), random_state=0)


def cells(quick: bool = False) -> dict:
    """``name -> dict(make, ratio, intercept, desc)``."""
    designs = {}
    shapes = SHAPES[:1] if quick else SHAPES
    for n, p in shapes:
        for rho in CORRELATIONS:
            designs[f"dense{n}x{p}_rho{rho:g}"] = (_dense(n, p, rho),
                                                   f"dense {n} x {p}, AR(1) {rho:g}")
    if quick:
        # the one quick design with enough entries to be split over 2 workers
        designs["dense10000x2000_rho0.9"] = (_dense(10000, 2000, 0.9),
                                             "dense 10000 x 2000, AR(1) 0.9")
        designs["sparse5000x20000_d1e-3"] = (_sparse(5000, 20000, 1e-3),
                                             "sparse 5000 x 20000, density 1e-3")
        designs["text5000x20000"] = (_text(5000, 20000, 40),
                                     "text-like 5000 x 20000, Zipf, 40 words/doc")
    else:
        designs["sparse20000x100000_d1e-3"] = (_sparse(20000, 100000, 1e-3),
                                               "sparse 20000 x 100000, density 1e-3")
        designs["sparse10000x50000_d1e-2"] = (_sparse(10000, 50000, 1e-2),
                                              "sparse 10000 x 50000, density 1e-2")
        designs["text20000x100000"] = (_text(20000, 100000, 50),
                                       "text-like 20000 x 100000, Zipf, 50 words/doc")
        designs["text50000x500000"] = (_text(50000, 500000, 100),
                                       "text-like 50000 x 500000, Zipf, 100 words/doc")
    out = {}
    for name, (make, desc) in designs.items():
        for ratio in RATIOS:
            out[f"{name}_a{ratio}"] = dict(make=make, design=name, ratio=ratio,
                                           intercept=False, desc=f"{desc}, alpha_max/{ratio}")
    with_intercept = (["text5000x20000_a100", "dense500x5000_rho0.5_a100"] if quick else
                      ["text20000x100000_a100", "text50000x500000_a100",
                       "dense2000x20000_rho0.5_a1000", "sparse20000x100000_d1e-3_a100"])
    for name in with_intercept:
        cell = dict(out[name])
        cell.update(intercept=True, desc=cell["desc"] + ", with intercept")
        out[name + "_icpt"] = cell
    return out


def cell_parser(description: str, stem: str) -> argparse.ArgumentParser:
    """The options of a script that fits chosen grid cells on one LocalCluster."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cells", required=True, help="grid cell names, comma-separated")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stem", default=stem)
    return ap


def chosen_cells(ap: argparse.ArgumentParser, names: str) -> dict:
    """``name -> cell`` of the comma-separated ``names`` (quick cells too), in order; an
    unknown name is the parser's error."""
    grid = {**cells(False), **cells(True)}
    unknown = [c for c in names.split(",") if c not in grid]
    if unknown:
        ap.error(f"--cells: unknown grid cells {unknown}")
    return {c: grid[c] for c in names.split(",")}


def warm_up_peers(peers) -> None:
    """Fit every peer once on a small problem: skglm and celer compile numba kernels on
    their first fit, which must not count in a cell's time."""
    from dask_strads._datasets.lasso import make_correlated_regression, make_sparse_regression

    for X, y, _ in (make_correlated_regression(50, 100), make_sparse_regression(50, 100)):
        for icpt in (False, True):
            run_peer_quiet = [run_peer(p, X, y, 0.01, 1.0, fit_intercept=icpt, verbose=False,
                                       warm=False)
                              for p in peers]
            del run_peer_quiet


def run_cell(name, cell, clients, peers, budget, data_cache, repeats: int = 1,
             order: str = "as-made", intercept: bool = False) -> dict:
    """Time every solver on one cell; ``clients``: ``{n_workers: client}``; ours
    ``repeats`` times on each, alternating. ``order="C"``: dense X C-ordered;
    ``intercept``: every solver fits one (some cells always do)."""
    from dask_strads._datasets.lasso import alpha_max

    t0 = time.perf_counter()
    if data_cache.get("design") != cell["design"]:
        data_cache.clear()
        gc.collect()
        data_cache["design"] = cell["design"]
        X, y, coef = cell["make"]()
        if order == "C" and isinstance(X, np.ndarray):
            X = np.ascontiguousarray(X)
        data_cache["data"] = X, y, coef
    X, y, _ = data_cache["data"]
    icpt = cell["intercept"] or intercept
    alpha = alpha_max(X, y, fit_intercept=icpt) / cell["ratio"]
    print(f"== {name}: {cell['desc']} (data {time.perf_counter() - t0:.1f} s)", flush=True)
    our_runs: dict = {w: [] for w in clients}
    for client in clients.values():
        # a first small fit compiles the kernels on the workers (not timed)
        with dask.config.set({"dask-strads.cd.min-block-nnz": 1}):  # every worker compiles
            run_ours(X[:, :50], y, alpha, client, tol=1e-3, fit_intercept=icpt)
    # 2 and 1 worker alternate (2, 1, 1, 2, 2, 1, ...): the machine's drift and whatever
    # a fit leaves behind fall on both; the median run of each counts
    order = [w for i in range(repeats) for w in sorted(clients, reverse=i % 2 == 0)]
    for workers in order:
        o = run_ours(X, y, alpha, clients[workers], tol=1e-10, time_limit=budget,
                     fit_intercept=icpt)
        our_runs[workers].append(o)
        print(f"    ours x{workers} wall {o['wall']:.2f} s (setup {o['setup']:.2f} s) "
              f"obj={o['final']:.12g}", flush=True)
    peer_runs = {p: run_peer(p, X, y, alpha, budget, fit_intercept=icpt) for p in peers}
    every = [o for rs in our_runs.values() for o in rs]
    best = min([o["final"] for o in every]
               + [v for o in every for v in o["trajectory"]["objective"]]
               + [r["objective"] for runs in peer_runs.values() for r in runs])
    row = {"cell": name, "desc": cell["desc"], "design": cell["design"],
           "ratio": cell["ratio"], "intercept": icpt, "alpha": alpha, "best": best,
           "shape": list(X.shape), "nnz_X": int(X.nnz) if hasattr(X, "nnz") else int(X.size)}
    ours = {}
    for workers, rs in our_runs.items():
        times = [time_to_target(o["trajectory"].itertuples(index=False), best) for o in rs]
        # runs that never reached the target (NaN) count as the slowest
        median = sorted(range(len(rs)), key=lambda i: (math.isnan(times[i]), times[i]))[
            len(rs) // 2]
        ours[workers] = o = rs[median]
        row[f"ours{workers}"] = times[median]
        row[f"ours{workers}_runs"] = times
        row[f"ours{workers}_setup"] = o["setup"]
        row[f"ours{workers}_final_subopt"] = (o["final"] - best) / abs(best)
        row[f"ours{workers}_profile"] = profile(o["est"])
        row[f"ours{workers}_curve"] = {
            "time": o["trajectory"]["time"].tolist(),
            "subopt": ((o["trajectory"]["objective"] - best) / abs(best)).tolist()}
    for p, runs in peer_runs.items():
        t = time_to_target([(r["time"], r["objective"]) for r in runs], best)
        # a peer that ran out of budget: its time is at least what it spent
        row[p] = t
        row[f"{p}_spent"] = float(sum(r["time"] for r in runs))
        row[f"{p}_curve"] = {"time": [r["time"] for r in runs],
                             "subopt": [(r["objective"] - best) / abs(best) for r in runs]}
    nnz = int(np.count_nonzero(ours[max(ours)]["est"].coef_))
    row["nnz_coef"] = nnz
    return row


def ratios(row: dict) -> dict:
    """ours / scikit-learn, ours / fastest of skglm and celer, 2 workers / 1 worker (NaN
    where a time is missing; a peer without a time spent at least its budget: the ratio
    is then an upper bound, marked by the key ``*_bound``)."""
    ours = row.get("ours2", math.nan)
    out = {}

    def peer_time(p):
        t = row.get(p, math.nan)
        if math.isfinite(t):
            return t, False
        spent = row.get(f"{p}_spent", math.nan)
        return spent, True

    t_sk, sk_bound = peer_time("sklearn")
    out["vs_sklearn"] = ours / t_sk if t_sk else math.nan
    out["vs_sklearn_bound"] = sk_bound
    fast = [peer_time(p) for p in ("skglm", "celer") if p in row]
    if fast:
        t_fast, bound = min(fast)
        out["vs_fastest"] = ours / t_fast if t_fast else math.nan
        out["vs_fastest_bound"] = bound
    out["two_vs_one"] = ours / row["ours1"] if row.get("ours1") else math.nan
    return out


def write_report(rows: list[dict], path_stem: str, command: str) -> None:
    lines = ["# Lasso grid", "",
             f"Command: `{command}`. dask_strads on 2 and on 1 worker process (process "
             "LocalClusters, 1 thread each, X in the client's memory: setup included; "
             "2 and 1 worker alternate, the median of their runs counts); "
             "peers single-threaded, refitted with decreasing tol after one untimed fit. "
             "Times (s) to 1e-6 "
             "relative suboptimality against the best objective any solver reached; "
             "'>T' means the solver did not get there within the T seconds it spent. "
             "Ratios < 1: dask_strads is faster. Targets (cells where scikit-learn needs "
             ">= 1 s): ours <= 0.5x scikit-learn, <= 1.0x the fastest of skglm/celer; 2 "
             "workers never slower than 1.", "",
             "| cell | nnz(b) | ours 2w | ours 1w | sklearn | skglm | celer | /sklearn "
             "| /fastest | 2w/1w | blocks | rounds (gap, phases, Gram) | wait s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def fmt(row, key):
        t = row.get(key, math.nan)
        if math.isfinite(t):
            return f"{t:.2f}"
        spent = row.get(f"{key}_spent")
        return f">{spent:.0f}" if spent is not None else "n/a"

    def fr(v, bound=False):
        return "n/a" if not math.isfinite(v) else (f"<{v:.2f}" if bound else f"{v:.2f}")

    counts = {"target": 0, "sk": 0, "fast": 0, "both": 0, "split": 0, "one": 0}
    for row in rows:
        r = ratios(row)
        prof = row.get("ours2_profile", {})
        t_sk = row.get("sklearn", math.nan)
        is_target = (not math.isfinite(t_sk)) or t_sk >= 1.0
        mark = "" if is_target else " (sklearn < 1 s)"
        if is_target:
            counts["target"] += 1
            ok_sk = r["vs_sklearn"] <= 0.5
            ok_fast = r.get("vs_fastest", math.nan) <= 1.0
            counts["sk"] += ok_sk
            counts["fast"] += ok_fast
            counts["both"] += ok_sk and ok_fast
        # on one block the 2-worker fit does the 1-worker fit's work: 2w/1w is spread there
        if (prof.get("blocks") or 1) > 1:
            counts["split"] += 1
            counts["one"] += r["two_vs_one"] <= 1.0
        lines.append(
            f"| {row['cell']}{mark} | {row.get('nnz_coef', '')} | {fmt(row, 'ours2')} | "
            f"{fmt(row, 'ours1')} | {fmt(row, 'sklearn')} | {fmt(row, 'skglm')} | "
            f"{fmt(row, 'celer')} | {fr(r['vs_sklearn'], r['vs_sklearn_bound'])} | "
            f"{fr(r.get('vs_fastest', math.nan), r.get('vs_fastest_bound', False))} | "
            f"{fr(r['two_vs_one'])} | {prof.get('blocks', '')} | {prof.get('rounds', '')} "
            f"({prof.get('gap_rounds', '')}, {prof.get('phases', '')}, "
            f"{prof.get('gram_phases', '')}) | "
            f"{prof.get('wait_minus_push_s', math.nan):.2f} |")
    lines += ["", f"Target cells: {counts['target']}; ours <= 0.5x scikit-learn on "
              f"{counts['sk']}, <= 1.0x the fastest of skglm/celer on {counts['fast']}, both "
              f"on {counts['both']}. Where the 2-worker fit split X ({counts['split']} "
              f"cells), 2 workers no slower than 1 on {counts['one']}; on the other "
              f"{len(rows) - counts['split']} both fits use one block.", ""]
    with open(path_stem + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(path_stem + ".json", "w") as fh:
        json.dump({"command": command, "rows": rows}, fh, indent=1, default=float)
    print("\n".join(lines), flush=True)
    try:
        plot_heatmap(rows, path_stem + "_heatmap.png")
        plot_curves(rows, path_stem + "_curves.png")
    except ImportError:
        print("matplotlib missing: no plots")


def plot_heatmap(rows, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    designs = list(dict.fromkeys(r["design"] + ("+icpt" if r["intercept"] else "")
                                 for r in rows))
    cols = RATIOS
    Z = np.full((len(designs), len(cols)), np.nan)
    for r in rows:
        i = designs.index(r["design"] + ("+icpt" if r["intercept"] else ""))
        peers = [r.get(p, math.nan) for p in PEERS]
        peers = [t if math.isfinite(t) else r.get(f"{p}_spent", math.nan)
                 for p, t in zip(PEERS, peers)]
        fastest = np.nanmin(peers) if np.isfinite(peers).any() else math.nan
        Z[i, cols.index(r["ratio"])] = r.get("ours2", math.nan) / fastest
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(designs) + 1.5))
    im = ax.imshow(np.log2(Z), cmap="RdYlGn_r", vmin=-3, vmax=3, aspect="auto")
    for i in range(Z.shape[0]):
        for j in range(Z.shape[1]):
            txt = "n/a" if not np.isfinite(Z[i, j]) else f"{Z[i, j]:.2f}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(cols)), [f"alpha_max/{c}" for c in cols], rotation=20)
    ax.set_yticks(range(len(designs)), designs, fontsize=7)
    ax.set_title("dask_strads (2 workers) / fastest peer: time to 1e-6")
    fig.colorbar(im, ax=ax, label="log2 ratio")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_curves(rows, path, n_cells: int = 6) -> None:
    """Suboptimality against time for the cells where ours is furthest behind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def badness(r):
        v = ratios(r).get("vs_fastest", math.nan)
        return v if math.isfinite(v) else 1e9

    hard = sorted(rows, key=badness, reverse=True)[:n_cells]
    cols = 3
    fig, axes = plt.subplots(math.ceil(len(hard) / cols), cols, figsize=(12, 3.2 *
                             math.ceil(len(hard) / cols)), squeeze=False)
    for ax, r in zip(axes.ravel(), hard):
        for key, label in (("ours2", "ours, 2 workers"), ("ours1", "ours, 1 worker"),
                           *((p, p) for p in PEERS)):
            c = r.get(f"{key}_curve")
            if not c or not c["time"]:
                continue
            sub = np.clip(np.asarray(c["subopt"], float), 1e-12, None)
            ax.semilogy(c["time"], sub, marker=".", ms=3, label=label)
        ax.axhline(1e-6, color="grey", ls=":", lw=1)
        ax.set_title(r["cell"], fontsize=8)
        ax.set_xlabel("time (s)")
    for ax in axes.ravel()[len(hard):]:
        ax.axis("off")
    axes[0, 0].set_ylabel("relative suboptimality")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
