"""The frontier panel: ticked candidates trained in the background, verdicts and plot shown, Stop."""

from __future__ import annotations

import functools

import pytest

from composer_lab.algorithms import CutOut, LabelSmoothing
from composer_lab.explore import InlineExecutor
from composer_lab.lab import FrontierPanel
from tests.explore.frontier_factories import curved


def _panel(tmp_path):
    factory = functools.partial(curved, {"": 1.0, "LabelSmoothing": 2.0, "CutOut": 1.0}, 0.002)
    return FrontierPanel(factory, {"baseline": [], "fast": [LabelSmoothing(0.1)], "same": [CutOut()]},
                         ["1ba", "2ba", "4ba"], seeds=2, cost="samples", metric="score", folder=tmp_path,
                         executor=InlineExecutor())


def test_the_ticked_candidates_run_and_the_verdicts_show(tmp_path):
    panel = _panel(tmp_path)
    panel.checks["same"].value = False
    assert panel.checks["baseline"].disabled  # the baseline always runs
    panel.start().wait()
    assert set(panel.frontier.candidates) == {"baseline", "fast"}
    assert panel.progress.value == panel.progress.max == 2 * 3 * 2
    assert "speed-up" in panel.table.value and panel.image.value[:4] == b"\x89PNG"
    assert panel.status.value.startswith("done: fast reaches the baseline's 2ba score")
    assert not panel.run_button.disabled and panel.stop_button.disabled


def test_stop_keeps_what_finished(tmp_path):
    panel = _panel(tmp_path)
    handle = panel.start()
    panel.stop()
    handle.wait()
    finished = len(panel.frontier.results())
    assert finished < panel.progress.max and panel.status.value.startswith("stopped")
    assert len(panel.frontier.pending()) == panel.progress.max - finished
    panel.start().wait()  # again: resumes, training only the rest
    assert panel.progress.value == panel.progress.max and panel.status.value.startswith("done")


def test_a_race_stops_what_is_decided_and_names_the_runs_it_trained(tmp_path):
    panel = _panel(tmp_path)
    panel.seeds.value, panel.race.value = 5, True
    shown = []
    panel.image.observe(lambda change: shown.append(change), "value")
    panel.start().wait()
    grid = 3 * 3 * 5
    trained = len(panel.frontier.results())
    assert trained < grid and len(shown) >= 2  # the plot filled in as the race's runs finished
    assert panel.status.value.startswith(f"done: the race trained {trained} of the grid's {grid} runs; fast reaches")
    fast = panel.frontier.results().query("candidate == 'fast'")
    assert fast["seed"].nunique() == 3 and "speed-up" in panel.table.value  # decided at the first look


def test_a_race_stops_and_refuses_too_few_seeds(tmp_path):
    panel = _panel(tmp_path)
    panel.race.value = True  # 2 seeds: fewer than a race's first look needs
    with pytest.raises(ValueError, match="min_seeds must be an int from 2 to the frontier's 2 seeds"):
        panel.start()
    assert not panel.run_button.disabled
    panel.seeds.value = 4
    handle = panel.start()
    panel.stop()
    handle.wait()
    assert panel.status.value.startswith("stopped") and len(panel.frontier.results()) < 3 * 3 * 4
