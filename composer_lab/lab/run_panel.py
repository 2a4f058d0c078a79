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

import html
import threading
import time
from typing import Any, Callable, Optional

import ipywidgets as widgets

from composer_lab.core.callback import Callback
from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.lab.background_run import BackgroundRun
from composer_lab.lab.live_plot import LivePlot, RedrawBudget
from composer_lab.trainer.duration import reached_max_duration, total_batches
from composer_lab.trainer.lifecycle import TrainerBusy

__all__ = ["Fit", "RunMonitor", "RunPanel"]


class Fit:
    """``trainer.fit(duration)`` as a :class:`BackgroundRun`'s work, with the run panel's pause
    point: ``pause_at``, pause when this many batches are done. A fit refused because the
    trainer runs a loop elsewhere (a thread, a cell) trains nothing: the handle's ``refused``
    holds the :class:`~composer_lab.trainer.lifecycle.TrainerBusy`."""

    def __init__(self, trainer: Any, duration: Optional[str] = None, pause_at: Optional[int] = None) -> None:
        self.trainer, self.duration, self.pause_at = trainer, duration, pause_at

    def __call__(self, handle: BackgroundRun) -> None:
        try:
            self.trainer.fit(duration=self.duration)
        except TrainerBusy as err:
            if err.holder is threading.current_thread():  # a loop called from inside this run: its failure
                raise
            handle.refused = err

    def will_pause(self, handle: BackgroundRun, state: State) -> bool:
        """Whether :meth:`boundary` at ``state`` pauses (and stays until resumed)."""
        return handle.will_pause() or (self.pause_at is not None and state.timestamp.batch >= self.pause_at)

    def boundary(self, handle: BackgroundRun, state: State) -> None:
        """The batch end as the handle's boundary: a change made while paused holds at once, and
        the trace notes each pause, continue and stop at its batch."""
        if self.pause_at is not None and state.timestamp.batch >= self.pause_at:
            self.pause_at = None
            handle.pause()
        handle.boundary(while_paused=self.trainer.apply_changes,
                        note=lambda what: self.trainer.engine.trace.note("run", what, state.timestamp))


class RunMonitor(Callback):
    """The run panel's eyes on its trainer, whoever drives it (the panel, a cell's ``fit()``, a
    thread): at FIT_START, every BATCH_END and FIT_END it hands over to the panel. A callback
    internal to the lab (``_internal``): the trace labels it ``lab.RunMonitor``, so diffs and
    plots leave its calls out."""

    _internal = True

    def __init__(self, panel: "RunPanel") -> None:
        self.panel = panel

    def fit_start(self, state: State, logger: Logger) -> None:
        self.panel._fit_started(state)

    def batch_end(self, state: State, logger: Logger) -> None:
        self.panel._step(state)

    def fit_end(self, state: State, logger: Logger) -> None:
        self.panel._fit_ended(state)


class RunPanel(widgets.VBox):
    """Start, pause, continue and stop training, with a progress bar, a status line and a live plot.

    ``start_button`` starts ``trainer.fit(duration)`` (``duration`` empty: to the end of
    ``max_duration``; e.g. '20ba' to train 20 more batches), ``pause_button`` pauses and
    continues, ``stop_button`` stops at the next step. The panel follows its trainer whoever
    trains it (its :class:`RunMonitor`, one per trainer: a new panel takes it over, with a run
    still going): the status line says what the trainer does, in batches trained; the progress
    bar's total is the run's current length, and the plot is redrawn within ``redraw_share`` of
    the run's time (:class:`RedrawBudget`). A Start the trainer refuses (it trains elsewhere) and
    a Start that needs a duration are notices, on a line of their own. ``handle`` is the current
    :class:`BackgroundRun` (its ``work`` a :class:`Fit`); ``on_finished()`` runs when a fit ends
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
        self.handle: Optional[BackgroundRun] = None
        self.live_plot = LivePlot()
        self._shown_at = 0.0
        self._outside: Optional[str] = None  # the thread of a fit outside the panel, while it trains
        self._ending = threading.Lock()  # one end of a fit reported at a time, whichever threads end
        self.start_button = widgets.Button(description="Start", button_style="success", icon="play")
        self.pause_button = widgets.Button(description="Pause", icon="pause", disabled=True)
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.duration = widgets.Text(placeholder="e.g. 20ba; empty: to max_duration", description="train for",
                                     layout={"width": "320px"})
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="batch")
        self.label = widgets.HTML()
        self.status = widgets.HTML()
        self.notice = widgets.HTML()
        self.plot = widgets.Image(format="png", layout={"display": "none"})  # shown from the first drawing
        for w, name in ((self.start_button, "start"), (self.pause_button, "pause"), (self.stop_button, "stop"),
                        (self.plot, "live-plot"), (self.progress, "progress"), (self.status, "status"),
                        (self.notice, "notice"), (self.label, "label"), (self.duration, "duration")):
            w.add_class(f"cl-run-{name}")
        self.start_button.on_click(lambda _: self._click_start())
        self.pause_button.on_click(lambda _: self.toggle_pause())
        self.stop_button.on_click(lambda _: self.stop())
        super().__init__([widgets.HTML("<b>Run</b>"),
                          widgets.HBox([self.start_button, self.pause_button, self.stop_button, self.duration]),
                          widgets.HBox([self.progress, self.label]), self.status, self.notice, self.plot])
        self._attach()
        self._show(trainer.state)

    def _attach(self) -> None:
        """Be the trainer's one :class:`RunMonitor`'s panel: a panel made again (a re-run cell, a
        second Lab) takes the monitor over, and a run the old panel started, if still going."""
        state = self.trainer.state
        monitor = next((cb for cb in state.callbacks if isinstance(cb, RunMonitor)), None)
        if monitor is None:
            state.callbacks = [*state.callbacks, RunMonitor(self)]
            return
        going = monitor.panel.handle
        if going is not None and not going.done:
            self.handle, going.on_done = going, self._finished
            self._set_buttons(running=True)
            self.status.value = "training (a run started from an earlier panel)"
        monitor.panel = self

    # -- buttons ----------------------------------------------------------------------------
    def start(self, duration: Optional[str] = None, pause_at: Optional[int] = None) -> BackgroundRun:
        """Train in the background: ``trainer.fit(duration)``. A trainer at the end of its
        ``max_duration`` needs a ``duration`` (how much more to train)."""
        state = self.trainer.state
        if self.handle is not None and not self.handle.done:
            raise RuntimeError("a run is going; pause, stop or await it before starting another")
        if duration is None and reached_max_duration(state.timestamp, state.max_duration):
            raise ValueError(f"the run is at its end (batch {state.timestamp.batch}, max_duration "
                             f"{state.max_duration}); say how much more to train, e.g. 'train for' 20ba "
                             f"(or start('20ba')), then Start")
        self.notice.value = ""
        self.handle = BackgroundRun(Fit(self.trainer, duration, pause_at), on_done=self._finished)
        self._set_buttons(running=True)
        return self.handle.start()

    def _click_start(self) -> None:
        try:
            self.start(self.duration.value.strip() or None)
        except (ValueError, TypeError, RuntimeError) as err:
            self._notify(str(err))

    def _notify(self, text: str) -> None:
        """A notice about a click (not the trainer's state, which the status line shows)."""
        self.notice.value = f"<span style='color:#8a5a00'>{html.escape(text, quote=False)}</span>"

    def _set_buttons(self, running: bool) -> None:
        self.start_button.disabled, self.pause_button.disabled, self.stop_button.disabled = \
            running, not running, not running
        self.pause_button.description, self.pause_button.icon = "Pause", "pause"

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

    # -- what the run reports (in the thread that trains) -----------------------------------
    def _own(self) -> Optional[BackgroundRun]:
        """The panel's run if the caller is its thread; None in a fit outside the panel."""
        handle = self.handle
        return handle if handle is not None and handle.runs_here() else None

    def _fit_started(self, state: State) -> None:
        handle = self._own()
        if handle is None:
            self._follow_outside()
        else:
            self._outside = None  # an outside fit that ended early is over: this run's status replaces it
            duration = handle.work.duration
            self.status.value = f"training{f' for {duration}' if duration else ' to max_duration'}"
        self._show(state)

    def _follow_outside(self) -> None:
        """Say that a fit outside the panel trains (once per fit; also for one that began before the
        panel), and watch for its end without FIT_END (an error, an interrupt)."""
        if self._outside is None:
            self._outside = threading.current_thread().name
            self.status.value = f"training in thread {self._outside!r} (a fit() outside the panel)"
            threading.Thread(target=self._watch_outside, args=(self._outside,), name="composer_lab-watch",
                             daemon=True).start()

    def _watch_outside(self, thread: str) -> None:
        """Wait until the outside fit lets go of the trainer; if it ended without reaching FIT_END,
        say so (the trace's last note says why)."""
        while self.trainer.busy:
            time.sleep(0.2)
        with self._ending:
            if self._outside == thread:
                self._outside = None
                state = self.trainer.state
                self._show(state)
                self.status.value = (f"the fit in thread {thread!r} ended early: {state.timestamp.batch} batches "
                                     f"trained (an error or an interrupt; trainer.trace.notes says which)")

    def _step(self, state: State) -> None:
        handle = self._own()
        if handle is None:
            self._follow_outside()
        if time.perf_counter() - self._shown_at >= 0.1:  # the bar moves at most ten times a second
            self._show(state)
        if self.redraw.due():
            self._redraw()
        if handle is not None:
            if handle.work.will_pause(handle, state):
                self._show(state)
                self.status.value = f"paused: {state.timestamp.batch} batches trained; press Continue"
            handle.work.boundary(handle, state)

    def _fit_ended(self, state: State) -> None:
        if self._own() is not None:
            return  # the panel's own run: _finished reports it
        with self._ending:
            thread, self._outside = self._outside or threading.current_thread().name, None
            self._show(state)
            self._redraw()
            self.status.value = (f"done: {state.timestamp.batch} batches trained (a fit() outside the panel, "
                                 f"in thread {thread!r})")
        if self.on_finished is not None:
            self.on_finished()

    def _finished(self) -> None:
        handle, state = self.handle, self.trainer.state
        with self._ending:
            self._set_buttons(running=False)
            self._show(state)
            if handle.refused is not None:  # nothing trained; the status line follows the fit that runs
                self._notify(f"Start refused at {state.timestamp.batch} batches trained: {handle.refused}")
                return
            self._redraw()
            self.status.value = self._end_status(handle, state)
        if self.on_finished is not None:
            self.on_finished()

    def _end_status(self, handle: BackgroundRun, state: State) -> str:
        batch, end = state.timestamp.batch, state.max_duration
        more = "press Start to go on to max_duration" if not reached_max_duration(state.timestamp, end) else \
            "give 'train for' (e.g. 20ba) and press Start to train more"
        if handle.error is not None:
            return (f"<span style='color:#b00'>failed after {batch} batches trained: "
                    f"{html.escape(type(handle.error).__name__)}: {html.escape(str(handle.error))}</span>")
        if handle.interrupted:
            return f"interrupted by the kernel: {batch} batches trained (max_duration {end}); {more}"
        if handle.stopped:
            return f"stopped: {batch} batches trained (max_duration {end}); {more}"
        return f"done: {batch} batches trained (max_duration {end}); {more}"

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
