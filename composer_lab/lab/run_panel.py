"""Training in the notebook: a run in a background thread, paused and continued from widgets.

The trainer's ``fit`` runs in a daemon thread, so the kernel stays free for the clicks of
the other panels; their changes reach the engine with one assignment and hold from the next
event. The thread stops at each ``BATCH_END`` (through a callback, :class:`RunMonitor`) to
update the progress bar and, every few steps, the live plot, to wait while paused, and to
stop when asked. Await the handle in a notebook (``await lab.run.handle``), so clicks keep
flowing while the cell waits; ``handle.wait()`` blocks, for scripts and tests.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Generator, Optional

import ipywidgets as widgets

from composer_lab.core.callback import Callback
from composer_lab.core.logger import Logger
from composer_lab.core.state import State
from composer_lab.lab.plots import LabFigure, draw_keep_ratio, draw_loss, figure_png
from composer_lab.lab.sources import RunData
from composer_lab.trainer.duration import total_batches

__all__ = ["RunHandle", "RunMonitor", "RunPanel", "RunStopped"]


class RunStopped(KeyboardInterrupt):
    """Raised at a step boundary to end a run that was asked to stop: an interrupt, as the
    trainer records it (the batch before it is applied)."""


class RunHandle:
    """One ``trainer.fit(duration)`` in a background thread: pause, resume, stop, wait.

    ``pause_at``: pause when this many batches are done. ``on_done()`` runs in the thread
    when the run ends, before :meth:`wait` returns. A failure in the thread is re-raised by :meth:`wait` and by
    awaiting the handle; a stop is not a failure (``stopped`` is True).
    """

    def __init__(self, trainer: Any, duration: Optional[str] = None, pause_at: Optional[int] = None,
                 on_done: Optional[Callable[[], None]] = None) -> None:
        self.trainer = trainer
        self.on_done = on_done
        self.duration = duration
        self.pause_at = pause_at
        self.error: Optional[BaseException] = None
        self.stopped = False
        self._stop = False
        self._resume = threading.Event()
        self._resume.set()
        self._paused = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="composer_lab-run", daemon=True)

    def start(self) -> "RunHandle":
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

    # -- called in the run's thread ---------------------------------------------------------
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
            self._note("stopped", state)
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
        """Block until the run ends; re-raise its error, if any."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run is still going after {timeout} s; wait longer or call stop()")
        if self.error is not None:
            raise self.error

    def __await__(self) -> Generator[Any, None, None]:
        async def finish() -> None:
            while not self._done.is_set():
                await asyncio.sleep(0.05)
            if self.error is not None:
                raise self.error
        return finish().__await__()


class RunMonitor(Callback):
    """At every BATCH_END, hands over to the panel's current run (if any)."""

    def __init__(self, panel: "RunPanel") -> None:
        self.panel = panel

    def batch_end(self, state: State, logger: Logger) -> None:
        self.panel._step(state)


def live_figure(trainer: Any) -> LabFigure:
    """Loss so far and, when logged, Selective Backprop's keep ratio, from the trainer's metrics."""
    run = RunData(name=trainer.state.run_name, metrics=trainer.metrics, notes=trainer.engine.trace.notes,
                  algorithms=list(trainer.state.algorithms), total_batches=total_batches(trainer.state))
    keep_ratio = (run.metrics["name"] == "sb/keep_ratio").any()
    fig = LabFigure(figsize=(9 if keep_ratio else 5, 3), layout="constrained")
    axes = fig.subplots(1, 2 if keep_ratio else 1, squeeze=False)[0]
    if not run.metrics.empty:
        draw_loss(axes[0], [run])
    if keep_ratio:
        draw_keep_ratio(axes[1], run)
    return fig


class RunPanel(widgets.VBox):
    """Start, pause, continue and stop training, with a progress bar and a live plot.

    ``start_button`` starts ``trainer.fit(duration)`` (``duration`` empty: to the end of
    ``max_duration``; e.g. '20ba' to train 20 more batches), ``pause_button`` pauses and
    continues, ``stop_button`` stops at the next step. The plot is redrawn every
    ``redraw_every`` steps. ``handle`` is the current :class:`RunHandle`; ``on_finished()``
    runs (in the run's thread) when a run ends.
    """

    def __init__(self, trainer: Any, redraw_every: int = 10,
                 on_finished: Optional[Callable[[], None]] = None) -> None:
        if not callable(getattr(trainer, "fit", None)) or getattr(trainer, "engine", None) is None:
            raise TypeError(f"the run panel needs a Trainer (with .fit and .engine), got {type(trainer).__name__}; "
                            f"pass the trainer itself, e.g. RunPanel(trainer)")
        if isinstance(redraw_every, bool) or not isinstance(redraw_every, int) or redraw_every < 1:
            raise ValueError(f"redraw_every is a number of steps >= 1, got {redraw_every!r}; pass e.g. "
                             f"redraw_every=10")
        self.trainer = trainer
        self.redraw_every = redraw_every
        self.on_finished = on_finished
        self.handle: Optional[RunHandle] = None
        self.start_button = widgets.Button(description="Start", button_style="success", icon="play")
        self.pause_button = widgets.Button(description="Pause", icon="pause", disabled=True)
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.duration = widgets.Text(placeholder="e.g. 20ba (empty: to max_duration)", description="train for")
        self.progress = widgets.IntProgress(value=0, min=0, max=total_batches(trainer.state) or 1,
                                            description="batch")
        self.label = widgets.HTML()
        self.plot = widgets.Image(format="png", layout={"display": "none"})  # shown from the first drawing
        for w, name in ((self.start_button, "start"), (self.pause_button, "pause"), (self.stop_button, "stop"),
                        (self.plot, "live-plot"), (self.progress, "progress")):
            w.add_class(f"cl-run-{name}")
        self.start_button.on_click(lambda _: self.start(self.duration.value.strip() or None))
        self.pause_button.on_click(lambda _: self.toggle_pause())
        self.stop_button.on_click(lambda _: self.handle.stop() if self.handle else None)
        super().__init__([widgets.HTML("<b>Run</b>"),
                          widgets.HBox([self.start_button, self.pause_button, self.stop_button, self.duration]),
                          widgets.HBox([self.progress, self.label]), self.plot])
        trainer.state.callbacks = [*trainer.state.callbacks, RunMonitor(self)]
        self._show(trainer.state)

    def start(self, duration: Optional[str] = None, pause_at: Optional[int] = None) -> RunHandle:
        """Train in the background: ``trainer.fit(duration)``."""
        if self.handle is not None and not self.handle.done:
            raise RuntimeError("a run is going; pause, stop or await it before starting another")
        self.handle = RunHandle(self.trainer, duration, pause_at, on_done=self._finished)
        self.start_button.disabled, self.pause_button.disabled, self.stop_button.disabled = True, False, False
        self.pause_button.description = "Pause"
        return self.handle.start()

    def _finished(self) -> None:
        self._show(self.trainer.state, redraw=True)
        self.start_button.disabled, self.pause_button.disabled, self.stop_button.disabled = False, True, True
        self.start_button.description = "Continue"
        if self.on_finished is not None:
            self.on_finished()

    def toggle_pause(self) -> None:
        """Pause a going run, or continue a paused one."""
        if self.handle is None or self.handle.done:
            return
        if self.pause_button.description == "Pause":
            self.handle.pause()
            self.pause_button.description = "Continue"
        else:
            self.handle.resume()
            self.pause_button.description = "Pause"

    def _step(self, state: State) -> None:
        handle = self.handle
        if handle is None or handle.done:
            return
        self._show(state, redraw=state.timestamp.batch % self.redraw_every == 0)
        handle.step_boundary(state)

    def _show(self, state: State, redraw: bool = False) -> None:
        batch = state.timestamp.batch
        self.progress.max = max(self.progress.max, batch)
        self.progress.value = batch
        self.label.value = f"{batch} / {self.progress.max} batches"
        if redraw:
            self.plot.value = figure_png(live_figure(self.trainer))
            self.plot.layout.display = None
