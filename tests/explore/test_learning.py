"""A race or ranking at chance level says so before any verdict: orders whose metric stays at
chance for the task (or past a floor the user sets) are named as not having learned, and get no
verdict as if they had."""

from __future__ import annotations

import pandas as pd

from composer_lab.algorithms import CutOut, MixUp
from composer_lab.explore import InlineExecutor, Sweep
from composer_lab.explore.learning import NOT_LEARNED, not_learned
from tests.explore.factories import make_trainer

METRIC = "metrics/eval/Accuracy"


def results(accuracies: dict[str, list[float]], chance: float = 0.1) -> pd.DataFrame:
    return pd.DataFrame([{"order": order, "seed": seed, METRIC: value, "chance": chance}
                         for order, values in accuracies.items() for seed, value in enumerate(values)])


def test_orders_at_chance_for_their_task_are_named():
    found = not_learned(results({"A > B": [0.10, 0.105, 0.098], "B > A": [0.62, 0.64, 0.61]}), METRIC)
    assert list(found) == ["A > B"] and "at chance (0.1 for its task" in found["A > B"]
    assert not_learned(results({"A > B": [0.10, 0.105]}), METRIC, higher_is_better=False) == {}  # (a loss: no chance)
    assert list(not_learned(results({"A > B": [0.3], "B > A": [0.6]}), METRIC, floor=0.5)) == ["A > B"]
    losses = results({"A > B": [0.3], "B > A": [0.6]}).rename(columns={METRIC: "loss"})
    assert list(not_learned(losses, "loss", floor=0.5, higher_is_better=False)) == ["B > A"]  # (above it)


def test_a_sweep_records_chance_and_withholds_the_verdicts_of_runs_that_did_not_learn(tmp_path):
    sweep = Sweep(make_trainer, [CutOut(), MixUp()], seeds=[0, 1], executor=InlineExecutor(), folder=tmp_path)
    finished = sweep.run()
    assert set(finished["chance"]) == {0.25}  # 4 classes
    ranking = sweep.ranking(floor=1.01)  # (no run reaches it: as if none had learned)
    assert set(ranking["verdict"]) == {NOT_LEARNED}
    assert ranking.attrs["summary"].startswith("no order learned, so no verdict is given (")
    assert "best" in set(sweep.ranking()["verdict"])  # (without the floor: they learned, above chance)
    decision = sweep.race(0.5, min_seeds=2, floor=1.01)
    assert set(decision.table["verdict"]) == {NOT_LEARNED} and decision.answer.startswith("no order learned")
