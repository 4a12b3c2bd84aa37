"""Plots of fits: convergence curves, comparisons of several fits, LDA topics.

Every function takes a fitted estimator (anything with a ``history_`` DataFrame), an
engine :class:`~dask_strads.engine.RunResult` (its ``history``) or the history
DataFrame itself, and returns the matplotlib ``Axes`` (or ``Figure``) it drew on, so
the caller can style or save it.

matplotlib is an optional dependency (the ``plot`` extra: ``pip install
'dask-strads[plot]'``); it is imported only when a plot is drawn. :func:`top_words` and
:func:`convergence_frame` need only pandas.

Examples
--------
>>> import pandas as pd
>>> from dask_strads.plotting import convergence_frame
>>> history = pd.DataFrame({"round": [0, 1, 2], "time": [0.0, 0.1, 0.2],
...                         "objective": [4.0, float("nan"), 1.0]})
>>> convergence_frame(history, x="round").to_dict("list")
{'round': [0, 2], 'objective': [4.0, 1.0]}
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "compare",
    "convergence_frame",
    "history_of",
    "plot_convergence",
    "plot_round_times",
    "plot_top_words",
    "top_words",
]

# seconds columns of the engine's history, in the order a round spends them
TIME_COLUMNS = ("schedule_s", "push_s", "wait_s", "pull_s")

_LABELS = {
    "time": "time (s)",
    "round": "round",
    "objective": "objective",
    "iteration": "iteration",
    "rmse": "validation RMSE",
    "train_rmse": "training RMSE",
    "loglikelihood": "log-likelihood",
}


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - matplotlib is installed in CI
        raise ImportError(
            "dask_strads.plotting needs matplotlib, which is not installed; install the "
            "'plot' extra: pip install 'dask-strads[plot]' (or pip install matplotlib)"
        ) from err
    return plt


def history_of(model_or_history: Any) -> pd.DataFrame:
    """The engine history of a fitted estimator, a ``RunResult`` or a DataFrame.

    Parameters
    ----------
    model_or_history : estimator, RunResult or pandas.DataFrame
        A fitted estimator (``history_``), the result of :func:`dask_strads.engine.run`
        (``history``) or the history itself.

    Returns
    -------
    pandas.DataFrame
    """
    if isinstance(model_or_history, pd.DataFrame):
        return model_or_history
    for attr in ("history_", "history"):
        history = getattr(model_or_history, attr, None)
        if isinstance(history, pd.DataFrame):
            return history
    raise TypeError(
        f"model_or_history: expected a fitted dask_strads estimator (with history_), an "
        f"engine RunResult or a pandas DataFrame, got {type(model_or_history).__name__}"
        + (" (not fitted yet?)" if hasattr(type(model_or_history), "fit") else "")
    )


def _check_column(history: pd.DataFrame, column: str, name: str) -> None:
    if column not in history.columns:
        raise ValueError(f"{name}: {column!r} is not a column of the history; expected one of "
                         f"{sorted(map(str, history.columns))}")


def convergence_frame(model_or_history: Any, x: str = "time", y: str = "objective", *,
                      optimum: float | None = None) -> pd.DataFrame:
    """The ``(x, y)`` points of a convergence curve, as a two-column DataFrame.

    Rounds where ``y`` was not computed (NaN: e.g. Lasso evaluates its objective only on
    duality-gap rounds) or is infinite (a diverged fit) are dropped, as are repeated rows
    where neither ``x`` nor ``y`` changed; when several rounds share an ``x`` value (an
    ``"iteration"`` made of several rounds), the last of them is kept.

    Parameters
    ----------
    model_or_history : estimator, RunResult or pandas.DataFrame
        See :func:`history_of`.
    x : str, default="time"
        Column on the horizontal axis: ``"time"`` (seconds since the fit started),
        ``"round"``, or any other history column (``"iteration"``, ...).
    y : str, default="objective"
        Column on the vertical axis (``"objective"``, or a metric such as MF's
        ``"rmse"``).
    optimum : float, optional
        Subtract this value from ``y`` (suboptimality ``F - F*``).

    Returns
    -------
    pandas.DataFrame with columns ``x`` and ``y``
    """
    history = history_of(model_or_history)
    _check_column(history, x, "x")
    _check_column(history, y, "y")
    frame = history[[x, y]] if x != y else history[[x]]
    frame = frame.apply(pd.to_numeric, errors="coerce")
    # NaN: not computed that round; inf: a diverged fit (e.g. shotgun on correlated data)
    frame = frame.loc[np.isfinite(frame.to_numpy(dtype=float)).all(axis=1)]
    frame = frame.loc[~frame.duplicated(keep="first")]
    if x != y:
        # several rounds per x value (e.g. per iteration): the curve shows the last of them
        frame = frame.drop_duplicates(subset=[x], keep="last")
    if optimum is not None:
        frame = frame.assign(**{y: frame[y] - float(optimum)})
    return frame.reset_index(drop=True)


def _use_log(values: np.ndarray, log: bool | str, suboptimality: bool) -> bool:
    if log == "auto":
        finite = values[np.isfinite(values)]
        if finite.size == 0 or np.any(finite <= 0):
            return bool(suboptimality and finite.size > 0 and np.any(finite > 0))
        return bool(suboptimality or float(finite.max() / finite.min()) >= 100.0)
    if isinstance(log, bool | np.bool_):
        return bool(log)
    raise ValueError(f"log: expected True, False or 'auto', got {log!r}")


def _label(column: str) -> str:
    return _LABELS.get(column, column.replace("_", " "))


def _new_axes(ax):
    if ax is not None:
        return ax
    plt = _pyplot()
    _, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    return ax


def plot_convergence(model_or_history: Any, x: str = "time", y: str = "objective", *,
                     ax=None, label: str | None = None, log: bool | str = "auto",
                     optimum: float | None = None, **plot_kwargs: Any):
    """Plot one fit's convergence: ``y`` (the objective by default) against time or rounds.

    Parameters
    ----------
    model_or_history : estimator, RunResult or pandas.DataFrame
        A fitted estimator (its ``history_``), an engine ``RunResult`` or a history.
    x : str, default="time"
        ``"time"`` (seconds), ``"round"``, or another history column.
    y : str, default="objective"
        The history column to plot.
    ax : matplotlib.axes.Axes, optional
        Draw here; by default on a new figure.
    label : str, optional
        Legend label of the curve (a legend is drawn when given).
    log : bool or "auto", default="auto"
        Logarithmic y axis. ``"auto"``: when ``optimum`` is given, or when every value
        is positive and they span at least two decades. Non-positive values cannot be
        drawn on a log axis and are left out.
    optimum : float, optional
        Plot ``y - optimum`` (suboptimality) instead of ``y``.
    **plot_kwargs
        Passed to ``Axes.plot`` (``color``, ``linestyle``, ...).

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import pandas as pd
    >>> from dask_strads.plotting import plot_convergence
    >>> history = pd.DataFrame({"round": [0, 1, 2], "time": [0.0, 0.1, 0.2],
    ...                         "objective": [100.0, 10.0, 1.0]})
    >>> ax = plot_convergence(history, x="round")
    >>> ax.get_yscale()
    'log'
    """
    frame = convergence_frame(model_or_history, x, y, optimum=optimum)
    ax = _new_axes(ax)
    values = frame[y].to_numpy(dtype=float)
    use_log = _use_log(values, log, optimum is not None)
    if use_log:
        frame = frame.loc[values > 0]
    marker = "o" if len(frame) <= 30 else None
    plot_kwargs.setdefault("marker", marker)
    plot_kwargs.setdefault("markersize", 3)
    ax.plot(frame[x].to_numpy(), frame[y].to_numpy(), label=label, **plot_kwargs)
    if use_log:
        ax.set_yscale("log")
    ax.set_xlabel(_label(x))
    ylabel = _label(y)
    ax.set_ylabel(f"{ylabel} - optimum" if optimum is not None else ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if label is not None:
        ax.legend()
    return ax


def _named_fits(models_or_histories, labels) -> list[tuple[str, Any]]:
    if isinstance(models_or_histories, Mapping):
        if labels is not None:
            raise ValueError("labels: give labels either as the keys of a mapping or as "
                             "labels=, not both")
        return [(str(k), v) for k, v in models_or_histories.items()]
    if isinstance(models_or_histories, pd.DataFrame) or hasattr(models_or_histories, "history_"):
        models_or_histories = [models_or_histories]
    fits = list(models_or_histories)
    if not fits:
        raise ValueError("models_or_histories: expected at least one fit, got none")
    if labels is None:
        labels = [_default_label(f, i) for i, f in enumerate(fits)]
    labels = [str(label) for label in labels]
    if len(labels) != len(fits):
        raise ValueError(f"labels: expected {len(fits)} labels (one per fit), got {len(labels)}")
    return list(zip(labels, fits))


def _default_label(fit: Any, i: int) -> str:
    if isinstance(fit, pd.DataFrame) or not hasattr(fit, "get_params"):
        return f"fit {i}"
    params = fit.get_params(deep=False)
    name = type(fit).__name__
    if "schedule" in params:
        return f"{name} ({params['schedule']})"
    return f"{name} {i}"


def compare(models_or_histories: Sequence | Mapping[Hashable, Any],
            labels: Sequence[str] | None = None, *, x: str = "time", y: str = "objective",
            ax=None, log: bool | str = "auto", optimum: float | str | None = None):
    """Plot several fits' convergence on one axis.

    Parameters
    ----------
    models_or_histories : sequence or mapping
        Fitted estimators, ``RunResult`` objects or histories; a mapping
        ``label -> fit`` names the curves by its keys.
    labels : sequence of str, optional
        One label per fit (default: the estimator's class and schedule, or "fit i").
    x, y : str
        History columns, as in :func:`plot_convergence`.
    ax : matplotlib.axes.Axes, optional
        Draw here; by default on a new figure.
    log : bool or "auto", default="auto"
        Logarithmic y axis (see :func:`plot_convergence`); decided once for all curves.
    optimum : float or "best", optional
        Plot ``y - optimum``. ``"best"`` uses the smallest ``y`` reached by any of the
        fits, so the curves show how far each is from the best of them (the best
        point itself, at zero, is left off a log axis).

    Notes
    -----
    On a log axis, a fit that diverges (values over 100 times the largest starting
    value) is cut at ten times the largest starting value, and the x axis ends with the
    last point drawn below that cut, so it does not squash the others.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import pandas as pd
    >>> from dask_strads.plotting import compare
    >>> fast = pd.DataFrame({"round": [0, 1], "time": [0.0, 1.0], "objective": [2.0, 1.0]})
    >>> slow = pd.DataFrame({"round": [0, 1], "time": [0.0, 2.0], "objective": [2.0, 1.5]})
    >>> ax = compare({"fast": fast, "slow": slow})
    >>> [line.get_label() for line in ax.get_lines()]
    ['fast', 'slow']
    """
    fits = _named_fits(models_or_histories, labels)
    frames = [(name, convergence_frame(fit, x, y)) for name, fit in fits]
    if isinstance(optimum, str):
        if optimum != "best":
            raise ValueError(f"optimum: expected a number, 'best' or None, got {optimum!r}")
        optimum = min(float(f[y].min()) for _, f in frames if len(f))
    if optimum is not None:
        frames = [(name, f.assign(**{y: f[y] - float(optimum)})) for name, f in frames]
    all_values = np.concatenate([f[y].to_numpy(dtype=float) for _, f in frames])
    use_log = _use_log(all_values, log, optimum is not None)
    starts = [float(f[y].iloc[0]) for _, f in frames if len(f) and f[y].iloc[0] > 0]
    top = None
    if use_log and starts and all_values.max() > 100 * max(starts):
        # a diverging fit would squash the others: cap the axis a decade above the starts
        # (and clip what is drawn far above it: huge values overflow the log transform)
        top = 10 * max(starts)
        frames = [(name, f.assign(**{y: f[y].clip(upper=top * 100)})) for name, f in frames]
    ax = _new_axes(ax)
    for name, frame in frames:
        plot_convergence(frame, x, y, ax=ax, label=name, log=use_log)
    if top is not None:
        positive = all_values[all_values > 0]
        ax.set_ylim(bottom=float(positive.min()) / 3, top=top)
        shown = [f.loc[f[y] <= top, x] for _, f in frames]
        right = max(float(s.max()) for s in shown if len(s))
        left = min(float(s.min()) for s in shown if len(s))
        ax.set_xlim(left - 0.03 * (right - left), right + 0.03 * (right - left))
    if optimum is not None:
        ax.set_ylabel(f"{_label(y)} - optimum")
    return ax


def plot_round_times(model_or_history: Any, *, ax=None, cumulative: bool = True):
    """Where a fit's time went: schedule, push, wait and pull seconds per round.

    Parameters
    ----------
    model_or_history : estimator, RunResult or pandas.DataFrame
        See :func:`history_of`.
    ax : matplotlib.axes.Axes, optional
        Draw here; by default on a new figure.
    cumulative : bool, default=True
        Stack cumulative seconds against the round (the top edge is the total time
        the engine accounted for); else per-round seconds.

    Returns
    -------
    matplotlib.axes.Axes
    """
    history = history_of(model_or_history)
    columns = [c for c in TIME_COLUMNS if c in history.columns]
    if not columns:
        raise ValueError(f"model_or_history: the history has none of the timing columns "
                         f"{list(TIME_COLUMNS)}; got {sorted(map(str, history.columns))}")
    _check_column(history, "round", "model_or_history")
    seconds = history[columns].fillna(0.0).to_numpy(dtype=float)
    if cumulative:
        seconds = np.cumsum(seconds, axis=0)
    ax = _new_axes(ax)
    ax.stackplot(history["round"].to_numpy(), seconds.T,
                 labels=[c.removesuffix("_s") for c in columns], alpha=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel("cumulative seconds" if cumulative else "seconds per round")
    ax.legend(loc="upper left")
    ax.grid(True, alpha=0.3)
    return ax


def _topic_word(lda_model: Any) -> np.ndarray:
    matrix = getattr(lda_model, "components_", lda_model)
    if matrix is lda_model and hasattr(lda_model, "fit"):
        raise ValueError("lda_model: the model has no components_ (not fitted, or fitted "
                         "with gather_model=False)")
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"lda_model: expected a fitted LDA (components_) or a 2-d topic-word "
                         f"array, got an array of shape {matrix.shape}")
    return matrix


def _topic_indices(topics, n_topics: int) -> list[int]:
    if topics is None:
        return list(range(n_topics))
    out = [int(t) for t in np.atleast_1d(topics)]
    bad = [t for t in out if not 0 <= t < n_topics]
    if bad:
        raise ValueError(f"topics: {bad} out of range; expected topic indices in [0, {n_topics})")
    return out


def _top(lda_model, vocabulary, n_words, topics):
    matrix = _topic_word(lda_model)
    vocabulary = np.asarray(vocabulary, dtype=object)
    if vocabulary.ndim != 1 or len(vocabulary) != matrix.shape[1]:
        raise ValueError(f"vocabulary: expected {matrix.shape[1]} words (one per column of "
                         f"components_), got {len(vocabulary)}")
    if int(n_words) != n_words or n_words < 1:
        raise ValueError(f"n_words: expected a positive integer, got {n_words!r}")
    n_words = min(int(n_words), matrix.shape[1])
    weights = matrix / matrix.sum(axis=1, keepdims=True)
    out = []
    for k in _topic_indices(topics, matrix.shape[0]):
        row = weights[k]
        # stable: ties keep vocabulary order
        order = np.argsort(-row, kind="stable")[:n_words]
        out.append((k, vocabulary[order], row[order]))
    return out


def top_words(lda_model: Any, vocabulary: Sequence[str], n_words: int = 10,
              topics: Sequence[int] | None = None) -> pd.DataFrame:
    """The most probable words of each topic, as a table (one row per topic).

    Parameters
    ----------
    lda_model : fitted LDA or ndarray of shape (n_topics, n_words)
        Anything with ``components_`` (ours or scikit-learn's / the ``lda`` package's
        LDA), or the topic-word matrix itself.
    vocabulary : sequence of str
        The word of each column.
    n_words : int, default=10
        Words per topic.
    topics : sequence of int, optional
        Which topics (default: all).

    Returns
    -------
    pandas.DataFrame
        Index ``topic``; columns ``1 .. n_words`` hold the words, most probable first.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_strads.plotting import top_words
    >>> topic_word = np.array([[5.0, 1.0, 3.0], [0.5, 4.0, 1.0]])
    >>> top_words(topic_word, ["apple", "bus", "cherry"], n_words=2).values.tolist()
    [['apple', 'cherry'], ['bus', 'cherry']]
    """
    rows = _top(lda_model, vocabulary, n_words, topics)
    table = pd.DataFrame([list(words) for _, words, _ in rows],
                         index=pd.Index([k for k, _, _ in rows], name="topic"),
                         columns=range(1, len(rows[0][1]) + 1) if rows else None)
    return table


def plot_top_words(lda_model: Any, vocabulary: Sequence[str], n_words: int = 10,
                   topics: Sequence[int] | None = None, *, ncols: int = 5):
    """Bar charts of each topic's most probable words and their probabilities.

    Parameters
    ----------
    lda_model : fitted LDA or ndarray of shape (n_topics, n_words)
        See :func:`top_words`.
    vocabulary : sequence of str
        The word of each column.
    n_words : int, default=10
        Words per topic.
    topics : sequence of int, optional
        Which topics (default: all).
    ncols : int, default=5
        Panels per row.

    Returns
    -------
    matplotlib.figure.Figure
    """
    rows = _top(lda_model, vocabulary, n_words, topics)
    if int(ncols) != ncols or ncols < 1:
        raise ValueError(f"ncols: expected a positive integer, got {ncols!r}")
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    ncols = min(int(ncols), len(rows))
    nrows = math.ceil(len(rows) / ncols)
    n = len(rows[0][1])
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols, 0.25 * n * nrows + 0.9 * nrows),
                             squeeze=False, layout="constrained")
    for ax, (k, words, probs) in zip(axes.flat, rows):
        positions = np.arange(len(words))
        ax.barh(positions, probs, color="tab:blue")
        ax.set_yticks(positions, labels=[str(w) for w in words], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"topic {k}", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(3))
    for ax in list(axes.flat)[len(rows):]:
        ax.set_visible(False)
    fig.supxlabel("p(word | topic)", fontsize=9)
    return fig
