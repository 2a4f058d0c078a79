"""The live trackers' common part: a callback that hands what a run logs to a tracker, in batches.

A :class:`Tracker` opens its tracker at each fit's start and closes it at the fit's end, or when
the fit fails or is interrupted (the trainer tells every callback, :meth:`Callback.fit_failed`), so no file
or tracking run stays open between fits. It reads the logger's rows new since its last read every
``flush_interval`` batches, after an epoch's evaluation and at the end, as the trainer's own flush
does: the values were already copied to the host in bulk, so tracking adds no read of the device
per batch. An evaluation outside fit (``trainer.eval()``) is written at once, opened and closed as a fit.
"""

from __future__ import annotations

import os
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import pandas as pd

from composer_lab.core.callback import Callback
from composer_lab.core.checks import check_positive_int

if TYPE_CHECKING:
    from composer_lab.core.logger import Logger
    from composer_lab.core.state import State
    from composer_lab.trainer.run import Run

__all__ = ["Tracker", "writable_folder", "require"]


class Tracker(Callback):
    """Base of :class:`~composer_lab.tracking.TensorBoardLogger` and
    :class:`~composer_lab.tracking.MLflowLogger`. A subclass writes with :meth:`_open`,
    :meth:`_write` (a frame of new metric rows), :meth:`_close` (the run and how it ended:
    'FINISHED', 'FAILED' or 'KILLED') and :meth:`_release` (drop what is open, raising nothing).

    ``flush_interval``: read the logged metrics every this many batches; None: the trainer's
    ``flush_interval``, so the values read were already copied to the host by its flush.

    A tracker that fails mid-run (a full disk, a tracking server gone) does not stop training: it
    warns, notes it in the trace (kind 'tracker') and writes nothing more this fit; the run's
    trace and metrics are whole, to export after the fact (``to_mlflow(trainer.to_run(), ...)``).
    Only rank 0 of a distributed run writes (it holds the metrics).
    """

    writes = frozenset()  # reads the run, changes no State field

    def __init__(self, flush_interval: Optional[int] = None) -> None:
        self.flush_interval = None if flush_interval is None else check_positive_int("flush_interval", flush_interval)
        self._trainer: Optional[weakref.ref] = None
        self._read = 0  # metric rows written so far
        self._open_now = False
        self._failed: Optional[Exception] = None

    def attach(self, trainer: Any) -> None:
        """Called by the Trainer that runs this tracker, before INIT (kept as a weak reference: no cycle)."""
        self._trainer = weakref.ref(trainer)

    @property
    def trainer(self) -> Any:
        """The Trainer this tracker writes for; a RuntimeError naming the fix when there is none."""
        trainer = self._trainer() if self._trainer is not None else None
        if trainer is None:
            raise RuntimeError(f"{type(self).__name__} is not part of a Trainer: pass it as "
                               f"Trainer(callbacks=[{type(self).__name__}(...)]) (a tracker added to state.callbacks "
                               f"later is not told about the run)")
        return trainer

    # -- events -------------------------------------------------------------------------------
    def fit_start(self, state: State, logger: Logger) -> None:
        self._failed = None
        if state.rank == 0:
            self._safely("start the run", self._start)

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        if self._open_now and state.timestamp.batch % (self.flush_interval or self.trainer.flush_interval) == 0:
            self._safely("write the metrics", self._write_new, logger)

    def epoch_checkpoint(self, state: State, logger: Logger) -> None:
        if self._open_now:
            self._safely("write the metrics", self._write_new, logger)

    def fit_end(self, state: State, logger: Logger) -> None:
        self._finish("FINISHED")

    def eval_standalone_end(self, state: State, logger: Logger) -> None:
        """An evaluation outside fit (``trainer.eval()``): its metrics written at once, as a fit's."""
        self.fit_start(state, logger)
        self.fit_end(state, logger)

    def fit_failed(self, error: BaseException) -> None:
        """The fit ended with ``error``: write what was logged and end the run as FAILED
        (KILLED for an interrupt)."""
        self._finish("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")

    def close(self, state: State, logger: Logger) -> None:
        self._finish("KILLED")  # (a fit still under way at the trainer's close; nothing otherwise)

    # -- machinery ----------------------------------------------------------------------------
    def _start(self) -> None:
        self._open(self.trainer)
        self._open_now = True

    def _write_new(self, logger: Logger) -> None:
        rows = logger.metrics.iloc[self._read:]
        if len(rows):
            self._write(rows)
            self._read += len(rows)

    def _finish(self, status: str) -> None:
        if not self._open_now:
            return
        self._safely("write the metrics", self._write_new, self.trainer.logger)
        self._safely(f"end the run as {status}", self._end, status)
        self._open_now = False

    def _end(self, status: str) -> None:
        self._close(self.trainer.to_run(), status)

    def _safely(self, what: str, step: Any, *args: Any) -> None:
        """``step(*args)``, unless this tracker failed this fit; a failure turns it off for the fit."""
        if self._failed is not None:
            return
        try:
            step(*args)
        except Exception as err:
            self._failed, self._open_now = err, False
            self._release()
            message = (f"{type(self).__name__} could not {what} ({type(err).__name__}: {err}); it writes nothing more "
                       f"this fit. Training goes on and the run keeps its trace and metrics: export them after the "
                       f"fact with composer_lab.tracking's to_mlflow(trainer.to_run(), ...) or to_tensorboard(...)")
            trainer = self.trainer
            trainer.trace.note("tracker", message, trainer.state.timestamp)
            warnings.warn(message, RuntimeWarning, stacklevel=2)

    def _open(self, trainer: Any) -> None:
        raise NotImplementedError

    def _write(self, rows: pd.DataFrame) -> None:
        raise NotImplementedError

    def _close(self, run: Run, status: str) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError


def writable_folder(path: Union[str, os.PathLike], what: str) -> Path:
    """``path`` as a folder that exists and takes files, else a ValueError saying ``what`` (the
    setting and its value) cannot be written, and the fix."""
    folder = Path(path).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".composer_lab_write_check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"{what} cannot be written ({type(err).__name__}: {err.strerror or err}); "
                         f"give a folder you can create files in") from None
    return folder


def require(module: str, extra: str) -> Any:
    """Import ``module``, or an ImportError naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{module} is not installed ({err}); install it with pip install 'composer_lab[{extra}]'"
                          ) from None
