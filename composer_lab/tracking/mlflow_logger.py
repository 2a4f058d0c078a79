"""MLflow, live: a run's parameters, metrics with their steps, and at its end the run folder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import pandas as pd

from composer_lab.tracking.mlflow_store import RUN_KEY, MLflowStore
from composer_lab.tracking.run_params import order_params, run_params
from composer_lab.tracking.tracker import Tracker

if TYPE_CHECKING:
    from composer_lab.trainer.run import Run

__all__ = ["MLflowLogger", "DEFAULT_EXPERIMENT"]

DEFAULT_EXPERIMENT = "composer_lab"


class MLflowLogger(Tracker):
    """Logs the run to MLflow while it trains: at the first fit's start a run of ``experiment_name``
    named ``run_name`` (default: the trainer's run name) with the setup as parameters
    (:func:`~composer_lab.tracking.run_params.run_params`: seed, duration, each algorithm's
    hyperparameters, ...); every metric row with its batch as step, read in batches
    (``flush_interval``, as for :class:`Tracker`); at each fit's end the order the algorithms ran in
    at each event (``order/<event>``), the run folder (config, metrics and trace parquet) as
    artifacts under ``run/``, and the status: FINISHED, FAILED when the fit raised, KILLED when it
    was interrupted. A later ``fit()`` of the same trainer continues the same MLflow run, and so
    does a trainer resumed from a checkpoint of the run (its ``run_id``, tagged on the MLflow run,
    finds it): the metric rows the checkpoint brings back were logged before and are not logged
    again (batches trained past the checkpoint before it was resumed are logged again when trained again).

    ``tracking_uri`` (None: MLflow's default) is reached at construction: one that cannot be
    reached raises ValueError naming it, before any training. Open the UI with
    ``mlflow ui --backend-store-uri <tracking_uri>``.
    """

    def __init__(self, tracking_uri: Optional[str] = None, experiment_name: str = DEFAULT_EXPERIMENT,
                 run_name: Optional[str] = None, flush_interval: Optional[int] = None) -> None:
        super().__init__(flush_interval)
        self.store = MLflowStore(tracking_uri)
        self.experiment_name, self.run_name = experiment_name, run_name
        self.run_id: Optional[str] = None
        """The MLflow run's id, from the first fit's start on."""

    def _open(self, trainer: Any) -> None:
        if self.run_id is not None:
            self.store.client.update_run(self.run_id, status="RUNNING")
            return
        experiment = self.store.experiment(self.experiment_name)
        resumed = self.store.find_run(experiment, {RUN_KEY: trainer.run_id})
        if resumed is not None:  # (a checkpoint of a run logged here: its rows so far were logged with it)
            self.run_id, self._read = resumed.info.run_id, len(trainer.metrics)
            self.store.client.update_run(self.run_id, status="RUNNING")
            return
        self.run_id = self.store.create_run(experiment, self.run_name or trainer.state.run_name,
                                            {RUN_KEY: trainer.run_id})
        self.store.log_params(self.run_id, run_params(trainer.to_run()))

    def _write(self, rows: pd.DataFrame) -> None:
        self.store.log_metrics(self.run_id, rows)

    def _close(self, run: Run, status: str) -> None:
        logged = self.store.client.get_run(self.run_id).data.params
        self.store.log_params(self.run_id, {k: v for k, v in order_params(run).items() if k not in logged})
        self.store.log_run_folder(self.run_id, run)
        self.store.end(self.run_id, status)

    def _release(self) -> None:
        if self.run_id is not None:
            try:  # (not left RUNNING where the store still answers)
                self.store.client.set_terminated(self.run_id, "FAILED")
            except Exception:  # (the tracker's failure is what gets reported)
                pass
