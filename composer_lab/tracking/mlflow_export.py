"""MLflow, after the fact: a saved run, or a sweep or frontier as a parent run with one child run per run."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

import pandas as pd

from composer_lab.tracking.mlflow_logger import DEFAULT_EXPERIMENT
from composer_lab.tracking.mlflow_store import COMPLETE, RUN_KEY, MLflowStore

if TYPE_CHECKING:
    from composer_lab.trainer.run import Run

__all__ = ["to_mlflow", "sweep_to_mlflow", "frontier_to_mlflow", "SWEEP_KEY", "TRIAL_KEY"]

SWEEP_KEY = "composer_lab.sweep"
"""The tag naming the sweep (or frontier) folder a run belongs to (the parent and every child)."""
TRIAL_KEY = "composer_lab.trial"
"""The tag naming a child's trial key (its run folder's name); the parent's is 'sweep' or 'frontier'."""

FRONTIER_METRICS = ("metric", "time", "flops", "samples")
"""A frontier run's columns logged as metrics of its child run (``frontier/<name>``)."""


def to_mlflow(run: Run, tracking_uri: Optional[str] = None, experiment_name: str = DEFAULT_EXPERIMENT) -> str:
    """Log ``run`` as :class:`~composer_lab.tracking.MLflowLogger` logs a live one (parameters, every
    metric row at its batch, the run folder as artifacts), as a FINISHED run; returns its id. A run
    logged before (live or exported, keyed by the run's ``run_id``) is not logged again."""
    store = MLflowStore(tracking_uri)
    return store.export(run, store.experiment(experiment_name), {RUN_KEY: str(run.config.get("run_id"))})


def sweep_to_mlflow(folder: Union[str, os.PathLike], results: pd.DataFrame, ranking: pd.DataFrame,
                    about: Mapping[str, Any], tracking_uri: Optional[str] = None,
                    experiment_name: str = DEFAULT_EXPERIMENT) -> str:
    """Log a sweep: a parent run tagged with the sweep ``folder`` (``about`` as tags ``sweep.<name>``,
    the ``ranking`` as ``ranking.csv``, its ``attrs['summary']`` as tag ``ranking.summary``) and,
    under it, one child run per row of ``results`` (the saved run of one (order, seed): its
    parameters, metrics and folder) with ``order``, ``seed`` and ``list_order`` (where the results
    have it) as parameters and its order's ranking row as tags (``ranking.rank``,
    ``ranking.verdict``, ...), named '<order> seed <seed>', its ``wall_time`` (s) a metric.
    Keyed by the folder and each trial's key: exporting again adds only
    the trials new since and sets the tags anew. Returns the parent's id."""
    group = Group("sweep", folder, about, ranking, "ranking", "order", ranking.attrs.get("summary"), "ranking.summary")
    return group.export(results, lambda row: {"order": row["order"], "seed": row["seed"],
                                              **({"list_order": row["list_order"]} if "list_order" in row else {})},
                        lambda row: f"{row['order']} seed {row['seed']}",
                        lambda row: {"wall_time": float(row["wall_time"])} if "wall_time" in row else {},
                        tracking_uri, experiment_name)


def frontier_to_mlflow(folder: Union[str, os.PathLike], results: pd.DataFrame, speedups: pd.DataFrame,
                       about: Mapping[str, Any], tracking_uri: Optional[str] = None,
                       experiment_name: str = DEFAULT_EXPERIMENT) -> str:
    """Log a frontier as a sweep is logged (:func:`sweep_to_mlflow`): a parent run tagged with the
    frontier ``folder`` (``about`` as tags ``frontier.<name>``, the ``speedups`` table as
    ``speedups.csv``, its ``attrs['answer']`` as tag ``frontier.answer``) and one child run per row
    of ``results`` (one (candidate, duration, seed)) with ``candidate``, ``duration`` and ``seed``
    as parameters, its candidate's speed-up row as tags (``speedups.verdict``,
    ``speedups.cost_ratio``, ...), named '<candidate> <duration> seed <seed>', and its costs and
    quality as metrics ``frontier/metric``, ``frontier/time`` (s), ``frontier/flops``,
    ``frontier/samples`` (a cost not recorded is left out). Exported again, only the runs new since
    are added and the tags set anew. Returns the parent's id."""
    group = Group("frontier", folder, about, speedups, "speedups", "candidate", speedups.attrs.get("answer"),
                  "frontier.answer")
    return group.export(results, lambda row: {"candidate": row["candidate"], "duration": row["duration"],
                                              "seed": row["seed"]},
                        lambda row: f"{row['candidate']} {row['duration']} seed {row['seed']}",
                        lambda row: {f"frontier/{name}": float(row[name]) for name in FRONTIER_METRICS
                                     if pd.notna(row.get(name))},
                        tracking_uri, experiment_name)


@dataclass(frozen=True)
class Group:
    """An experiment of many runs exported as a parent with one child per run: its ``kind`` ('sweep',
    'frontier'), ``folder``, ``about`` (tags ``<kind>.<name>``), its verdict ``table`` (logged as
    ``<name>.csv``; the row whose ``by`` column names a child's ``by`` gives the child's tags
    ``<name>.<column>``) and the ``summary`` sentence (tag ``summary_tag``)."""

    kind: str
    folder: Union[str, os.PathLike]
    about: Mapping[str, Any]
    table: pd.DataFrame
    name: str
    by: str
    summary: Optional[str]
    summary_tag: str

    def export(self, results: pd.DataFrame, params: Callable[[dict], dict], title: Callable[[dict], str],
               totals: Callable[[dict], dict], tracking_uri: Optional[str], experiment_name: str) -> str:
        """The parent (found again by the folder, or made) and a child per row of ``results``
        (``params``, ``title`` and ``totals`` of the row); the parent's id."""
        from composer_lab.trainer.run import Run

        store = MLflowStore(tracking_uri)
        experiment = store.experiment(experiment_name)
        folder = str(Path(self.folder).resolve())
        parent_key = {SWEEP_KEY: folder, TRIAL_KEY: self.kind}
        found = store.find_run(experiment, parent_key)
        parent = found.info.run_id if found is not None else store.create_run(experiment,
                                                                             f"{self.kind} {Path(folder).name}",
                                                                             parent_key)
        for name, value in self.about.items():  # (tags, not parameters: resumed with more seeds, they change)
            store.client.set_tag(parent, f"{self.kind}.{name}", str(value))
        rows = {row[self.by]: row for row in self.table.to_dict("records")}
        for row in results.to_dict("records"):
            tags = {f"{self.name}.{name}": str(value) for name, value in rows.get(row[self.by], {}).items()
                    if name != self.by}
            store.export(Run.load(row["run_folder"]), experiment, {SWEEP_KEY: folder,
                                                                   TRIAL_KEY: Path(row["run_folder"]).name},
                         params(row), {"mlflow.parentRunId": parent, **tags}, title(row), totals(row))
        with tempfile.TemporaryDirectory(prefix="composer_lab-mlflow-") as scratch:
            self.table.to_csv(Path(scratch) / f"{self.name}.csv", index=False)
            store.client.log_artifact(parent, str(Path(scratch) / f"{self.name}.csv"))
        if self.summary is not None:
            store.client.set_tag(parent, self.summary_tag, str(self.summary))
        store.client.set_tag(parent, COMPLETE, "true")
        store.client.set_terminated(parent, "FINISHED")
        return parent
