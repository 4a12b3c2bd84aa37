"""Does each heuristic of the working-set Lasso earn its place? Each one switched off in
turn, on problems of the quick grid, counted in work that does not depend on the
machine's load: entries of X read (sweeps of the working sets plus one pass over X per
gap round) and rounds, besides the time.

Runs the program in this process (:func:`dask_strads.engine.run_in_process`) with two
column blocks whose phases may exchange, as on two workers.

    python bench/lasso_ablation.py            # writes bench/results/lasso_ablation.md
    python bench/lasso_ablation.py --variants "all on" "no Anderson" --problems text \
        --repeats 3 --out -                   # an A/B of two variants, interleaved

With ``--repeats``, the variants of a problem run in turn, repetition after repetition
(the order reversed every other repetition), and the time is each variant's median.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import dask
import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from dask_strads._datasets.lasso import (  # noqa: E402
    alpha_max,
    make_correlated_regression,
    make_sparse_regression,
    make_text_regression,
)
from dask_strads.cd.program import CDProgram  # noqa: E402
from dask_strads.engine import run_in_process  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"

PROBLEMS = {
    "dense500x5000_rho0.5": lambda: make_correlated_regression(500, 5000, n_informative=50,
                                                               correlation=0.5)[:2],
    "dense500x5000_rho0.9": lambda: make_correlated_regression(500, 5000, n_informative=50,
                                                               correlation=0.9)[:2],
    "sparse5000x20000_d1e-3": lambda: make_sparse_regression(5000, 20000, density=1e-3,
                                                             n_informative=50)[:2],
    "text5000x20000": lambda: make_text_regression(5000, 20000, doc_length=40,
                                                   n_informative=50)[:2],
}
RATIOS = (100, 1000)

# each variant: what it switches off, as program arguments and dask settings
VARIANTS = {
    "all on": ({}, {}),
    "no Anderson": ({}, {"dask-strads.cd.anderson": 0}),
    "no screening": ({"screening": False}, {}),
    "no working-set growth (x1.2)": ({}, {"dask-strads.cd.ws-growth": 1.2}),
    "solo phases only": ({}, {"dask-strads.cd.exchange-seconds": 1e3}),
    "peer phases only": ({}, {"dask-strads.cd.exchange-seconds": 0.0,
                              "dask-strads.cd.bandwidth": 1e-3}),
}


def run(X, y, alpha, kwargs, settings) -> dict:
    n, p = X.shape
    yc = y - y.mean()
    starts = np.array([0, p // 2, p])
    Xb = X.tocsc() if sp.issparse(X) else np.asfortranarray(X)
    shards = {b: Xb[:, starts[b]:starts[b + 1]] for b in range(2)}
    with dask.config.set(settings):
        program = CDProgram(yc, starts, alpha * n, 0.0, 1e-8 * float(yc @ yc),
                            fit_intercept=True, **kwargs)
        t0 = time.perf_counter()
        res = run_in_process(program, shards, can_exchange=True)
        seconds = time.perf_counter() - t0
    state = res.state
    nnz_x = X.nnz if sp.issparse(X) else X.size
    per_update = (X.nnz / p) if sp.issparse(X) else n  # entries of a column, on average
    work = state.updates * per_update + state.gap_rounds * nnz_x
    return {"seconds": seconds, "work": work, "rounds": res.rounds,
            "gap_rounds": state.gap_rounds, "stop": state.stop,
            "peer_phases": state.mode_counts.get("peer", 0),
            "objective": state.primal / n}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                        default=list(VARIANTS), help="the first is the reference")
    parser.add_argument("--problems", nargs="+", default=None,
                        help="run the problems whose name contains one of these")
    parser.add_argument("--ratios", nargs="+", type=int, default=list(RATIOS),
                        help="alpha = alpha_max / ratio")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "lasso_ablation.md"),
                        help="the table's file; '-': print only")
    args = parser.parse_args(argv)
    from dask_strads.cd import kernels, logistic_kernels, steps

    kernels.warm_up()
    steps.warm_up()
    logistic_kernels.warm_up()
    problems = {name: make for name, make in PROBLEMS.items()
                if args.problems is None or any(k in name for k in args.problems)}
    rows = []
    for name, make in problems.items():
        X, y = make()
        for ratio in args.ratios:
            alpha = alpha_max(X, y) / ratio
            runs = {v: [] for v in args.variants}
            for rep in range(args.repeats):
                order = args.variants if rep % 2 == 0 else args.variants[::-1]
                for variant in order:
                    kwargs, settings = VARIANTS[variant]
                    runs[variant].append(run(X, y, alpha, kwargs, settings))
            base = None
            for variant in args.variants:
                r = dict(runs[variant][-1])
                r["seconds"] = statistics.median(x["seconds"] for x in runs[variant])
                r["all_seconds"] = [x["seconds"] for x in runs[variant]]
                base = base or r
                r.update(problem=f"{name}_a{ratio}", variant=variant,
                         work_ratio=r["work"] / base["work"],
                         time_ratio=r["seconds"] / base["seconds"])
                rows.append(r)
                times = " ".join(f"{t:.3f}" for t in r["all_seconds"])
                works = sorted({f"{x['work']:.4g}" for x in runs[variant]})
                print(f"{name}_a{ratio:<5} {variant:28s} {r['seconds']:7.3f} s ({times})  "
                      f"work {'/'.join(works)} ({r['work_ratio']:.2f}x)  time "
                      f"{r['time_ratio']:.2f}x  rounds {r['rounds']:5d}  "
                      f"peer phases {r['peer_phases']}  {r['stop']}",
                      flush=True)
    if args.out != "-":
        write(rows, args.variants, pathlib.Path(args.out))


def write(rows, variants, path: pathlib.Path) -> None:
    lines = ["# Lasso: what each heuristic buys", "",
             "`python bench/lasso_ablation.py`: the working-set program in one process, two "
             "column blocks that may exchange, tol 1e-8; each row switches one heuristic off. "
             "Work: entries of X read (working-set sweeps and one pass per gap round), "
             "independent of the machine's load; time: wall seconds of this run (the machine "
             "was shared). Ratios against 'all on' on the same problem; > 1: switching it "
             "off costs.", "",
             "| problem | variant | work ratio | time ratio | rounds | gap rounds | stop |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['problem']} | {r['variant']} | {r['work_ratio']:.2f} | "
                     f"{r['time_ratio']:.2f} | {r['rounds']} | {r['gap_rounds']} | "
                     f"{r['stop']} |")
    lines += ["", "## Best gain of each heuristic over the problems", "",
              "| heuristic switched off | largest work ratio | largest time ratio |",
              "|---|---|---|"]
    for variant in variants[1:]:
        mine = [r for r in rows if r["variant"] == variant]
        lines.append(f"| {variant} | {max(r['work_ratio'] for r in mine):.2f} | "
                     f"{max(r['time_ratio'] for r in mine):.2f} |")
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
