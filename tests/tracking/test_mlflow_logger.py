"""MLflowLogger against a real sqlite tracking store, read back with mlflow.search_runs and
MlflowClient.get_metric_history: what the run logged, at its steps; FAILED / KILLED when a fit
raises or is interrupted; bad URIs refused before training; a tracker failure stops no training."""

from __future__ import annotations

import pytest

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'composer_lab[mlflow]'")

from mlflow.tracking import MlflowClient  # noqa: E402

from composer_lab.core.callback import Callback  # noqa: E402
from composer_lab.tracking import MLflowLogger  # noqa: E402
from tests.tracking.helpers import FailAt, histories, tiny_trainer  # noqa: E402


def read_back(uri: str, experiment: str = "lab"):
    """The experiment's runs (mlflow.search_runs) and the client to read their metric histories."""
    mlflow.set_tracking_uri(uri)
    try:
        runs = mlflow.search_runs(experiment_names=[experiment])
    finally:
        mlflow.set_tracking_uri(None)
    return runs, MlflowClient(tracking_uri=uri)


def stored(client: MlflowClient, run_id: str, names) -> dict:
    return {name: sorted((m.step, m.value) for m in client.get_metric_history(run_id, name)) for name in names}


def test_a_run_is_logged_with_its_metrics_steps_params_and_folder(uri):
    tracker = MLflowLogger(uri, experiment_name="lab", run_name="tiny", flush_interval=2)
    trainer = tiny_trainer([tracker])
    trainer.fit()
    runs, client = read_back(uri)
    assert len(runs) == 1 and runs["status"][0] == "FINISHED" and runs["tags.mlflow.runName"][0] == "tiny"
    expected = histories(trainer.metrics)
    assert set(expected) >= {"loss/train", "lr", "loss/eval", "metrics/eval/Accuracy"}
    assert stored(client, tracker.run_id, expected) == expected
    params = client.get_run(tracker.run_id).data.params
    assert params["seed"] == "0" and params["max_duration"] == "6ba" and params["algorithms"] == "CutOut > MixUp"
    assert params["MixUp.alpha"] == "0.2" and params["order/after_dataloader"] == "MixUp > CutOut"  # (FILO)
    assert params["composer_lab.run_id"] == trainer.run_id
    files = {f.path for f in client.list_artifacts(tracker.run_id, "run")}
    assert files == {"run/config.json", "run/metrics.parquet", "run/trace"}


def test_a_second_fit_continues_the_same_mlflow_run(uri):
    tracker = MLflowLogger(uri, experiment_name="lab")
    trainer = tiny_trainer([tracker], batches="3ba")
    trainer.fit()
    first = tracker.run_id
    trainer.fit(duration="2ba")
    runs, client = read_back(uri)
    assert list(runs["run_id"]) == [first] and runs["status"][0] == "FINISHED"
    assert stored(client, first, ["loss/train"])["loss/train"] == histories(trainer.metrics)["loss/train"]
    assert [step for step, _ in stored(client, first, ["loss/train"])["loss/train"]] == [0, 1, 2, 3, 4]


def test_a_trainer_resumed_from_a_checkpoint_continues_its_mlflow_run(uri, tmp_path):
    """The checkpoint carries the run's id, which the MLflow run is tagged with: the resumed trainer
    logs into that run, each step once (the rows the checkpoint brings back are not logged again)."""
    folder = tmp_path / "checkpoints"
    first = MLflowLogger(uri, experiment_name="lab", flush_interval=1)
    tiny_trainer([first], batches="3ba", save_folder=folder, save_interval="3ba").fit()
    tracker = MLflowLogger(uri, experiment_name="lab", flush_interval=1)
    resumed = tiny_trainer([tracker], batches="5ba", load_path=folder / "ep0-ba3.pt")
    resumed.fit()
    runs, client = read_back(uri)
    assert list(runs["run_id"]) == [first.run_id] == [tracker.run_id] and runs["status"][0] == "FINISHED"
    assert stored(client, tracker.run_id, ["loss/train"])["loss/train"] == histories(resumed.metrics)["loss/train"]
    assert [step for step, _ in stored(client, tracker.run_id, ["loss/train"])["loss/train"]] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("error, status", [(RuntimeError("boom"), "FAILED"), (KeyboardInterrupt(), "KILLED")])
def test_a_run_killed_mid_fit_ends_failed_with_its_metrics_up_to_the_failure(uri, error, status):
    tracker = MLflowLogger(uri, experiment_name="lab", flush_interval=2)
    trainer = tiny_trainer([tracker, FailAt(4, error)])
    with pytest.raises(type(error)):
        trainer.fit()
    runs, client = read_back(uri)
    assert runs["status"][0] == status
    expected = histories(trainer.metrics)
    assert [step for step, _ in expected["loss/train"]] == [0, 1, 2, 3]  # 4 batches applied, then BATCH_END raised
    assert stored(client, tracker.run_id, expected) == expected
    assert {f.path for f in client.list_artifacts(tracker.run_id, "run")} >= {"run/trace"}


def test_an_unreachable_tracking_uri_is_refused_before_training():
    with pytest.raises(ValueError, match=r"'http://127.0.0.1:9' cannot be reached.*mlflow server"):
        MLflowLogger("http://127.0.0.1:9")


def test_a_database_that_cannot_be_written_is_refused_naming_it(tmp_path):
    (tmp_path / "a_file").write_text("")
    uri = f"sqlite:///{tmp_path / 'a_file' / 'mlflow.db'}"
    with pytest.raises(ValueError, match=r"MLflow database .*a_file/mlflow.db.* cannot be written"):
        MLflowLogger(uri)


class DeleteTheRun(Callback):
    """Deletes the tracker's MLflow run at batch 2: its next write fails (the run is no longer active)."""

    def __init__(self, tracker: MLflowLogger) -> None:
        self.tracker = tracker

    def batch_end(self, state, logger):
        if state.timestamp.batch == 2:
            self.tracker.store.client.delete_run(self.tracker.run_id)


def test_a_tracker_that_fails_mid_run_warns_and_training_goes_on(uri):
    tracker = MLflowLogger(uri, experiment_name="lab", flush_interval=1)
    trainer = tiny_trainer([DeleteTheRun(tracker), tracker])
    with pytest.warns(RuntimeWarning, match=r"MLflowLogger could not write the metrics .* Training goes on"):
        trainer.fit()
    assert trainer.state.timestamp.batch == 6
    assert [step for step, _ in histories(trainer.metrics)["loss/train"]] == list(range(6))
    notes = trainer.trace.notes
    assert list(notes.loc[notes["kind"] == "tracker", "batch"]) == [2]
