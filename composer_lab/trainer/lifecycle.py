"""A trainer's life across threads and the interpreter's exit: one fit at a time, closed at exit."""

from __future__ import annotations

import atexit
import functools
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

__all__ = ["FitLock", "close_at_exit"]


class FitLock:
    """One fit at a time, whichever thread calls it (a cell, the lab's run panel, a callback)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._where = ""  # where the fit under way was started, for the error of a second one

    @contextmanager
    def hold(self, run_name: str, batch: int) -> Iterator[None]:
        """Held for one fit of run ``run_name`` starting at ``batch``; a second fit meanwhile
        raises RuntimeError saying where the first one started and how to stop it."""
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(f"run {run_name!r} is already training ({self._where}); one trainer trains in one "
                               f"place at a time: wait for that fit to end, or stop it (the lab's Stop button or "
                               f"lab.run.handle.stop(); the kernel's interrupt for a fit in a cell), then call fit() "
                               f"again")
        try:
            self._where = f"fit started in thread {threading.current_thread().name!r} at batch {batch}"
            yield
        finally:
            self._where = ""
            self._lock.release()


def close_at_exit(trainer: Any) -> Callable[[], None]:
    """Have ``trainer.close()`` called at interpreter exit if the trainer is still alive then
    (through a weak reference: exit keeps no trainer alive); a trainer collected before leaves
    no hook. Returns the hook, for ``atexit.unregister`` when the trainer is closed."""
    hook = functools.partial(_close_if_alive, weakref.ref(trainer))
    atexit.register(hook)
    weakref.finalize(trainer, atexit.unregister, hook)
    return hook


def _close_if_alive(trainer: "weakref.ref[Any]") -> None:
    if (alive := trainer()) is not None:
        alive.close()
