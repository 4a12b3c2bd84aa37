"""Randomized fault soak (issue 40): faults at random moments of whole fits, set-up included.

For every model (Lasso, MatrixFactorization, LDA through their estimators, and the
engine's proof program ``BlockLeastSquares`` through ``dask_strads.run``), N fits on a
LocalCluster of 4 single-threaded worker processes (nannies restart killed workers), each
disturbed by one fault kind at a moment drawn uniformly over an undisturbed fit's wall
time, measured from the call of ``fit`` (so data preparation, shipping shards, placing
blocks, the first round, snapshots, checkpoint writes and the final gather are all hit):

``kill1``      SIGKILL of one worker process
``kill2``      SIGKILL of two worker processes at once
``kill_rec``   SIGKILL of one worker, then of another while the recovery from the first is
               under way (0-0.3 s after the engine logs the loss)
``retire``     one worker retired gracefully (``Client.retire_workers``); the cluster is
               scaled back to 4 after the fit
``client``     the client process (a subprocess fitting with ``checkpoint=``) SIGKILLed;
               a new fit resumes from the checkpoint (or starts afresh when none was
               written yet)

Outcomes per fit: ``equal`` (completed, and equal to the undisturbed fit: Lasso, MF and
the proof program objective within 1e-6 relative, LDA identical counts), ``differs``
(completed, not equal), ``failed`` (raised), ``hung`` (not done within the timeout).
Recovery times are the engine's (loss known -> blocks rebuilt, from its log records) and
fault -> fit recovered. Workers not all back 120 s after a fit are counted too.

Usage::

    flock -s /work/cpu.lock python bench/soak.py --n 5            # all models and faults
    python bench/soak.py --n 2 --models lstsq --faults kill1,kill2  # a subset

Writes bench/results/soak.md (and soak.json, one record per fit).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))

N_WORKERS = 4
FAULTS = ("kill1", "kill2", "kill_rec", "retire", "client")
RTOL = 1e-6


# ----------------------------------------------------------------------------- models
class Model:
    """A problem and how to fit it; ``fit`` returns what ``equal`` compares."""

    name = ""
    warm = ""  # kernels the workers compile (see tests/conftest.py)

    def fit(self, client, checkpoint=None, resume=None, every=None):
        raise NotImplementedError

    def equal(self, out, ref) -> bool:
        return abs(out["objective"] - ref["objective"]) <= RTOL * abs(ref["objective"])


class LassoModel(Model):
    name = "lasso"
    warm = "import dask_strads.cd.kernels"

    def __init__(self):
        from dask_strads.datasets import alpha_max, make_correlated_regression

        self.X, self.y, _ = make_correlated_regression(1000, 5000, n_informative=60,
                                                       correlation=0.3, random_state=0)
        self.alpha = alpha_max(self.X, self.y) / 50

    def fit(self, client, checkpoint=None, resume=None, every=None):
        from dask_strads import Lasso

        est = Lasso(self.alpha, tol=1e-10, max_iter=5000, client=client, progress=False,
                    checkpoint=checkpoint, checkpoint_every=every)
        est.fit(self.X, self.y, resume=resume)
        r = self.y - self.X @ est.coef_ - est.intercept_
        obj = 0.5 * r @ r / len(self.y) + self.alpha * np.abs(est.coef_).sum()
        return {"objective": float(obj)}


class MFModel(Model):
    name = "mf"
    warm = "from dask_strads.mf import kernels; kernels.warm_up()"

    def __init__(self):
        from dask_strads.datasets import make_ratings

        self.data = make_ratings(3000, 1500, rank=5, n_observed=150_000, random_state=1)

    def fit(self, client, checkpoint=None, resume=None, every=None):
        from dask_strads import MatrixFactorization

        est = MatrixFactorization(n_components=8, alpha=0.05, max_iter=12, tol=0,
                                  random_state=0, inner_tol=0.0, client=client,
                                  progress=False, checkpoint=checkpoint,
                                  checkpoint_every=every)
        est.fit(self.data.train, resume=resume)
        return {"objective": float(est.objective_), "recoveries": len(est.recoveries_)
                if hasattr(est, "recoveries_") else None}


class LDAModel(Model):
    name = "lda"
    warm = "from dask_strads.lda import kernels; kernels.warm_up()"
    block_threads = None  # the workers' threads (one each here)

    def __init__(self):
        from dask_strads.datasets import make_lda_corpus

        self.X, _ = make_lda_corpus(800, 400, 10, doc_length=60, random_state=0)

    def fit(self, client, checkpoint=None, resume=None, every=None):
        from dask_strads import LDA

        est = LDA(n_components=10, max_iter=150, random_state=0, n_blocks=N_WORKERS,
                  block_threads=self.block_threads, client=client, progress=False,
                  checkpoint=checkpoint, checkpoint_every=every)
        doc_topic = est.fit_transform(self.X, resume=resume)
        return {"components": est.components_.copy(), "doc_topic": np.array(doc_topic)}

    def equal(self, out, ref) -> bool:
        return (np.array_equal(out["components"], ref["components"])
                and np.array_equal(out["doc_topic"], ref["doc_topic"]))


class LDAThreadsModel(LDAModel):
    """LDA with blocks of 2 threads: each push rotates the halves of its vocabulary
    block between its threads (lda/groups.py)."""

    name = "lda-threads"
    block_threads = 2


class ProofModel(Model):
    """The engine's proof program (tests/engine/programs.py) through ``run``."""

    name = "lstsq"

    def __init__(self):
        rng = np.random.default_rng(0)
        self.X = rng.standard_normal((400, 48))
        self.y = self.X @ rng.standard_normal(48) + 0.1 * rng.standard_normal(400)
        cols = np.array_split(np.arange(48), N_WORKERS)
        self.data = {b: (self.X[:, c], self.y) for b, c in enumerate(cols)}

    def fit(self, client, checkpoint=None, resume=None, every=None):
        from dask_strads import run
        from tests.engine.programs import BlockLeastSquares

        res = run(BlockLeastSquares(self.y, work_seconds=0.01), self.data, client,
                  max_rounds=20000, progress=False, transport="direct",
                  checkpoint=checkpoint, checkpoint_every=every, resume=resume)
        coef = np.concatenate([res.block_results[b] for b in range(N_WORKERS)])
        r = self.y - self.X @ coef
        return {"objective": float(0.5 * r @ r)}


MODELS = {m.name: m for m in (LassoModel, MFModel, LDAModel, LDAThreadsModel,
                                  ProofModel)}
# Rounds between snapshots in the disturbed fits (a recovery replays at most these)
EVERY = {"lasso": 3, "mf": 20, "lda": 6, "lda-threads": 6, "lstsq": 10}


# ----------------------------------------------------------------------------- events
class Events(logging.Handler):
    """Collects the engine's recovery log records (``dask_strads`` logger)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list = []

    def emit(self, record):
        self.records.append((time.perf_counter(), record))

    def since(self, t0):
        return [(t, r) for t, r in self.records if t >= t0]


# ----------------------------------------------------------------------------- cluster
class Cluster:
    def __init__(self):
        self.start()

    def start(self):
        import dask
        from distributed import Client, LocalCluster

        # LocalCluster closes the nanny of a worker that left unless a worker of the same
        # name is back within this timeout, read when the worker leaves (15 s by
        # default). A timer left from an earlier kill of the same name then closes the
        # nanny that is restarting it after a later kill, and the cluster stays one worker
        # short. Set for the whole run (not in a `with` block: it is read at each loss).
        dask.config.set({"distributed.deploy.lost-worker-timeout": "3600s"})
        self.cluster = LocalCluster(n_workers=N_WORKERS, threads_per_worker=1,
                                    host="127.0.0.1", dashboard_address=":0",
                                    memory_limit="2GiB")
        self.client = Client(self.cluster, set_as_default=False)
        CLIENTS[:] = [self.client]
        self.client.wait_for_workers(N_WORKERS, timeout=180)

    def restart(self):
        with contextlib.suppress(Exception):
            self.client.close(timeout=10)
        with contextlib.suppress(Exception):
            self.cluster.close(timeout=30)
        self.start()

    def pids(self) -> dict:
        got = self.client.run(os.getpid, on_error="return")
        return {a: p for a, p in got.items() if isinstance(p, int)}

    def all_back(self, timeout=120.0) -> bool:
        """Wait for N_WORKERS workers. False at once when a nanny closed (a retired
        worker's closes with it, and LocalCluster.scale did not replace it here): the
        caller then starts a new cluster."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            n = len(self.client.scheduler_info()["workers"])
            if n >= N_WORKERS:
                return True
            if any(getattr(w, "status", None) is not None and w.status.name in (
                    "closing", "closing_gracefully", "closed", "failed")
                   for w in self.cluster.workers.values()):
                return False
            time.sleep(0.25)
        return False


# ----------------------------------------------------------------------------- one fit
def in_thread(fn, timeout):
    """Run ``fn`` in a daemon thread: (status, value, error text)."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - recorded
            box["error"] = f"{type(exc).__name__}: {exc}"
            box["trace"] = traceback.format_exc()

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return "hung", None, hang_dump()
    if "error" in box:
        return "failed", None, box["error"]
    return "done", box["value"], None


def hang_dump() -> str:
    """What the client's coroutines wait on (a hung fit's diagnosis)."""
    import asyncio
    import io

    from distributed import default_client  # noqa: F401 - the loop of our client

    out = io.StringIO()
    loops = {id(c.loop.asyncio_loop): c.loop.asyncio_loop for c in CLIENTS}
    for loop in loops.values():
        for task in list(asyncio.all_tasks(loop)):
            if "dask_strads" in repr(task.get_coro()) or "_run" in repr(task.get_coro()):
                task.print_stack(limit=12, file=out)
    return out.getvalue()[-20000:]


CLIENTS: list = []


def injector(fault, delay, cl: Cluster, events: Events, rng, log: list, done):
    """Apply ``fault`` ``delay`` seconds from now, from a thread, unless the fit is over
    by then (``done``, a threading.Event). ``log``: what was done."""
    pids = cl.pids()
    addrs = sorted(pids)

    def kill(addr):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pids[addr], signal.SIGKILL)
        log.append((time.perf_counter(), "kill", addr))

    def go():
        if done.wait(delay):
            log.append((time.perf_counter(), "fit ended first", None))
            return
        victims = list(rng.permutation(addrs))
        if fault == "kill1":
            kill(victims[0])
        elif fault == "kill2":
            kill(victims[0])
            kill(victims[1])
        elif fault == "kill_rec":
            t0 = time.perf_counter()
            kill(victims[0])
            deadline = t0 + 10
            while time.perf_counter() < deadline and not done.is_set():
                if any("lost workers" in r.getMessage() for _, r in events.since(t0)):
                    time.sleep(rng.uniform(0, 0.3))
                    break
                time.sleep(0.01)
            else:
                log.append((time.perf_counter(), "no recovery seen", None))
            if not done.is_set():
                kill(victims[1])
        elif fault == "retire":
            log.append((time.perf_counter(), "retire", victims[0]))
            try:
                cl.client.retire_workers([victims[0]])
            except Exception as exc:  # noqa: BLE001 - recorded
                log.append((time.perf_counter(), f"retire failed: {exc}", victims[0]))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def recovery_times(events: Events, t0: float, log: list):
    """(engine seconds per recovery, seconds from the first fault to the last recovery)."""
    recs = [(t, r) for t, r in events.since(t0) if getattr(r, "strads", None)
            and r.strads.get("event") == "recovered"]
    engine = [r.strads["seconds"] for _, r in recs]
    faults = [t for t, what, _ in log if what in ("kill", "retire")]
    total = (recs[-1][0] - faults[0]) if recs and faults else None
    return engine, total


def child_main(args):
    """``--child``: fit with a checkpoint on an existing cluster (killed by the parent)."""
    from distributed import Client

    model = MODELS[args.child]()
    with Client(args.scheduler, set_as_default=False) as client:
        client.wait_for_workers(N_WORKERS, timeout=120)
        print("fitting", flush=True)
        model.fit(client, checkpoint=args.checkpoint, every=EVERY[args.child])
        print("done", flush=True)


def client_fault(model: Model, cl: Cluster, delay: float, timeout: float):
    """The client process dies ``delay`` s into its fit; a new fit resumes."""
    from dask_strads.engine import checkpoint as ckpt

    tmp = tempfile.mkdtemp(prefix="soak-ckpt-")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, __file__, "--child", model.name,
                             "--scheduler", cl.client.scheduler.address, "--checkpoint", tmp],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        line = proc.stdout.readline().strip()
        if line != "fitting":
            return "failed", None, f"child did not start: {line!r}", None, False
        time.sleep(delay)
        struck = proc.poll() is None  # else the child's fit ended first
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
        proc.stdout.close()
    has = os.path.exists(os.path.join(tmp, ckpt.FILENAME))
    resume = tmp if has else None
    status, value, error = in_thread(lambda: model.fit(cl.client, resume=resume), timeout)
    return status, value, error, (ckpt.load(tmp).round if has else None), struck


def soak(args):
    from dask_strads.engine import checkpoint as _  # noqa: F401 - import before timing

    events = Events()
    strads_log = logging.getLogger("dask_strads")
    strads_log.addHandler(events)
    strads_log.setLevel(logging.DEBUG)
    if not args.verbose:
        strads_log.propagate = False  # our table, not the engine's lines
    rng = np.random.default_rng(args.seed)
    warm = [subprocess.Popen([sys.executable, "-c", MODELS[m].warm]) for m in args.models
            if MODELS[m].warm]
    for p in warm:
        p.wait()
    cl = Cluster()
    records = []
    out_json = Path(args.results) / (args.out + ".json")
    t_start = time.time()
    try:
        models, refs = {}, {}
        for name in args.models:
            model = models[name] = MODELS[name]()
            model.fit(cl.client)  # warm: imports and compilation on the workers
            t0 = time.perf_counter()
            ref = model.fit(cl.client)
            refs[name] = (ref, time.perf_counter() - t0)
            print(f"{name}: undisturbed fit {refs[name][1]:.2f} s", flush=True)
        # repetition by repetition, so that a time budget leaves every cell filled alike
        for i in range(args.n):
            for name in args.models:
                model = models[name]
                ref, ref_s = refs[name]
                timeout = max(120.0, 20 * ref_s)
                for fault in args.faults:
                    if args.budget and time.time() - t_start > args.budget:
                        raise TimeoutError("budget")
                    tb = time.perf_counter()
                    back = cl.all_back()
                    delay = float(rng.uniform(0, ref_s))
                    rec = {"model": name, "fault": fault, "i": i, "delay": delay,
                           "ref_s": ref_s, "workers_back_before": back,
                           "waited_for_workers_s": time.perf_counter() - tb}
                    t0 = time.perf_counter()
                    log: list = []
                    if fault == "client":
                        status, value, error, rnd, struck = client_fault(model, cl, delay,
                                                                         timeout)
                        rec["checkpoint_round"] = rnd
                        rec["struck"] = struck
                    else:
                        done = threading.Event()
                        inj = injector(fault, delay, cl, events, rng, log, done)
                        status, value, error = in_thread(
                            lambda m=model, e=EVERY[name]: m.fit(cl.client, every=e), timeout)
                        done.set()
                        inj.join(15)
                        rec["struck"] = any(what in ("kill", "retire") for _, what, _ in log)
                    rec["seconds"] = time.perf_counter() - t0
                    rec["actions"] = [(round(t - t0, 3), what, who) for t, what, who in log]
                    engine, total = recovery_times(events, t0, log)
                    rec["recovery_s"] = engine
                    rec["fault_to_recovered_s"] = total
                    rec["messages"] = [(round(t - t0, 3), r.getMessage())
                                       for t, r in events.since(t0)]
                    if status == "done":
                        status = "equal" if model.equal(value, ref) else "differs"
                        if status == "differs" and "objective" in value:
                            rec["objective_rel"] = abs(value["objective"] - ref["objective"]) \
                                / abs(ref["objective"])
                    rec["status"] = status
                    rec["error"] = error if status != "hung" else "hung"
                    if status == "hung":
                        rec["hang_dump"] = error
                    print(f"  {name} {fault} #{i} at {delay:.2f}s: {status} "
                          f"({rec['seconds']:.1f} s){' ' + rec['error'] if rec['error'] else ''} "
                          f"recoveries {[round(s, 2) for s in engine]}", flush=True)
                    records.append(rec)
                    out_json.write_text(json.dumps(records, indent=1, default=str))
                    last = (i, name, fault) == (args.n - 1, args.models[-1], args.faults[-1])
                    if status == "hung":
                        cl.restart()
                    elif not last and not cl.all_back():
                        rec["workers_back_after"] = False
                        with contextlib.suppress(Exception):
                            rec["nanny_logs"] = {a: [m for _, m in logs[:20]] for a, logs in
                                                 cl.client.get_worker_logs(nanny=True).items()}
                        print("  workers not all back: restarting the cluster", flush=True)
                        cl.restart()
    except TimeoutError:
        print("time budget spent", flush=True)
    finally:
        with contextlib.suppress(Exception):
            cl.client.close()
            cl.cluster.close()
    write_table(records, args)
    return records


def write_table(records, args):
    lines = ["# Fault soak (issue 40)", "",
             f"Command: `{args.command or ' '.join(['python', 'bench/soak.py'] + sys.argv[1:])}`"
             "  ",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"{N_WORKERS} worker processes (LocalCluster, nannies) on a shared 2-core machine.",
             "", "Fault moments uniform over [0, undisturbed fit time) from the call of fit; "
             "struck: fits whose fault came before the fit's end (a disturbed fit lasts "
             "longer than the undisturbed one, so nearly all). "
             "Recovery: engine seconds from the loss being known to the blocks rebuilt "
             "(median / max over recoveries); fault -> recovered: from the (first) fault to "
             "the last recovery of the fit (median / max).", "",
             "| model | fault | fits | struck | equal | differs | failed | hung | recoveries | "
             "set-up re-placements | recovery s (med / max) | fault -> recovered s "
             "(med / max) | fit s (med / max; undisturbed) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    cells: dict = {}
    for r in records:
        cells.setdefault((r["model"], r["fault"]), []).append(r)
    for (m, f), rs in cells.items():
        count = {s: sum(r["status"] == s for r in rs) for s in ("equal", "differs", "failed",
                                                                "hung")}
        rec = [s for r in rs for s in r["recovery_s"]]
        replaced = sum(sum("placing again" in msg for _, msg in r["messages"]) for r in rs)
        tot = [r["fault_to_recovered_s"] for r in rs if r["fault_to_recovered_s"] is not None]

        def mm(xs):
            return f"{np.median(xs):.2f} / {max(xs):.2f}" if xs else "-"

        struck = sum(bool(r.get("struck", True)) for r in rs)
        lines.append(f"| {m} | {f} | {len(rs)} | {struck} | {count['equal']} | "
                     f"{count['differs']} | "
                     f"{count['failed']} | {count['hung']} | {len(rec)} | {replaced} | {mm(rec)} | "
                     f"{mm(tot)} | {mm([r['seconds'] for r in rs])}; "
                     f"{rs[0]['ref_s']:.2f} |")
    bad = [r for r in records if r["status"] != "equal"]
    if bad:
        lines += ["", "## Not equal", ""]
        for r in bad:
            lines.append(f"- {r['model']} {r['fault']} #{r['i']} at {r['delay']:.2f} s: "
                         f"{r['status']} {r.get('error') or ''} "
                         f"{r.get('objective_rel', '')}".rstrip())
    path = Path(args.results) / (args.out + ".md")
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=5, help="fits per model and fault kind")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=float, default=0, help="stop after this many seconds")
    p.add_argument("--out", default="soak", help="RESULTS/OUT.md and RESULTS/OUT.json")
    p.add_argument("--results", default=str(HERE / "results"), help="directory of the tables")
    p.add_argument("--verbose", action="store_true", help="print the engine's log lines too")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--scheduler", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--table-only", action="store_true",
                   help="rewrite RESULTS/OUT.md from RESULTS/OUT.json (no fits)")
    p.add_argument("--command", help="with --table-only: the command that made the JSON")
    args = p.parse_args(argv)
    if args.table_only:
        records = json.loads((Path(args.results) / (args.out + ".json")).read_text())
        write_table(records, args)
        return 0
    if args.child:
        return child_main(args)
    args.models = [m for m in args.models.split(",") if m]
    args.faults = [f for f in args.faults.split(",") if f]
    for m in args.models:
        if m not in MODELS:
            p.error(f"--models: unknown model {m!r}; known: {sorted(MODELS)}")
    for f in args.faults:
        if f not in FAULTS:
            p.error(f"--faults: unknown fault {f!r}; known: {FAULTS}")
    records = soak(args)
    # exit status 1 unless every fit completed equal to the undisturbed one
    return 0 if records and all(r["status"] == "equal" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
