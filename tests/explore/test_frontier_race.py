"""The frontier's race on a synthetic experiment of known curves (benchmarks/frontier_race.py's
stand-in, no training): it stops what it decided and what its seeds cannot decide, keeps the
runs paired, its verdicts hold, and a resumed race reaches the same ones."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from composer_lab.explore.frontier_race import FUTILITY, decisive_chance
from composer_lab.explore.speedup import seeds_to_decide

_SPEC = importlib.util.spec_from_file_location(
    "frontier_race_benchmark", Path(__file__).resolve().parents[2] / "benchmarks" / "frontier_race.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _race(frontier, trials: int = -1):
    """Race on ``frontier`` (a stand-in), revealing at most ``trials`` runs (all it asks for: -1)."""
    race = bench.FrontierRace(frontier, 0.05, 3, "4ep", 0.05)
    while trials != 0 and (trial := race.next_trial()) is not None:
        frontier.reveal(trial)
        trials -= 1
    return race


def test_a_clear_experiment_is_decided_on_less_than_half_the_grid():
    """A candidate twice as fast and one 1.4x as slow: both decided, the grid mostly untrained."""
    speeds = {"baseline": 1.0, "fast": 2.0, "slow": 1 / 1.4}
    frontier = bench.StandIn(bench.grid(10, 0.005, np.random.default_rng(0), speeds), 10)
    table = _race(frontier).table().set_index("candidate")
    assert table.loc[["fast", "slow"], "verdict"].tolist() == ["speed-up", "slower"]
    assert len(frontier.folder.revealed) <= 0.5 * len(frontier.grid)
    assert table.loc["fast", "cost_ratio"] == pytest.approx(0.5, rel=0.1)


def test_the_race_stops_early_and_its_verdicts_hold():
    """Six candidates (speeds 1, 1, 1.02, 1.25, 2, 0.8), decided at different looks."""
    found = bench.experiment(10, 0.005, 0.05, 0.05, np.random.default_rng(3))
    assert found["wrong"] == 0
    assert found["runs"] < 0.6 * found["grid"]
    assert found["decided"] >= 4


def test_a_near_null_candidate_stops_undecided_before_the_last_seed():
    """A candidate as fast as the baseline, noisy runs: 10 seeds cannot put its interval inside the
    5% band, so it stops at an early look, saying how many more seeds would decide, and the
    baseline stops with it."""
    speeds = {"baseline": 1.0, "same": 1.0}
    frontier = bench.StandIn(bench.grid(10, 0.02, np.random.default_rng(0), speeds), 10)
    race = _race(frontier)
    row = race.table().set_index("candidate").loc["same"]
    assert row["verdict"] == "undecided" and row["n"] < 10
    assert row["n"] + row["more_seeds"] > 10  # the seeds it needs go past the frontier's
    assert decisive_chance(row, 10, race.level, 0.05) < FUTILITY
    assert frontier.results()["seed"].max() == row["n"] - 1  # no run past the look that stopped it


def test_the_chance_to_decide():
    row = pd.Series({"n": 3, "cost_ratio": 1.0, "ratio_ci_low": 0.7, "ratio_ci_high": 1 / 0.7, "verdict": "undecided"})
    assert decisive_chance(row, 10, 0.01, 0.05) < FUTILITY  # centred on 1, far too wide for the 5% band
    assert decisive_chance(row, 400, 0.01, 0.05) > 0.9  # ... but 400 seeds would put it inside
    assert decisive_chance(row, 3, 0.01, 0.05) == 0.0  # no seed left
    near = pd.Series({"n": 4, "cost_ratio": 0.8, "ratio_ci_low": 0.62, "ratio_ci_high": 1.03, "verdict": "undecided"})
    assert decisive_chance(near, 10, 0.01, 0.05) > 0.5  # 0.8x, the interval just short of excluding 1
    bound = pd.Series({"n": 3, "cost_ratio": 1.2, "ratio_ci_low": 0.9, "ratio_ci_high": math.inf,
                       "verdict": "undecided"})
    assert decisive_chance(bound, 10, 0.01, 0.05) == 1.0  # a bound: its curve may yet cross, race on


@pytest.mark.parametrize("half, gap, n", [(0.3, 0.05, 3), (0.06, 0.05, 8), (0.05, 0.049, 20)])
def test_seeds_to_decide_is_the_fewest_whose_interval_fits(half, gap, n):
    def projected(m):
        return half * stats.t.isf(0.005, m - 1) / stats.t.isf(0.005, n - 1) * math.sqrt(n / m)

    m = seeds_to_decide(half, gap, n, 0.01)
    assert projected(m) <= gap and (m == n + 1 or projected(m - 1) > gap)


def test_a_resumed_race_reaches_the_same_verdicts():
    """Stopped after 50 runs, raced again by a new race on the same folder: the same runs, the same table."""
    table = bench.grid(10, 0.01, np.random.default_rng(1))
    whole = bench.StandIn(table, 10)
    expected = _race(whole).table()
    resumed = bench.StandIn(table, 10)
    _race(resumed, 50)
    assert len(resumed.folder.revealed) == 50
    again = _race(resumed).table()
    assert sorted(resumed.folder.revealed) == sorted(whole.folder.revealed)
    pd.testing.assert_frame_equal(again, expected)


def test_a_candidate_decided_before_the_last_look_keeps_its_row():
    frontier = bench.StandIn(bench.grid(8, 0.02, np.random.default_rng(0)), 8)  # noisy: some decide late
    table = _race(frontier).table().set_index("candidate")
    assert list(table.index) == list(bench.SPEEDS)
    assert table.loc["fast", "verdict"] == "speed-up" and table.loc["slower", "verdict"] in ("slower", "undecided")
    assert table.loc["fast", "n"] < table["n"].max()  # stopped at an earlier look than the last
    revealed = frontier.results()
    seeds = revealed.groupby("candidate")["seed"].max()
    assert (seeds <= seeds["baseline"]).all()  # the baseline trains as long as any candidate races
