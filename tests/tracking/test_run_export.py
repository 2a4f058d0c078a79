"""Run.to_mlflow: a saved run logged after the fact as the live logger logs it, and only once."""

from __future__ import annotations

from composer_lab.tracking import MLflowLogger
from composer_lab.trainer.run import Run
from tests.tracking.helpers import histories, tiny_trainer
from tests.tracking.test_mlflow_logger import read_back, stored


def test_a_saved_run_is_logged_once_with_its_metrics_and_params(uri, tmp_path):
    trainer = tiny_trainer()
    trainer.fit()
    run = Run.load(trainer.to_run().save(tmp_path / "run"))
    run_id = run.to_mlflow(uri, "lab")
    assert run.to_mlflow(uri, "lab") == run_id  # exported again: the same run, nothing added
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
    assert trainer.to_run().to_mlflow(uri, "lab") == tracker.run_id
    assert len(read_back(uri)[0]) == 1


def test_an_export_cut_short_is_written_anew(uri):
    trainer = tiny_trainer(batches="2ba")
    trainer.fit()
    run = trainer.to_run()
    tracker = MLflowLogger(uri, experiment_name="lab")  # (its store, to leave a run half written)
    experiment = tracker.store.experiment("lab")
    partial = tracker.store.create_run(experiment, run.name, {"composer_lab.run_id": trainer.run_id})
    run_id = run.to_mlflow(uri, "lab")
    runs, client = read_back(uri)
    assert run_id != partial and list(runs["run_id"]) == [run_id]
    assert stored(client, run_id, ["loss/train"]) == {"loss/train": histories(trainer.metrics)["loss/train"]}
