"""One MLflow tracking store, written through ``MlflowClient``: experiments, runs found by their
tags (so an export is never duplicated), parameters, metric rows and a run's folder as artifacts.

Only the client is used, never MLflow's fluent API: no global active run, so trackers of several
trainers (or threads) never log into each other's runs. Needs the ``mlflow`` extra
(``pip install 'composer_lab[mlflow]'``), imported when a store is opened.
"""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional
from urllib.parse import urlparse

import pandas as pd

from composer_lab.tracking.run_clock import RunClock, run_clock
from composer_lab.tracking.run_params import order_params, run_params, tracker_key
from composer_lab.tracking.tracker import require, writable_folder

if TYPE_CHECKING:
    from composer_lab.trainer.run import Run

__all__ = ["MLflowStore", "RUN_KEY", "COMPLETE"]

RUN_KEY = "composer_lab.run_id"
"""The tag that names the composer_lab run an MLflow run records (``Trainer.run_id``)."""
COMPLETE = "composer_lab.complete"
"""Tagged 'true' once a run holds all it was to hold; an export finding one keeps it, else writes it anew."""
_BATCH = {"metrics": 1000, "params": 100}  # MLflow's most per log_batch call


class MLflowStore:
    """The tracking store at ``tracking_uri`` (None: MLflow's default, ``MLFLOW_TRACKING_URI`` or
    ``sqlite:///mlflow.db`` in the working folder). Reached at construction: a URI that cannot be
    reached, or a database file that cannot be written, raises ValueError naming it."""

    def __init__(self, tracking_uri: Optional[str] = None) -> None:
        mlflow = require("mlflow", "mlflow")
        from mlflow.tracking import MlflowClient

        self.uri = str(tracking_uri) if tracking_uri is not None else mlflow.get_tracking_uri()
        self._artifacts = _check_reachable(self.uri)
        self.client = MlflowClient(tracking_uri=self.uri)
        try:
            self.client.search_experiments(max_results=1)
        except Exception as err:
            raise ValueError(f"the MLflow tracking URI {self.uri!r} does not answer ({type(err).__name__}: {err}); "
                             f"give a tracking server's http:// address or a database such as sqlite:///mlflow.db"
                             ) from None

    def experiment(self, name: str) -> str:
        """The id of experiment ``name``, created if new (for a sqlite store, with its artifacts in
        ``mlartifacts/`` beside the database, not in the working folder)."""
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        return self.client.create_experiment(name, artifact_location=self._artifacts)

    def find_run(self, experiment_id: str, tags: Mapping[str, str]) -> Any:
        """The run of ``experiment_id`` carrying all of ``tags`` (the oldest, if several), or None."""
        where = " and ".join(f"tags.`{key}` = '{_quoted(value)}'" for key, value in tags.items())
        found = self.client.search_runs([experiment_id], filter_string=where, order_by=["attributes.start_time ASC"],
                                        max_results=1)
        return found[0] if found else None

    def create_run(self, experiment_id: str, name: str, tags: Mapping[str, str],
                   start_time: Optional[int] = None) -> str:
        """A new run (RUNNING) of ``experiment_id``, started at ``start_time`` (unix ms; None: now); its id."""
        return self.client.create_run(experiment_id, start_time=start_time, run_name=name, tags=dict(tags)).info.run_id

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """``params`` as MLflow parameters (text), keys made valid (:func:`tracker_key`)."""
        from mlflow.entities import Param

        entries = [Param(tracker_key(key), str(value)) for key, value in params.items()]
        for start in range(0, len(entries), _BATCH["params"]):
            self.client.log_batch(run_id, params=entries[start:start + _BATCH["params"]])

    def log_metrics(self, run_id: str, rows: pd.DataFrame, clock: Optional[RunClock] = None) -> None:
        """Each ``(batch, name, value)`` row of a metrics frame as metric ``name`` at step ``batch``,
        dated by the run's ``clock`` (None: now, for rows logged as they come)."""
        from mlflow.entities import Metric

        times = clock.at(rows["batch"]) if clock is not None else [int(time.time() * 1000)] * len(rows)
        entries = [Metric(tracker_key(name), value, stamp, batch) for batch, name, value, stamp in zip(
            rows["batch"].tolist(), rows["name"].astype(str).tolist(), rows["value"].tolist(), times)]
        for start in range(0, len(entries), _BATCH["metrics"]):
            self.client.log_batch(run_id, metrics=entries[start:start + _BATCH["metrics"]])

    def log_run_folder(self, run_id: str, run: Run) -> None:
        """``run`` saved as a run folder (config, metrics and trace parquet) under the artifacts' ``run/``."""
        with tempfile.TemporaryDirectory(prefix="composer_lab-mlflow-") as folder:
            run.save(Path(folder) / "run")
            self.client.log_artifacts(run_id, str(Path(folder) / "run"), artifact_path="run")

    def end(self, run_id: str, status: str, end_time: Optional[int] = None) -> None:
        """End the run with ``status`` ('FINISHED', 'FAILED', 'KILLED') at ``end_time`` (unix ms;
        None: now), tagged complete."""
        self.client.set_tag(run_id, COMPLETE, "true")
        self.client.set_terminated(run_id, status, end_time=end_time)

    def export(self, run: Run, experiment_id: str, key: Mapping[str, str], params: Optional[Mapping[str, Any]] = None,
               tags: Optional[Mapping[str, str]] = None, name: Optional[str] = None,
               totals: Optional[Mapping[str, float]] = None) -> str:
        """Write ``run`` (parameters, every metric row, its folder as artifacts) as the run tagged
        ``key``, named ``name`` (default: the run's), unless a complete one is there already (then
        only ``tags`` are set on it again); ``params`` and ``tags`` add to the run's own, ``totals``
        (e.g. the wall time) are metrics logged once, at its end. The MLflow run carries the run's
        own clock (:func:`run_clock`: its start, end and each step's time).
        Returns the MLflow run's id."""
        tags = tags or {}
        found = self.find_run(experiment_id, key)
        if found is not None and found.data.tags.get(COMPLETE) == "true":
            for tag, value in tags.items():
                self.client.set_tag(found.info.run_id, tag, value)
            return found.info.run_id
        if found is not None:
            self.client.delete_run(found.info.run_id)  # an export cut short: written anew
        return self._write(run, experiment_id, {RUN_KEY: str(run.config.get("run_id")), **key, **tags},
                           {**run_params(run), **order_params(run), **(params or {})}, name or run.name, totals or {})

    def _write(self, run: Run, experiment_id: str, tags: Mapping[str, str], params: Mapping[str, Any], name: str,
               totals: Mapping[str, float]) -> str:
        """A new MLflow run of ``run`` on its own clock, FINISHED; its id."""
        clock = run_clock(run)
        run_id = self.create_run(experiment_id, name, tags, clock and clock.start)
        self.log_params(run_id, params)
        self.log_metrics(run_id, run.metrics, clock)
        for metric, value in totals.items():
            self.client.log_metric(run_id, metric, value, timestamp=clock and clock.end)
        self.log_run_folder(run_id, run)
        self.end(run_id, "FINISHED", clock and clock.end)
        return run_id


def _check_reachable(uri: str) -> Optional[str]:
    """Raise ValueError if ``uri`` cannot be reached quickly (a server that does not answer would
    otherwise be retried for minutes); return where a sqlite store's artifacts go (else None)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("http", "https"):
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=5).close()
        except OSError as err:
            raise ValueError(f"the MLflow tracking URI {uri!r} cannot be reached ({err}); start the server "
                             f"(mlflow server --backend-store-uri sqlite:///mlflow.db) or give a database such as "
                             f"sqlite:///mlflow.db") from None
        return None
    if parsed.scheme == "sqlite":
        database = Path(uri[len("sqlite:///"):])
        folder = writable_folder(database.parent, f"the MLflow database {uri!r} (its folder {str(database.parent)!r})")
        return (folder / "mlartifacts").resolve().as_uri()
    if parsed.scheme in ("", "file"):
        writable_folder(parsed.path, f"the MLflow tracking folder {uri!r}")
    return None


def _quoted(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("'", "\\'")
