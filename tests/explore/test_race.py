"""Racing: verdicts from the results (pure, on synthetic tables of known effects), the trials a
race asks for, its error rate over repeated looks, and Sweep.race end to end: fewer runs than the
full sweep, resumable after a stop, bad settings refused."""

from __future__ import annotations

import functools
import re
import threading

import numpy as np
import pandas as pd
import pytest

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.explore import InlineExecutor, Sweep
from composer_lab.explore.race import decide, look_level, next_trials
from tests.explore.factories import scored

DELTA = 0.005
TIED = {"CutOut > MixUp": 0.8, "MixUp > CutOut": 0.8}


def results(means: dict, seeds: int = 12, run_sd: float = 0.002, seed: int = 0) -> pd.DataFrame:
    """Seeds x orders: each order's mean + a seed effect shared by every order + the run's noise."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, 0.03, (seeds, 1))
    values = np.asarray(list(means.values())) + shared + rng.normal(0, run_sd, (seeds, len(means)))
    return pd.DataFrame(values, index=pd.Index(range(seeds), name="seed"), columns=list(means))


def verdicts(table: pd.DataFrame) -> dict:
    return dict(zip(table["order"], table["verdict"]))


def test_an_order_far_worse_is_decided_at_the_first_look_and_a_tied_one_equivalent():
    table = decide(results({"A": 0.80, "B": 0.80, "C": 0.70}), DELTA)
    assert verdicts(table)["C"] == "worse" and table.set_index("order").loc["C", "n"] == 3
    assert sorted(verdicts(table)[o] for o in "AB") == ["best", "equivalent"]
    assert table.loc[0, "verdict"] == "best" and table["mean"].is_monotonic_decreasing
    c = table.set_index("order").loc["C"]
    assert c["diff_ci_low"] < c["diff"] < c["diff_ci_high"] < 0 and c["p_adjusted"] < 0.05


def test_verdicts_use_only_seeds_every_racing_order_has():
    values = results({"A": 0.80, "B": 0.80, "C": 0.70})
    early = values.copy()
    early.iloc[4:] = np.nan
    early.loc[4, "B"] = np.nan
    table = decide(early, DELTA)
    assert verdicts(table)["C"] == "worse" and set(verdicts(table).values()) >= {"racing"}
    assert (table.loc[table["verdict"] == "racing", "n"] == 4).all()  # the look at 4 seeds, none at 5
    ahead = early.copy()
    ahead.loc[5:8, "A"] = values.loc[5:8, "A"]  # one order ran ahead: no verdict moves
    ahead.loc[4:, "C"] = values.loc[4:, "C"]  # a decided order trained on: ignored
    pd.testing.assert_frame_equal(decide(ahead, DELTA), table)


def test_a_race_whose_seeds_run_out_is_undecided():
    table = decide(results({"A": 0.80, "B": 0.793}, seeds=4, run_sd=0.01), DELTA)
    assert sorted(verdicts(table).values()) == ["best", "undecided"]


def test_every_racing_order_gets_the_same_next_seed_one_look_ahead_at_most():
    values = results({"A": 0.80, "B": 0.80, "C": 0.70})
    empty = values * np.nan
    wanted = next_trials(decide(empty, DELTA), empty, min_seeds=3)
    assert wanted == [(o, s) for s in range(4) for o in "ABC"]  # 3 seeds for the first look, 1 ahead
    partial = values.copy()
    partial.iloc[3:] = np.nan
    wanted = next_trials(decide(partial, DELTA), partial, min_seeds=3)
    assert wanted == [("A", 3), ("B", 3), ("A", 4), ("B", 4)]  # C was decided at the first look
    assert next_trials(decide(values, DELTA), values, min_seeds=3) == []


def test_look_level_keeps_the_error_over_all_looks_at_alpha():
    assert look_level(0.05, 3, 3) == 0.05
    levels = [look_level(0.05, 3, n) for n in (4, 8, 20)]
    assert levels == sorted(levels, reverse=True) and 0.05 / 18 < levels[-1] < 0.05
    rng = np.random.default_rng(1)  # not look_level's draws: the level holds on fresh differences
    from scipy import stats
    z = rng.standard_normal((4000, 20))
    n = np.arange(3, 21)
    t = np.array([z[:, :k].mean(1) / (z[:, :k].std(1, ddof=1) / np.sqrt(k)) for k in n]).T
    rejected = (stats.t.sf(t, n - 1) < levels[-1]).any(axis=1).mean()
    assert 0.035 < rejected < 0.065


def race_sweep(folder, effects=TIED, seeds=range(12), run_sd=0.002) -> Sweep:
    return Sweep(functools.partial(scored, effects, run_sd), [CutOut(), MixUp()], seeds=seeds, metric="score",
                 executor=InlineExecutor(), folder=folder)


def test_a_race_of_tied_orders_says_so_in_fewer_runs_than_the_full_sweep(tmp_path):
    decision = race_sweep(tmp_path).race(DELTA)
    assert sorted(decision.table["verdict"]) == ["best", "equivalent"]
    assert set(decision.table["list_order"]) == {"CutOut > MixUp", "MixUp > CutOut"}
    n = int(decision.table["n"].max())
    assert decision.answer == (f"the order of CutOut and MixUp changes score by less than 0.005 "
                               f"(equivalent within delta=0.005, {n} seeds)")
    assert decision.trained == decision.runs == 2 * n < 2 * 12
    assert decision.answer in str(decision) and decision.answer in decision._repr_html_()


def test_a_worse_order_stops_training_at_its_verdict(tmp_path):
    sweep = race_sweep(tmp_path, {"CutOut > MixUp": 0.8, "MixUp > CutOut": 0.75})
    decision = sweep.race(DELTA)
    label = {order.positions: order.label for order in sweep.orders}  # the orders as they ran
    assert verdicts(decision.table) == {label[(0, 1)]: "best", label[(1, 0)]: "worse"}
    assert decision.trained == 6 and len(sweep.results) == 6  # one look at min_seeds=3
    assert re.fullmatch(rf"best: {re.escape(label[(0, 1)])}; against it 1 worse \(by 0\.0[45]\d*\) \(3 seeds, "
                        r"Holm-adjusted paired tests\)", decision.answer)


def test_a_stopped_race_resumes_to_the_same_decision(tmp_path):
    whole = race_sweep(tmp_path / "whole").race(DELTA)
    stop = threading.Event()
    sweep = race_sweep(tmp_path / "parts")
    first = sweep.race(DELTA, on_result=lambda row: stop.set() if len(sweep.folder.rows()) >= 5 else None,
                       stop=stop)
    assert first.trained == 5 and "racing" in set(first.table["verdict"])
    assert first.answer.startswith("racing: no verdict yet")
    again = race_sweep(tmp_path / "parts").race(DELTA)
    assert again.trained == whole.trained - 5 and again.runs == whole.runs
    pd.testing.assert_frame_equal(again.table, whole.table)


@pytest.mark.parametrize("settings, message", [
    ({"delta": 0}, r"delta must be a positive number, got 0"),
    ({"delta": DELTA, "alpha": 1.5}, r"alpha must lie in \(0, 1\), got 1.5"),
    ({"delta": DELTA, "min_seeds": 1}, r"min_seeds must be an int >= 2, got 1"),
    ({"delta": DELTA, "min_seeds": 20}, r"the sweep has 12 seeds, fewer than min_seeds=20"),
])
def test_bad_settings_are_refused_before_any_run(tmp_path, settings, message):
    sweep = race_sweep(tmp_path)
    with pytest.raises(ValueError, match=message):
        sweep.race(**settings)
    assert sweep.folder.rows() == {}


def test_a_metric_the_runs_do_not_log_is_refused_with_the_fix(tmp_path):
    sweep = Sweep(functools.partial(scored, TIED, 0.002), [CutOut(), MixUp()], seeds=range(4), metric="accuracy",
                  executor=InlineExecutor(), folder=tmp_path)
    with pytest.raises(ValueError, match=r"the runs do not record the metric 'accuracy'; they record \[.*'score'"):
        sweep.race(DELTA)
