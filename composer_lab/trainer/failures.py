"""Failures during ``fit``: what an interrupted or failed batch leaves behind, and why.

A batch is *applied* once its optimizer step and timestamp advance have both happened; a
failure before that leaves the weights and the timestamp as they were, and the trainer keeps
the batch to train it again. :class:`InterruptGuard` holds back SIGINT (Jupyter's stop button)
while a step is being applied, so a stop can never land between two parameter updates.
:class:`NonFiniteLossError` stops a run whose loss is NaN or infinite, naming the calls that
changed the batch, outputs or loss just before (read from the trace).
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Optional

__all__ = ["InterruptGuard", "NonFiniteLossError", "nonfinite_loss_message", "failure_note"]


class InterruptGuard:
    """While entered (on the main thread), SIGINT raises :class:`KeyboardInterrupt` as usual,
    except while :attr:`held` is True: then it is remembered and :meth:`release` raises it.

    The handler is installed once per ``fit``, so holding costs two attribute writes a step.
    On other threads (a run started from the lab's panels) signals do not arrive; the guard
    then does nothing.
    """

    def __init__(self) -> None:
        self.held = False
        self.pending = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> "InterruptGuard":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False
        self.held = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.held:
            self.pending = True
        elif callable(self._previous):
            self._previous(signum, frame)
        else:
            raise KeyboardInterrupt

    def release(self) -> None:
        """End a held section; raise the interrupt that arrived during it, if any."""
        self.held = False
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the batch was not applied."""


def nonfinite_loss_message(loss: float, timestamp: Any, calls: Any) -> str:
    """The error for a non-finite ``loss`` at ``timestamp``; ``calls`` is the trace's
    invocations of this batch that changed ``batch``, ``outputs`` or ``loss`` (None when the
    trace is off)."""
    where = (f"the training loss is {loss} at batch {timestamp.batch} (epoch {timestamp.epoch}, batch "
             f"{timestamp.batch_in_epoch} of the epoch); the batch was not applied (no optimizer step)")
    if calls is None:
        culprits = "the trace is off, so the calls that changed the batch, outputs or loss are unknown"
    elif len(calls) == 0:
        culprits = "no algorithm or callback changed the batch, outputs or loss in this batch (look at the data and the learning rate)"
    else:
        culprits = "calls that changed the batch, outputs or loss just before, in order: " + "; ".join(
            f"{row.name} at {row.event} (changed {row.changed})" for row in calls.itertuples())
    return (f"{where}; {culprits}. Fix the cause, or pass Trainer(stop_on_nonfinite_loss=False) to train on "
            f"regardless")


def failure_note(err: BaseException, event: Optional[str], timestamp: Any, applied: bool) -> tuple[str, str]:
    """The trace note ``(kind, text)`` for a fit that ``err`` ended during ``event``."""
    kind = "interrupt" if isinstance(err, KeyboardInterrupt) else "error"
    what = "interrupted" if kind == "interrupt" else f"failed ({type(err).__name__}: {err})"
    at = f"at {event}" if event else "before the first event"
    if applied:
        state = (f"batch {timestamp.batch - 1} was the last one applied; what was due after {event} (evaluation, "
                 f"checkpoint) did not run" if timestamp.batch else "no batch had been trained")
    else:
        state = (f"batch {timestamp.batch} was not applied: no optimizer step, gradients cleared, timestamp "
                 f"unchanged; the next fit() trains it again")
    return kind, f"fit {what} {at}; {state}"
