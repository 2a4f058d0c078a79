"""The metric logger: algorithms, callbacks and the trainer log scalars; pandas reads them."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Mapping, Optional

import pandas as pd
import torch

if TYPE_CHECKING:
    from composer_lab.core.state import State

__all__ = ["Logger", "METRIC_COLUMNS"]

METRIC_COLUMNS = ("batch", "epoch", "phase", "name", "value")


class Logger:
    """Collects ``(batch, epoch, phase, name, value)`` rows.

    Values may be tensors: they are kept as they are (no device-to-host copy on the hot
    path) and turned into floats, one transfer per device, when :attr:`metrics` is read.
    ``phase`` follows the event being run ('fit', 'eval' or 'predict'); the engine sets it.
    """

    def __init__(self, state: Optional[State] = None) -> None:
        self.state = state
        self.phase = "fit"
        self._rows: list[tuple] = []
        self._cache: Optional[tuple[int, pd.DataFrame]] = None

    def log_metrics(self, metrics: Mapping[str, Any], phase: Optional[str] = None) -> None:
        """Record each ``name: value`` at the current batch and epoch."""
        ts = self.state.timestamp if self.state is not None else None
        batch, epoch = (ts.batch, ts.epoch) if ts is not None else (0, 0)
        phase = phase or self.phase
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                if value.requires_grad:  # (without grad there is no graph to drop: detach would only add an object)
                    value = value.detach()
                if value.numel() != 1:
                    raise ValueError(f"metric {name!r} has {value.numel()} values; log one scalar per name "
                                     f"(e.g. value.mean())")
            self._rows.append((batch, epoch, phase, name, value))

    def load_metrics(self, frame: pd.DataFrame) -> None:
        """Append rows read from another logger's :attr:`metrics` (a resumed checkpoint's)."""
        columns = list(METRIC_COLUMNS)
        rows = frame[columns].astype(object).itertuples(index=False, name=None)
        self._rows.extend((int(b), int(e), str(p), str(n), float(v)) for b, e, p, n, v in rows)

    @property
    def metrics(self) -> pd.DataFrame:
        """A tidy DataFrame: ``batch``, ``epoch``, ``phase``, ``name``, ``value`` (float)."""
        if self._cache is None or self._cache[0] != len(self._rows):
            self._cache = (len(self._rows), self._build(self._rows))
        return self._cache[1]

    @staticmethod
    def _build(rows: list[tuple]) -> pd.DataFrame:
        values = [r[4] for r in rows]
        by_device: dict[torch.device, list[int]] = defaultdict(list)
        for i, v in enumerate(values):
            if isinstance(v, torch.Tensor):
                by_device[v.device].append(i)
        for idx in by_device.values():
            floats = torch.stack([values[i].reshape(()).float() for i in idx]).tolist()
            for i, f in zip(idx, floats):
                values[i] = f
        df = pd.DataFrame.from_records([r[:4] for r in rows], columns=list(METRIC_COLUMNS[:4]))
        df["value"] = pd.Series(values, dtype="float64")
        return df.astype({"batch": "int64", "epoch": "int64", "phase": "category", "name": "category"})
