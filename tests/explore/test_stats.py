"""The statistics of a sweep: each test against a hand computation or scipy, its undefined cases
labelled, and its error rate checked by simulation where the claim is a rate."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from composer_lab.explore.stats import VERDICTS, compare, friedman, holm, paired, seeds_needed, tost_p_value


def test_holm_matches_the_hand_computation_in_the_given_order():
    # sorted 0.01, 0.02, 0.04 -> 3*0.01, 2*0.02, 1*0.04 = 0.03, 0.04, 0.04 (monotone)
    np.testing.assert_allclose(holm([0.04, 0.01, 0.02]), [0.04, 0.03, 0.04])
    np.testing.assert_allclose(holm([0.5, 0.3]), [0.6, 0.6])  # capped by monotonicity, then at 1
    np.testing.assert_allclose(holm([0.9, 0.8]), [1.0, 1.0])


def test_holm_leaves_nan_out_of_the_family():
    adjusted = holm([math.nan, 0.01, 0.02, math.nan])
    assert np.isnan(adjusted[[0, 3]]).all()
    np.testing.assert_allclose(adjusted[[1, 2]], [0.02, 0.02])  # a family of 2, not 4
    assert holm([]).shape == (0,)


def test_paired_agrees_with_scipys_t_test_and_interval():
    diffs = np.array([0.01, 0.03, -0.005, 0.02, 0.015])
    result = paired(diffs, confidence=0.9)
    expected = sps.ttest_1samp(diffs, 0.0)
    low, high = expected.confidence_interval(0.9)
    assert result.n == 5 and result.degenerate is None
    assert result.mean == pytest.approx(diffs.mean())
    assert result.p_value == pytest.approx(expected.pvalue)
    assert (result.ci_low, result.ci_high) == pytest.approx((low, high))


def test_paired_labels_what_it_cannot_test():
    equal = paired(np.full(3, 1 / 359) + np.array([0.5, 0.25, 0.7]) - np.array([0.5, 0.25, 0.7]))
    assert equal.degenerate == "zero spread" and equal.p_value == 0.0
    assert equal.ci_low == equal.ci_high == equal.mean == pytest.approx(1 / 359)
    assert paired(np.zeros(4)).p_value == 1.0
    one = paired(np.array([0.2, math.nan]))  # the missing pair is dropped
    assert one.degenerate == "n < 2" and one.n == 1 and one.mean == 0.2 and math.isnan(one.ci_low)
    assert math.isnan(paired(np.array([])).mean)


def test_tost_says_equivalent_only_inside_delta():
    rng = np.random.default_rng(0)
    near = rng.normal(0.001, 0.002, size=20)
    far = rng.normal(0.02, 0.002, size=20)
    assert tost_p_value(near, 0.005) < 0.01
    assert tost_p_value(far, 0.005) > 0.5
    # the larger of the two one-sided p-values, by hand
    se = near.std(ddof=1) / math.sqrt(20)
    expected = max(sps.t.sf((near.mean() + 0.005) / se, 19), sps.t.cdf((near.mean() - 0.005) / se, 19))
    assert tost_p_value(near, 0.005) == pytest.approx(expected)


def test_tost_degenerate_cases():
    assert tost_p_value(np.full(3, 0.001), 0.005) == 0.0
    assert tost_p_value(np.full(3, 0.01), 0.005) == 1.0
    assert math.isnan(tost_p_value(np.array([0.0]), 0.005))
    with pytest.raises(ValueError, match="delta must be a positive number"):
        tost_p_value(np.zeros(3), 0.0)


def test_tost_rejects_at_most_alpha_of_the_time_at_the_margin():
    rng = np.random.default_rng(1)
    rejections = [tost_p_value(rng.normal(0.005, 0.01, size=8), 0.005) < 0.05 for _ in range(2000)]
    assert np.mean(rejections) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 2000)


def test_friedman_agrees_with_scipy_and_is_undefined_where_it_should_be():
    rng = np.random.default_rng(2)
    values = rng.normal(size=(6, 4)) + np.array([0.0, 0.5, 1.0, 1.5])
    statistic, p_value = friedman(values)
    expected = sps.friedmanchisquare(*values.T)
    assert (statistic, p_value) == pytest.approx((expected.statistic, expected.pvalue))
    with_gap = np.vstack([values, [np.nan, 1.0, 2.0, 3.0]])  # an incomplete seed is left out
    assert friedman(with_gap) == pytest.approx((statistic, p_value))
    assert all(math.isnan(x) for x in friedman(values[:, :2]))  # two orders: the paired test answers
    assert all(math.isnan(x) for x in friedman(values[:1]))
    assert friedman(np.ones((4, 3))) == (0.0, 1.0)
    with pytest.raises(ValueError, match="seeds x orders"):
        friedman(np.ones(3))


def test_seeds_needed_gives_the_power_asked_for():
    rng = np.random.default_rng(3)
    diffs = rng.normal(0.0, 0.02, size=6)
    n = seeds_needed(diffs, delta=0.01)
    sd = diffs.std(ddof=1)
    # simulate the paired t-test at n seeds and n - 1 seeds with the observed spread
    def power(k: int) -> float:
        samples = rng.normal(0.01, sd, size=(4000, k))
        return float(np.mean(sps.ttest_1samp(samples, 0.0, axis=1).pvalue < 0.05))
    assert power(n) >= 0.8 - 0.03 and power(n - 1) < 0.8 + 0.03
    assert seeds_needed(diffs, delta=0.005) > n  # a smaller difference needs more seeds
    assert seeds_needed(np.full(3, 0.01), delta=0.01) == 2


def test_seeds_needed_refuses_what_it_cannot_estimate():
    with pytest.raises(ValueError, match=r"at least 2 pairs \(seeds both orders finished\), got 1"):
        seeds_needed(np.array([0.1]), delta=0.01)
    with pytest.raises(ValueError, match="alpha must lie in"):
        seeds_needed(np.zeros(3), delta=0.01, alpha=1.5)
    with pytest.raises(ValueError, match="power must lie in"):
        seeds_needed(np.zeros(3), delta=0.01, power=1)


def test_the_verdict_words():
    assert VERDICTS == ("best", "worse", "equivalent", "racing", "undecided")


def test_only_the_family_of_every_pair_keeps_wrong_worse_verdicts_at_alpha():
    # six orders with no true difference: the best of the data is compared with the others
    rng = np.random.default_rng(4)
    wrong = {"best": 0, "pairs": 0}
    repeats = 300
    for _ in range(repeats):
        values = pd.DataFrame(rng.normal(0, 0.01, size=(5, 6)) + rng.normal(0, 0.05, size=(5, 1)))
        for family in wrong:
            wrong[family] += (compare(values, family=family)["verdict"] == "worse").any()
    assert wrong["pairs"] / repeats <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / repeats)
    assert wrong["best"] > wrong["pairs"]  # picking the best from the data makes the others look worse


def test_compare_gives_each_order_a_verdict_against_the_best():
    values = pd.DataFrame({"a": [0.80, 0.82, 0.79, 0.81], "b": [0.70, 0.73, 0.69, 0.70],
                           "c": [0.80, 0.815, 0.795, 0.81]})
    table = compare(values, delta=0.01)
    assert list(table.index) == ["a", "b", "c"] and list(table["verdict"]) == ["best", "worse", "equivalent"]
    assert compare(values, reference="b").loc["b", "verdict"] == "best"
    assert compare(values, higher_is_better=False).loc["b", "verdict"] == "best"  # a loss: smallest first
    with pytest.raises(ValueError, match="family must be 'best'"):
        compare(values, family="all")
