"""MLflow, after the fact: a saved run, or a sweep as a parent run with one child run per (order, seed)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import pandas as pd

from composer_lab.tracking.mlflow_logger import DEFAULT_EXPERIMENT
from composer_lab.tracking.mlflow_store import COMPLETE, RUN_KEY, MLflowStore

if TYPE_CHECKING:
    from composer_lab.trainer.run import Run

__all__ = ["to_mlflow", "sweep_to_mlflow", "SWEEP_KEY", "TRIAL_KEY"]

SWEEP_KEY = "composer_lab.sweep"
"""The tag naming the sweep folder a run belongs to (the parent and every child)."""
TRIAL_KEY = "composer_lab.trial"
"""The tag naming a child's trial key (its run folder's name); the parent's is 'sweep'."""


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
    from composer_lab.trainer.run import Run

    store = MLflowStore(tracking_uri)
    experiment = store.experiment(experiment_name)
    sweep = str(Path(folder).resolve())
    parent_key = {SWEEP_KEY: sweep, TRIAL_KEY: "sweep"}
    found = store.find_run(experiment, parent_key)
    parent = found.info.run_id if found is not None else store.create_run(experiment, f"sweep {Path(sweep).name}",
                                                                         parent_key)
    for name, value in about.items():  # (tags, not parameters: a sweep resumed with more seeds changes them)
        store.client.set_tag(parent, f"sweep.{name}", str(value))
    ranks = {row["order"]: row for row in ranking.to_dict("records")}
    for row in results.to_dict("records"):
        key = Path(row["run_folder"]).name
        child = {"order": row["order"], "seed": row["seed"], **({"list_order": row["list_order"]}
                                                                  if "list_order" in row else {})}
        tags = {f"ranking.{name}": str(value) for name, value in ranks.get(row["order"], {}).items() if name != "order"}
        store.export(Run.load(row["run_folder"]), experiment, {SWEEP_KEY: sweep, TRIAL_KEY: key}, child,
                     {"mlflow.parentRunId": parent, **tags}, f"{row['order']} seed {row['seed']}",
                     {"wall_time": float(row["wall_time"])} if "wall_time" in row else {})
    with tempfile.TemporaryDirectory(prefix="composer_lab-mlflow-") as scratch:
        ranking.to_csv(Path(scratch) / "ranking.csv", index=False)
        store.client.log_artifact(parent, str(Path(scratch) / "ranking.csv"))
    if "summary" in ranking.attrs:
        store.client.set_tag(parent, "ranking.summary", str(ranking.attrs["summary"]))
    store.client.set_tag(parent, COMPLETE, "true")
    store.client.set_terminated(parent, "FINISHED")
    return parent
