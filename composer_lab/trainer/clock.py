"""The run's wall clock: how long each training batch took, for ``state.timestamp``'s ``*_wct`` fields.

As in Composer, a batch's duration is the host's time from the end of the batch before (or the
start of the fit) to the end of its own optimizer step, and evaluations are left out of it
(:meth:`WallClock.paused`). The clock reads only the host's time source: it never waits for
the device, so on a GPU a batch's duration is the time the host spent on it, which includes
the device's time whenever the host waits for it (a flush, a host read) and so adds up to the
real time over a run.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from typing import Callable, Iterator

__all__ = ["WallClock"]


class WallClock:
    """Measures the batches' durations with ``now`` (seconds, monotonic; default
    :func:`time.perf_counter`). A test gives it a fake time source: ``trainer.clock =
    WallClock(fake_now)``."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self.now = now
        self._mark = now()

    def start(self) -> None:
        """Start timing the next batch from now (a fit begins)."""
        self._mark = self.now()

    def lap(self) -> datetime.timedelta:
        """The time since the last lap (or :meth:`start`), and start the next one."""
        now = self.now()
        elapsed, self._mark = now - self._mark, now
        return datetime.timedelta(seconds=elapsed)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the time spent inside out of the batches' durations (an evaluation during fit)."""
        begun = self.now()
        try:
            yield
        finally:
            self._mark += self.now() - begun
