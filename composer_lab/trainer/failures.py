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

from composer_lab.trainer.devices import fresh_grad_scaler

__all__ = ["InterruptGuard", "NonFiniteLossError", "raise_nonfinite_loss", "nonfinite_loss_message", "abandon_batch",
           "note_failure"]


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


def raise_nonfinite_loss(loss: float, trace: Any, timestamp: Any, since_seq: int) -> None:
    """Note the non-finite ``loss`` in the trace and raise :class:`NonFiniteLossError`, naming
    the calls from trace seq ``since_seq`` on (this batch's) that changed batch, outputs or loss."""
    calls = None
    if trace.recording:
        calls = trace.invocations
        calls = calls[(calls["seq"] >= since_seq)
                      & calls["changed"].map(lambda fields: bool({"batch", "outputs", "loss"} & set(fields)))]
    trace.note("nonfinite", f"loss {loss} at batch {timestamp.batch}; stopped before the optimizer step", timestamp)
    raise NonFiniteLossError(nonfinite_loss_message(loss, timestamp, calls))


def nonfinite_loss_message(loss: float, timestamp: Any, calls: Any) -> str:
    """The error for a non-finite ``loss`` at ``timestamp``; ``calls`` is the trace's
    invocations of this batch that changed ``batch``, ``outputs`` or ``loss`` (None when the
    trace is off)."""
    where = (f"the training loss is {loss} at batch {timestamp.batch} (epoch {timestamp.epoch}, batch "
             f"{timestamp.batch_in_epoch} of the epoch); the batch was not applied (no optimizer step)")
    if calls is None:
        culprits = "the trace is off, so the calls that changed the batch, outputs or loss are unknown"
    elif len(calls) == 0:
        culprits = ("no algorithm or callback changed the batch, outputs or loss in this batch (look at the data "
                    "and the learning rate)")
    else:
        culprits = "calls that changed the batch, outputs or loss just before, in order: " + "; ".join(
            f"{row.name} at {row.event} (changed {', '.join(row.changed)})" for row in calls.itertuples())
    return (f"{where}; {culprits}. Fix the cause, or pass Trainer(stop_on_nonfinite_loss=False) to train on "
            f"regardless")


def abandon_batch(state: Any, scaler: Any) -> Any:
    """Undo what a batch left half done: its gradients, its microbatch index, and a GradScaler's
    step under way (the scaler returned replaces ``scaler``: same scale, no step pending)."""
    for optimizer in state.optimizers:
        optimizer.zero_grad(set_to_none=True)
    state.microbatch = None
    return fresh_grad_scaler(scaler, state.device) if scaler is not None else None


def note_failure(trace: Any, err: BaseException, event: Any, timestamp: Any, applied: bool) -> None:
    """Note in ``trace`` that ``err`` ended a fit during ``event`` (an Event, or None before
    the first), and whether the batch in flight was ``applied``."""
    trace.note(*_failure_note(err, event.value if event is not None else None, timestamp, applied), timestamp)


def _failure_note(err: BaseException, event: Optional[str], timestamp: Any, applied: bool) -> tuple[str, str]:
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
