"""Fits on a real SLURM through dask_jobqueue.SLURMCluster (issue 7).

Needs a running SLURM (``sudo bash ci/slurm/start.sh`` starts a single-node one on
127.0.0.1). Without one the tests skip, except under ``CI=true``, where a missing SLURM
is a failure: CI must never go green without having run them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import numpy as np
import pytest

from dask_strads.engine import Plan, Program, run
from dask_strads.engine.cluster import workers_of

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def slurm_problem() -> str | None:
    """Why SLURM cannot be used here (None when it can)."""
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "SLURM is not installed (no sinfo/sbatch on PATH)"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scontrol ping failed: {exc}"
    if "UP" not in ping.stdout:
        return f"slurmctld is not responding: {(ping.stdout + ping.stderr).strip()!r}"
    states = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                            timeout=20).stdout.split()
    if not any(s.rstrip("*") in ("idle", "mix", "alloc", "comp") for s in states):
        return f"no SLURM node is up (sinfo states: {states})"
    try:
        import dask_jobqueue  # noqa: F401
    except ImportError:
        return "dask-jobqueue is not installed (pip install 'dask-strads[slurm]')"
    return None


@pytest.fixture(scope="module")
def slurm():
    problem = slurm_problem()
    if problem is not None:
        if IN_CI:
            pytest.fail(f"CI=true but SLURM cannot be used: {problem}")
        pytest.skip(f"{problem}; start a single-node SLURM with `sudo bash ci/slurm/start.sh`")


def _pythonpath() -> str:
    # batch jobs do not inherit this interpreter's sys.path: the package (if not installed)
    # and the tests' helper modules must be importable where the program is unpickled
    paths = [str(REPO), str(Path(__file__).resolve().parent)]
    paths += [p for p in sys.path if p.startswith(str(REPO))]
    return os.pathsep.join(dict.fromkeys(paths))


@contextlib.contextmanager
def slurm_client(tmp_path: Path, *, jobs: int = 2, walltime: str = "00:20:00",
                 worker_extra_args: tuple = (), lost_worker_timeout: str | None = None):
    """A SLURMCluster held at ``jobs`` jobs (adapt min = max) and a client of it.

    ``lost_worker_timeout``: how long the cluster waits before it replaces the job of a
    worker that left (``distributed.deploy.lost-worker-timeout``, 15 s by default).
    """
    import dask
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    logs = tmp_path / "slurm-logs"
    logs.mkdir(exist_ok=True)
    config = ({"distributed.deploy.lost-worker-timeout": lost_worker_timeout}
              if lost_worker_timeout else {})
    with dask.config.set(config):
        cluster = SLURMCluster(
            cores=1, processes=1, memory="2GB", walltime=walltime,
            interface="lo", scheduler_options={"dashboard_address": ":0"},
            python=sys.executable, log_directory=str(logs), local_directory=str(tmp_path),
            job_script_prologue=[f"export PYTHONPATH={_pythonpath()}"],
            worker_extra_args=list(worker_extra_args), death_timeout=30,
            job_name="dask-strads-test",
        )
        try:
            cluster.adapt(minimum_jobs=jobs, maximum_jobs=jobs)
            with Client(cluster, set_as_default=False) as client:
                try:
                    client.wait_for_workers(jobs, timeout=180)
                except TimeoutError:
                    raise AssertionError(
                        f"{jobs} SLURM workers did not start in 180 s; squeue:\n"
                        + subprocess.run(["squeue"], capture_output=True, text=True).stdout
                        + f"\njob script:\n{cluster.job_script()}\nlogs: "
                        + "\n".join(p.read_text()[-2000:] for p in logs.glob("*"))
                    ) from None
                yield cluster, client
        finally:
            cluster.close()


def _job_of_worker(cluster, client, worker_name) -> str:
    job = cluster.workers.get(worker_name)
    assert job is not None and job.job_id, f"no SLURM job known for worker {worker_name!r}"
    return str(job.job_id)


# ----------------------------------------------------------------------------- program
class LeastSquaresProgram(Program):
    """Block coordinate descent for min ||y - X b||^2 / 2, column blocks on workers.

    Workers unpickle it by importing this module (``tests/`` is on the jobs' PYTHONPATH).
    ``work_seconds`` stretches each push so a fit outlasts a cancelled job or a lifetime.
    Blocks checkpoint their coefficients so the engine can restore them on another worker.
    """

    name = "slurm-lstsq"

    def __init__(self, y, work_seconds: float = 0.0, tol: float = 1e-13, transport="auto"):
        self.y = np.asarray(y, dtype=float)
        self.n_rows = len(self.y)
        self.work_seconds = work_seconds
        self.tol = tol
        self.transport = transport

    def init_block(self, block_id, shard):
        X_b, y = shard
        return {"X": np.asfortranarray(X_b), "coef": np.zeros(X_b.shape[1]),
                "residual": np.array(y, dtype=float), "pinv": np.linalg.pinv(X_b)}

    def push(self, block, part, carried=None):
        if self.work_seconds:
            time.sleep(self.work_seconds)
        block["residual"] += part
        step = block["pinv"] @ block["residual"]
        block["coef"] += step
        delta = -(block["X"] @ step)
        block["residual"] += delta
        return {"delta": delta, "step": float(np.max(np.abs(step), initial=0.0)),
                "loss": 0.5 * float(block["residual"] @ block["residual"])}

    def block_result(self, block_id, block):
        return block["coef"].copy()

    def block_arrays(self, block):
        return {"coef": block["coef"]}

    def restore_block(self, block_id, shard, state_arrays, block_arrays):
        block = self.init_block(block_id, shard)
        block["coef"] = np.array(block_arrays["coef"])
        block["residual"] = np.array(state_arrays["residual"])
        return block

    def init_state(self, summaries):
        blocks = sorted(summaries)
        return {"blocks": blocks, "pending": {b: np.zeros(self.n_rows) for b in blocks},
                "changes": np.zeros(self.n_rows), "sweep": 0.0, "last_sweep": np.inf,
                "updates": 0, "loss": None}

    def schedule(self, state, ctx):
        block = state["blocks"][ctx.round % len(state["blocks"])]
        part, state["pending"][block] = state["pending"][block], np.zeros(self.n_rows)
        return Plan(parts={block: part})

    def pull(self, state, partials, plan):
        for b, p in partials.items():
            for other in state["blocks"]:
                if other != b:
                    state["pending"][other] += p["delta"]
            state["changes"] += p["delta"]
            state["sweep"] = max(state["sweep"], p["step"])
            state["loss"] = p["loss"]
            state["updates"] += 1
            if state["updates"] % len(state["blocks"]) == 0:
                state["last_sweep"], state["sweep"] = state["sweep"], 0.0
        return state

    def objective(self, state):
        return state["loss"]

    def converged(self, state):
        return state["last_sweep"] < self.tol

    def state_arrays(self, state):
        # taken with no round in flight: every block's residual equals y + all changes
        return {"residual": self.y + state["changes"], "blocks": np.array(state["blocks"]),
                "updates": state["updates"], "last_sweep": state["last_sweep"]}

    def load_state(self, arrays):
        state = self.init_state({int(b): None for b in arrays["blocks"]})
        state["changes"] = np.array(arrays["residual"]) - self.y
        state["updates"] = int(arrays["updates"])
        state["last_sweep"] = float(arrays["last_sweep"])
        return state


def _least_squares(seed=0, n=600, p=120, blocks=4):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    y = X @ rng.standard_normal(p) + 0.1 * rng.standard_normal(n)
    cols = np.array_split(np.arange(p), blocks)
    return X, y, cols, {b: (X[:, c], y) for b, c in enumerate(cols)}


def _worker_names(client) -> set:
    return {w["name"] for w in workers_of(client).values()}


def _coef(result, cols):
    return np.concatenate([result.block_results[b] for b in range(len(cols))])


# ----------------------------------------------------------------------------- cancelled job
def _cancel_when_fitting(cluster, client, delay: float) -> threading.Thread:
    """scancel the SLURM job of a worker that holds blocks, ``delay`` s after its first
    push (the blocks are placed and the rounds run: a loss while placing is placed
    again, not recovered); the thread's ``cancelled`` dict records what and when."""
    cancelled: dict = {}

    def pushed(dask_worker=None) -> bool:
        from dask_strads.engine.tasks import EXTENSION

        store = dask_worker.extensions.get(EXTENSION)
        return store is not None and any(f.next_seq > 0 for f in store.fits.values())

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                holders = [addr for addr, done in client.run(pushed).items() if done]
            except Exception:
                holders = []
            if holders:
                time.sleep(delay)
                workers = workers_of(client)
                victim = sorted(str(workers[a]["name"]) for a in holders if a in workers)[0]
                job_id = _job_of_worker(cluster, client, victim)
                subprocess.run(["scancel", job_id], check=True, timeout=30)
                cancelled.update(worker=victim, job=job_id, at=time.monotonic())
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.cancelled = cancelled
    thread.start()
    return thread


def _cancel_lasso_problem():
    from dask_strads.datasets import alpha_max, make_correlated_regression

    X, y, _ = make_correlated_regression(1500, 6000, n_informative=60, correlation=0.5,
                                         random_state=0)
    # weak enough a penalty that the fit lasts twice the cancel's delay
    return X, y, alpha_max(X, y) / 2000


def _cancel_ratings():
    from dask_strads.datasets import make_ratings

    return make_ratings(2000, 1000, rank=5, n_observed=80_000, random_state=1).train


def _cancel_corpus():
    from dask_strads.datasets import make_lda_corpus

    X, _ = make_lda_corpus(800, 400, 10, doc_length=60, random_state=0)
    return X


def _fit_for_cancel(model: str, client, **extra):
    """The fit of ``model`` that a cancelled job interrupts (each lasts ~5-10 s on the
    two SLURM workers, snapshots every ~0.5 s) and its undisturbed twin."""
    if model == "lasso":
        X, y, alpha = _cancel_lasso_problem()
        Lasso = _model("dask_strads.lasso.estimator", "Lasso")
        # one column block per worker, however small the problem
        with dask.config.set({"dask-strads.cd.min-block-nnz": 1}):
            return Lasso(alpha, tol=1e-10, max_iter=5000, client=client, progress=False,
                         **extra).fit(X, y)
    if model == "mf":
        MF = _model("dask_strads.mf.estimator", "MatrixFactorization")
        # all inner sweeps (inner_tol=0): a fit long enough to be cancelled in its middle
        return MF(n_components=8, alpha=0.05, max_iter=80, tol=0, random_state=0,
                  inner_tol=0.0, n_blocks=2, client=client, progress=False,
                  **extra).fit(_cancel_ratings())
    LDA = _model("dask_strads.lda.estimator", "LDA")
    # long enough to be cancelled in its middle with its blocks moving worker to worker
    return LDA(n_components=10, max_iter=600, random_state=0, n_blocks=2, client=client,
               progress=False, **extra).fit(_cancel_corpus())


def _assert_same_fit(model: str, on_slurm, local) -> None:
    if model == "lasso":
        X, y, alpha = _cancel_lasso_problem()

        def objective(est):
            r = y - X @ est.coef_ - est.intercept_
            return 0.5 * r @ r / len(y) + alpha * np.abs(est.coef_).sum()

        # both converged to a duality gap of 1e-10: the same minimum
        assert objective(on_slurm) == pytest.approx(objective(local), rel=1e-6)
        np.testing.assert_allclose(on_slurm.coef_, local.coef_,
                                   atol=1e-4 * np.abs(local.coef_).max())
    elif model == "mf":
        # CCD++ is deterministic: a recovery continues the same trajectory
        assert on_slurm.objective_ == pytest.approx(local.objective_, rel=1e-8)
        np.testing.assert_allclose(on_slurm.W_ @ on_slurm.H_.T, local.W_ @ local.H_.T,
                                   rtol=1e-6, atol=1e-8)
    else:
        # every draw is seeded by round and shard: the very same chain and counts
        np.testing.assert_array_equal(on_slurm.components_, local.components_)
        np.testing.assert_allclose(on_slurm.loglikelihoods_, local.loglikelihoods_,
                                   rtol=1e-12)
        X = _cancel_corpus()
        counts = on_slurm.components_ - on_slurm.topic_word_prior
        np.testing.assert_allclose(counts.sum(axis=0), np.asarray(X.sum(axis=0)).ravel())


@pytest.mark.parametrize("model", ["lasso", "mf", "lda"])
def test_cancelled_worker_job_is_replaced_and_fit_completes(slurm, tmp_path, client, caplog,
                                                            model):
    """scancel a worker job in the middle of a Lasso, MF or LDA fit: the engine rebuilds the
    lost blocks from its last snapshot on the worker left, the fit ends where the same fit
    on a LocalCluster ends, and adapt replaces the job.

    All three run on the direct (handler) transport, LDA with its carried blocks moving
    worker to worker; the engine-program test below covers a planned retirement.
    """
    import logging

    caplog.set_level(logging.WARNING, logger="dask_strads")
    # the cluster replaces a lost job 1 s after the worker left (15 s by default)
    with slurm_client(tmp_path, lost_worker_timeout="1s") as (cluster, sclient):
        killer = _cancel_when_fitting(cluster, sclient, delay=2.0)
        every = {"lasso": 5, "mf": 20, "lda": 4}[model]
        start = time.monotonic()
        on_slurm = _fit_for_cancel(model, sclient, checkpoint_every=every)
        end = time.monotonic()
        killer.join(timeout=60)
        cancelled = killer.cancelled
        assert cancelled, "the worker job was never cancelled"
        assert start < cancelled["at"] < end, "the fit ended before the cancel"
        recovered = [r.getMessage() for r in caplog.records
                     if "restarted from round" in r.getMessage()]
        assert recovered, "the engine did not report recovering from the lost worker"
        print(f"\n{model}: cancelled job {cancelled['job']} {cancelled['at'] - start:.1f} s "
              f"into a {end - start:.1f} s fit; {recovered}")
        if model == "lda":
            assert len(on_slurm.recoveries_) == 1
        # the reference fit on the LocalCluster runs while the replacement job starts
        _assert_same_fit(model, on_slurm, _fit_for_cancel(model, client))
        # adapt(minimum_jobs=2) brought a replacement job (jobqueue may reuse the name)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            jobs = _running_jobs(cluster, sclient)
            if len(jobs) >= 2 and cancelled["job"] not in jobs:
                break
            time.sleep(0.5)
        assert cancelled["job"] not in jobs, (cancelled, jobs)
        assert len(jobs) >= 2, f"no replacement job joined the cluster: {jobs}"


class _JoiningLeastSquares(LeastSquaresProgram):
    """Its pushes wait, at their third, for ``marker`` (written once a second job's worker
    joined), so the join always falls in the middle of the fit."""

    def __init__(self, y, marker: str, **kwargs):
        super().__init__(y, **kwargs)
        self.marker = marker

    def push(self, block, part, carried=None):
        block["pushes"] = block.get("pushes", 0) + 1
        deadline = time.time() + 180
        while block["pushes"] == 3 and not os.path.exists(self.marker) and \
                time.time() < deadline:
            time.sleep(0.05)
        return super().push(block, part, carried)


def test_a_job_that_joins_takes_blocks_at_the_next_snapshot(slurm, tmp_path):
    """A fit of 2 blocks on one SLURM worker; a second job joins mid-fit and takes a
    block at the next snapshot; the fit ends where the one-job fit ends."""
    X, y, cols, data = _least_squares(seed=3, blocks=2)
    marker = tmp_path / "joined"
    with slurm_client(tmp_path, jobs=1) as (cluster, sclient):
        ref = run(LeastSquaresProgram(y), data, sclient, max_rounds=3000, progress=False,
                  checkpoint_every=10)
        assert len(set(ref.placement.values())) == 1

        def grow():
            cluster.adapt(minimum_jobs=2, maximum_jobs=2)
            sclient.wait_for_workers(2, timeout=180)
            marker.write_text("joined")

        grower = threading.Thread(target=grow, daemon=True)
        grower.start()
        res = run(_JoiningLeastSquares(y, str(marker)), data, sclient, max_rounds=3000,
                  progress=False, checkpoint_every=10)
        grower.join(60)
        assert marker.exists() and res.spreads and not res.recoveries
        assert len(set(res.placement.values())) == 2
        assert res.n_rounds == ref.n_rounds and res.history["round"].is_unique
        np.testing.assert_allclose(_coef(res, cols), _coef(ref, cols), rtol=0, atol=1e-12)


def _running_jobs(cluster, client) -> set:
    """SLURM job ids of the workers connected now."""
    jobs = set()
    for name in _worker_names(client):
        job = cluster.workers.get(name)
        if job is not None and job.job_id:
            jobs.add(str(job.job_id))
    return jobs


@pytest.mark.parametrize("transport", ["tasks", "direct"])
def test_worker_lifetime_retires_before_walltime(slurm, tmp_path, transport):
    """Workers retire (--lifetime) before their job's walltime; the fit survives it: its
    rounds through the scheduler recover from a snapshot, direct ones take the retired
    worker's blocks (a handover, no round run again)."""
    from dask_strads.cli import lifetime_for

    walltime = "00:01:00"
    # 16 +- 6 s, staggered; when the second worker leaves before the first one's
    # replacement came, the fit waits for it. The cluster replaces a worker 5 s after it
    # left (15 s by default); by then a retired worker's job has ended on its own (after
    # 1 s the cluster still cancelled it)
    lifetime, stagger = lifetime_for(walltime, margin="44s", stagger="6s")
    X, y, cols, data = _least_squares(seed=2)
    with slurm_client(tmp_path, walltime=walltime, lost_worker_timeout="5s",
                      worker_extra_args=("--lifetime", lifetime, "--lifetime-stagger",
                                         stagger)) as (cluster, sclient):
        first = {name: _job_of_worker(cluster, sclient, name) for name in cluster.workers}
        # replacement jobs start without a lifetime, so that exactly one generation retires
        # during the fit (replacements retiring in turn would stretch the test unboundedly).
        # The cluster restarts a lost worker under its name from its spec, or scales up
        # with a new one.
        for spec in [cluster.new_spec, *cluster.worker_spec.values()]:
            spec["options"] = {**spec["options"], "worker_extra_args": []}
        start = time.monotonic()
        # snapshots every 10 rounds (~2 s): a retirement costs at most that much progress
        result = run(LeastSquaresProgram(y, work_seconds=0.2, transport=transport), data,
                     sclient, max_rounds=3000, progress=False, checkpoint_every=10)
        elapsed = time.monotonic() - start
        # ~130 rounds x 0.2 s: the fit outlasts the latest retirement (22 s after start)
        assert elapsed > 22, f"the fit ({elapsed:.0f} s) must outlast the workers' lifetime"
        assert result.stop_reason == "converged"
        np.testing.assert_allclose(_coef(result, cols), np.linalg.lstsq(X, y, rcond=None)[0],
                                   atol=1e-8)
        if transport == "tasks":
            assert result.recoveries, "no recovery recorded although the workers retired"
        else:  # the first worker to retire has the other one to hand over to
            assert result.handovers, (result.handovers, result.recoveries)
        live = _running_jobs(cluster, sclient)
        assert not live & set(first.values()), f"first jobs {first} still have workers: {live}"
        # the first jobs ended on their own (worker exited), not by SLURM's time limit
        for name, job_id in first.items():
            state = _job_state(job_id)
            assert state in ("COMPLETED", "COMPLETING", ""), (name, job_id, state)


def _job_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                         text=True, timeout=20).stdout
    for token in out.split():
        if token.startswith("JobState="):
            return token.split("=", 1)[1]
    return ""  # already purged (MinJobAge)


# ----------------------------------------------------------------------------- models
def _model(module: str, name: str):
    return getattr(importlib.import_module(module), name)


@pytest.fixture(scope="class")
def shared_slurm(slurm, tmp_path_factory):
    """One 2-job SLURMCluster for the model comparisons (closed after the class, so the
    node's two CPUs are free again for the tests that start their own jobs)."""
    with slurm_client(tmp_path_factory.mktemp("slurm-models")) as pair:
        yield pair


def _lasso_problem():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((200, 60))
    coef = np.zeros(60)
    coef[:6] = rng.standard_normal(6) * 3
    return X, X @ coef + 0.1 * rng.standard_normal(200)


def _fit_lasso(client):
    Lasso = _model("dask_strads.lasso.estimator", "Lasso")
    X, y = _lasso_problem()
    return Lasso(alpha=0.05, tol=1e-10, max_iter=10000, random_state=0, client=client,
                 progress=False).fit(X, y)


def _lda_corpus():
    from dask_strads._datasets.lda import make_lda_corpus

    X, _ = make_lda_corpus(200, 150, 4, doc_length=50, random_state=0)
    return X


def _fit_lda(client):
    LDA = _model("dask_strads.lda.estimator", "LDA")
    return LDA(n_components=4, max_iter=40, random_state=0, client=client,
               progress=False).fit(_lda_corpus())


def _ratings():
    from dask_strads._datasets import mf as mf_data

    return mf_data.make_ratings(60, 40, rank=3, n_observed=900, random_state=0)


def _fit_mf(client):
    MF = _model("dask_strads.mf.estimator", "MatrixFactorization")
    A = _ratings().train
    return MF(n_components=3, alpha=0.1, max_iter=20, random_state=0, client=client,
              progress=False).fit(A), A


class TestModelsOnSlurm:
    """Lasso, LDA, MF and an engine program fitted on SLURM workers equal the same fits on a
    LocalCluster."""

    def test_engine_program(self, shared_slurm, client):
        X, y, cols, data = _least_squares()
        cluster, sclient = shared_slurm
        on_slurm = run(LeastSquaresProgram(y), data, sclient, max_rounds=3000, progress=False)
        names = set(on_slurm.placement.values())
        assert names <= set(cluster.workers), (names, set(cluster.workers))  # SLURM workers
        local = run(LeastSquaresProgram(y), data, client, max_rounds=3000, progress=False)
        assert on_slurm.stop_reason == local.stop_reason == "converged"
        np.testing.assert_allclose(_coef(on_slurm, cols), _coef(local, cols), atol=1e-9)
        np.testing.assert_allclose(_coef(on_slurm, cols), np.linalg.lstsq(X, y, rcond=None)[0],
                                   atol=1e-8)

    def test_lasso(self, shared_slurm, client):
        from sklearn.linear_model import Lasso

        on_slurm, local = _fit_lasso(shared_slurm[1]), _fit_lasso(client)
        np.testing.assert_allclose(on_slurm.coef_, local.coef_, atol=1e-7)
        np.testing.assert_allclose(on_slurm.intercept_, local.intercept_, atol=1e-7)
        X, y = _lasso_problem()
        reference = Lasso(alpha=0.05, tol=1e-10, max_iter=10000).fit(X, y)
        np.testing.assert_allclose(on_slurm.coef_, reference.coef_, atol=1e-6)

    def test_lda(self, shared_slurm, client):
        on_slurm, local = _fit_lda(shared_slurm[1]), _fit_lda(client)
        X = _lda_corpus()
        for model in (on_slurm, local):  # counts are consistent: every token in one topic
            counts = model.components_ - model.topic_word_prior
            np.testing.assert_allclose(counts.sum(axis=0), np.asarray(X.sum(axis=0)).ravel())
        # same corpus, seed and number of workers: same chain, or at least the same fit
        ll_slurm, ll_local = on_slurm.loglikelihoods_[-1], local.loglikelihoods_[-1]
        assert abs(ll_slurm - ll_local) <= 0.01 * abs(ll_local), (ll_slurm, ll_local)
        assert on_slurm.n_iter_ == local.n_iter_ == 40

    def test_mf(self, shared_slurm, client):
        (on_slurm, A), (local, _) = _fit_mf(shared_slurm[1]), _fit_mf(client)
        A = A.tocoo()
        pred_slurm = np.einsum("ij,ij->i", on_slurm.W_[A.row], on_slurm.H_[A.col])
        pred_local = np.einsum("ij,ij->i", local.W_[A.row], local.H_[A.col])
        np.testing.assert_allclose(pred_slurm, pred_local, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(on_slurm.objective_, local.objective_, rtol=1e-8)
        # and the fit explains the data far better than predicting zero
        assert on_slurm.objective_ < 0.2 * float(A.data @ A.data)


def test_command_line_fit_on_slurm(slurm, tmp_path, client, monkeypatch, capsys):
    """`python -m dask_strads fit mf ... --cluster slurm` equals the same fit on LocalCluster."""
    import json

    import scipy.sparse as sp

    from dask_strads import cli

    A = sp.csr_matrix(_ratings().train)
    sp.save_npz(tmp_path / "ratings.npz", A)
    monkeypatch.setenv("PYTHONPATH", _pythonpath())  # sbatch exports the environment
    out = tmp_path / "mf.npz"
    code = cli.main([
        "fit", "mf", "--data", str(tmp_path / "ratings.npz"), "--n-components", "3",
        "--alpha", "0.1", "--max-iter", "20", "--random-state", "0",
        "--cluster", "slurm", "--jobs", "2", "--cores", "1", "--memory", "2GB",
        "--walltime", "00:10:00", "--interface", "lo", "--python", sys.executable,
        "--log-directory", str(tmp_path / "logs"), "--local-directory", str(tmp_path),
        "--wait-timeout", "180", "--output", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["n_workers"] == 2
    local, _ = _fit_mf(client)
    with np.load(out, allow_pickle=False) as f:
        np.testing.assert_allclose(float(f["objective_"]), local.objective_, rtol=1e-8)
        assert f["W_"].shape == local.W_.shape and f["H_"].shape == local.H_.shape
    # the command line's jobs are gone once it returns (squeue may list them while
    # slurmctld finishes the cancellation)
    deadline = time.monotonic() + 30
    while True:
        left = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True)
        if "dask-worker" not in left.stdout or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "dask-worker" not in left.stdout, left.stdout
