"""``python -m dask_strads demo``: Lasso, logistic regression, LDA and matrix factorisation
on one embedded cluster.

The demo draws four seeded synthetic problems, starts a ``LocalCluster`` on 127.0.0.1
(two single-threaded worker processes by default), fits

* :class:`dask_strads.Lasso` on an AR(1)-correlated regression,
* :class:`dask_strads.LogisticRegression` (L1) on labels drawn from a sparse logistic model,
* :class:`dask_strads.LDA` on a corpus drawn from a known LDA model,
* :class:`dask_strads.MatrixFactorization` on noisy low-rank ratings,

with progress bars, and prints a summary table: rounds, seconds and final objective of each
fit next to the same problem solved by a reference implementation where one is installed
(scikit-learn's ``Lasso`` and liblinear logistic regression; the ``lda`` package's
collapsed Gibbs sampler; for matrix factorisation, which has no scikit-learn counterpart
for missing entries, the noise level of the ratings, the best RMSE any model can reach).
It then saves the convergence curves of the four fits as a PNG (matplotlib;
``pip install -e ".[demo]"`` installs it and ``lda``) and prints its path.

Before the timed fits, each model is fitted once on a tiny problem of the same kind, so
that numba compiles the kernels on the workers first; that compile time is reported in its
own column, not in the fit's time (numba caches the compiled kernels on disk: a second
demo run compiles little). The whole run takes well under a minute on two cores once the
kernels are compiled; a first run adds the compile time.

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
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DemoResult", "compile_kernels", "draw_plot", "format_table", "main", "plot_message",
           "run_demo", "save_plot"]

MODELS = ("lasso", "logistic", "lda", "mf")
INSTALL_HINT = "pip install -e \".[demo]\" (matplotlib and lda)"

# problem sizes: "tiny" only compiles the kernels (the same kinds of arrays, so numba
# compiles the same specialisations), "small" is for tests, "full" what the demo shows
SIZES = ("tiny", "small", "full")


@dataclass
class DemoResult:
    """One row of the summary table."""

    model: str
    data: str
    rounds: int
    seconds: float
    objective: float
    objective_name: str
    reference: str | None = None
    reference_iterations: int | None = None
    reference_seconds: float | None = None
    reference_objective: float | None = None
    estimator: Any = field(default=None, repr=False)
    extra: dict = field(default_factory=dict)
    compile_seconds: float | None = None


# ---------------------------------------------------------------------------- models
def lasso_objective(X: np.ndarray, y: np.ndarray, coef: np.ndarray, intercept: float,
                    alpha: float) -> float:
    """scikit-learn's Lasso objective ``||y - X b - b0||^2 / (2 n) + alpha ||b||_1``."""
    r = y - X @ coef - intercept
    return float(r @ r / (2 * len(y)) + alpha * np.abs(coef).sum())


def _rounds(model) -> int:
    """Rounds of a fit: the rows of its ``history_``, which the plot's x axis counts."""
    return int(len(model.history_))


def _demo_lasso(client, seed: int, progress: bool, size: str,
                reference: bool = True) -> DemoResult:
    from dask_strads import Lasso
    from dask_strads._datasets.lasso import alpha_max, make_correlated_regression

    n, p = {"tiny": (40, 80), "small": (200, 400), "full": (500, 2000)}[size]
    X, y, _ = make_correlated_regression(n, p, n_informative=20, correlation=0.5,
                                         random_state=seed)
    alpha = alpha_max(X, y) / 20
    tol = 1e-6
    start = time.perf_counter()
    model = Lasso(alpha=alpha, tol=tol, random_state=seed, client=client,
                  progress=progress).fit(X, y)
    seconds = time.perf_counter() - start
    result = DemoResult("Lasso", f"{n} x {p}, AR(1) rho=0.5", _rounds(model), seconds,
                        lasso_objective(X, y, model.coef_, model.intercept_, alpha),
                        "objective", estimator=model,
                        extra={"nnz": int(np.count_nonzero(model.coef_)),
                               "passes over the features (n_iter_)": int(model.n_iter_)})
    if not reference:
        return result
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


def logistic_objective(X, labels, coef, intercept: float, C: float) -> float:
    """scikit-learn's L1 logistic objective ``C sum log(1 + exp(-y z)) + ||b||_1``."""
    z = X @ np.ravel(coef) + intercept
    signs = np.where(labels == 1, 1.0, -1.0)
    return float(C * np.logaddexp(0.0, -signs * z).sum() + np.abs(coef).sum())


def _demo_logistic(client, seed: int, progress: bool, size: str,
                   reference: bool = True) -> DemoResult:
    from dask_strads import LogisticRegression
    from dask_strads._datasets.logistic import C_min, make_classification

    n, p = {"tiny": (40, 80), "small": (200, 400), "full": (1000, 2000)}[size]
    X, labels = make_classification(n, p, n_informative=20, correlation=0.5,
                                    random_state=seed)
    C = 10 * C_min(X, labels)
    tol = 1e-6
    start = time.perf_counter()
    model = LogisticRegression(C=C, tol=tol, client=client, progress=progress).fit(X, labels)
    seconds = time.perf_counter() - start
    result = DemoResult("LogisticRegression", f"{n} x {p}, AR(1) rho=0.5", _rounds(model),
                        seconds, logistic_objective(X, labels, model.coef_,
                                                    model.intercept_[0], C),
                        "objective", estimator=model,
                        extra={"nnz": int(np.count_nonzero(model.coef_)),
                               "accuracy (training)": round(model.score(X, labels), 3),
                               "C": C, "samples": n})
    if not reference:
        return result
    with contextlib.suppress(ImportError):
        from sklearn.linear_model import LogisticRegression as SklearnLogistic

        start = time.perf_counter()
        # liblinear penalises the intercept: a large intercept_scaling makes that nil
        reference = SklearnLogistic(C=C, l1_ratio=1.0, solver="liblinear", tol=tol,
                                    intercept_scaling=1e4, max_iter=10_000).fit(X, labels)
        result.reference = "scikit-learn liblinear"
        result.reference_seconds = time.perf_counter() - start
        result.reference_iterations = int(np.max(reference.n_iter_))
        result.reference_objective = logistic_objective(X, labels, reference.coef_,
                                                        reference.intercept_[0], C)
    return result


def _demo_lda(client, seed: int, progress: bool, size: str,
              reference: bool = True) -> DemoResult:
    from dask_strads import LDA
    from dask_strads._datasets.lda import make_lda_corpus

    n_docs, n_words, n_topics, n_iter = {"tiny": (40, 50, 3, 2), "small": (300, 300, 5, 20),
                                         "full": (600, 600, 8, 40)}[size]
    X, _ = make_lda_corpus(n_docs, n_words, n_topics, doc_length=100, zipf=1.0,
                           random_state=seed)
    start = time.perf_counter()
    model = LDA(n_components=n_topics, max_iter=n_iter, random_state=seed, client=client,
                progress=progress).fit(X)
    seconds = time.perf_counter() - start
    n_tokens = int(X.sum())
    result = DemoResult("LDA", f"{n_docs} docs x {n_words} words, {n_tokens:,d} tokens, "
                        f"{n_topics} topics", _rounds(model), seconds,
                        float(model.loglikelihoods_[-1]) / n_tokens, "log-lik / token",
                        estimator=model, extra={"sweeps (n_iter_)": int(model.n_iter_)})
    if not reference:
        return result
    with contextlib.suppress(ImportError):
        import lda

        start = time.perf_counter()
        reference = _quietly(lambda: lda.LDA(
            n_topics=n_topics, n_iter=n_iter, alpha=model.doc_topic_prior,
            eta=model.topic_word_prior, random_state=seed, refresh=n_iter).fit(X))
        result.reference = "lda package (Gibbs)"
        result.reference_seconds = time.perf_counter() - start
        result.reference_iterations = n_iter
        result.reference_objective = float(reference.loglikelihood()) / n_tokens
    return result


def _demo_mf(client, seed: int, progress: bool, size: str,
             reference: bool = True) -> DemoResult:
    from dask_strads import MatrixFactorization
    from dask_strads._datasets.mf import make_ratings

    shape, n_observed = {"tiny": ((40, 30), 600), "small": ((400, 300), 15_000),
                         "full": ((2000, 1000), 100_000)}[size]
    noise = 0.1
    data = make_ratings(*shape, rank=5, n_observed=n_observed, noise=noise, random_state=seed)
    start = time.perf_counter()
    model = MatrixFactorization(n_components=5, alpha=0.1, max_iter=20 if size != "tiny" else 2,
                                random_state=seed, client=client, progress=progress)
    model.fit(data.train, validation=data.test)
    seconds = time.perf_counter() - start
    rmse = -model.score(data.test)
    result = DemoResult("MatrixFactorization",
                        f"{shape[0]} x {shape[1]}, {data.train.nnz:,d} ratings, rank 5",
                        _rounds(model), seconds, rmse, "test RMSE", estimator=model,
                        extra={"recommend(0)": model.recommend(0, 5).tolist(),
                               "outer iterations (n_iter_)": int(model.n_iter_)})
    result.reference = "noise level (best RMSE)"
    result.reference_objective = noise
    return result


def _quietly(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with the ``lda`` package's per-iteration log lines silenced, and undo
    the ``logging.basicConfig(level=INFO)`` that its constructor calls (else every
    library's INFO lines, matplotlib's included, reach the console for the rest of the
    demo)."""
    import logging

    logger, root = logging.getLogger("lda"), logging.getLogger()
    level, root_level, root_handlers = logger.level, root.level, list(root.handlers)
    logger.setLevel(logging.ERROR)
    try:
        return fn()
    finally:
        logger.setLevel(level)
        root.setLevel(root_level)
        for handler in [h for h in root.handlers if h not in root_handlers]:
            root.removeHandler(handler)


DEMOS: dict[str, Callable[..., DemoResult]] = {"lasso": _demo_lasso,
                                               "logistic": _demo_logistic,
                                               "lda": _demo_lda, "mf": _demo_mf}


# ---------------------------------------------------------------------------- output
def _fmt(value: float | int | None, digits: int = 6) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int | np.integer):
        return str(int(value))
    return f"{value:.{digits}g}"


ROUNDS_NOTE = ("rounds: schedule/push/pull rounds of the fit (rows of history_, the plots' x "
               "axis); ref. iterations: the reference's own (epochs over the features, Gibbs "
               "sweeps); compile: numba compiling the kernels on the workers, before and "
               "not in the fit's time")


def format_table(results: Sequence[DemoResult]) -> str:
    """The summary table as aligned plain text."""
    header = ["model", "measure", "rounds", "time (s)", "compile (s)", "value", "reference",
              "ref. iterations", "ref. time (s)", "ref. value"]
    rows = [[r.model, r.objective_name, _fmt(r.rounds), f"{r.seconds:.2f}",
             "-" if r.compile_seconds is None else f"{r.compile_seconds:.2f}",
             _fmt(r.objective), r.reference or "not installed", _fmt(r.reference_iterations),
             "-" if r.reference_seconds is None else f"{r.reference_seconds:.2f}",
             _fmt(r.reference_objective)] for r in results]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), line]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(out)


# the words of the table and of the plot: one source for both
X_AXIS = "round"
MF_CURVES = (("rmse", "test RMSE"), ("train_rmse", "training RMSE"))


def draw_plot(results: Sequence[DemoResult]):
    """The figure: convergence of each fit against its rounds, one panel per model, each
    panel's y axis the table's measure."""
    import matplotlib.pyplot as plt

    from dask_strads.plotting import plot_convergence

    fig, axes = plt.subplots(1, len(results), figsize=(5.0 * len(results), 3.8),
                             layout="constrained", squeeze=False)
    for ax, r in zip(axes.flat, results):
        model = r.estimator
        if r.model in ("Lasso", "LogisticRegression"):
            optimum = min(r.objective, r.reference_objective or r.objective)
            if r.model == "LogisticRegression":  # history_ holds it per sample, over C
                optimum /= r.extra["C"] * r.extra["samples"]
            # suboptimality against the better of the two fits, on the rounds that
            # evaluated the objective (duality-gap checks)
            plot_convergence(model, x=X_AXIS, optimum=optimum - 1e-12 * abs(optimum), ax=ax,
                             label="dask_strads")
            ax.set_ylabel(f"{r.objective_name} - best {r.objective_name}")
        elif r.model == "LDA":
            frame = model.history_[[X_AXIS, "loglikelihood"]].dropna()
            ax.plot(frame[X_AXIS], frame["loglikelihood"] / model.n_tokens_, marker="o",
                    markersize=3, label="dask_strads")
            if r.reference_objective is not None:
                ax.axhline(r.reference_objective, color="grey", linestyle=":",
                           label=f"{r.reference}, final")
            ax.set_xlabel(X_AXIS)
            ax.set_ylabel(r.objective_name)
            ax.grid(True, alpha=0.3)
            ax.legend()
        else:
            for column, label in MF_CURVES:
                plot_convergence(model, x=X_AXIS, y=column, ax=ax, label=label)
            ax.axhline(r.reference_objective, color="grey", linestyle=":",
                       label=r.reference)
            ax.set_ylabel("RMSE")
            ax.legend()
        ax.set_title(f"{r.model}: {r.data}\n{r.rounds} rounds, {r.seconds:.2f} s", fontsize=9)
    fig.suptitle("dask_strads demo: convergence", fontsize=11)
    return fig


def save_plot(results: Sequence[DemoResult], path: Path) -> Path:
    """:func:`draw_plot` written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = draw_plot(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- driver
def compile_kernels(client, name: str, seed: int = 0) -> float:
    """Fit model ``name`` once on a tiny problem, so that numba compiles its kernels on
    the workers before the timed fit; returns the seconds it took."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tiny fit may stop before it converges
        DEMOS[name](client, seed, False, "tiny", reference=False)
    return time.perf_counter() - start


def run_demo(client, models: Sequence[str] = MODELS, *, seed: int = 0, progress: bool = True,
             small: bool = False, warm_up: bool = True,
             echo: Callable[[str], Any] = print) -> list[DemoResult]:
    """Fit the demo models on ``client``'s cluster; returns one :class:`DemoResult` each.

    With ``warm_up``, each model is first fitted on a tiny problem (numba compiles its
    kernels then) and that time goes to ``compile_seconds``, not to ``seconds``.
    """
    unknown = [name for name in models if name not in DEMOS]
    if unknown:
        raise ValueError(f"models: unknown model {unknown[0]!r}; expected some of "
                         f"{list(MODELS)}")
    results = []
    for name in models:
        echo(f"\n== {name} ==")
        compile_s = None
        if warm_up:
            echo("compiling the kernels (numba, on the workers) ...")
            compile_s = compile_kernels(client, name, seed)
            echo(f"compiled in {compile_s:.1f} s (not counted in the fit's time)")
        result = DEMOS[name](client, seed, progress, "small" if small else "full")
        result.compile_seconds = compile_s
        results.append(result)
    return results


def _parse(argv: Sequence[str] | None, prog: str = "python -m dask_strads demo"
           ) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Fit Lasso, logistic regression, LDA and matrix factorisation on seeded "
                    "synthetic data on an embedded LocalCluster, print a summary table and "
                    "save a convergence plot.")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated subset of lasso,logistic,lda,mf (default: all four)")
    parser.add_argument("--n-workers", type=int, default=2,
                        help="worker processes of the embedded cluster (default: 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and fits")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="path of the convergence plot (PNG); default: "
                             "<tmpdir>/dask_strads_demo/convergence.png")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="time the fits with numba's compile time included")
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
    if args.output is not None and not args.no_plot:
        try:
            from matplotlib.backend_bases import FigureCanvasBase
        except ImportError:  # no plot is drawn: save_plot says so
            FigureCanvasBase = None
        kinds = FigureCanvasBase and FigureCanvasBase.get_supported_filetypes()
        if kinds and args.output.suffix.lstrip(".").lower() not in kinds:
            parser.error(f"--output: {args.output} is not a format matplotlib writes; "
                         f"expected one of {', '.join(sorted(kinds))}")
    args.models = models
    return args


def main(argv: Sequence[str] | None = None, prog: str = "python -m dask_strads demo") -> int:
    """Run the demo; returns a process exit code."""
    args = _parse(argv, prog)
    from distributed import Client, LocalCluster

    start = time.perf_counter()
    print(f"Starting a LocalCluster: {args.n_workers} worker processes on 127.0.0.1 ...")
    with LocalCluster(n_workers=args.n_workers, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        print(f"Dashboard: {client.dashboard_link}")
        results = run_demo(client, args.models, seed=args.seed,
                           progress=not args.no_progress, small=args.small,
                           warm_up=not args.no_warm_up)
    print("\nSummary (value: Lasso objective, lower is better; LDA log-likelihood per token, "
          "higher is better; MF test RMSE, lower is better)")
    print(format_table(results))
    print(ROUNDS_NOTE)
    if any(r.reference is None for r in results):
        print(f"A reference is not installed: {INSTALL_HINT}")
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
        return f"Convergence plot skipped: matplotlib is not installed ({INSTALL_HINT})"
    return f"Convergence plot: {save_plot(results, output).resolve()}"


if __name__ == "__main__":
    raise SystemExit(main())
