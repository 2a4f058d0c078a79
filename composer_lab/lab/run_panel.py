"""Training in the notebook: a run in a background thread, paused and continued from widgets.

The trainer's ``fit`` runs in a daemon thread, so the kernel stays free for the clicks of
the other panels; their changes reach the engine with one assignment and hold from the next
event. The thread stops at each ``BATCH_END`` (through a callback, :class:`RunMonitor`) to
update the progress bar and, within a share of the run's time, the live plot, to wait while
paused, and to stop when asked (the Stop button, or the kernel's interrupt). Await the
handle in a notebook (``await lab.run.handle``), so clicks keep flowing while the cell waits;
``handle.wait()`` blocks, for scripts and tests.
"""

from __future__ import annotations

import asyncio
import html
import threading
import time
from typing import Any, Callable, Generator, Optional

import ipywidgets as widgets

from composer_lab.core.callback import Callback
from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.explore.diff import INTERNAL_PREFIX
from composer_lab.lab.interrupt import relay_interrupt
from composer_lab.lab.live_plot import LivePlot, RedrawBudget
from composer_lab.trainer.duration import reached_max_duration, total_batches

__all__ = ["RunHandle", "RunMonitor", "RunPanel", "RunStopped"]


class RunStopped(KeyboardInterrupt):
    """Raised at a step boundary to end a run that was asked to stop: an interrupt, as the
    trainer records it (the batch before it is applied)."""


class RunHandle:
    """One ``trainer.fit(duration)`` in a background thread: pause, resume, stop, wait.

    ``pause_at``: pause when this many batches are done. ``on_done()`` runs in the thread
    when the run ends, before :meth:`wait` returns. A failure in the thread is re-raised by :meth:`wait` and by
    awaiting the handle; a stop is not a failure (``stopped`` is True). Interrupting the kernel
    (SIGINT, :mod:`~composer_lab.lab.interrupt`) stops the run at its next batch boundary, as
    it stops a ``fit()`` in a cell (``interrupted`` is True); so does interrupting a cell that
    awaits the handle.
    """

    def __init__(self, trainer: Any, duration: Optional[str] = None, pause_at: Optional[int] = None,
                 on_done: Optional[Callable[[], None]] = None) -> None:
        self.trainer = trainer
        self.on_done = on_done
        self.duration = duration
        self.pause_at = pause_at
        self.error: Optional[BaseException] = None
        self.stopped = False
        self.interrupted = False
        self._stop = False
        self._resume = threading.Event()
        self._resume.set()
        self._paused = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="composer_lab-run", daemon=True)
        self._restore_interrupt: Callable[[], None] = lambda: None

    def start(self) -> "RunHandle":
        self._restore_interrupt = relay_interrupt(self.interrupt)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.trainer.fit(duration=self.duration)
        except RunStopped:
            self.stopped = True
        except BaseException as err:  # kept for wait() / await, which re-raise it in the notebook
            self.error = err
        finally:
            if self.on_done is not None:
                self.on_done()
            self._done.set()
            self._restore_interrupt()

    # -- called in the run's thread ---------------------------------------------------------
    def will_pause(self, state: State) -> bool:
        """Whether :meth:`step_boundary` at ``state`` pauses (and stays until resumed)."""
        return not self._resume.is_set() or (self.pause_at is not None and state.timestamp.batch >= self.pause_at)

    def step_boundary(self, state: State) -> None:
        """Pause here while paused; raise :class:`RunStopped` if asked to stop."""
        if self.pause_at is not None and state.timestamp.batch >= self.pause_at:
            self.pause_at = None
            self._resume.clear()
        if not self._resume.is_set():
            self._note("paused", state)
            self._paused.set()
            self._resume.wait()
            self._paused.clear()
            if not self._stop:
                self._note("resumed", state)
        if self._stop:
            self._note("interrupted (kernel interrupt)" if self.interrupted else "stopped", state)
            raise RunStopped(f"stopped at batch {state.timestamp.batch}")

    def _note(self, what: str, state: State) -> None:
        self.trainer.engine.trace.note("run", what, state.timestamp)

    # -- called from the notebook -----------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def paused(self) -> bool:
        """True while the run's thread waits at a step boundary."""
        return self._paused.is_set()

    def pause(self) -> None:
        """Pause at the next step boundary."""
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    def stop(self) -> None:
        """End the run at the next step boundary (also when paused)."""
        self._stop = True
        self._resume.set()

    def interrupt(self) -> None:
        """What the kernel's interrupt does: :meth:`stop`, noted as an interrupt."""
        if not self.done:
            self.interrupted = True
            self.stop()

    def wait_paused(self, timeout: Optional[float] = None) -> bool:
        """Block until the run is paused (or over); True if it is paused."""
        while not self._done.is_set():
            if self._paused.wait(0.01 if timeout is None else min(timeout, 0.01)):
                return True
            if timeout is not None:
                timeout -= 0.01
                if timeout <= 0:
                    return False
        return False

    def wait(self, timeout: Optional[float] = None) -> None:
        """Block until the run ends; re-raise its error, if any. An interrupt while waiting
        (Ctrl-C) stops the run too."""
        try:
            if not self._done.wait(timeout):
                raise TimeoutError(f"the run is still going after {timeout} s; wait longer or call stop()")
        except KeyboardInterrupt:
            self.interrupt()
            raise
        self._finish()

    def _finish(self) -> None:
        self._restore_interrupt()
        if self.error is not None:
            raise self.error

    def __await__(self) -> Generator[Any, None, None]:
        async def finish() -> None:
            try:
                while not self._done.is_set():
                    await asyncio.sleep(0.05)
            except (KeyboardInterrupt, asyncio.CancelledError):  # the cell awaiting the run was interrupted
                self.interrupt()
                raise
            self._finish()
        return finish().__await__()


class RunMonitor(Callback):
    """The run panel's eyes on its trainer, whoever drives it (the panel, a cell's ``fit()``, a
    thread): at FIT_START, every BATCH_END and FIT_END it hands over to the panel. A callback
    internal to the lab: its class name carries :data:`~composer_lab.explore.diff.INTERNAL_PREFIX`,
    so diffs and plots leave its calls out."""

    def __init__(self, panel: "RunPanel") -> None:
        self.panel = panel

    def fit_start(self, state: State, logger: Logger) -> None:
        self.panel._show(state)

    def batch_end(self, state: State, logger: Logger) -> None:
        self.panel._step(state)

    def fit_end(self, state: State, logger: Logger) -> None:
        self.panel._fit_ended(state)


RunMonitor.__name__ = RunMonitor.__qualname__ = INTERNAL_PREFIX + "RunMonitor"  # its name in the trace


class RunPanel(widgets.VBox):
    """Start, pause, continue and stop training, with a progress bar, a status line and a live plot.

    ``start_button`` starts ``trainer.fit(duration)`` (``duration`` empty: to the end of
    ``max_duration``; e.g. '20ba' to train 20 more batches), ``pause_button`` pauses and
    continues, ``stop_button`` stops at the next step. The panel follows its trainer whoever
    trains it (its :class:`RunMonitor`): the progress bar's total is the run's current length,
    and the plot is redrawn within ``redraw_share`` of the run's time (:class:`RedrawBudget`).
    ``handle`` is the current :class:`RunHandle`; ``on_finished()`` runs when a fit ends
    (in the thread that trained).
    """

    def __init__(self, trainer: Any, redraw_share: float = 0.05,
                 on_finished: Optional[Callable[[], None]] = None) -> None:
        if not callable(getattr(trainer, "fit", None)) or getattr(trainer, "engine", None) is None:
            raise TypeError(f"the run panel needs a Trainer (with .fit and .engine), got {type(trainer).__name__}; "
                            f"pass the trainer itself, e.g. RunPanel(trainer)")
        self.redraw = RedrawBudget(redraw_share)
        self.trainer = trainer
        self.on_finished = on_finished
        self.handle: Optional[RunHandle] = None
        self.live_plot = LivePlot()
        self._shown_at = 0.0
        self.start_button = widgets.Button(description="Start", button_style="success", icon="play")
        self.pause_button = widgets.Button(description="Pause", icon="pause", disabled=True)
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.duration = widgets.Text(placeholder="e.g. 20ba; empty: to max_duration", description="train for",
                                     layout={"width": "320px"})
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="batch")
        self.label = widgets.HTML()
        self.status = widgets.HTML()
        self.plot = widgets.Image(format="png", layout={"display": "none"})  # shown from the first drawing
        for w, name in ((self.start_button, "start"), (self.pause_button, "pause"), (self.stop_button, "stop"),
                        (self.plot, "live-plot"), (self.progress, "progress"), (self.status, "status"),
                        (self.label, "label"), (self.duration, "duration")):
            w.add_class(f"cl-run-{name}")
        self.start_button.on_click(lambda _: self._click_start())
        self.pause_button.on_click(lambda _: self.toggle_pause())
        self.stop_button.on_click(lambda _: self.stop())
        super().__init__([widgets.HTML("<b>Run</b>"),
                          widgets.HBox([self.start_button, self.pause_button, self.stop_button, self.duration]),
                          widgets.HBox([self.progress, self.label]), self.status, self.plot])
        trainer.state.callbacks = [*trainer.state.callbacks, RunMonitor(self)]
        self._show(trainer.state)

    # -- buttons ----------------------------------------------------------------------------
    def start(self, duration: Optional[str] = None, pause_at: Optional[int] = None) -> RunHandle:
        """Train in the background: ``trainer.fit(duration)``. A trainer at the end of its
        ``max_duration`` needs a ``duration`` (how much more to train)."""
        state = self.trainer.state
        if self.handle is not None and not self.handle.done:
            raise RuntimeError("a run is going; pause, stop or await it before starting another")
        if duration is None and reached_max_duration(state):
            raise ValueError(f"the run is at its end (batch {state.timestamp.batch}, max_duration "
                             f"{state.max_duration}); say how much more to train, e.g. 'train for' 20ba "
                             f"(or start('20ba')), then Start")
        self.handle = RunHandle(self.trainer, duration, pause_at, on_done=self._finished)
        self.start_button.disabled, self.pause_button.disabled, self.stop_button.disabled = True, False, False
        self.pause_button.description, self.pause_button.icon = "Pause", "pause"
        self.status.value = f"training{f' for {duration}' if duration else ' to max_duration'}"
        return self.handle.start()

    def _click_start(self) -> None:
        try:
            self.start(self.duration.value.strip() or None)
        except (ValueError, TypeError, RuntimeError) as err:
            self.status.value = f"<span style='color:#b00'>{html.escape(str(err))}</span>"

    def toggle_pause(self) -> None:
        """Pause a going run, or continue a paused one."""
        if self.handle is None or self.handle.done:
            return
        if self.pause_button.description == "Pause":
            self.handle.pause()
            self.pause_button.description, self.pause_button.icon = "Continue", "play"
            self.status.value = "pausing at the next batch boundary"
        else:
            self.handle.resume()
            self.pause_button.description, self.pause_button.icon = "Pause", "pause"
            self.status.value = "training"

    def stop(self) -> None:
        """Stop the run at the next batch boundary."""
        if self.handle is not None and not self.handle.done:
            self.status.value = "stopping at the next batch boundary"
            self.handle.stop()

    # -- what the run reports ---------------------------------------------------------------
    def _step(self, state: State) -> None:
        if time.perf_counter() - self._shown_at >= 0.1:  # the bar moves at most ten times a second
            self._show(state)
        if self.redraw.due():
            self._redraw()
        handle = self.handle
        if handle is not None and not handle.done:
            if handle.will_pause(state):
                self._show(state)
                self.status.value = f"paused after batch {state.timestamp.batch}; press Continue"
            handle.step_boundary(state)

    def _fit_ended(self, state: State) -> None:
        if self.handle is not None and not self.handle.done:
            return  # the panel's own run: _finished reports it
        self._show(state)
        self._redraw()
        self.status.value = f"trained to batch {state.timestamp.batch} (a fit() outside the panel)"
        if self.on_finished is not None:
            self.on_finished()

    def _finished(self) -> None:
        handle, state = self.handle, self.trainer.state
        self._show(state)
        self._redraw()
        self.start_button.disabled, self.pause_button.disabled, self.stop_button.disabled = False, True, True
        self.pause_button.description, self.pause_button.icon = "Pause", "pause"
        self.status.value = self._end_status(handle, state)
        if self.on_finished is not None:
            self.on_finished()

    def _end_status(self, handle: RunHandle, state: State) -> str:
        batch, end = state.timestamp.batch, state.max_duration
        more = "press Start to go on to max_duration" if not reached_max_duration(state) else \
            "give 'train for' (e.g. 20ba) and press Start to train more"
        if handle.error is not None:
            return (f"<span style='color:#b00'>failed at batch {batch}: {html.escape(type(handle.error).__name__)}: "
                    f"{html.escape(str(handle.error))}</span>")
        if handle.interrupted:
            return f"interrupted by the kernel after batch {batch} (max_duration {end}); {more}"
        if handle.stopped:
            return f"stopped after batch {batch} (max_duration {end}); {more}"
        return f"done: {batch} batches (max_duration {end}); {more}"

    def _show(self, state: State) -> None:
        batch, total = state.timestamp.batch, total_batches(state) or state.timestamp.batch
        self.progress.max = max(total, batch, 1)
        self.progress.value = batch
        self.label.value = f"{batch} / {total} batches"
        self._shown_at = time.perf_counter()

    def _redraw(self) -> None:
        started = time.perf_counter()
        self.plot.value = self.live_plot.draw(self.trainer)
        self.plot.layout.display = None
        self.redraw.spent(started)
