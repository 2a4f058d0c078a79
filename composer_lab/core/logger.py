"""The metric logger: algorithms, callbacks and the trainer log scalars; pandas reads them."""

from __future__ import annotations

import operator
import threading
from itertools import chain, compress, count, repeat
from typing import TYPE_CHECKING, Any, Mapping, Optional

import numpy as np
import pandas as pd
import torch

from composer_lab.core.trace.storage import columns

if TYPE_CHECKING:
    from composer_lab.core.state import State

__all__ = ["Logger", "METRIC_COLUMNS", "WRITE_ROWS", "stack_scalars"]

METRIC_COLUMNS = ("batch", "epoch", "phase", "name", "value")
WRITE_ROWS = 4096
"""Rows flushed that the logger writes to its columns at once, if no read of :attr:`Logger.metrics` did before."""


class Logger:
    """Collects ``(batch, epoch, phase, name, value)`` rows.

    Values may be tensors: they are kept as they are (no device-to-host copy on the hot path)
    until :meth:`flush` (the trainer's flush points, or a read of :attr:`metrics`) copies those
    logged since the last flush to the host in bulk, one transfer per device. Their rows join
    growing columns at the next read, or once :data:`WRITE_ROWS` of them wait (a write to the
    columns costs about as much for 100 rows as for thousands): a read costs time in proportion
    to the rows new since the last. ``phase`` follows the event being run ('fit', 'eval' or
    'predict'); the engine sets it.
    """

    def __init__(self, state: Optional[State] = None) -> None:
        self.state, self.phase = state, "fit"  # (the engine sets the phase)
        self.hyperparameters: dict[str, Any] = {}
        """What :meth:`log_hyperparameters` recorded, by name."""
        self.latest: dict[str, float] = {}
        """Each name's last value as of the last flush (what the progress bar shows: no sync)."""
        self._rows: list[tuple] = []  # logged since the last flush
        self._flushed: list[list] = []  # flushed since the last write to the columns: their columns, as lists
        self._flushed_rows = 0
        self._codes: dict[str, dict[str, int]] = {"phase": {}, "name": {}}  # category -> code, first seen first
        self._columns = {c: np.empty(0, np.float64 if c == "value" else np.int64) for c in METRIC_COLUMNS}
        # rows written into the columns; the frames read of them; a lock for a read from another thread
        self._size, self._numeric, self._frame, self._lock = 0, None, None, threading.RLock()

    def log_metrics(self, metrics: Mapping[str, Any], phase: Optional[str] = None) -> None:
        """Record each ``name: value`` at the current batch and epoch."""
        batch, epoch = (ts.batch, ts.epoch) if (ts := getattr(self.state, "timestamp", None)) is not None else (0, 0)
        phase, append = phase or self.phase, self._rows.append
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                value = value.detach() if value.requires_grad else value  # (no graph: detach would add an object)
                if value.numel() != 1:
                    raise ValueError(f"metric {name!r} has {value.numel()} values; log one scalar per name "
                                     f"(e.g. value.mean())")
            append((batch, epoch, phase, name, value))

    def log_hyperparameters(self, hyperparameters: Mapping[str, Any]) -> None:
        """Record facts of the run's setup (Composer's ``Logger.log_hyperparameters``: a surgery's layer
        counts): kept in :attr:`hyperparameters`, and each number also logged as a metric now."""
        self.hyperparameters.update(hyperparameters)
        numbers = {k: float(v) for k, v in hyperparameters.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if numbers:
            self.log_metrics(numbers)

    def log_train_step(self, loss: Any, lr: Any) -> None:
        """The trainer's rows of every batch, as ``log_metrics({'loss/train': loss, 'lr': lr}, phase='fit')``
        records them, without its loop and checks: ``loss`` is a float or a detached one-value tensor
        (its backward ran), ``lr`` a number (a tensor goes through :meth:`log_metrics`)."""
        if isinstance(lr, torch.Tensor):
            return self.log_metrics({"loss/train": loss, "lr": lr}, phase="fit")
        ts = self.state.timestamp
        self._rows.extend(((ts.batch, ts.epoch, "fit", "loss/train", loss), (ts.batch, ts.epoch, "fit", "lr", lr)))

    def load_metrics(self, rows: list[tuple]) -> None:
        """Start again from ``rows`` ``(batch, epoch, phase, name, value)`` (a resumed checkpoint's
        metrics, then those logged before the load that it lacks), in new columns, so a frame read
        before keeps its rows. Called before training (a resume)."""
        with self._lock:
            self._columns = {column: values[:0] for column, values in self._columns.items()}  # (new at the write)
            self._rows, self._flushed, self._flushed_rows = list(rows), [], 0
            self._size, self._numeric, self._frame = 0, None, None

    def flush(self) -> dict[int, float]:
        """Copy the tensor values of the rows logged since the last flush to the host together (one
        transfer per device) and note each name's latest value; the rows join the columns at the next
        read (or once :data:`WRITE_ROWS` wait). Returns the value read of each tensor, by its id (the
        trainer's non-finite check reads its losses there: one read of the device a flush). Safe to
        call from another thread: the rows are taken by count, so a row the run appends meanwhile
        stays for the next flush."""
        with self._lock:
            rows = self._rows[:]
            if not rows:
                return {}
            del self._rows[:len(rows)]  # (not a new list: an append to the old one would be lost)
            # (picked out by column: zip(*rows) makes an iterator per row, and a resumed checkpoint's
            # 400,000 rows then spent 1.2 s in the garbage collector)
            new = columns(rows, len(METRIC_COLUMNS))
            *_, names, values = new
            read = _to_host_floats(values)
            self.latest.update(zip(names, values))
            self._flushed.append(new)
            self._flushed_rows += len(rows)
            if self._flushed_rows >= WRITE_ROWS:
                self._write()
            return read

    def _write(self) -> None:
        """Append the flushed rows to the columns (twice the length when full, the rows copied)."""
        if not self._flushed:
            return
        new = [list(chain.from_iterable(parts)) for parts in zip(*self._flushed)]
        start, end = self._size, self._size + self._flushed_rows
        self._flushed, self._flushed_rows = [], 0
        if end >= len(self._columns["batch"]):  # (the frame viewing them is made again at a read)
            self._columns = {column: np.resize(values, start + end) for column, values in self._columns.items()}
            self._numeric = None
        for column, values in zip(METRIC_COLUMNS, new):  # (phase and name as category codes, in the order first seen)
            codes = self._codes.get(column)
            if codes is not None:
                for category in dict.fromkeys(values):  # (each category once; the rows' codes in a C loop)
                    codes.setdefault(category, len(codes))
                values = list(map(codes.__getitem__, values))
            self._columns[column][start:end] = values
        self._size, self._frame = end, None

    @property
    def metrics(self) -> pd.DataFrame:
        """A tidy DataFrame: ``batch``, ``epoch``, ``phase``, ``name``, ``value`` (float)."""
        with self._lock:  # (reentrant: flush takes it too)
            self.flush()
            self._write()
            if self._numeric is None:  # (a frame viewing the numbers: made again after the columns grew)
                self._numeric = pd.DataFrame(self._columns, columns=["batch", "epoch", "value"], copy=False)
            if self._frame is None:  # views of the columns (copy-on-write: a change to the frame copies)
                self._frame = self._numeric.iloc[:self._size].assign(**{c: pd.Categorical.from_codes(
                    self._columns[c][:self._size], list(codes), validate=False).reorder_categories(sorted(codes))
                    for c, codes in self._codes.items()})[list(METRIC_COLUMNS)]
            return self._frame


_DEVICE, _DTYPE = operator.attrgetter("device"), operator.attrgetter("dtype")


def _to_host_floats(values: list) -> dict[int, float]:
    """Replace the tensors among ``values`` by floats, copied to the host in one transfer per
    device; returns each tensor's float by the tensor's id."""
    # (C loops, not comprehensions: they run over every row logged, a loss tensor per batch among them)
    at = list(compress(count(), map(isinstance, values, repeat(torch.Tensor))))
    devices, read = list(map(_DEVICE, map(values.__getitem__, at))), {}
    for device in set(devices):
        on_device = list(compress(at, map(device.__eq__, devices)))
        tensors = list(map(values.__getitem__, on_device))
        floats = stack_scalars(tensors).tolist()
        read.update(zip(map(id, tensors), floats))
        for i, f in zip(on_device, floats):
            values[i] = f
    return read


def stack_scalars(tensors: list) -> torch.Tensor:
    """One-value ``tensors`` of one device as one 1-d float tensor: a single stack when they share a
    dtype and a shape (the usual case: each batch's loss), else each one reshaped and cast first (a
    stack of mixed dtypes would promote them together: an int64 with a float16 to float16)."""
    if len(set(map(_DTYPE, tensors))) == 1:  # (a C loop: a loss tensor per batch)
        try:
            return torch.stack(tensors).reshape(len(tensors)).float()
        except RuntimeError:  # (shapes differ, e.g. () and (1,))
            pass
    return torch.stack([t.reshape(()).float() for t in tensors])
