"""Gram phases on and off (``dask-strads.cd.gram-max-bytes`` 0), grid cells, one sitting.

For each cell a process LocalCluster of ``--workers`` workers (1 thread each, X in the
client's memory) fits the Lasso to ``tol=1e-10``, Gram phases on and off in turn,
``--repeats`` times each, after one untimed fit. Reported, as medians: the time to 1e-6
relative suboptimality against the best objective any of the cell's fits reached (read
from ``history_``, as the grid reads it) and the time of the whole fit, with the
rounds and the Gram phases of the last fit of each.

    python bench/lasso_gram.py --cells dense10000x2000_rho0.9_a1000 --workers 2 \\
        --repeats 3 --stem lasso_gram
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import time

import dask

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
SETTINGS = {"on": {}, "off": {"dask-strads.cd.gram-max-bytes": 0}}


def run_cell(cell: dict, client, repeats: int) -> dict:
    from dask_strads import Lasso
    from dask_strads._datasets.lasso import alpha_max

    X, y = cell["make"]()[:2]
    alpha = alpha_max(X, y, fit_intercept=cell["intercept"]) / cell["ratio"]
    kw = dict(alpha=alpha, fit_intercept=cell["intercept"], client=client, progress=False)
    Lasso(tol=1e-4, **kw).fit(X, y)
    runs = []
    for rep in range(repeats):
        modes = ("on", "off") if rep % 2 == 0 else ("off", "on")
        for mode in modes:
            with dask.config.set(SETTINGS[mode]):
                t0 = time.perf_counter()
                est = Lasso(tol=1e-10, **kw).fit(X, y)
                runs.append((mode, est.history_, time.perf_counter() - t0))
    best = min(float(h["objective"].min()) for _, h, _ in runs)
    out = {}
    for mode in SETTINGS:
        mine = [(h, total) for m, h, total in runs if m == mode]
        to_target = []
        for h, _ in mine:
            ok = h[(h["objective"] - best) <= 1e-6 * abs(best)]
            to_target.append(float(ok["time"].iloc[0]) if len(ok) else float("nan"))
        last = mine[-1][0].iloc[-1]
        out[mode] = {"to_1e-6": statistics.median(to_target),
                     "whole": statistics.median(total for _, total in mine),
                     "rounds": len(mine[-1][0]), "gram_phases": int(last["gram_phases"])}
    return out


def main(argv=None) -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from distributed import Client, LocalCluster
    from lasso_grid import cell_parser, chosen_cells

    ap = cell_parser(__doc__.splitlines()[0], "lasso_gram")
    args = ap.parse_args(argv)
    chosen = chosen_cells(ap, args.cells)
    rows = []
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True) as lc, \
            Client(lc) as client:
        for name, cell in chosen.items():
            res = run_cell(cell, client, args.repeats)
            rows.append((name, res))
            on, off = res["on"], res["off"]
            print(name, {k: round(v, 3) for k, v in on.items()},
                  {k: round(v, 3) for k, v in off.items()}, flush=True)
    lines = [f"Command: `python bench/lasso_gram.py --cells {args.cells} --workers "
             f"{args.workers} --repeats {args.repeats} --stem {args.stem}`. Medians of "
             f"{args.repeats} fits each, on and off alternating; times (s) to 1e-6 relative "
             "suboptimality and of the whole fit to tol 1e-10.", "",
             "| cell | to 1e-6, on | off | on/off | whole fit, on | off | on/off "
             "| rounds on (Gram) | rounds off |", "|---|---|---|---|---|---|---|---|---|"]
    for name, res in rows:
        on, off = res["on"], res["off"]
        lines.append(
            f"| {name} | {on['to_1e-6']:.2f} | {off['to_1e-6']:.2f} | "
            f"{on['to_1e-6'] / off['to_1e-6']:.2f} | {on['whole']:.2f} | {off['whole']:.2f} "
            f"| {on['whole'] / off['whole']:.2f} | {on['rounds']} ({on['gram_phases']}) | "
            f"{off['rounds']} |")
    path = RESULTS / f"{args.stem}.md"
    path.write_text("# Gram phases on and off\n\n" + "\n".join(lines) + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
