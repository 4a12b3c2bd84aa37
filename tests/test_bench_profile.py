"""``bench/lasso_profile.py`` hooks into the solver by name: its profiler and its oracle
must still reach what they replace."""

import importlib.util
import pathlib

import numpy as np
import pytest

from dask_strads import Lasso
from dask_strads.cd import program, working_set

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"


def _tool():
    spec = importlib.util.spec_from_file_location("lasso_profile", BENCH / "lasso_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _problem():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 40))
    y = X[:, :4] @ np.array([2.0, -1.0, 1.5, 0.5]) + 0.1 * rng.standard_normal(120)
    return X, y


def test_the_oracle_ranks_the_solutions_support_first_and_lets_go():
    tool = _tool()
    before = (working_set.choose, program.CDProgram.init_state)
    solution = np.zeros(10)
    solution[[3, 7]] = 1.0
    with tool.Oracle(solution) as oracle:
        oracle.starts = np.array([0, 5, 10])
        # block 0's candidates 1, 2, 3 (best first), block 1's 5, 6, 7 (global ids)
        candidates = [(np.array([1, 2, 3]), np.array([3.0, 2.0, 1.0])),
                      (np.array([0, 1, 2]), np.array([5.0, 4.0, 0.5]))]
        ws = working_set.choose([np.zeros(0, np.int64)] * 2, candidates, 2)
    assert [w.tolist() for w in ws] == [[3], [2]]  # global 3 and 7, the worst scores
    assert (working_set.choose, program.CDProgram.init_state) == before


def test_an_oracle_fit_reaches_the_plain_fits_solution(client):
    tool = _tool()
    X, y = _problem()
    plain = Lasso(alpha=0.01, tol=1e-10, client=client, progress=False).fit(X, y)
    with tool.Oracle(plain.coef_) as oracle:
        ranked = Lasso(alpha=0.01, tol=1e-10, client=client, progress=False).fit(X, y)
    assert oracle.starts is not None  # the client's program handed its blocks' starts
    np.testing.assert_allclose(ranked.coef_, plain.coef_, atol=1e-6)


def test_the_profiler_sees_the_pushes_and_is_taken_off(client):
    tool = _tool()
    X, y = _problem()
    client.run(tool.start_profiling)
    try:
        client.run(tool.collect_profile)  # from here on: this fit's pushes only
        Lasso(alpha=0.01, tol=1e-8, client=client, progress=False).fit(X, y)
        profiles = client.run(tool.collect_profile)
        again = client.run(tool.collect_profile)
    finally:
        client.run(tool.stop_profiling)
    names = {name for rows in profiles.values() for name, _, _ in rows}
    assert "gap.py:measure_gap" in names
    assert all(not rows for rows in again.values())  # each collection starts afresh
    assert not any(client.run(lambda: hasattr(program.CDProgram.push, "profiler")).values())


def test_settings_reach_their_fits_only(client, monkeypatch):
    import dask

    monkeypatch.syspath_prepend(str(BENCH))  # the tool's fits are bench/lasso_solvers.py's
    tool = _tool()
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3000, 60))
    y = X[:, :6] @ rng.standard_normal(6) + 0.1 * rng.standard_normal(3000)
    cell = dict(make=lambda: (X, y, None), ratio=100, intercept=False)
    before = dask.config.get("dask-strads.cd.gram-max-bytes")
    res = tool.run_cell(cell, client, 2, False, {"dask-strads.cd.gram-max-bytes": 0},
                        profile=False)
    assert res["plain"]["gram_phases"] > 0  # a tall problem: its phases sweep G
    assert res["settings"]["gram_phases"] == 0  # no room for G
    assert len(res["settings"]["each"]) == 2
    assert res["profiles"] == {}
    assert dask.config.get("dask-strads.cd.gram-max-bytes") == before


def test_settings_are_checked_before_any_fit():
    import argparse

    tool = _tool()
    ap = argparse.ArgumentParser()
    pairs = ["dask-strads.cd.gram-max-bytes=0", "dask-strads.cd.anderson=5"]
    assert tool.parse_settings(ap, pairs) == {"dask-strads.cd.gram-max-bytes": 0,
                                              "dask-strads.cd.anderson": 5}
    for bad in (["dask-strads.cd.no-such-setting=1"], ["dask-strads.cd.anderson"]):
        with pytest.raises(SystemExit):
            tool.parse_settings(ap, bad)
