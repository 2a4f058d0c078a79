"""Trackers: a run's metrics and setup in TensorBoard and MLflow, live (callbacks) or after the fact.

Optional extras: ``pip install 'composer_lab[tensorboard]'`` / ``'composer_lab[mlflow]'``. The
trackers' packages are imported when a logger is built or a run exported, not by this import.
"""

from composer_lab.tracking.mlflow_export import frontier_to_mlflow, to_mlflow, sweep_to_mlflow
from composer_lab.tracking.mlflow_logger import MLflowLogger
from composer_lab.tracking.tensorboard_logger import TensorBoardLogger, to_tensorboard
from composer_lab.tracking.tracker import Tracker

__all__ = ["TensorBoardLogger", "MLflowLogger", "Tracker", "to_tensorboard", "to_mlflow", "sweep_to_mlflow",
           "frontier_to_mlflow"]
