"""Distinct orderings: permutations the passes run alike count once; commuting swaps merge."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from composer_lab.algorithms import CutMix, CutOut, LabelSmoothing, RandomSubset, SelectiveBackprop
from composer_lab.explore import orderings


def _all_permutations_once(table: pd.DataFrame, n: int) -> None:
    members = [p for perms in table["permutations"] for p in perms]
    assert len(members) == len(set(members)) == math.factorial(n)
    assert table["n_permutations"].sum() == math.factorial(n)


def test_pinned_and_separate_algorithms_have_one_order():
    # SB is pinned first where it meets CutOut; LabelSmoothing shares no event with either.
    table = orderings([CutOut(), SelectiveBackprop(), LabelSmoothing()])
    assert list(table["order"]) == ["CutOut > SelectiveBackprop > LabelSmoothing"]
    assert table["positions"][0] == (0, 1, 2)
    _all_permutations_once(table, 3)


def test_two_augmentations_at_one_event_have_two_orders():
    table = orderings([CutOut(), CutMix(), SelectiveBackprop()])
    assert list(table["order"]) == ["CutOut > CutMix > SelectiveBackprop", "CutMix > CutOut > SelectiveBackprop"]
    assert list(table["n_permutations"]) == [3, 3]
    _all_permutations_once(table, 3)


def test_the_passes_decide_what_is_distinct():
    algorithms = [CutOut(), SelectiveBackprop()]
    assert len(orderings(algorithms)) == 1
    assert len(orderings(algorithms, passes=[])) == 2  # without the SB-first pass, the order is free


def test_commuting_neighbours_merge():
    algorithms = [LabelSmoothing(0.1), LabelSmoothing(0.2), CutOut()]
    assert len(orderings(algorithms)) == 2
    commute = pd.DataFrame({"event": ["before_loss"], "first": ["LabelSmoothing"], "second": ["LabelSmoothing#2"],
                            "field": ["targets"], "max_abs_diff": [1e-8], "commutes": [True]})
    merged = orderings(algorithms, commutation=commute)
    assert list(merged["order"]) == ["LabelSmoothing > LabelSmoothing#2 > CutOut"]
    _all_permutations_once(merged, 3)
    assert len(orderings(algorithms, commutation=commute.assign(commutes=False))) == 2


def test_more_than_eight_algorithms_need_a_sample_size():
    algorithms = [CutOut() for _ in range(9)]
    with pytest.raises(ValueError, match=r"9 algorithms have 362,880 orders; .* pass max_orders=N"):
        orderings(algorithms)
    table = orderings(algorithms, max_orders=40)
    assert table["n_permutations"].sum() == 40
    assert table["order"][0] == " > ".join(["CutOut"] + [f"CutOut#{i}" for i in range(2, 10)])


def test_the_same_instance_twice_is_refused():
    smoothing = LabelSmoothing()
    with pytest.raises(ValueError, match=r"algorithms\[2\] is the same LabelSmoothing instance as algorithms\[0\]"):
        orderings([smoothing, RandomSubset(), smoothing])


def test_plans_show_the_order_each_event_runs():
    table = orderings([LabelSmoothing(0.1), LabelSmoothing(0.2), CutOut()])
    assert table["plans"][0] == {"before_loss": "LabelSmoothing > LabelSmoothing#2",
                                 "after_loss": "LabelSmoothing#2 > LabelSmoothing"}  # FILO on the after-event
