"""TensorBoard: a run's metrics as scalars, its setup as text and hyperparameters, live or after the fact.

Needs the ``tensorboard`` extra (``pip install 'composer_lab[tensorboard]'``); it is imported
when a logger is built or a run exported, never by ``import composer_lab``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import pandas as pd

from composer_lab.tracking.run_params import order_params, run_params
from composer_lab.tracking.tracker import Tracker, require, writable_folder

if TYPE_CHECKING:
    from composer_lab.trainer.run import Run

__all__ = ["TensorBoardLogger", "to_tensorboard", "RUN_MARK"]

RUN_MARK = "composer_lab_run.json"
"""The file in a ``log_dir`` that names the run a :class:`TensorBoardLogger` last wrote there
(TensorBoard reads the event files only)."""


class TensorBoardLogger(Tracker):
    """Writes the metrics the run logs (train and eval loss, lr, throughput, eval accuracy, Selective
    Backprop's keep ratio, ...) to TensorBoard event files in ``log_dir`` while it trains, one scalar
    per metric name at its batch; at each fit's end, the setup (:func:`run_params`: algorithms and
    their hyperparameters, the order at each event, seed, duration) as text and hyperparameters.

    ``log_dir`` is checked at construction: one that cannot be written raises ValueError before any
    training. Each fit writes its own event file (the writer is closed at the fit's end, failure or
    interrupt); TensorBoard reads them all as one run. Open with ``tensorboard --logdir <log_dir>``.
    A trainer resumed from a checkpoint (``load_path=``) into the ``log_dir`` its run wrote before
    (:data:`RUN_MARK` names the run's id) writes only the rows it logs: the checkpoint's are there;
    into another ``log_dir`` it writes them all. ``flush_interval``: as for :class:`Tracker`.
    """

    def __init__(self, log_dir: Union[str, os.PathLike], flush_interval: Optional[int] = None) -> None:
        super().__init__(flush_interval)
        require("tensorboard", "tensorboard")
        self.log_dir = writable_folder(log_dir, f"TensorBoardLogger log_dir {str(log_dir)!r}")
        self._writer: Any = None
        self._marked = False

    def _open(self, trainer: Any) -> None:
        if not self._marked:  # (the first fit: the log_dir may hold this run's rows up to its checkpoint)
            if _marked_run(self.log_dir) == trainer.run_id:
                self._read = len(trainer.metrics)
            (self.log_dir / RUN_MARK).write_text(json.dumps({"run_id": trainer.run_id}))
            self._marked = True
        self._writer = _writer(self.log_dir)

    def _write(self, rows: pd.DataFrame) -> None:
        write_scalars(self._writer, rows)
        self._writer.flush()

    def _close(self, run: Run, status: str) -> None:
        write_setup(self._writer, run, status)
        self._release()

    def _release(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception:  # (releasing after a failure: the failure is what gets reported)
                pass


def to_tensorboard(run: Run, log_dir: Union[str, os.PathLike]) -> str:
    """Write a saved (or finished) ``run`` to ``log_dir`` as :class:`TensorBoardLogger` writes a live
    one: every metric row as a scalar at its batch, the setup as text and hyperparameters. Returns
    the folder's path (``tensorboard --logdir <it>``)."""
    require("tensorboard", "tensorboard")
    folder = writable_folder(log_dir, f"log_dir {str(log_dir)!r}")
    writer = _writer(folder)
    try:
        write_scalars(writer, run.metrics)
        write_setup(writer, run, "exported")
    finally:
        writer.close()
    return str(folder)


def write_scalars(writer: Any, rows: pd.DataFrame) -> None:
    """Each ``(batch, name, value)`` row of a metrics frame as a scalar ``name`` at step ``batch``."""
    for batch, name, value in zip(rows["batch"].tolist(), rows["name"].astype(str).tolist(), rows["value"].tolist()):
        writer.add_scalar(name, value, batch)


def write_setup(writer: Any, run: Run, status: str) -> None:
    """``run``'s parameters as a text table ('setup') and as TensorBoard hyperparameters, at the
    run's last batch, with how it ended ('status')."""
    from torch.utils.tensorboard.summary import hparams

    params = {**run_params(run), **order_params(run)}
    step = int(run.metrics["batch"].max()) if len(run.metrics) else 0
    table = "| parameter | value |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in params.items())
    writer.add_text("setup", table, step)
    writer.add_text("status", status, step)
    for summary in hparams(params, {}):
        writer.file_writer.add_summary(summary, step)


def _marked_run(log_dir: Path) -> Optional[str]:
    """The id of the run :data:`RUN_MARK` names in ``log_dir`` (None: none, or unreadable)."""
    try:
        return json.loads((log_dir / RUN_MARK).read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None


def _writer(folder: Any) -> Any:
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(folder))
