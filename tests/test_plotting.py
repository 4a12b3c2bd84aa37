"""dask_strads.plotting: curves drawn from engine histories and fitted models."""

from __future__ import annotations

import sys

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from dask_strads import plotting  # noqa: E402
from dask_strads.engine import run  # noqa: E402
from dask_strads.plotting import (  # noqa: E402
    compare,
    convergence_frame,
    history_of,
    plot_convergence,
    plot_round_times,
    plot_top_words,
    top_words,
)
from tests.engine.programs import BlockLeastSquares  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _history(objective, time=None, **extra) -> pd.DataFrame:
    objective = np.asarray(objective, dtype=float)
    n = len(objective)
    frame = {"round": np.arange(n), "time": np.linspace(0.0, 1.0, n) if time is None else time,
             "objective": objective, "schedule_s": np.full(n, 0.001), "push_s": np.full(n, 0.01),
             "pull_s": np.full(n, 0.002), "wait_s": np.full(n, 0.003), "transport": "direct"}
    frame.update(extra)
    return pd.DataFrame(frame)


@pytest.fixture(scope="module")
def lstsq_result(cluster):
    """A real engine fit: block least squares on the shared process cluster."""
    from distributed import Client

    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 40))
    y = X @ rng.standard_normal(40) + 0.1 * rng.standard_normal(300)
    blocks = np.array_split(np.arange(40), 4)
    with Client(cluster, set_as_default=False) as client:
        data = {b: (X[:, c], y) for b, c in enumerate(blocks)}
        result = run(BlockLeastSquares(y, tol=1e-10), data, client=client, max_rounds=400,
                     progress=False)
    reference = 0.5 * float(np.sum((y - X @ np.linalg.lstsq(X, y, rcond=None)[0]) ** 2))
    return result, reference


# ------------------------------------------------------------------------ histories
def test_history_of_accepts_models_results_and_frames(lstsq_result):
    result, _ = lstsq_result
    frame = _history([3.0, 2.0])

    class Fitted:
        history_ = frame

    assert history_of(frame) is frame
    assert history_of(Fitted()) is frame
    assert history_of(result) is result.history


def test_history_of_rejects_unfitted_and_other_objects():
    from sklearn.linear_model import Lasso

    with pytest.raises(TypeError, match="not fitted yet"):
        history_of(Lasso())
    with pytest.raises(TypeError, match="got list"):
        history_of([1, 2])


def test_convergence_frame_drops_rounds_without_objective_and_subtracts_optimum():
    history = _history([5.0, np.nan, 3.0, np.nan, 2.0])
    frame = convergence_frame(history, x="round")
    assert frame.columns.tolist() == ["round", "objective"]
    assert frame["round"].tolist() == [0, 2, 4]
    assert frame["objective"].tolist() == [5.0, 3.0, 2.0]
    shifted = convergence_frame(history, x="round", optimum=2.0)
    assert shifted["objective"].tolist() == [3.0, 1.0, 0.0]


def test_convergence_frame_drops_repeated_points_only():
    history = _history([4.0, 4.0, 4.0, 1.0], time=[0.0, 0.0, 0.5, 1.0])
    frame = convergence_frame(history)
    # the repeated (0.0, 4.0) goes; a plateau at a later time stays
    assert frame["time"].tolist() == [0.0, 0.5, 1.0]


def test_convergence_frame_keeps_the_last_round_of_each_iteration():
    history = _history([9.0, 5.0, 4.0, 3.0, 2.5], iteration=[0, 1, 1, 2, 2])
    frame = convergence_frame(history, x="iteration")
    assert frame["iteration"].tolist() == [0, 1, 2]
    assert frame["objective"].tolist() == [9.0, 4.0, 2.5]


def test_unknown_column_names_the_argument_and_the_choices():
    with pytest.raises(ValueError, match=r"y: 'rmse' is not a column.*'objective'"):
        convergence_frame(_history([1.0]), y="rmse")
    with pytest.raises(ValueError, match=r"x: 'seconds'"):
        plot_convergence(_history([1.0]), x="seconds")


# ------------------------------------------------------------------ plot_convergence
def test_plot_convergence_draws_the_engine_history(lstsq_result, tmp_path):
    result, reference = lstsq_result
    history = result.history
    assert result.stop_reason == "converged"
    for x in ("time", "round"):
        ax = plot_convergence(result, x=x, label="lstsq")
        (line,) = ax.get_lines()
        expected = convergence_frame(history, x=x)
        np.testing.assert_array_equal(line.get_xdata(), expected[x])
        np.testing.assert_array_equal(line.get_ydata(), expected["objective"])
        assert ax.get_xlabel() == ("time (s)" if x == "time" else "round")
        assert ax.get_legend().get_texts()[0].get_text() == "lstsq"
    # the curve ends at the least-squares optimum
    assert line.get_ydata()[-1] == pytest.approx(reference, rel=1e-8)
    ax = plot_convergence(result, x="round", optimum=reference)
    assert ax.get_yscale() == "log"
    assert ax.get_ylabel() == "objective - optimum"
    assert np.all(ax.get_lines()[0].get_ydata() > 0)
    path = tmp_path / "lstsq.png"
    ax.figure.savefig(path)
    assert path.stat().st_size > 1000


def test_plot_convergence_log_scale_rules():
    decreasing = _history([1000.0, 10.0, 1.0])
    assert plot_convergence(decreasing).get_yscale() == "log"
    assert plot_convergence(_history([3.0, 2.0])).get_yscale() == "linear"  # one decade or less
    assert plot_convergence(_history([-5.0, -1.0])).get_yscale() == "linear"  # log-likelihoods
    assert plot_convergence(decreasing, log=False).get_yscale() == "linear"
    ax = plot_convergence(_history([3.0, 0.0, -1.0, 2.0]), log=True)
    assert ax.get_lines()[0].get_ydata().tolist() == [3.0, 2.0]  # non-positive left out
    with pytest.raises(ValueError, match="log: expected True, False or 'auto', got 'yes'"):
        plot_convergence(decreasing, log="yes")


def test_plot_convergence_draws_on_a_given_axes_and_passes_style():
    fig, ax = plt.subplots()
    out = plot_convergence(_history([2.0, 1.0]), ax=ax, color="red", y="objective")
    assert out is ax
    assert matplotlib.colors.to_hex(ax.get_lines()[0].get_color()) == "#ff0000"
    assert ax.get_legend() is None


def test_plot_convergence_of_a_metric_column():
    history = _history([2.0, 1.0, 0.5], rmse=[0.9, np.nan, 0.3])
    ax = plot_convergence(history, x="round", y="rmse")
    assert ax.get_lines()[0].get_ydata().tolist() == [0.9, 0.3]
    assert ax.get_ylabel() == "validation RMSE"


# --------------------------------------------------------------------------- compare
def test_compare_draws_one_labelled_curve_per_fit():
    fits = {"priority": _history([4.0, 1.0, 0.5]), "random": _history([4.0, 2.0, 1.0])}
    ax = compare(fits, x="round")
    assert [line.get_label() for line in ax.get_lines()] == ["priority", "random"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["priority", "random"]
    np.testing.assert_array_equal(ax.get_lines()[1].get_ydata(), [4.0, 2.0, 1.0])
    ax = compare(list(fits.values()), labels=["a", "b"])
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    ax = compare(list(fits.values()))
    assert [line.get_label() for line in ax.get_lines()] == ["fit 0", "fit 1"]


def test_compare_against_the_best_fit():
    fits = [_history([4.0, 1.0, 0.5]), _history([4.0, 2.0, 1.0])]
    ax = compare(fits, labels=["fast", "slow"], x="round", optimum="best")
    assert ax.get_yscale() == "log"
    fast, slow = ax.get_lines()
    assert fast.get_ydata().tolist() == [3.5, 0.5]  # its final 0 cannot go on a log axis
    assert slow.get_ydata().tolist() == [3.5, 1.5, 0.5]
    assert ax.get_ylabel() == "objective - optimum"


def test_compare_keeps_a_diverging_fit_from_squashing_the_others():
    fits = {"converges": _history([10.0, 1.0, 1e-6]),
            "diverges": _history([10.0, 20.0, 1e40, 1e300, np.inf, np.nan, 1e300, 1e300])}
    ax = compare(fits, x="round")
    assert ax.get_yscale() == "log"
    assert ax.get_ylim()[1] == pytest.approx(100.0)
    assert 1e-7 < ax.get_ylim()[0] < 1e-6
    # the infinite and NaN rounds are not drawn; the finite ones are
    assert ax.get_lines()[1].get_xdata().tolist() == [0, 1, 2, 3, 6, 7]
    # the x axis ends near the last point under the cut (round 2), not at round 7
    assert 2 < ax.get_xlim()[1] < 2.2


def test_compare_validates_its_arguments():
    fits = [_history([1.0]), _history([2.0])]
    with pytest.raises(ValueError, match="labels: expected 2 labels"):
        compare(fits, labels=["one"])
    with pytest.raises(ValueError, match="at least one fit"):
        compare([])
    with pytest.raises(ValueError, match="optimum: expected a number, 'best' or None"):
        compare(fits, optimum="min")
    with pytest.raises(ValueError, match="labels: give labels either"):
        compare({"a": fits[0]}, labels=["b"])


def test_plot_round_times_stacks_cumulative_seconds():
    history = _history([3.0, 2.0, 1.0])
    ax = plot_round_times(history)
    tops = np.vstack([c.get_paths()[0].vertices for c in ax.collections])
    total = float(history[["schedule_s", "push_s", "wait_s", "pull_s"]].to_numpy().sum())
    assert tops[:, 1].max() == pytest.approx(total)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["schedule", "push", "wait",
                                                                    "pull"]
    with pytest.raises(ValueError, match="timing columns"):
        plot_round_times(history[["round", "time", "objective"]])


# ------------------------------------------------------------------------- top words
def test_top_words_ranks_each_topic():
    rng = np.random.default_rng(1)
    topic_word = rng.gamma(0.3, size=(4, 30))
    vocabulary = [f"w{i}" for i in range(30)]
    table = top_words(topic_word, vocabulary, n_words=5)
    assert table.shape == (4, 5) and table.index.name == "topic"
    for k in range(4):
        expected = [vocabulary[i] for i in np.argsort(-topic_word[k])[:5]]
        assert table.loc[k].tolist() == expected
    assert top_words(topic_word, vocabulary, n_words=3, topics=[2]).index.tolist() == [2]
    assert top_words(topic_word, vocabulary, n_words=100).shape == (4, 30)


def test_top_words_validates_its_arguments():
    topic_word = np.ones((2, 3))
    with pytest.raises(ValueError, match="vocabulary: expected 3 words"):
        top_words(topic_word, ["a", "b"])
    with pytest.raises(ValueError, match=r"topics: \[5\] out of range"):
        top_words(topic_word, ["a", "b", "c"], topics=[5])
    with pytest.raises(ValueError, match="n_words: expected a positive integer, got 0"):
        top_words(topic_word, ["a", "b", "c"], n_words=0)
    with pytest.raises(ValueError, match="2-d topic-word"):
        top_words(np.ones(3), ["a", "b", "c"])


def test_plot_top_words_draws_one_panel_per_topic():
    topic_word = np.array([[5.0, 1.0, 3.0, 1.0], [0.5, 4.0, 1.0, 2.5], [1.0, 1.0, 1.0, 9.0]])
    vocabulary = ["apple", "bus", "cherry", "dog"]
    fig = plot_top_words(topic_word, vocabulary, n_words=2, ncols=2)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 3 and len(fig.axes) == 4
    first = visible[0]
    assert [t.get_text() for t in first.get_yticklabels()] == ["apple", "cherry"]
    widths = [bar.get_width() for bar in first.patches]
    np.testing.assert_allclose(widths, [0.5, 0.3])
    assert visible[2].get_title() == "topic 2"


def test_missing_matplotlib_names_the_plot_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"dask-strads\[plot\]"):
        plot_convergence(_history([2.0, 1.0]))
    # the tables need no matplotlib
    assert top_words(np.eye(2) + 1, ["a", "b"], n_words=1).values.tolist() == [["a"], ["b"]]
    assert plotting.convergence_frame(_history([2.0])).shape == (1, 2)


# ------------------------------------------------------------------- fitted models
@pytest.mark.slow
def test_plots_of_fitted_models(client):
    from sklearn.linear_model import Lasso as SklearnLasso

    from dask_strads import LDA, Lasso, MatrixFactorization
    from dask_strads._datasets.lasso import make_correlated_regression
    from dask_strads._datasets.lda import make_lda_corpus
    from dask_strads._datasets.mf import make_ratings

    # Lasso: one curve per schedule, named after it, ending at scikit-learn's optimum
    X, y, _ = make_correlated_regression(100, 60, n_informative=5, random_state=0)
    fits = [Lasso(alpha=0.05, schedule=s, tol=1e-8, random_state=0, client=client).fit(X, y)
            for s in ("priority", "round_robin")]
    reference = SklearnLasso(alpha=0.05, tol=1e-10).fit(X, y)
    r = y - reference.predict(X)
    optimum = r @ r / (2 * len(y)) + 0.05 * np.abs(reference.coef_).sum()
    ax = compare(fits, x="round")
    assert [line.get_label() for line in ax.get_lines()] == ["Lasso (priority)",
                                                             "Lasso (round_robin)"]
    for line, model in zip(ax.get_lines(), fits):
        assert line.get_ydata()[-1] == pytest.approx(optimum, rel=1e-6)
        assert line.get_xdata()[-1] == model.history_["round"].iloc[-1]
    assert compare(fits, optimum=optimum * (1 - 1e-9)).get_yscale() == "log"

    # LDA: the log-likelihood curve is loglikelihoods_, the top words follow components_
    counts, _ = make_lda_corpus(60, 40, 3, doc_length=30, random_state=0)
    lda = LDA(n_components=3, max_iter=5, random_state=0, client=client).fit(counts)
    ax = plot_convergence(lda, x="iteration", y="loglikelihood")
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), lda.loglikelihoods_)
    vocabulary = [f"word{i}" for i in range(40)]
    table = top_words(lda, vocabulary, n_words=3)
    for k in range(3):
        best = np.argsort(-lda.components_[k], kind="stable")[:3]
        assert table.loc[k].tolist() == [vocabulary[i] for i in best]
    assert len(plot_top_words(lda, vocabulary, n_words=3).axes) == 3

    # MF: the validation RMSE curve ends at the fitted model's test RMSE
    data = make_ratings(100, 60, rank=2, n_observed=2000, random_state=0)
    mf = MatrixFactorization(n_components=2, alpha=0.05, max_iter=5, random_state=0,
                             client=client, progress=False).fit(data.train, validation=data.test)
    ax = plot_convergence(mf, x="iteration", y="rmse")
    assert ax.get_lines()[0].get_ydata()[-1] == pytest.approx(-mf.score(data.test), rel=1e-6)
    assert ax.get_lines()[0].get_xdata().tolist() == list(range(mf.n_iter_ + 1))
