"""The frontier's race on a synthetic experiment of known curves (benchmarks/frontier_race.py's
stand-in, no training): it stops what it decided, keeps the runs paired, and its verdicts hold."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

_SPEC = importlib.util.spec_from_file_location(
    "frontier_race_benchmark", Path(__file__).resolve().parents[2] / "benchmarks" / "frontier_race.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_the_race_stops_early_and_its_verdicts_hold():
    """Six candidates (speeds 1, 1, 1.02, 1.25, 2, 0.8), decided at different looks."""
    found = bench.experiment(10, 0.005, 0.05, 0.05, np.random.default_rng(3))
    assert found["wrong"] == 0
    assert found["runs"] < 0.7 * found["grid"]  # (the near-null 'close' keeps the baseline training longest)
    assert found["decided"] >= 3


def test_a_candidate_decided_before_the_last_look_keeps_its_row():
    frontier = bench.StandIn(bench.grid(8, 0.02, np.random.default_rng(0)), 8)  # noisy: some decide late
    race = bench.FrontierRace(frontier, 0.05, 3, "4ep", 0.05)
    while (trial := race.next_trial()) is not None:
        frontier.reveal(trial)
    table = race.table().set_index("candidate")
    assert list(table.index) == list(bench.SPEEDS)
    assert table.loc["fast", "verdict"] == "speed-up" and table.loc["slower", "verdict"] in ("slower", "undecided")
    assert table.loc["fast", "n"] < table["n"].max()  # stopped at an earlier look than the last
    revealed = frontier.results()
    seeds = revealed.groupby("candidate")["seed"].max()
    assert (seeds <= seeds["baseline"]).all()  # the baseline trains as long as any candidate races
