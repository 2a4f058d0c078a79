"""The speed-up and its interval on synthetic experiments of known curves (no training)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from composer_lab.explore.speedup import answer, curves, pareto, reach_bounds, speedup_table

DURATIONS = ["1ep", "2ep", "4ep", "8ep"]


def known(speeds: dict, seeds: int, noise: float, rng_seed: int = 0) -> pd.DataFrame:
    """Runs whose quality is 0.5 + 0.1 * log2(cost * speed) (so a candidate of speed s reaches any
    quality at 1/s of the cost), a shared seed effect and each run's own noise; cost 2**i."""
    rng = np.random.default_rng(rng_seed)
    rows = []
    for seed in range(seeds):
        shared = rng.normal(0, 0.01)
        for name, speed in speeds.items():
            for i, duration in enumerate(DURATIONS):
                cost = 2.0 ** i
                rows.append({"candidate": name, "duration": duration, "seed": seed, "time": cost,
                             "metric": 0.5 + 0.1 * math.log2(cost * speed) + shared + rng.normal(0, noise)})
    return pd.DataFrame(rows)


def test_exact_curves_give_the_exact_ratio():
    table = speedup_table(known({"baseline": 1.0, "fast": 1.6, "slow": 0.7}, 3, 0.0), "baseline", "4ep", DURATIONS,
                          "time").set_index("candidate")
    assert table.loc["fast", "cost_ratio"] == pytest.approx(1 / 1.6)
    assert table.loc["slow", "cost_ratio"] == pytest.approx(1 / 0.7)
    assert table.loc["fast", "speedup"] == pytest.approx(1.6)
    assert table.loc["fast", "cost_to_reach"] == pytest.approx(4 / 1.6)
    assert table.loc[["fast", "slow"], "verdict"].tolist() == ["speed-up", "slower"]
    assert table.loc["baseline", "verdict"] == "reference"


def test_the_interval_covers_the_true_ratio_at_its_level():
    """Over 100 experiments of 6 seeds, the 95% interval of a true 0.625x misses it at most 8 times."""
    missed = 0
    for trial in range(100):
        table = speedup_table(known({"baseline": 1.0, "fast": 1.6}, 6, 0.01, trial), "baseline", "4ep", DURATIONS,
                              "time", draws=400).set_index("candidate")
        missed += not table.loc["fast", "ratio_ci_low"] <= 1 / 1.6 <= table.loc["fast", "ratio_ci_high"]
    assert missed <= 8  # nominal 5 (a plain percentile interval misses about 11)


def test_no_gain_and_undecided_with_the_seeds_that_would_decide():
    table = speedup_table(known({"baseline": 1.0, "same": 1.0}, 10, 0.002), "baseline", "4ep", DURATIONS,
                          "time").set_index("candidate")
    assert table.loc["same", "verdict"] == "no gain"
    noisy = speedup_table(known({"baseline": 1.0, "some": 1.1}, 3, 0.03), "baseline", "4ep", DURATIONS,
                          "time").set_index("candidate")
    assert noisy.loc["some", "verdict"] == "undecided"
    assert noisy.loc["some", "more_seeds"] >= 1


def test_curves_that_do_not_cross_are_bounds():
    low, high = reach_bounds(np.array([[1.0, 2.0, 4.0]] * 3), np.array([[0.9, 1, 1.1], [0.1, 0.2, 0.3],
                                                                         [0.5, 0.6, 0.7]]), np.array([0.5, 0.5, 0.65]))
    assert low.tolist() == [0.0, 4.0, pytest.approx(2 * 2 ** 0.5)]
    assert high.tolist() == [1.0, math.inf, pytest.approx(2 * 2 ** 0.5)]


def test_pareto_set_and_the_sentence():
    results = known({"baseline": 1.0, "fast": 2.0, "same": 1.0}, 6, 0.001)
    table = curves(results, "time")
    on = table[pareto(table)]
    assert set(on["candidate"]) == {"fast"}  # at each cost, fast is better
    speed = speedup_table(results, "baseline", "4ep", DURATIONS, "time")
    sentence = answer(speed, "metrics/eval/Accuracy")
    assert sentence.startswith("fast reaches the baseline's 4ep accuracy (")
    assert "at 0.50x its time (95% CI" in sentence and "same shows no gain" in sentence
