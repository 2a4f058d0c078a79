"""Distinct orderings: permutations the passes run alike count once; commuting swaps merge."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from composer_lab.algorithms import CutMix, CutOut, LabelSmoothing, MixUp, RandomSubset, SelectiveBackprop
from composer_lab.core.passes import sort_selective_backprop_first
from composer_lab.explore import orderings
from composer_lab.explore.orderings import NO_SHARED_EVENT, out_of_question, run_label, run_labels


def _all_permutations_once(table: pd.DataFrame, n: int) -> None:
    members = [p for perms in table["permutations"] for p in perms]
    assert len(members) == len(set(members)) == math.factorial(n)
    assert table["n_permutations"].sum() == math.factorial(n)


def test_pinned_and_separate_algorithms_have_one_order():
    # SB is pinned first where it meets CutOut; LabelSmoothing shares no event with either.
    table = orderings([CutOut(), SelectiveBackprop(), LabelSmoothing()])
    assert list(table["list_order"]) == ["CutOut > SelectiveBackprop > LabelSmoothing"]
    assert list(table["order"]) == ["after_dataloader: SelectiveBackprop > CutOut"]  # what runs, pinned included
    assert table["positions"][0] == (0, 1, 2)
    _all_permutations_once(table, 3)
    assert table.attrs["free_events"] == []
    assert table.attrs["out_of_question"].values.tolist() == [
        ["CutOut", "pinned last at after_dataloader by sort_selective_backprop_first"],
        ["SelectiveBackprop", "pinned first at after_dataloader by sort_selective_backprop_first"],
        ["LabelSmoothing", "never shares an event with another algorithm"]]


def test_two_augmentations_at_one_event_have_two_orders():
    table = orderings([CutOut(), CutMix(), SelectiveBackprop()])
    assert list(table["list_order"]) == ["CutOut > CutMix > SelectiveBackprop", "CutMix > CutOut > SelectiveBackprop"]
    assert list(table["n_permutations"]) == [3, 3]
    _all_permutations_once(table, 3)


def test_an_order_is_named_by_what_runs_at_the_free_events():
    # The list CutOut > MixUp runs MixUp first at after_dataloader (FILO), after SB (pinned first).
    table = orderings([CutOut(), MixUp(), SelectiveBackprop(), LabelSmoothing()])
    assert list(table["order"]) == ["after_dataloader: SelectiveBackprop > MixUp > CutOut",
                                    "after_dataloader: SelectiveBackprop > CutOut > MixUp"]
    assert list(table["list_order"]) == ["CutOut > MixUp > SelectiveBackprop > LabelSmoothing",
                                         "MixUp > CutOut > SelectiveBackprop > LabelSmoothing"]
    assert table.attrs["out_of_question"].values.tolist() == [
        ["SelectiveBackprop", "pinned first at after_dataloader by sort_selective_backprop_first"],
        ["LabelSmoothing", "never shares an event with another algorithm"]]
    assert run_labels([CutOut(), MixUp(), SelectiveBackprop()], [(2, 1, 0)]) == [
        "after_dataloader: SelectiveBackprop > CutOut > MixUp"]


def test_several_free_events_are_named_in_loop_order():
    table = orderings([LabelSmoothing(0.1), LabelSmoothing(0.2), CutOut()])
    assert table["order"][0] == ("before_loss: LabelSmoothing > LabelSmoothing#2; "
                                 "after_loss: LabelSmoothing#2 > LabelSmoothing")
    assert run_label({"after_loss": ["B", "A"], "before_loss": ["A", "B"]}) == "before_loss: A > B; after_loss: B > A"
    assert run_label({}) == NO_SHARED_EVENT


def test_a_pin_no_single_pass_makes_is_said_so():
    # Without FILO the after-event keeps the list order; pinned by two passes together, no single one moves it.
    pin = [sort_selective_backprop_first, lambda algorithms, event: sorted(algorithms, key=lambda a: a.selects_batch,
                                                                           reverse=True)]
    reasons = out_of_question([CutOut(), SelectiveBackprop()], passes=pin)["reason"]
    assert list(reasons) == ["pinned last at after_dataloader by the passes together",
                             "pinned first at after_dataloader by the passes together"]

    def without_mixup(algorithms, event):
        return [a for a in algorithms if not isinstance(a, MixUp)]

    assert out_of_question([CutOut(), MixUp()], passes=[without_mixup]).values.tolist() == [
        ["CutOut", "pinned first at after_dataloader by without_mixup"],
        ["MixUp", "left out at after_dataloader by without_mixup"]]


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
    assert list(merged["list_order"]) == ["LabelSmoothing > LabelSmoothing#2 > CutOut"]
    _all_permutations_once(merged, 3)
    assert len(orderings(algorithms, commutation=commute.assign(commutes=False))) == 2


def test_more_than_eight_algorithms_need_a_sample_size():
    algorithms = [CutOut() for _ in range(9)]
    with pytest.raises(ValueError, match=r"9 algorithms have 362,880 orders; .* pass max_orders=N"):
        orderings(algorithms)
    table = orderings(algorithms, max_orders=40)
    assert table["n_permutations"].sum() == 40
    assert table["list_order"][0] == " > ".join(["CutOut"] + [f"CutOut#{i}" for i in range(2, 10)])


def test_the_same_instance_twice_is_refused():
    smoothing = LabelSmoothing()
    with pytest.raises(ValueError, match=r"algorithms\[2\] is the same LabelSmoothing instance as algorithms\[0\]"):
        orderings([smoothing, RandomSubset(), smoothing])


def test_plans_show_the_order_each_event_runs():
    table = orderings([LabelSmoothing(0.1), LabelSmoothing(0.2), CutOut()])
    assert table["plans"][0] == {"before_loss": "LabelSmoothing > LabelSmoothing#2",
                                 "after_loss": "LabelSmoothing#2 > LabelSmoothing"}  # FILO on the after-event
