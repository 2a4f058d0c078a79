"""Failures during ``fit``: what an interrupted or failed batch leaves behind, and why.

A batch is *applied* once its optimizer step and timestamp advance have both happened; a
failure before that leaves the weights and the timestamp as they were, and the trainer keeps
the batch to train it again. :class:`InterruptGuard` holds back SIGINT (Jupyter's stop button)
while a step is being applied, so a stop can never land between two parameter updates.
:class:`NonFiniteLossError` stops a run whose loss is NaN or infinite, naming the batch and the
calls that changed its batch, outputs or loss (read from the trace); :class:`NonFiniteWatch`
finds that batch on the device, without a host read per batch.
"""

from __future__ import annotations

import math
import signal
import threading
from operator import itemgetter
from typing import Any, Mapping, Optional

import torch

from composer_lab.core.logger import _to_host_floats
from composer_lab.trainer.devices import fresh_grad_scaler

__all__ = ["FitInterrupted", "interrupt_message", "evaluation_skipped", "InterruptGuard", "NonFiniteLossError",
           "NonFiniteWatch", "NONFINITE_MODES", "raise_nonfinite_loss", "nonfinite_loss_message", "abandon_batch",
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


class FitInterrupted(KeyboardInterrupt):
    """A fit stopped by an interrupt (Jupyter's stop button, Ctrl-C), raised in place of the bare
    KeyboardInterrupt: its message says what stopped, at which batch and how to resume, and a
    notebook shows that one line instead of a traceback through torch."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows in place of the traceback."""
        return [f"{type(self).__name__}: {self}"]


def interrupt_message(event: Any, timestamp: Any, applied: bool, eval_skipped: bool) -> str:
    """The line of :class:`FitInterrupted`: the ``event`` it came at (an Event or None), whether
    the batch in flight was ``applied``, and whether the evaluation due was skipped."""
    at = f"at {event.value} of batch {timestamp.batch}" if event is not None else "before the first event"
    done = (f"{timestamp.batch} batches trained, the last one completely" if applied else
            f"batch {timestamp.batch} was not applied (the next fit trains it again)")
    skipped = (f"; the evaluation due after batch {timestamp.batch} was skipped (trainer.eval() runs it)"
               if eval_skipped else "")
    return f"fit interrupted {at}: {done}{skipped}. trainer.fit() resumes from here (details: trainer.trace.notes)"


def evaluation_skipped(timestamp: Any, interval: Any, evaluates: bool, evaluated_at: Optional[int]) -> bool:
    """Whether an evaluation was due once batch ``timestamp.batch`` was applied (every ``interval``,
    when the trainer ``evaluates``) and did not run: the last one ran after batch ``evaluated_at``."""
    due = timestamp.batch > 0 and (interval.due_after_batch(timestamp) or (
        timestamp.batch_in_epoch == 0 and interval.due_after_epoch(timestamp)))
    return evaluates and due and evaluated_at != timestamp.batch


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite (the message says whether that batch was applied)."""


NONFINITE_MODES = (True, False, "before_step")
"""``Trainer(stop_on_nonfinite_loss=...)``: True checks on the device, False never, 'before_step'
reads the loss on the host before every optimizer step."""


class NonFiniteWatch:
    """Watches the training loss for NaN or infinity without a host read per batch.

    :meth:`watch` keeps each batch's loss tensor (a reference: no device op, no sync);
    :meth:`check` stacks those since the last check and reads on the host whether all were
    finite (one sync), then raises naming the first that was not. The trainer checks every
    ``flush_interval`` batches and where it reads the host anyway, so the bad batch and the ones
    after it up to the check were applied. ``'before_step'`` reads every loss before the
    optimizer step instead, as :func:`raise_nonfinite_loss` says: the bad batch is never
    applied, at one sync per batch.
    """

    def __init__(self, mode: Any) -> None:
        if mode not in NONFINITE_MODES:
            raise ValueError(f"stop_on_nonfinite_loss={mode!r}; expected True (check on the device, read every "
                             f"flush_interval batches), 'before_step' (read every loss before the optimizer step) "
                             f"or False (no check)")
        self.mode = mode
        self._watched: list[tuple[torch.Tensor, Any, int, int]] = []  # each batch's (loss, timestamp, trace seqs)

    def watch(self, loss: torch.Tensor, trace: Any, timestamp: Any, since_seq: int) -> Any:
        """This batch's ``loss`` (detached) as it is logged: a float in 'before_step' mode (read,
        and raised on when not finite), else the tensor, kept for the next check. ``since_seq``:
        the trace's seq when the batch was taken."""
        if self.mode == "before_step":
            value = loss.item()
            if not math.isfinite(value):
                raise_nonfinite_loss(value, trace, timestamp, since_seq, trace.seq)
            return value
        if not self.mode:
            return loss
        self._watched.append((loss, timestamp, since_seq, trace.seq))  # (one list: one append a batch)
        return loss

    def check(self, trace: Any, timestamp: Any, read: Optional[Mapping[int, float]] = None) -> None:
        """Raise :class:`NonFiniteLossError` if a batch watched since the last check had a non-finite
        loss, naming the first; ``timestamp`` is now's. ``read``: values already copied to the host,
        by the id of their tensor (the logger's flush, which copied out the losses it logged): the
        losses among them are not read again. At most one host read a device, none when nothing was
        watched or all of it was read."""
        if not self._watched:
            return
        watched, self._watched, read = self._watched, [], read or {}
        tensors = list(map(itemgetter(0), watched))
        unread = [loss for loss in tensors if id(loss) not in read]  # (not logged, or flushed from another thread)
        if unread:  # (as the logger reads its own: one transfer per device, no op on the device)
            read = {**read, **_to_host_floats(unread)}
        losses = list(map(read.__getitem__, map(id, tensors)))
        if not all(map(math.isfinite, losses)):
            first = next(i for i, loss in enumerate(losses) if not math.isfinite(loss))
            _, at, since_seq, until_seq = watched[first]
            raise_nonfinite_loss(losses[first], trace, at, since_seq, until_seq, timestamp.batch - at.batch)


def raise_nonfinite_loss(loss: float, trace: Any, timestamp: Any, since_seq: int, until_seq: int,
                         applied: int = 0) -> None:
    """Note the non-finite ``loss`` of the batch at ``timestamp`` in the trace and raise
    :class:`NonFiniteLossError`, naming the calls of trace seqs ``since_seq`` to ``until_seq``
    (that batch's) that changed batch, outputs or loss. ``applied``: how many
    batches, that one and the ones after it, were applied before the check (0: none)."""
    calls = None
    if trace.recording:
        calls = trace.query("invocations", seqs=(since_seq, until_seq + 1), matched=True)  # that batch's rows only
        calls = calls[calls["changed"].map(lambda fields: bool({"batch", "outputs", "loss"} & set(fields)))]
    done = f"{applied} batches applied from it on" if applied else "stopped before the optimizer step"
    trace.note("nonfinite", f"loss {loss} at batch {timestamp.batch}; {done}", timestamp)
    raise NonFiniteLossError(nonfinite_loss_message(loss, timestamp, calls, applied))


def nonfinite_loss_message(loss: float, timestamp: Any, calls: Any, applied: int = 0) -> str:
    """The error for a non-finite ``loss`` at ``timestamp``; ``calls`` is the trace's
    invocations of this batch that changed ``batch``, ``outputs`` or ``loss`` (None when the
    trace is off); ``applied`` as for :func:`raise_nonfinite_loss`."""
    where = (f"the training loss is {loss} at batch {timestamp.batch} (epoch {timestamp.epoch}, batch "
             f"{timestamp.batch_in_epoch} of the epoch); ")
    found = "it was" if applied == 1 else f"it and the {applied - 1} batches after it were"
    where += (f"the check after batch {timestamp.batch + applied - 1} found it: {found} applied, so the weights "
              f"may hold non-finite values" if applied else "the batch was not applied (no optimizer step)")
    if calls is None:
        culprits = "the trace is off, so the calls that changed the batch, outputs or loss are unknown"
    elif len(calls) == 0:
        culprits = ("no algorithm or callback changed the batch, outputs or loss in this batch (look at the data "
                    "and the learning rate)")
    else:
        culprits = "calls that changed the batch, outputs or loss just before, in order: " + "; ".join(
            f"{row.name} at {row.event} (changed {', '.join(row.changed)})" for row in calls.itertuples())
    fix = ("Fix the cause, or pass Trainer(stop_on_nonfinite_loss='before_step') to stop before the optimizer step "
           "of that batch (one host read of the loss per batch), or stop_on_nonfinite_loss=False to train on "
           "regardless" if applied else
           "Fix the cause, or pass Trainer(stop_on_nonfinite_loss=False) to train on regardless")
    return f"{where}; {culprits}. {fix}"


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
        state = (f"{timestamp.batch} batches trained, the last one completely; what was due after {event} "
                 f"(evaluation, checkpoint) did not run" if timestamp.batch else "no batch had been trained")
    else:
        state = (f"batch {timestamp.batch} was not applied: no optimizer step, gradients cleared, timestamp "
                 f"unchanged; the next fit() trains it again")
    return kind, f"fit {what} {at}; {state}"
