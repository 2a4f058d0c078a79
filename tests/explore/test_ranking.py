"""The ranking of orders on results frames whose statistics are known: Holm beside raw p-values,
Friedman, ties, degenerate comparisons, bounded intervals, verdicts, and their figure."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection
from scipy import stats as sps

from composer_lab.explore.ranking import RANKING_COLUMNS, plot_ranking, rank_orders
from composer_lab.explore.stats import holm

METRIC = "metrics/eval/Accuracy"


def results_of(values: dict[str, list[float]], metric: str = METRIC) -> pd.DataFrame:
    """A results frame: one row per (order, seed), the seeds counted from 0; NaN: not finished."""
    return pd.DataFrame([{"order": order, "seed": seed, metric: value}
                         for order, column in values.items() for seed, value in enumerate(column)
                         if not math.isnan(value)])


NOISY = {"A": [0.80, 0.82, 0.79, 0.81, 0.83], "B": [0.78, 0.80, 0.78, 0.78, 0.80],
         "C": [0.70, 0.75, 0.69, 0.72, 0.74], "D": [0.79, 0.83, 0.77, 0.80, 0.84]}


def test_the_best_order_is_the_reference_and_holm_adjusts_over_every_pair():
    ranking = rank_orders(results_of(NOISY), METRIC)
    assert list(ranking.columns) == RANKING_COLUMNS
    assert list(ranking["order"]) == ["A", "D", "B", "C"] and list(ranking["rank"]) == [1, 2, 3, 4]
    best = ranking.iloc[0]
    assert best["verdict"] == "best" and best["diff"] == 0 and math.isnan(best["p_value"])
    others = ranking.iloc[1:]
    for row in others.itertuples():
        assert row.p_value == pytest.approx(sps.ttest_rel(NOISY[row.order], NOISY["A"]).pvalue)
        assert row.diff == pytest.approx(np.mean(NOISY[row.order]) - np.mean(NOISY["A"]))
    every_pair = {(a, b): sps.ttest_rel(NOISY[a], NOISY[b]).pvalue for a, b in itertools.combinations(NOISY, 2)}
    adjusted = dict(zip(every_pair, holm(list(every_pair.values()))))
    np.testing.assert_allclose(others["p_adjusted"], [adjusted[tuple(sorted((o, "A")))] for o in others["order"]])
    assert (others["p_adjusted"] >= others["p_value"]).all()
    assert list(others["verdict"]) == ["undecided", "worse", "worse"]  # D is within noise of A


def test_friedman_and_the_summary_line():
    ranking = rank_orders(results_of(NOISY), METRIC)
    expected = sps.friedmanchisquare(*NOISY.values())
    found = ranking.attrs["friedman"]
    assert (found["statistic"], found["p_value"]) == pytest.approx((expected.statistic, expected.pvalue))
    assert (found["orders"], found["seeds"]) == (4, 5)
    line = ranking.attrs["summary"]
    assert "\n" not in line and "4 orders x 5 seeds" in line and "Friedman" in line and "best 'A' (0.81)" in line
    assert "2 worse" in line and "1 undecided" in line and "Holm" in line


def test_two_orders_are_summarised_by_their_paired_test():
    line = rank_orders(results_of({"A": NOISY["A"], "C": NOISY["C"]}), METRIC).attrs["summary"]
    assert line == "2 orders x 5 seeds: 'C' minus 'A' = -0.09 [-0.1052, -0.07479], p = 8e-05 (paired t-test): worse"
    assert "Friedman" not in line


def test_ties_share_the_better_rank():
    tied = {"A": [0.5, 0.6, 0.7], "B": [0.9, 0.9, 0.9], "C": [0.5, 0.6, 0.7]}
    ranking = rank_orders(results_of(tied), METRIC, orders=["C", "B", "A"])
    assert list(ranking["order"]) == ["B", "C", "A"] and list(ranking["rank"]) == [1, 2, 2]


def test_a_loss_ranks_the_smallest_first():
    ranking = rank_orders(results_of({"A": [1.0, 1.1, 1.2], "B": [0.5, 0.7, 0.6]}, "loss"), "loss",
                          higher_is_better=False)
    assert list(ranking["order"]) == ["B", "A"] and ranking.iloc[1]["verdict"] == "worse"


def test_degenerate_comparisons_are_labelled_not_drawn_as_intervals():
    values = {"A": [0.70, 0.60, 0.65], "B": [0.70 - 1 / 359, 0.60 - 1 / 359, 0.65 - 1 / 359],
              "C": [math.nan, 0.55, math.nan]}
    ranking = rank_orders(results_of(values), METRIC).set_index("order")
    assert ranking.loc["B", "degenerate"] == "zero spread" and ranking.loc["B", "p_value"] == 0.0
    assert ranking.loc["B", "diff"] == pytest.approx(-1 / 359) and ranking.loc["B", "verdict"] == "worse"
    assert ranking.loc["C", "degenerate"] == "n < 2" and ranking.loc["C", "verdict"] == "undecided"
    assert math.isnan(ranking.loc["C", "p_adjusted"])
    assert pd.isna(ranking.loc["A", "degenerate"])
    fig = plot_ranking(ranking.reset_index(), METRIC)
    diffs = fig.axes[1]
    assert not [c for c in diffs.collections if isinstance(c, LineCollection)]  # no interval on the right
    words = [t.get_text() for t in diffs.texts]
    assert any("zero spread" in w for w in words) and any("n < 2" in w for w in words)


def test_an_accuracy_interval_stays_inside_0_and_1():
    values = {"A": [0.99, 0.70, 0.98, 0.99], "B": [0.80, 0.76, 0.78, 0.79]}
    ranking = rank_orders(results_of(values), METRIC).set_index("order")
    assert ranking.loc["A", "ci_high"] == 1.0 and ranking.loc["A", "ci_clipped"]
    assert ranking.loc["B", "ci_high"] < 1.0 and not ranking.loc["B", "ci_clipped"]
    assert not ranking["diff_ci_clipped"].any()  # the difference's interval is well inside +-1
    loss = rank_orders(results_of(values, "loss"), "loss").set_index("order")
    assert loss.loc["A", "ci_high"] > 1.0 and not loss["ci_clipped"].any()  # a loss has no upper bound
    custom = rank_orders(results_of(values, "score"), "score", bounds=(0, 0.95)).set_index("order")
    assert custom.loc["A", "ci_high"] == 0.95 and custom.loc["A", "ci_clipped"]
    wide = rank_orders(results_of({"A": [0.9, 0.1, 0.9], "B": [0.1, 0.9, 0.1]}), METRIC).set_index("order")
    assert (wide.loc["B", "diff_ci_low"], wide.loc["B", "diff_ci_high"]) == (-1.0, 1.0)  # a difference: +-1
    assert wide.loc["B", "diff_ci_clipped"]
    with pytest.raises(ValueError, match="bounds must be"):
        rank_orders(results_of(values), METRIC, bounds=(1, 0))


def test_delta_turns_a_small_difference_into_equivalent():
    rng = np.random.default_rng(0)
    base = rng.normal(0.8, 0.02, size=8)
    values = {"A": list(base), "B": list(base - 0.001 + rng.normal(0, 0.0005, size=8))}
    assert rank_orders(results_of(values), METRIC).iloc[1]["verdict"] == "worse"
    within = rank_orders(results_of(values), METRIC, delta=0.005)
    assert within.iloc[1]["verdict"] == "equivalent" and within.iloc[1]["tost_p_adjusted"] < 0.05
    assert "equivalent (delta=0.005)" in within.attrs["summary"]


def test_the_list_order_is_kept_beside_the_label():
    results = results_of(NOISY)
    results["list_order"] = results["order"].str.lower()
    ranking = rank_orders(results, METRIC)
    assert list(ranking.columns[:3]) == ["rank", "order", "list_order"]
    assert (ranking["list_order"] == ranking["order"].str.lower()).all()


def test_the_figure_labels_both_axes_and_draws_each_verdict():
    ranking = rank_orders(results_of(NOISY), METRIC)
    fig = plot_ranking(ranking, METRIC)
    means, diffs = fig.axes
    assert METRIC in means.get_xlabel() and means.get_ylabel() == "order (as run)"
    assert "difference from the best" in diffs.get_xlabel()
    assert [t.get_text() for t in means.get_yticklabels()] == list(ranking["order"])
    assert [t.get_text().split()[0] for t in diffs.texts] == list(ranking["verdict"])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["best", "worse", "undecided"]
    assert fig._repr_png_().startswith(b"\x89PNG")


def test_long_labels_are_broken_at_each_event():
    results = results_of({"after_dataloader: A > B; after_loss: C > D": [0.5, 0.6],
                          "after_dataloader: B > A; after_loss: C > D": [0.4, 0.5]})
    fig = plot_ranking(rank_orders(results, METRIC), METRIC)
    assert fig.axes[0].get_yticklabels()[0].get_text() == "after_dataloader: A > B\nafter_loss: C > D"
