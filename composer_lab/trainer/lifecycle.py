"""A trainer's life across threads and the interpreter's exit: one loop at a time, closed at exit."""

from __future__ import annotations

import atexit
import functools
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

__all__ = ["LoopLock", "TrainerBusy", "close_at_exit"]

_DOING = {"fit": "training", "eval": "evaluating", "predict": "predicting", "close": "closing"}


class TrainerBusy(RuntimeError):
    """A loop (fit, eval, predict, close) was called while another one of the same trainer runs;
    ``holder`` is the thread that runs it (the caller's own for a loop called from inside one)."""

    def __init__(self, message: str, holder: Optional[threading.Thread] = None) -> None:
        super().__init__(message)
        self.holder = holder


class LoopLock:
    """One loop at a time, whichever thread calls it (a cell, the lab's run panel, a callback):
    ``fit``, ``eval``, ``predict`` and ``close`` share the trainer's state (batch, outputs, loss,
    the model's train/eval mode), so a second one while one runs would race on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._where = ""  # what runs and where it was started, for the error of a second one
        self._holder: Optional[threading.Thread] = None

    @property
    def busy(self) -> bool:
        """Whether a loop runs now in another thread than the caller's."""
        return self._lock.locked() and self._holder is not threading.current_thread()

    @contextmanager
    def hold(self, loop: str, run_name: str, batch: int) -> Iterator[None]:
        """Held for one ``loop`` ('fit', 'eval', 'predict', 'close') of run ``run_name`` starting at
        ``batch``; another loop meanwhile raises :class:`TrainerBusy` saying what runs, where it
        started and how to stop it."""
        if not self._lock.acquire(blocking=False):
            raise TrainerBusy(f"run {run_name!r} is already {self._where or 'running'}; one trainer runs one loop "
                              f"(fit, eval, predict, close) at a time: wait for that one to end, or stop it (the "
                              f"lab's Stop button or lab.run.handle.stop(); the kernel's interrupt for a fit in a "
                              f"cell), then call {loop}() again", self._holder)
        try:
            self._holder = threading.current_thread()
            self._where = f"{_DOING[loop]} ({loop} started in thread {self._holder.name!r} at batch {batch})"
            yield
        finally:
            self._where, self._holder = "", None
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
    """Close the trainer if it is alive and no loop runs: a run still training in a daemon thread
    at exit (a panel's) is left to end with the process rather than be closed under it."""
    if (alive := trainer()) is not None and not alive.busy:
        alive.close()
