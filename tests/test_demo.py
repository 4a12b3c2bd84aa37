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
    assert "iterations" in lines[header] and "time (s)" in lines[header]
    rows = {line.split()[0]: line for line in lines[header + 2:header + 5]}
    assert set(rows) == {"Lasso", "LDA", "MatrixFactorization"}
    assert "scikit-learn Lasso" in rows["Lasso"]
    assert "lda package" in rows["LDA"]

    def numbers(line):
        return [float(x) for x in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", line)]

    # Lasso: the same objective as scikit-learn's to 1e-6 (both solve to tol=1e-6)
    lasso = numbers(rows["Lasso"].split("scikit-learn Lasso")[0])
    lasso_ref = numbers(rows["Lasso"].split("scikit-learn Lasso")[1])
    assert lasso[-1] == pytest.approx(lasso_ref[-1], rel=1e-5)
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


def test_run_demo_names_unknown_models():
    with pytest.raises(ValueError, match="models: unknown model 'svm'"):
        demo.run_demo(None, ["svm"], echo=lambda _: None)


def test_summary_table_aligns_results_and_references():
    results = [
        demo.DemoResult("Lasso", "d", 12, 1.234, 7.5, "objective", "scikit-learn Lasso", 20,
                        0.05, 7.5),
        demo.DemoResult("LDA", "d", 40, 10.0, -4.0, "log-lik / token"),
    ]
    table = demo.format_table(results).splitlines()
    assert len(table) == 4 and set(table[1]) <= {"-", " "}
    starts = [m.start() for m in re.finditer(r"\S+", table[0])]
    assert table[2][starts[3]:].startswith("1.23")  # time column aligned with its header
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
    assert "pip install 'dask-strads[plot]'" in message
    assert not (tmp_path / "x.png").exists()
