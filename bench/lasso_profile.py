"""Where a Lasso fit's time goes on its workers, for grid cells, one sitting.

For each grid cell (``bench/lasso_grid.py``) a process LocalCluster of ``--workers``
workers (1 thread each, X in the client's memory) fits the Lasso to ``tol=1e-10``
``--repeats`` times after one untimed fit, then as many times again with every worker's
pushes under ``cProfile`` (which slows them). Reported: the time to 1e-6 relative
suboptimality (setup included, as the grid times it, against the best objective of the
cell's fits) and of the whole fit, the rounds, and per worker the seconds per profiled
fit of the functions that took most (their own time: BLAS inside ``gram.rows`` counts
there; ``acquire`` is waiting for the other blocks).

``--oracle`` also fits, interleaved with the plain fits, with the working sets' candidates
ranked by the solution (those in its support first): what a perfect ranking of the
candidates would buy, an upper bound for any rule that chooses them better. ``--set
KEY=VALUE`` (repeatable) also fits, interleaved likewise, with those dask settings (set
in the client, which reads them all): an A/B of a setting on the cells;
``--no-profile`` skips the profiled fits.

    python bench/lasso_profile.py --cells dense10000x2000_rho0.9_a1000 --repeats 5 \\
        --oracle --stem lasso_profile_10k
    python bench/lasso_profile.py --cells dense10000x2000_rho0.9_a100 --repeats 5 \\
        --set dask-strads.cd.gram-max-bytes=0 --no-profile --stem lasso_no_gram
"""

from __future__ import annotations

import datetime
import pathlib
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
TOP = 12


def start_profiling() -> None:
    """On a worker: every push of a coordinate-descent fit under one profiler from now."""
    import cProfile

    from dask_strads.cd import program

    if getattr(program.CDProgram.push, "profiler", None) is not None:
        return
    push = program.CDProgram.push

    def profiled_push(self, *args, **kwargs):
        profiler = profiled_push.profiler  # collect_profile hands it a fresh one
        profiler.enable()
        try:
            return push(self, *args, **kwargs)
        finally:
            profiler.disable()

    profiled_push.profiler = cProfile.Profile()
    profiled_push.unprofiled = push
    program.CDProgram.push = profiled_push


def stop_profiling() -> None:
    """On a worker: pushes as they were."""
    from dask_strads.cd import program

    program.CDProgram.push = getattr(program.CDProgram.push, "unprofiled",
                                     program.CDProgram.push)


def collect_profile() -> list:
    """On a worker: ``(function, calls, own seconds)`` of the pushes since the last call,
    most time first; the profiler starts again."""
    import cProfile
    import pstats

    from dask_strads.cd import program

    profiler = program.CDProgram.push.profiler
    program.CDProgram.push.profiler = cProfile.Profile()
    try:
        stats = pstats.Stats(profiler).stats
    except TypeError:  # nothing profiled
        return []
    rows = [(f"{pathlib.Path(file).name}:{name}" if file != "~" else name, calls, own)
            for (file, _, name), (calls, _, own, _, _) in stats.items()]
    return sorted(rows, key=lambda r: -r[2])


class Oracle:
    """Candidates of the working sets in the support of ``solution`` first (the client
    chooses working sets; its program keeps the blocks' first columns)."""

    def __init__(self, solution: np.ndarray):
        self.support = np.flatnonzero(solution)
        self.starts = None

    def __enter__(self):
        from dask_strads.cd import program, working_set

        self.choose, self.init_state = working_set.choose, program.CDProgram.init_state
        oracle = self

        def init_state(prog, summaries):
            oracle.starts = prog.starts
            return oracle.init_state(prog, summaries)

        def choose(support, candidates, size):
            lift = 1.0 + max((float(np.max(s, initial=0.0)) for _, s in candidates),
                             default=0.0)
            ranked = [(ids, np.where(np.isin(ids + oracle.starts[b], oracle.support),
                                     scores + lift, scores))
                      for b, (ids, scores) in enumerate(candidates)]
            return oracle.choose(support, ranked, size)

        program.CDProgram.init_state = init_state
        working_set.choose = choose
        return self

    def __exit__(self, *exc):
        from dask_strads.cd import program, working_set

        working_set.choose, program.CDProgram.init_state = self.choose, self.init_state


def fit(X, y, alpha, intercept, client):
    from lasso_solvers import run_ours

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_ours(X, y, alpha, client, tol=1e-10, fit_intercept=intercept)


def run_cell(cell: dict, client, repeats: int, oracle: bool, settings: dict | None = None,
             profile: bool = True) -> dict:
    """Fits of ``cell``: ``repeats`` plain ones, as many with the oracle's ranking
    (``oracle``) and with the dask ``settings`` (if any), interleaved; then, with
    ``profile``, ``repeats`` profiled plain fits."""
    import dask
    from lasso_solvers import time_to_target

    from dask_strads._datasets.lasso import alpha_max

    X, y = cell["make"]()[:2]
    alpha = alpha_max(X, y, fit_intercept=cell["intercept"]) / cell["ratio"]
    first = fit(X, y, alpha, cell["intercept"], client)  # untimed: kernels, pages
    kinds = ("plain",) + (("oracle",) if oracle else ()) + (("settings",) if settings else ())
    runs = {k: [] for k in kinds}
    for rep in range(repeats):
        for kind in kinds if rep % 2 == 0 else kinds[::-1]:
            if kind == "oracle":
                with Oracle(first["est"].coef_):
                    runs[kind].append(fit(X, y, alpha, cell["intercept"], client))
            else:
                with dask.config.set(settings if kind == "settings" else {}):
                    runs[kind].append(fit(X, y, alpha, cell["intercept"], client))
    # profiled apart: the profiler slows the pushes
    profiles = profiled_fits(X, y, alpha, cell["intercept"], client, repeats) if profile else {}
    best = min(min(r["final"] for r in rs) for rs in runs.values())
    best = min(best, first["final"])
    out = {}
    for kind, rs in runs.items():
        to_target = [time_to_target(zip(r["trajectory"]["time"], r["trajectory"]["objective"]),
                                    best) for r in rs]
        h = rs[-1]["est"].history_
        out[kind] = {"to_1e-6": statistics.median(to_target),
                     "each": to_target,
                     "whole": statistics.median(r["wall"] for r in rs),
                     "setup": statistics.median(r["setup"] for r in rs),
                     "rounds": len(h), "gram_phases": int(h["gram_phases"].iloc[-1]),
                     "ws": [int(w) for w in h["ws_size"]]}
    out["profiles"] = {w: sorted(((name, c / repeats, s / repeats)
                                  for name, (c, s) in p.items()), key=lambda r: -r[2])
                       for w, p in profiles.items()}
    return out


def profiled_fits(X, y, alpha, intercept, client, repeats: int) -> dict:
    """``worker -> {function: [calls, own seconds]}`` summed over ``repeats`` fits with
    every push profiled."""
    profiles: dict = {}
    client.run(start_profiling)
    try:
        for _ in range(repeats):
            fit(X, y, alpha, intercept, client)
            for worker, rows in client.run(collect_profile).items():
                mine = profiles.setdefault(worker, {})
                for name, calls, own in rows:
                    total = mine.setdefault(name, [0, 0.0])
                    total[0] += calls
                    total[1] += own
    finally:
        client.run(stop_profiling)
    return profiles


def _fits(kind: str, res: dict) -> str:
    """One kind of fits in a sentence: their median and each time to 1e-6, and the
    last one's phases."""
    r = res[kind]
    each = ", ".join(f"{t:.3f}" for t in r["each"])
    ratio = "" if kind == "plain" else \
        f" ({r['to_1e-6'] / res['plain']['to_1e-6']:.2f}x the plain fits)"
    return (f"{r['to_1e-6']:.3f} s to 1e-6{ratio} (each: {each}; setup {r['setup']:.3f} s), "
            f"{r['whole']:.3f} s in all; the last: {r['rounds']} rounds, {r['gram_phases']} "
            f"phases on a Gram matrix, working sets {r['ws']}.")


def report(name: str, res: dict, settings: dict | None = None) -> list:
    lines = [f"## {name}", "", f"Plain fits: {_fits('plain', res)}"]
    if "oracle" in res:
        lines += ["", f"Oracle ranking: {_fits('oracle', res)}"]
    if "settings" in res:
        named = ", ".join(f"`{k}: {v}`" for k, v in settings.items())
        lines += ["", f"With {named}: {_fits('settings', res)}"]
    for i, (_, rows) in enumerate(sorted(res["profiles"].items())):
        total = sum(s for _, _, s in rows)
        if not rows:
            lines += ["", f"Worker {i}: no pushes (it holds no block)."]
            continue
        lines += ["", f"Worker {i}: {total:.3f} s of pushes per fit, own time by function:",
                  "", "| function | calls per fit | s per fit | share |", "|---|---|---|---|"]
        lines += [f"| `{fn}` | {c:.0f} | {s:.4f} | {s / total:.0%} |" for fn, c, s in rows[:TOP]]
    return lines + [""]


def parse_settings(ap, pairs: list) -> dict:
    """``KEY=VALUE`` pairs as dask settings (values read as YAML); an unknown key or a
    pair without ``=`` is the parser's error."""
    import dask
    import yaml

    import dask_strads  # noqa: F401  (its defaults are dask settings)

    settings = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        key = key.strip()
        if not eq:
            ap.error(f"--set: expected KEY=VALUE, got {pair!r}")
        try:
            dask.config.get(key)
        except KeyError:
            ap.error(f"--set: no dask setting {key!r}")
        settings[key] = yaml.safe_load(value)
    return settings


def main(argv=None) -> None:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from distributed import Client, LocalCluster
    from lasso_grid import cell_parser, chosen_cells

    ap = cell_parser(__doc__.splitlines()[0], "lasso_profile")
    ap.add_argument("--oracle", action="store_true",
                    help="also fit with candidates ranked by the solution")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="also fit with this dask setting (repeatable)")
    ap.add_argument("--no-profile", action="store_true", help="no profiled fits")
    args = ap.parse_args(argv)
    chosen = chosen_cells(ap, args.cells)
    settings = parse_settings(ap, args.set)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=RESULTS.parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python bench/lasso_profile.py", *(argv if argv is not None
                                                          else sys.argv[1:])])
    lines = [f"Command: `{command}` ({started}, code of {commit}). Medians of "
             f"{args.repeats} fits of each kind, interleaved"
             + ("." if args.no_profile else f"; the profiles are of {args.repeats} more "
                                             "plain fits, per fit."), ""]
    t0 = time.perf_counter()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True) as lc, \
            Client(lc) as client:
        for name, cell in chosen.items():
            res = run_cell(cell, client, args.repeats, args.oracle, settings,
                           profile=not args.no_profile)
            lines += report(name, res, settings)
            print("\n".join(report(name, res, settings)), flush=True)
    path = RESULTS / f"{args.stem}.md"
    title = "Lasso fits of grid cells, kind against kind" if args.no_profile \
        else "Where a Lasso fit's time goes"
    path.write_text(f"# {title}\n\n" + "\n".join(lines))
    print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
