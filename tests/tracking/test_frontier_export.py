"""Frontier.to_mlflow: a parent run per frontier folder (the speed-up table, the answer), a child per
(candidate, duration, seed) with its metric and costs; exported again, only new runs are added."""

from __future__ import annotations

import pytest

from composer_lab.algorithms import LabelSmoothing
from composer_lab.explore import Frontier, InlineExecutor
from tests.explore.frontier_factories import make_trainer
from tests.tracking.test_mlflow_logger import read_back


def frontier(folder, seeds) -> Frontier:
    return Frontier(make_trainer, {"baseline": [], "ls": [LabelSmoothing(0.1)]}, ["2ba", "4ba"], seeds=seeds,
                    folder=folder, cost="flops", executor=InlineExecutor())


def test_a_frontier_exports_each_run_with_its_costs_and_the_verdicts_once(uri, tmp_path):
    first = frontier(tmp_path / "fr", [0])
    results = first.run()
    parent = first.to_mlflow(uri, "lab")
    runs, client = read_back(uri)
    children = runs[runs["tags.composer_lab.trial"] != "frontier"].set_index("tags.mlflow.runName")
    assert len(runs) == 1 + 4 and set(children["tags.mlflow.parentRunId"]) == {parent}
    tags = client.get_run(parent).data.tags
    assert tags["frontier.answer"] == first.answer and tags["frontier.cost"] == "flops"
    assert tags["frontier.metric"] == "metrics/eval/Accuracy" and tags["frontier.durations"] == "2ba, 4ba"
    assert [a.path for a in client.list_artifacts(parent)] == ["speedups.csv"]
    verdicts = first.speedups().set_index("candidate")["verdict"]
    for row in results.to_dict("records"):
        child = children.loc[f"{row['candidate']} {row['duration']} seed {row['seed']}"]
        assert (child["params.candidate"], child["params.duration"], child["params.seed"]) == (
            row["candidate"], row["duration"], str(row["seed"]))
        assert child["tags.speedups.verdict"] == verdicts[row["candidate"]]
        for name in ("metric", "time", "flops", "samples"):
            assert child[f"metrics.frontier/{name}"] == pytest.approx(row[name])

    more = frontier(tmp_path / "fr", [0, 1])  # a seed more: its 4 runs are added, the 4 exported are kept
    more.run()
    assert more.to_mlflow(uri, "lab") == parent
    again = read_back(uri)[0]
    assert len(again) == 1 + 8 and set(runs["run_id"]) <= set(again["run_id"])
    assert client.get_run(parent).data.tags["frontier.answer"] == more.answer
