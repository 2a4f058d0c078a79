"""Frontier: candidates x durations x seeds on the sweep's machinery; bad input refused; the race."""

from __future__ import annotations

import functools
import json

import pytest

from composer_lab.algorithms import CutOut, LabelSmoothing, SelectiveBackprop
from composer_lab.explore import Frontier, InlineExecutor, ablations, compositions, plot_frontier
from tests.explore.frontier_factories import curved, ignoring_duration, make_trainer


def _frontier(tmp_path, factory=make_trainer, **options):
    settings = {"candidates": {"baseline": [], "ls": [LabelSmoothing(0.1)]}, "durations": ["1ba", "2ba"],
                "seeds": [0], "folder": tmp_path / "f", "executor": InlineExecutor(), **options}
    return Frontier(factory, **settings)


def test_one_row_per_run_with_its_costs_and_resume(tmp_path):
    frontier = _frontier(tmp_path)
    results = frontier.run()
    assert results[["candidate", "duration", "seed"]].values.tolist() == [
        ["baseline", "1ba", 0], ["baseline", "2ba", 0], ["ls", "1ba", 0], ["ls", "2ba", 0]]
    assert (results["time"] > 0).all() and (results["flops"] > 0).all()
    assert results["samples"].tolist() == [4, 8, 4, 8] and results["batches"].tolist() == [1, 2, 1, 2]
    assert results.loc[1, "flops"] == pytest.approx(2 * results.loc[0, "flops"])  # two batches of one kind
    again = _frontier(tmp_path, seeds=[0, 1])  # more seeds: the finished runs are kept
    assert [t.seed for t in again.pending()] == [1, 1, 1, 1]


def test_a_folder_of_another_experiment_is_refused(tmp_path):
    _frontier(tmp_path)
    with pytest.raises(ValueError, match="holds results of another experiment: .*LabelSmoothing.smoothing: 0.1 -> 0.2"):
        _frontier(tmp_path, candidates={"baseline": [], "ls": [LabelSmoothing(0.2)]})


def test_a_factory_that_ignores_the_duration_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"ignores the duration: .* both trained 2 batches.*max_duration=duration"):
        _frontier(tmp_path, ignoring_duration).run()


def test_a_metric_the_runs_do_not_log_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"do not record the metric 'nope'.*metric=\.\.\."):
        _frontier(tmp_path, metric="nope").run()


@pytest.mark.parametrize("durations, message", [
    (["2ba"], "at least two baseline durations"),
    (["4ba", "2ba"], "durations must grow"),
    (["2ba", "2ep"], "durations must grow, in one unit"),
])
def test_durations_refused(tmp_path, durations, message):
    with pytest.raises(ValueError, match=message):
        _frontier(tmp_path, durations=durations)


def test_cost_axis_and_baseline_refused(tmp_path):
    with pytest.raises(ValueError, match="cost must be one of"):
        _frontier(tmp_path, cost="energy")
    with pytest.raises(ValueError, match="need a baseline"):
        _frontier(tmp_path, candidates={"a": [LabelSmoothing(0.1)], "b": [LabelSmoothing(0.2)]})


def test_compositions_and_ablations_name_what_runs():
    made = compositions([LabelSmoothing(0.1), SelectiveBackprop(), CutOut()], max_size=2)
    assert list(made) == ["baseline", "LabelSmoothing", "SelectiveBackprop", "CutOut",
                          "LabelSmoothing + SelectiveBackprop", "LabelSmoothing + CutOut", "SelectiveBackprop + CutOut"]
    assert [type(a).__name__ for a in made["SelectiveBackprop + CutOut"]] == ["SelectiveBackprop", "CutOut"]
    pinned = compositions([CutOut(), SelectiveBackprop()])
    assert list(pinned)[-1] == "SelectiveBackprop + CutOut"  # SB is pinned first at after_dataloader
    left = ablations([SelectiveBackprop(), LabelSmoothing(0.1)])
    assert list(left) == ["baseline", "SelectiveBackprop + LabelSmoothing", "LabelSmoothing", "SelectiveBackprop"]
    everything = [a for algorithms in left.values() for a in algorithms]
    assert len({id(a) for a in everything}) == len(everything)  # each candidate its own copies


def test_the_race_stops_what_it_decided_and_saves_runs(tmp_path):
    """Known curves: LabelSmoothing twice as fast, CutOut as fast as the baseline."""
    factory = functools.partial(curved, {"": 1.0, "LabelSmoothing": 2.0, "CutOut": 1.0}, 0.002)
    frontier = Frontier(factory, {"baseline": [], "fast": [LabelSmoothing(0.1)], "same": [CutOut()]},
                        ["1ba", "2ba", "4ba"], seeds=range(8), folder=tmp_path / "r", metric="score",
                        cost="samples", executor=InlineExecutor())
    table = frontier.race(alpha=0.05, min_seeds=3).set_index("candidate")
    assert table.loc["fast", "verdict"] == "speed-up" and table.loc["fast", "cost_ratio"] == pytest.approx(0.5, 0.05)
    assert table.loc["same", "verdict"] == "no gain"
    assert table.attrs["runs"] < table.attrs["grid"]  # stopped once decided
    assert table.loc["fast", "n"] < 8
    rows = frontier.results()
    assert (rows.groupby(["candidate", "seed"]).size() == 3).all()  # whole seeds: every duration
    last = rows.groupby("candidate")["seed"].max()
    assert (last <= last["baseline"]).all() and last["fast"] < last["baseline"]  # the baseline pairs every seed
    assert json.loads((tmp_path / "r" / "sweep.json").read_text())["format"].startswith("composer_lab.sweep")
    assert "fast reaches the baseline's 2ba score" in frontier.answer
    fig = plot_frontier(frontier)
    assert fig.axes[0].get_xscale() == "log" and "samples" in fig.axes[0].get_xlabel()
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "Pareto set" in labels and any(label.startswith("fast: speed-up") for label in labels)
