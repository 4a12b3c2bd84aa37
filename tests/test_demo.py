"""``python -m dask_strads demo``: the README's main job, run as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dask_strads import demo

ROOT = Path(__file__).resolve().parents[1]


def _run_demo(*args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    env["MPLBACKEND"] = "Agg"
    return subprocess.run([sys.executable, "-m", "dask_strads", "demo", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_demo_fits_all_models_prints_the_table_and_saves_the_plot(tmp_path):
    png = tmp_path / "plots" / "demo.png"
    proc = _run_demo("--small", "--no-progress", "--output", str(png))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "127.0.0.1" in out  # the embedded cluster listens on localhost only

    # the summary table: a header and one row per model, with its reference next to it
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model "))
    assert "rounds" in lines[header] and "time (s)" in lines[header]
    assert "compile (s)" in lines[header]  # numba's compile time, apart from the fits'
    assert out.count("(not counted in the fit's time)") == 4
    rows = {line.split()[0]: line for line in lines[header + 2:header + 6]}
    assert set(rows) == {"Lasso", "LogisticRegression", "LDA", "MatrixFactorization"}
    assert "scikit-learn Lasso" in rows["Lasso"]
    assert "lda package" in rows["LDA"]

    def numbers(line):
        return [float(x) for x in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", line)]

    # Lasso: the same objective as scikit-learn's to 1e-6 (both solve to tol=1e-6)
    lasso = numbers(rows["Lasso"].split("scikit-learn Lasso")[0])
    lasso_ref = numbers(rows["Lasso"].split("scikit-learn Lasso")[1])
    assert lasso[-1] == pytest.approx(lasso_ref[-1], rel=1e-5)
    # logistic regression: liblinear's objective, reached or beaten
    logistic = numbers(rows["LogisticRegression"].split("scikit-learn liblinear")[0])
    logistic_ref = numbers(rows["LogisticRegression"].split("scikit-learn liblinear")[1])
    assert logistic[-1] <= logistic_ref[-1] * (1 + 1e-5)
    # MF: the test RMSE is close to the noise level (0.1) of the ratings
    mf = numbers(rows["MatrixFactorization"].split("noise level")[0])
    assert 0.1 <= mf[-1] < 0.2
    # LDA: per-token log-likelihood no worse than the lda package's after as many sweeps
    lda_ours = numbers(rows["LDA"].split("lda package")[0])[-1]
    lda_ref = numbers(rows["LDA"].split("lda package")[1])[-1]
    assert -10 < lda_ours < 0 and lda_ours > lda_ref - 0.05

    # the plot, at the printed path
    printed = re.search(r"Convergence plot: (.+\.png)", out)
    assert printed and Path(printed.group(1)) == png.resolve()
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_demo_rejects_bad_arguments():
    proc = _run_demo("--models", "lasso,svm", timeout=120)
    assert proc.returncode == 2
    assert "--models: unknown model(s) ['svm']" in proc.stderr
    with pytest.raises(SystemExit):
        demo._parse(["--n-workers", "0"])
    assert demo._parse(["--models", " LDA, mf "]).models == ["lda", "mf"]
    with pytest.raises(SystemExit):  # before the fits, not after them
        demo._parse(["--output", "out.txt"])
    assert demo._parse(["--output", "out.txt", "--no-plot"]).no_plot
    assert demo._parse(["-o", "plot.svg"]).output.name == "plot.svg"


def test_run_demo_names_unknown_models():
    with pytest.raises(ValueError, match="models: unknown model 'svm'"):
        demo.run_demo(None, ["svm"], echo=lambda _: None)


def test_summary_table_aligns_results_and_references():
    results = [
        demo.DemoResult("Lasso", "d", 12, 1.234, 7.5, "objective", "scikit-learn Lasso", 20,
                        0.05, 7.5, compile_seconds=20.5),
        demo.DemoResult("LDA", "d", 40, 10.0, -4.0, "log-lik / token"),
    ]
    table = demo.format_table(results).splitlines()
    assert len(table) == 4 and set(table[1]) <= {"-", " "}
    starts = [m.start() for m in re.finditer(r"\S+", table[0])]
    assert table[2][starts[3]:].startswith("1.23")  # time column aligned with its header
    assert table[2][starts[5]:].startswith("20.50")  # compile time in a column of its own
    assert "not installed" in table[3] and table[3].rstrip().endswith("-")


def test_lasso_objective_is_scikit_learns():
    from sklearn.linear_model import Lasso

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((50, 8)), rng.standard_normal(50)
    model = Lasso(alpha=0.05).fit(X, y)
    r = y - model.predict(X)
    expected = r @ r / (2 * 50) + 0.05 * np.abs(model.coef_).sum()
    assert demo.lasso_objective(X, y, model.coef_, model.intercept_, 0.05) == \
        pytest.approx(expected)


def test_without_matplotlib_the_demo_says_how_to_get_the_plot(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    message = demo.plot_message([], tmp_path / "x.png")
    assert message.count("\n") == 0 and "matplotlib is not installed" in message
    assert 'pip install -e ".[demo]"' in message  # what the README's command 1 installs
    assert not (tmp_path / "x.png").exists()


def _history(n_rounds, **columns):
    import pandas as pd

    return pd.DataFrame({"round": np.arange(n_rounds), "time": 0.01 * np.arange(n_rounds),
                         **columns})


class _Fitted:
    def __init__(self, history, **attrs):
        self.history_ = history
        vars(self).update(attrs)


def test_table_and_plot_say_the_same_things():
    """The plot's x axis is what the table's "rounds" column counts, its y axes are the
    table's measures, and MF's held-out curve has the table's name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 30
    lasso = _Fitted(_history(n, objective=np.r_[10.0, [np.nan] * 8, np.geomspace(5, 1, n - 9)]))
    lda = _Fitted(_history(n, loglikelihood=np.linspace(-5e3, -2e3, n)), n_tokens_=1000)
    mf = _Fitted(_history(n, rmse=np.linspace(1, 0.12, n), train_rmse=np.linspace(1, 0.1, n),
                          objective=np.linspace(9, 1, n)))
    results = [
        demo.DemoResult("Lasso", "d", n, 1.0, 1.0, "objective", "scikit-learn Lasso", 5, 0.1,
                        1.0, estimator=lasso),
        demo.DemoResult("LDA", "d", n, 1.0, -2.0, "log-lik / token", "lda package (Gibbs)", 20,
                        0.5, -2.1, estimator=lda),
        demo.DemoResult("MatrixFactorization", "d", n, 1.0, 0.12, "test RMSE",
                        "noise level (best RMSE)", reference_objective=0.1, estimator=mf),
    ]
    fig = demo.draw_plot(results)
    try:
        axes = fig.axes
        assert [ax.get_xlabel() for ax in axes] == ["round"] * 3
        table = demo.format_table(results)
        assert "rounds" in table.splitlines()[0] and "iterations" not in table.split()[:4]
        for ax, r in zip(axes, results):
            assert f"{r.rounds} rounds" in ax.get_title()
            assert r.rounds == len(r.estimator.history_)
        assert axes[0].get_ylabel().startswith("objective")
        assert axes[1].get_ylabel() == "log-lik / token"
        # LDA's curve is per token, as the table's value and the reference line are
        assert axes[1].lines[0].get_ydata()[-1] == pytest.approx(-2.0)
        mf_labels = [t.get_text() for t in axes[2].get_legend().get_texts()]
        assert "test RMSE" in mf_labels and "validation RMSE" not in mf_labels
    finally:
        plt.close(fig)


def test_kernels_are_compiled_before_the_timed_fit(monkeypatch):
    import time

    calls = []

    def fake(client, seed, progress, size, reference=True):
        calls.append((size, reference))
        time.sleep(0.3 if size == "tiny" else 0.0)  # the compile happens on the first fit
        return demo.DemoResult("Lasso", "d", 3, 0.01, 1.0, "objective")

    monkeypatch.setitem(demo.DEMOS, "lasso", fake)
    lines = []
    [result] = demo.run_demo(None, ["lasso"], echo=lines.append)
    assert calls == [("tiny", False), ("full", True)]
    assert result.compile_seconds >= 0.3 and result.seconds == 0.01
    assert any("not counted in the fit's time" in line for line in lines)
    calls.clear()
    [result] = demo.run_demo(None, ["lasso"], small=True, warm_up=False, echo=lines.append)
    assert calls == [("small", True)] and result.compile_seconds is None


def test_the_lda_reference_leaves_the_logging_configuration_as_it_was(monkeypatch):
    import logging

    lda = pytest.importorskip("lda")
    root = logging.getLogger()
    # as in a plain `python -m dask_strads demo`: no handler on the root logger (pytest
    # has its own, which would make the package's logging.basicConfig a no-op)
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    X = np.random.default_rng(0).integers(0, 3, (20, 15))
    model = demo._quietly(lambda: lda.LDA(n_topics=2, n_iter=2, random_state=0).fit(X))
    assert model.components_.shape == (2, 15)
    assert root.level == logging.WARNING and root.handlers == []
    lda.LDA(n_topics=2, n_iter=2)  # what the package does on its own
    assert root.level == logging.INFO and len(root.handlers) == 1
