"""Scaling of the STRADS rounds with the number of workers (issue 35).

For N = 1, 2, 4, 8, 16 worker processes (one thread each; on this 2-core machine more
workers than cores, which is fine for what is measured: the coordination, not the
speed of the kernels) this runs, on one cluster per N:

``sleep-tasks`` / ``sleep-direct``
    the engine with pushes that only sleep (10 ms, one block per worker, staleness 0)
    over each transport: the coordination overhead share ``1 - 10 ms / round``;
``sleep-reduce``
    the same pushes, each then summing a 2000 x 2 float64 array with the others worker
    to worker (``all_reduce``, as matrix factorisation does): the workers' CPU per round
    calibrates the cost of an exchange message;
``sleep-carry``
    the same pushes, each with a small carried block that rotates over the blocks as
    LDA's vocabulary blocks do (fetched from the worker that made it);
``lasso`` / ``lda`` / ``mf`` ``-strong`` and ``-weak``
    each model on a fixed problem (strong scaling) and on one that grows with N
    (weak scaling: N times the rows / documents / samples of the N = 1 problem).

Per run and per round: the client's CPU in ``schedule`` and in ``pull`` (thread CPU
time of the calls), the client process's CPU in total (its event loop's messaging
included), the bytes the client wrote to and read from its TCP comms, the scheduler
process's CPU, the workers' idle share (``1 - sum of push times / (N * wall)``) and
CPU share, and the round's wall time. The scheduler and the workers run in their own
processes (``SubprocessCluster``); their CPU clocks (``time.process_time``) are read
by one message each at the start and the end of the rounds. Everything is counted
from the first ``schedule`` to the last ``pull`` (set-up and the final gather of
results are left out).

The machine is shared: wall times are noisy, CPU times much less so (prefer those).

Run: ``python bench/scaling.py [--quick] [--workers 1 2 4 8 16] [--cases ...]``,
then ``python bench/scaling.py --report`` to redraw ``bench/results/scaling.md`` and
its plots from ``bench/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import dask
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# bench/lda.py would shadow the `lda` package; engine_overhead is imported from here
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))
RESULTS = HERE / "results"
SLEEP = 0.010

CASES = ("sleep-tasks", "sleep-direct", "sleep-reduce", "sleep-carry", "lasso-strong",
         "lasso-weak", "lda-strong",
         "lda-weak", "mf-strong", "mf-weak")


# ----------------------------------------------------------------- instrumentation
class Probe:
    """Counters of the client process: patched into its TCP comms and into the
    programs' client-side methods. One fit at a time."""

    def __init__(self):
        self.bytes_out = 0
        self.bytes_in = 0
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.schedule_cpu = 0.0
        self.pull_cpu = 0.0
        self.n_schedule = 0
        self.n_pull = 0
        self.push_elapsed = 0.0
        self.n_push = 0
        self.start = None
        self.end = None

    async def snapshot(self, client):
        """Clocks of every process of the fit, read in the client's event loop (the
        scheduler's and the workers' process_time come by one message each: /proc's
        10 ms ticks are too coarse for rounds of a few ms)."""
        sched = await client.run_on_scheduler(time.process_time, asynchronous=True)
        workers = await client.run(time.process_time, asynchronous=True)
        return {"wall": time.perf_counter(), "client_cpu": time.process_time(),
                "sched_cpu": sched, "workers_cpu": sum(workers.values()),
                "each_worker_cpu": workers,
                "bytes_out": self.bytes_out, "bytes_in": self.bytes_in}


PROBE = Probe()


def install(programs):
    """Patch the client process: TCP byte counters, CPU clocks around the programs'
    ``schedule`` / ``pull``, the engine's push results (per-worker push time) and the
    end of its rounds. Bench-only: touches private engine names."""
    import distributed.comm.tcp as tcp

    from dask_strads.engine import loop

    write, read_rw, read = tcp.TCP.write, tcp.read_bytes_rw, tcp.TCP.read

    async def counted_write(self, msg, *a, **k):
        n = await write(self, msg, *a, **k)
        PROBE.bytes_out += n + 8
        return n

    async def counted_read_rw(stream, n):
        PROBE.bytes_in += n
        return await read_rw(stream, n)

    async def counted_read(self, *a, **k):
        PROBE.bytes_in += 8  # the length prefix
        return await read(self, *a, **k)

    tcp.TCP.write, tcp.read_bytes_rw, tcp.TCP.read = counted_write, counted_read_rw, counted_read

    for cls in programs:
        schedule, pull = cls.schedule, cls.pull

        def timed_schedule(self, state, round, _f=schedule):
            t0 = time.thread_time()
            try:
                return _f(self, state, round)
            finally:
                PROBE.schedule_cpu += time.thread_time() - t0
                PROBE.n_schedule += 1

        def timed_pull(self, state, partials, plan, _f=pull):
            t0 = time.thread_time()
            try:
                return _f(self, state, partials, plan)
            finally:
                PROBE.pull_cpu += time.thread_time() - t0
                PROBE.n_pull += 1

        # a subclass's inherited method is timed once, on the class that defines it
        if "schedule" in vars(cls):
            cls.schedule = timed_schedule
        if "pull" in vars(cls):
            cls.pull = timed_pull

    wait = loop._Runner._wait

    async def timed_wait(self, awaitables, _f=wait):
        results = await _f(self, awaitables)
        for r in results:
            if isinstance(r, dict) and r.get("elapsed") is not None:
                PROBE.push_elapsed += r["elapsed"]
                PROBE.n_push += 1
        return results

    init, block_results = loop._Runner._init_resilient, loop._Runner._block_results

    async def started(self, *a, _f=init, **k):
        out = await _f(self, *a, **k)
        PROBE.start = await PROBE.snapshot(self.client)
        return out

    async def ended(self, _f=block_results):
        if PROBE.end is None:
            PROBE.end = await PROBE.snapshot(self.client)
        return await _f(self)

    loop._Runner._wait = timed_wait
    loop._Runner._init_resilient, loop._Runner._block_results = started, ended


# ----------------------------------------------------------------- problems
def _lasso_problem(n_samples, n_features):
    from dask_strads.datasets import alpha_max, make_sparse_regression
    X, y, _ = make_sparse_regression(n_samples, n_features, density=0.01, n_informative=50,
                                     random_state=0)
    return X, y, alpha_max(X, y) / 20


def _lda_problem(n_docs):
    from dask_strads.datasets import make_lda_corpus
    counts, _ = make_lda_corpus(n_docs, 5000, 20, doc_length=100, zipf=1.0, random_state=0)
    return counts


def _mf_problem(n_rows):
    from dask_strads.datasets import make_ratings
    return make_ratings(n_rows, 2000, rank=10, n_observed=40 * n_rows, random_state=0)


def sizes(quick):
    s = 2 if quick else 1
    return {"lasso": (2000, 80000 // s), "lasso_weak": (2000, 10000 // s),
            "lda": 8000 // s, "lda_weak": 1000 // s,
            "mf": 32000 // s, "mf_weak": 4000 // s, "sleep_rounds": 200 // s}


def run_case(client, case, n, cfg):
    from engine_overhead import ReducingSleep, RotatingSleep, TimedPush

    from dask_strads import LDA, Lasso, MatrixFactorization
    from dask_strads.engine import run

    model, kind = case.split("-")
    info = {}
    PROBE.reset()
    names = sorted(w["name"] for w in client.scheduler_info(n_workers=-1)["workers"].values())
    t0 = time.perf_counter()
    if model == "sleep":
        program = {"reduce": ReducingSleep, "carry": RotatingSleep}.get(kind, TimedPush)(SLEEP)
        res = run(program, dict.fromkeys(range(n)), client,
                  max_rounds=cfg["sleep_rounds"], staleness=0,
                  transport="direct" if kind in ("reduce", "carry") else kind,
                  progress=False, placement={b: names[b] for b in range(n)})
        rounds = res.n_rounds
        info["problem"] = f"{n} blocks, {SLEEP * 1e3:g} ms pushes"
    elif model == "lasso":
        n_samples, p = cfg["lasso"] if kind == "strong" else cfg["lasso_weak"]
        if kind == "weak":
            p *= n
        X, y, alpha = _lasso_problem(n_samples, p)
        est = Lasso(alpha=alpha, tol=1e-6, max_iter=50, client=client, progress=False)
        t0 = time.perf_counter()
        # one column block per worker, however small the problem: coordination is measured
        with dask.config.set({"dask-strads.cd.min-block-nnz": 1}):
            est.fit(X, y)
        rounds = len(est.history_)
        info["problem"] = f"{n_samples} x {p}, nnz {X.nnz}"
        info["n_blocks"] = int(getattr(est, "n_blocks_", n))
        info["n_blocks_source"] = "n_blocks_" if hasattr(est, "n_blocks_") else "workers"
        info["nonzeros"] = int(np.count_nonzero(est.coef_))
    elif model == "lda":
        n_docs = cfg["lda"] if kind == "strong" else cfg["lda_weak"] * n
        counts = _lda_problem(n_docs)
        est = LDA(n_components=50, max_iter=4, random_state=0, client=client)
        t0 = time.perf_counter()
        est.fit(counts)
        rounds = PROBE.n_pull
        info["problem"] = f"{n_docs} docs, V 5000, K 50, {int(counts.sum())} tokens"
    else:
        n_rows = cfg["mf"] if kind == "strong" else cfg["mf_weak"] * n
        data = _mf_problem(n_rows)
        train = data.train if hasattr(data, "train") else data[0]
        est = MatrixFactorization(n_components=10, alpha=0.1, max_iter=2, inner_iter=3,
                                  random_state=0, client=client, progress=False)
        t0 = time.perf_counter()
        est.fit(train)
        rounds = len(est.history_)
        info["problem"] = f"{n_rows} x 2000, nnz {train.nnz}, rank 10"
    fit_wall = time.perf_counter() - t0
    a, b = PROBE.start, PROBE.end
    wall = b["wall"] - a["wall"]
    rounds = max(PROBE.n_pull, 1)
    row = dict(case=case, workers=n, rounds=rounds, fit_wall=fit_wall, rounds_wall=wall,
               round_ms=1e3 * wall / rounds,
               schedule_cpu_ms=1e3 * PROBE.schedule_cpu / max(PROBE.n_schedule, 1),
               pull_cpu_ms=1e3 * PROBE.pull_cpu / rounds,
               client_cpu_ms=1e3 * (b["client_cpu"] - a["client_cpu"]) / rounds,
               sched_cpu_ms=1e3 * (b["sched_cpu"] - a["sched_cpu"]) / rounds,
               kb_out=(b["bytes_out"] - a["bytes_out"]) / rounds / 1e3,
               kb_in=(b["bytes_in"] - a["bytes_in"]) / rounds / 1e3,
               push_ms=1e3 * PROBE.push_elapsed / max(PROBE.n_push, 1),
               idle=1 - PROBE.push_elapsed / (n * wall),
               worker_cpu=(b["workers_cpu"] - a["workers_cpu"]) / (n * wall),
               busiest_worker_cpu_ms=1e3 * max(
                   b["each_worker_cpu"][w] - a["each_worker_cpu"].get(w, b["each_worker_cpu"][w])
                   for w in b["each_worker_cpu"]) / rounds,
               load=os.getloadavg()[0], **info)
    if model == "sleep":
        row["overhead"] = 1 - SLEEP / (wall / rounds)
    return row


def prepare_workers_path():
    """The workers import the sleep program from bench/ (by reference, unpatched)."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                  if p])
    sys.path.insert(1, str(HERE))


@contextlib.contextmanager
def subprocess_client(n: int):
    """A client of ``n`` worker processes (one thread each) on this machine."""
    from distributed import Client
    from distributed.deploy.subprocess import SubprocessCluster

    with SubprocessCluster(n_workers=n, threads_per_worker=1, dashboard_address=None,
                           worker_class="distributed.Worker",
                           worker_kwargs={"memory_limit": "1GB"}) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(n, timeout=300)
        yield client


def measure(args):
    from dask_strads.cd.program import CDProgram
    from dask_strads.lda.program import LDAProgram
    from dask_strads.mf.program import MFProgram

    prepare_workers_path()
    from engine_overhead import ReducingSleep, RotatingSleep, TimedPush
    install([CDProgram, LDAProgram, MFProgram, TimedPush, ReducingSleep, RotatingSleep])
    cfg = sizes(args.quick)
    out = RESULTS / _name(args)
    rows = json.loads(out.read_text())["rows"] if out.exists() and args.append else []
    for n in args.workers:
        with subprocess_client(n) as client:
            for case in args.cases:
                try:
                    row = run_case(client, case, n, cfg)
                except Exception as exc:  # record and go on: one case must not lose the rest
                    row = dict(case=case, workers=n, error=repr(exc))
                rows = [r for r in rows if (r["case"], r["workers"]) != (case, n)] + [row]
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                  for k, v in row.items()}), flush=True)
                out.write_text(json.dumps({"command": " ".join(sys.argv), "cfg": cfg,
                                           "rows": rows}, indent=1))
    return out


# ----------------------------------------------------------------- report
COLS = [("workers", "N", "{}"), ("rounds", "rounds", "{}"), ("round_ms", "ms/round", "{:.1f}"),
        ("schedule_cpu_ms", "schedule CPU ms", "{:.3f}"),
        ("pull_cpu_ms", "pull CPU ms", "{:.3f}"), ("client_cpu_ms", "client CPU ms", "{:.2f}"),
        ("sched_cpu_ms", "scheduler CPU ms", "{:.2f}"),
        ("kb_out", "kB out", "{:.1f}"), ("kb_in", "kB in", "{:.1f}"),
        ("push_ms", "push ms", "{:.1f}"), ("idle", "worker idle", "{:.0%}"),
        ("worker_cpu", "worker CPU", "{:.0%}"), ("load", "load", "{:.1f}")]


def table(rows, case):
    rs = sorted((r for r in rows if r["case"] == case and "error" not in r),
                key=lambda r: r["workers"])
    cols = COLS + ([("overhead", "overhead share", "{:.1%}")] if case.startswith("sleep") else [])
    lines = ["| " + " | ".join(c[1] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rs:
        lines.append("| " + " | ".join(c[2].format(r[c[0]]) for c in cols) + " |")
    errs = [r for r in rows if r["case"] == case and "error" in r]
    for r in errs:
        lines.append(f"\nN = {r['workers']}: failed: `{r['error']}`")
    problems = sorted({(r["workers"], r.get("problem", "")) for r in rs})
    text = "\n".join(lines)
    if rs and "problem" in rs[0]:
        text += "\n\nProblem: " + "; ".join(f"N={w}: {p}" for w, p in problems)
        if "n_blocks" in rs[0]:
            text += "; column blocks: " + ", ".join(f"N={r['workers']}: {r['n_blocks']}"
                                                    for r in rs)
            text += f" (from {rs[0]['n_blocks_source']})"
    return text


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [("client_cpu_ms", "client CPU / round (ms)"),
               ("sched_cpu_ms", "scheduler CPU / round (ms)"),
               ("kb_in", "kB into the client / round"), ("round_ms", "round wall (ms)")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(18, 4.2))
    for ax, (m, label) in zip(axes, metrics):
        for case in CASES:
            rs = sorted((r for r in rows if r["case"] == case and "error" not in r),
                        key=lambda r: r["workers"])
            if rs:
                ax.plot([r["workers"] for r in rs], [max(r[m], 1e-3) for r in rs], "o-",
                        label=case, lw=1.2, ms=3)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers N")
        ax.set_title(label, fontsize=10)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def report(path: Path):
    data = json.loads(path.read_text())
    rows = data["rows"]
    md = path.with_suffix(".md")
    png = path.with_suffix(".png")
    plot(rows, png)
    parts = [f"# Scaling with the number of workers (issue 35)\n\nCommand: `{data['command']}`; "
             f"{os.cpu_count()} cores shared with other sessions; sizes {data['cfg']}. "
             "Per-round values are means over the rounds of one fit (first schedule to last "
             "pull). CPU columns are process/thread CPU time, steadier than the wall columns "
             "on this loaded machine.\n", f"![scaling]({png.name})\n"]
    for case in CASES:
        if any(r["case"] == case for r in rows):
            parts.append(f"## {case}\n\n{table(rows, case)}\n")
    md.write_text("\n".join(parts))
    print(f"wrote {md} and {png}")


def _name(args) -> str:
    return "scaling" + ("_quick" if args.quick else "") + \
        (f"_{args.label}" if args.label else "") + ".json"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller problems")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--append", action="store_true", help="keep the rows of other runs")
    ap.add_argument("--report", action="store_true", help="only redraw the report")
    ap.add_argument("--label", default="", help="results in scaling_LABEL.json / .md")
    args = ap.parse_args(argv)
    if args.report:
        report(RESULTS / _name(args))
        return
    out = measure(args)
    report(out)


if __name__ == "__main__":
    main()
