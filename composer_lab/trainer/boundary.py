"""Changes that wait for a batch boundary: a change of algorithms or passes made from another
thread while a fit trains (the lab's run panel) never lands between two events of one batch
(LabelSmoothing's BEFORE_LOSS and AFTER_LOSS)."""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Optional

__all__ = ["BatchBoundary"]


class BatchBoundary:
    """Holds changes while a fit runs (:meth:`open`) and the training loop is busy in another
    thread (``busy()``), until the loop calls :meth:`apply`; runs them at once otherwise."""

    def __init__(self, busy: Callable[[], bool]) -> None:
        self._busy = busy
        self._lock = threading.RLock()  # (a change may make another: it runs at once then)
        self._queued: Optional[list[Callable[[], None]]] = None  # a list while a fit runs

    @property
    def pending(self) -> bool:
        """Whether changes wait for the loop."""
        return bool(self._queued)

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        """While a fit runs: changes from other threads wait; at its end, what waits runs."""
        self._queued = []
        try:
            yield
        finally:
            with self._lock:  # from here on, a change runs at once
                self.apply()
                self._queued = None

    def defer(self, change: Callable[[], None]) -> None:
        """Run ``change`` at the next batch boundary when a fit runs in another thread, now otherwise."""
        with self._lock:
            if self._queued is not None and self._busy():
                self._queued.append(change)
                return
        change()

    def apply(self) -> None:
        """Run the changes queued, in the calling thread."""
        with self._lock:
            changes = list(self._queued or ())
            if self._queued:
                self._queued.clear()
            for change in changes:
                change()
