"""``python -m dask_strads demo``: Lasso, LDA and matrix factorisation on one embedded cluster.

The demo draws three seeded synthetic problems, starts a ``LocalCluster`` on 127.0.0.1
(two single-threaded worker processes by default), fits

* :class:`dask_strads.Lasso` on an AR(1)-correlated regression,
* :class:`dask_strads.LDA` on a corpus drawn from a known LDA model,
* :class:`dask_strads.MatrixFactorization` on noisy low-rank ratings,

with progress bars, and prints a summary table: iterations, seconds and final objective
of each fit next to the same problem solved by a reference implementation where one is
installed (scikit-learn's ``Lasso``; the ``lda`` package's collapsed Gibbs sampler; for
matrix factorisation, which has no scikit-learn counterpart for missing entries, the
noise level of the ratings, the best RMSE any model can reach). It then saves the
convergence curves of the three fits as a PNG (with matplotlib, the ``plot`` extra) and
prints its path. The whole run takes well under a minute on two cores.

Examples
--------
::

    python -m dask_strads demo
    python -m dask_strads demo --output demo.png --no-progress
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DemoResult", "format_table", "main", "plot_message", "run_demo", "save_plot"]

MODELS = ("lasso", "lda", "mf")


@dataclass
class DemoResult:
    """One row of the summary table."""

    model: str
    data: str
    iterations: int
    seconds: float
    objective: float
    objective_name: str
    reference: str | None = None
    reference_iterations: int | None = None
    reference_seconds: float | None = None
    reference_objective: float | None = None
    estimator: Any = field(default=None, repr=False)
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------- models
def lasso_objective(X: np.ndarray, y: np.ndarray, coef: np.ndarray, intercept: float,
                    alpha: float) -> float:
    """scikit-learn's Lasso objective ``||y - X b - b0||^2 / (2 n) + alpha ||b||_1``."""
    r = y - X @ coef - intercept
    return float(r @ r / (2 * len(y)) + alpha * np.abs(coef).sum())


def _demo_lasso(client, seed: int, progress: bool, small: bool) -> DemoResult:
    from dask_strads import Lasso
    from dask_strads._datasets.lasso import alpha_max, make_correlated_regression

    n, p = (200, 400) if small else (500, 2000)
    X, y, _ = make_correlated_regression(n, p, n_informative=20, correlation=0.5,
                                         random_state=seed)
    alpha = alpha_max(X, y) / 20
    tol = 1e-6
    start = time.perf_counter()
    model = Lasso(alpha=alpha, tol=tol, random_state=seed, client=client,
                  progress=progress).fit(X, y)
    seconds = time.perf_counter() - start
    result = DemoResult("Lasso", f"{n} x {p}, AR(1) rho=0.5", model.n_iter_, seconds,
                        lasso_objective(X, y, model.coef_, model.intercept_, alpha),
                        "objective", estimator=model,
                        extra={"nnz": int(np.count_nonzero(model.coef_))})
    with contextlib.suppress(ImportError):
        from sklearn.linear_model import Lasso as SklearnLasso

        start = time.perf_counter()
        reference = SklearnLasso(alpha=alpha, tol=tol, max_iter=100_000).fit(X, y)
        result.reference = "scikit-learn Lasso"
        result.reference_seconds = time.perf_counter() - start
        result.reference_iterations = int(reference.n_iter_)
        result.reference_objective = lasso_objective(X, y, reference.coef_,
                                                     reference.intercept_, alpha)
    return result


def _demo_lda(client, seed: int, progress: bool, small: bool) -> DemoResult:
    from dask_strads import LDA
    from dask_strads._datasets.lda import make_lda_corpus

    n_docs, n_words, n_topics, n_iter = (300, 300, 5, 20) if small else (600, 600, 8, 40)
    X, _ = make_lda_corpus(n_docs, n_words, n_topics, doc_length=100, zipf=1.0,
                           random_state=seed)
    start = time.perf_counter()
    model = LDA(n_components=n_topics, max_iter=n_iter, random_state=seed, client=client,
                progress=progress).fit(X)
    seconds = time.perf_counter() - start
    n_tokens = int(X.sum())
    result = DemoResult("LDA", f"{n_docs} docs x {n_words} words, {n_tokens:,d} tokens, "
                        f"{n_topics} topics", model.n_iter_, seconds,
                        float(model.loglikelihoods_[-1]) / n_tokens, "log-lik / token",
                        estimator=model)
    with contextlib.suppress(ImportError):
        import lda

        start = time.perf_counter()
        reference = lda.LDA(n_topics=n_topics, n_iter=n_iter, alpha=model.doc_topic_prior,
                            eta=model.topic_word_prior, random_state=seed, refresh=n_iter)
        _quietly(lambda: reference.fit(X))
        result.reference = "lda package (Gibbs)"
        result.reference_seconds = time.perf_counter() - start
        result.reference_iterations = n_iter
        result.reference_objective = float(reference.loglikelihood()) / n_tokens
    return result


def _demo_mf(client, seed: int, progress: bool, small: bool) -> DemoResult:
    from dask_strads import MatrixFactorization
    from dask_strads._datasets.mf import make_ratings

    shape, n_observed = ((400, 300), 15_000) if small else ((2000, 1000), 100_000)
    noise = 0.1
    data = make_ratings(*shape, rank=5, n_observed=n_observed, noise=noise, random_state=seed)
    start = time.perf_counter()
    model = MatrixFactorization(n_components=5, alpha=0.1, max_iter=20, random_state=seed,
                                client=client, progress=progress)
    model.fit(data.train, validation=data.test)
    seconds = time.perf_counter() - start
    rmse = -model.score(data.test)
    result = DemoResult("MatrixFactorization",
                        f"{shape[0]} x {shape[1]}, {data.train.nnz:,d} ratings, rank 5",
                        model.n_iter_, seconds, rmse, "test RMSE", estimator=model,
                        extra={"recommend(0)": model.recommend(0, 5).tolist()})
    result.reference = "noise level (best RMSE)"
    result.reference_objective = noise
    return result


def _quietly(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with the ``lda`` package's per-iteration log lines silenced."""
    import logging

    logger = logging.getLogger("lda")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return fn()
    finally:
        logger.setLevel(level)


DEMOS: dict[str, Callable[..., DemoResult]] = {"lasso": _demo_lasso, "lda": _demo_lda,
                                               "mf": _demo_mf}


# ---------------------------------------------------------------------------- output
def _fmt(value: float | int | None, digits: int = 6) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int | np.integer):
        return str(int(value))
    return f"{value:.{digits}g}"


def format_table(results: Sequence[DemoResult]) -> str:
    """The summary table as aligned plain text."""
    header = ["model", "measure", "iterations", "time (s)", "value", "reference",
              "ref. iterations", "ref. time (s)", "ref. value"]
    rows = [[r.model, r.objective_name, _fmt(r.iterations), f"{r.seconds:.2f}",
             _fmt(r.objective), r.reference or "not installed", _fmt(r.reference_iterations),
             "-" if r.reference_seconds is None else f"{r.reference_seconds:.2f}",
             _fmt(r.reference_objective)] for r in results]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), line]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(out)


def save_plot(results: Sequence[DemoResult], path: Path) -> Path:
    """Convergence of each fit, one panel per model, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dask_strads.plotting import plot_convergence

    fig, axes = plt.subplots(1, len(results), figsize=(5.0 * len(results), 3.8),
                             layout="constrained", squeeze=False)
    for ax, r in zip(axes.flat, results):
        model = r.estimator
        if r.model == "Lasso":
            optimum = min(r.objective, r.reference_objective or r.objective)
            # suboptimality against the better of the two fits, on the rounds that
            # evaluated the objective (duality-gap checks)
            plot_convergence(model, x="round", optimum=optimum - 1e-12 * abs(optimum), ax=ax,
                             label="dask_strads")
            ax.set_ylabel("objective - best objective")
        elif r.model == "LDA":
            plot_convergence(model, x="iteration", y="loglikelihood", ax=ax, log=False,
                             label="dask_strads")
            if r.reference_objective is not None:
                ax.axhline(r.reference_objective * model.n_tokens_, color="grey",
                           linestyle=":", label="lda package, final")
                ax.legend()
        else:
            plot_convergence(model, x="time", y="rmse", ax=ax, label="validation RMSE")
            plot_convergence(model, x="time", y="train_rmse", ax=ax, label="training RMSE")
            ax.axhline(r.reference_objective, color="grey", linestyle=":", label="noise level")
            ax.set_ylabel("RMSE")
            ax.legend()
        ax.set_title(f"{r.model}: {r.data}", fontsize=9)
    fig.suptitle("dask_strads demo: convergence", fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- driver
def run_demo(client, models: Sequence[str] = MODELS, *, seed: int = 0, progress: bool = True,
             small: bool = False, echo: Callable[[str], Any] = print) -> list[DemoResult]:
    """Fit the demo models on ``client``'s cluster; returns one :class:`DemoResult` each."""
    results = []
    for name in models:
        if name not in DEMOS:
            raise ValueError(f"models: unknown model {name!r}; expected some of {list(MODELS)}")
        echo(f"\n== {name} ==")
        results.append(DEMOS[name](client, seed, progress, small))
    return results


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dask_strads demo",
        description="Fit Lasso, LDA and matrix factorisation on seeded synthetic data on an "
                    "embedded LocalCluster, print a summary table and save a convergence plot.")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated subset of lasso,lda,mf (default: all three)")
    parser.add_argument("--n-workers", type=int, default=2,
                        help="worker processes of the embedded cluster (default: 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and fits")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="path of the convergence plot (PNG); default: "
                             "<tmpdir>/dask_strads_demo/convergence.png")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument("--small", action="store_true",
                        help="smaller problems (a few seconds per model; for tests)")
    args = parser.parse_args(argv)
    models = [m.strip().lower() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        parser.error(f"--models: unknown model(s) {unknown or args.models!r}; expected a "
                     f"comma-separated subset of {','.join(MODELS)}")
    if args.n_workers < 1:
        parser.error(f"--n-workers: expected a positive integer, got {args.n_workers}")
    args.models = models
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns a process exit code."""
    args = _parse(argv)
    from distributed import Client, LocalCluster

    start = time.perf_counter()
    print(f"Starting a LocalCluster: {args.n_workers} worker processes on 127.0.0.1 ...")
    with LocalCluster(n_workers=args.n_workers, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        print(f"Dashboard: {client.dashboard_link}")
        results = run_demo(client, args.models, seed=args.seed,
                           progress=not args.no_progress, small=args.small)
    print("\nSummary (value: Lasso objective, lower is better; LDA log-likelihood per token, "
          "higher is better; MF test RMSE)")
    print(format_table(results))
    for r in results:
        for key, value in r.extra.items():
            print(f"{r.model} {key}: {value}")
    if not args.no_plot:
        output = args.output or Path(tempfile.gettempdir()) / "dask_strads_demo" / \
            "convergence.png"
        print(plot_message(results, output))
    print(f"Total time: {time.perf_counter() - start:.1f} s")
    return 0


def plot_message(results: Sequence[DemoResult], output: Path) -> str:
    """Save the convergence plot; the line to print (its path, or why there is none)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ("Convergence plot skipped: matplotlib is not installed "
                "(pip install 'dask-strads[plot]')")
    return f"Convergence plot: {save_plot(results, output).resolve()}"


if __name__ == "__main__":
    raise SystemExit(main())
