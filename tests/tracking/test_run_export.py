"""to_mlflow(run): a saved run logged after the fact as the live logger logs it, once, on its own clock."""

from __future__ import annotations

import pytest

from composer_lab.tracking import MLflowLogger, to_mlflow
from composer_lab.trainer.run import Run
from tests.tracking.helpers import histories, tiny_trainer
from tests.tracking.test_mlflow_logger import read_back, stored


def test_a_saved_run_is_logged_once_with_its_metrics_and_params(uri, tmp_path):
    trainer = tiny_trainer()
    trainer.fit()
    run = Run.load(trainer.to_run().save(tmp_path / "run"))
    run_id = to_mlflow(run, uri, "lab")
    assert to_mlflow(run, uri, "lab") == run_id  # exported again: the same run, nothing added
    runs, client = read_back(uri)
    assert list(runs["run_id"]) == [run_id] and runs["status"][0] == "FINISHED"
    expected = histories(trainer.metrics)
    assert stored(client, run_id, expected) == expected
    params = client.get_run(run_id).data.params
    assert params["order/after_dataloader"] == "MixUp > CutOut" and params["CutOut.length"] == "0.5"


def test_a_run_logged_live_is_not_exported_again(uri):
    tracker = MLflowLogger(uri, experiment_name="lab")
    trainer = tiny_trainer([tracker], batches="2ba")
    trainer.fit()
    assert to_mlflow(trainer.to_run(), uri, "lab") == tracker.run_id
    assert len(read_back(uri)[0]) == 1


def test_an_export_cut_short_is_written_anew(uri):
    trainer = tiny_trainer(batches="2ba")
    trainer.fit()
    run = trainer.to_run()
    tracker = MLflowLogger(uri, experiment_name="lab")  # (its store, to leave a run half written)
    experiment = tracker.store.experiment("lab")
    partial = tracker.store.create_run(experiment, run.name, {"composer_lab.run_id": trainer.run_id})
    run_id = to_mlflow(run, uri, "lab")
    runs, client = read_back(uri)
    assert run_id != partial and list(runs["run_id"]) == [run_id]
    assert stored(client, run_id, ["loss/train"]) == {"loss/train": histories(trainer.metrics)["loss/train"]}


def test_an_exported_run_carries_its_own_clock(uri, tmp_path):
    """The MLflow run's start, end and step times are the run's (read back from the sqlite store),
    not the export's: a run dated 2001 stays in 2001."""
    import sqlite3

    trainer = tiny_trainer(batches="3ba")
    trainer.fit()
    run = trainer.to_run()
    run.config["started_at"] = 1_000_000_000.0  # (as if trained in 2001)
    run_id = to_mlflow(run, uri, "lab")
    ends = (run.events["t_start"] + run.events["duration"]).groupby(run.events["batch"]).max()
    expected = {int(batch): 1_000_000_000_000 + int(seconds * 1000) for batch, seconds in ends.items()}
    with sqlite3.connect(uri[len("sqlite:///"):]) as db:
        start, end = db.execute("select start_time, end_time from runs where run_uuid = ?", (run_id,)).fetchone()
        steps = db.execute("select step, timestamp from metrics where run_uuid = ? and key = 'loss/train'",
                           (run_id,)).fetchall()
    assert start == 1_000_000_000_000 and end == max(expected.values())
    logged = run.metrics.loc[run.metrics["name"] == "loss/train", "batch"]
    assert sorted(steps) == [(batch, expected[batch]) for batch in sorted(logged)] and len(steps) == 3


def test_a_sweep_exports_readable_child_names_and_wall_times(uri, tmp_path):
    from composer_lab.algorithms import CutOut, MixUp
    from composer_lab.explore import InlineExecutor, Sweep
    from tests.explore.factories import make_trainer

    sweep = Sweep(make_trainer, [CutOut(), MixUp()], seeds=[0], executor=InlineExecutor(), folder=tmp_path / "sw")
    results = sweep.run()
    sweep.to_mlflow(uri, "lab")
    runs, client = read_back(uri)
    children = runs[runs["tags.composer_lab.trial"] != "sweep"].set_index("tags.mlflow.runName")
    assert sorted(children.index) == sorted(f"{order} seed 0" for order in sweep.labels)
    for order, wall_time in zip(results["order"], results["wall_time"]):
        assert children.loc[f"{order} seed 0", "metrics.wall_time"] == pytest.approx(wall_time)
