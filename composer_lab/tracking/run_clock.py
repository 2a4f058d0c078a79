"""A run's own clock, for exports: when it started, when it ended and when each batch ended, read
from what the run recorded (the trainer's start time, ``config['started_at']``, and the trace's
event times), never the clock of the export."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from composer_lab.trainer.run import Run

__all__ = ["RunClock", "run_clock"]


@dataclass(frozen=True)
class RunClock:
    """Unix milliseconds: ``start``, ``end``, and ``batches`` / ``ends`` (each batch the trace saw,
    ascending, and when its last event ended)."""

    start: int
    end: int
    batches: np.ndarray
    ends: np.ndarray

    def at(self, batches: pd.Series) -> list[int]:
        """When the run had reached each of ``batches``: the end of the last traced batch at or
        before it (the start, before the first; with the trace off, the end)."""
        if not len(self.batches):
            return [self.end] * len(batches)
        where = np.searchsorted(self.batches, np.asarray(batches, dtype=np.int64), side="right") - 1
        return [int(self.ends[i]) if i >= 0 else self.start for i in where]


def run_clock(run: Run) -> Optional[RunClock]:
    """``run``'s clock; None for a run saved before runs recorded their start (its times are unknown)."""
    started = run.config.get("started_at")
    if started is None:
        return None
    events = run.events
    ends = (events["t_start"] + events["duration"]).groupby(events["batch"], sort=True).max()
    start = int(float(started) * 1000)
    stamps = (start + ends.to_numpy(dtype=float) * 1000).astype(np.int64)
    end = int(stamps.max()) if len(stamps) else start
    return RunClock(start, end, ends.index.to_numpy(dtype=np.int64), np.maximum.accumulate(stamps))
