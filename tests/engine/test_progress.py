"""The progress bar of a fit ends saying why the fit ended."""

from __future__ import annotations

import re

import numpy as np

from dask_strads.engine import run

from .programs import BlockLeastSquares


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((120, 16))
    y = X @ rng.standard_normal(16)
    return y, {b: (X[:, 4 * b:4 * (b + 1)], y) for b in range(4)}


class PassesOf1000(BlockLeastSquares):
    """Counts its progress in its own units against a bound it rarely reaches, as the
    Lasso counts passes over the features against ``max_iter``."""

    def progress(self, state):
        return state["updates"] // 4, 1000, "pass"


def _last_bar(err: str) -> str:
    return re.split(r"[\r\n]", err.strip())[-1]


def test_a_converged_fit_ends_its_bar_full_and_says_converged(client, capsys):
    y, data = _problem()
    result = run(PassesOf1000(y), data, client, max_rounds=3000, progress=True)
    assert result.stop_reason == "converged"
    bar = _last_bar(capsys.readouterr().err)
    done = result.n_rounds // 4
    assert f"{done}/{done} " in bar and "100%" in bar, bar  # not "n/1000"
    assert bar.rstrip().endswith("converged]"), bar
    final = result.history["objective"].iloc[-1]
    assert f"objective={final:.6g}, converged" in bar, bar  # the last objective, not a stale one


class StopsShort(PassesOf1000):
    def why_stopped(self, state):
        return "diverged"


def test_a_program_that_stops_short_of_converging_names_it_on_the_bar(client, capsys):
    y, data = _problem()
    result = run(StopsShort(y), data, client, max_rounds=3000, progress=True)
    assert result.stop_reason == "converged"  # the engine's word: the program said stop
    bar = _last_bar(capsys.readouterr().err)
    assert bar.rstrip().endswith("diverged]") and "converged" not in bar, bar


def test_a_fit_cut_short_keeps_its_bound_and_says_why(client, capsys):
    y, data = _problem()
    result = run(BlockLeastSquares(y, tol=0.0), data, client, max_rounds=7, progress=True)
    assert result.stop_reason == "max_rounds"
    bar = _last_bar(capsys.readouterr().err)
    assert "7/7 " in bar and bar.rstrip().endswith("max_rounds]"), bar
