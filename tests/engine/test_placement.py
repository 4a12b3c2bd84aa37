"""Placement of blocks on workers by name."""

from __future__ import annotations

import collections

import pytest

from dask_strads.engine.placement import balance, replace_lost, sort_names, spread


def test_sort_names_orders_numbers_numerically():
    assert sort_names([10, 2, "b", 1, "a"]) == [1, 2, 10, "a", "b"]


def test_balance_round_robin_keeps_program_order():
    assert balance(range(5), [1, 0]) == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0}


def test_balance_by_weight_evens_the_load():
    placement = balance("abcd", [0, 1], weights={"a": 5, "b": 3, "c": 2, "d": 1})
    load = {0: 0, 1: 0}
    for b, w in placement.items():
        load[w] += {"a": 5, "b": 3, "c": 2, "d": 1}[b]
    assert sorted(load.values()) == [5, 6]


def test_balance_honours_data_locality():
    assert balance([0, 1], ["x", "y"], preferred={0: "y", 1: "x"}) == {0: "y", 1: "x"}


def test_balance_needs_workers():
    with pytest.raises(ValueError, match="workers"):
        balance([0], [])


def test_replace_lost_moves_only_the_lost_blocks():
    placement = {0: "a", 1: "b", 2: "c", 3: "a"}
    out = replace_lost(placement, alive=["a", "c"])
    assert out[0] == "a" and out[2] == "c" and out[3] == "a"
    assert out[1] == "c"  # the least-loaded survivor


def test_replace_lost_prefers_a_replacement_worker():
    out = replace_lost({0: "a", 1: "b"}, alive=["a", "z"], new=["z"])
    assert out == {0: "a", 1: "z"}


def test_replace_lost_with_nobody_left():
    with pytest.raises(RuntimeError, match="no worker"):
        replace_lost({0: "a"}, alive=[])


def test_spread_moves_only_what_exceeds_the_even_share():
    before = {b: b % 2 for b in range(8)}  # 4 blocks on each of workers 0 and 1
    after = spread(before, [0, 1, 2, 3])
    counts = collections.Counter(after.values())
    assert counts == {0: 2, 1: 2, 2: 2, 3: 2}
    assert sum(after[b] != before[b] for b in before) == 4  # the excess, nothing else
    # uneven shares: no worker above ceil(blocks / workers), joined workers filled first
    after = spread({b: 0 for b in range(5)}, [0, 1, 2])
    assert max(collections.Counter(after.values()).values()) == 2
    assert sum(w == 0 for w in after.values()) == 2
    # as many workers as before: nothing moves
    assert spread(before, [0, 1]) == before
    with pytest.raises(ValueError, match="workers"):
        spread(before, [])
