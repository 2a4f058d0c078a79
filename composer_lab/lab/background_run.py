"""One piece of training in a background thread, driven from the notebook: the handle every
panel that trains (a run, a sweep, a frontier) hands back.

The work runs in a daemon thread, so the kernel stays free for the clicks of the panels. The
handle asks, and the work answers at its own boundaries: a fit calls :meth:`BackgroundRun.boundary`
at each batch end (pause there, or stop with :class:`RunStopped`); a sweep reads
:attr:`BackgroundRun.stop_requested` (an Event it is given as ``stop=``) and cancels the runs not
yet training. Interrupting the kernel (SIGINT, :mod:`~composer_lab.lab.interrupt`) stops the
work as the Stop button does, and so does interrupting a cell that awaits the handle. Await the
handle in a notebook (``await panel.start()``), so clicks keep flowing while the cell waits;
:meth:`BackgroundRun.wait` blocks, for scripts and tests.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Generator, Optional

from composer_lab.lab.interrupt import relay_interrupt

__all__ = ["BackgroundRun", "RunStopped"]


class RunStopped(KeyboardInterrupt):
    """Raised at a boundary to end work that was asked to stop: an interrupt, as the trainer
    records it (the batch before it is applied)."""


def _nothing() -> None:
    """What a boundary does while paused when the work gives nothing to do."""


class BackgroundRun:
    """``work(handle)`` in a background thread: pause, resume, stop, wait, await.

    ``on_done()`` runs in the thread when the work ends, before :meth:`wait` returns. A failure
    in the thread is kept in ``error`` and re-raised by :meth:`wait` and by awaiting the handle;
    a stop is not a failure (``stopped`` is True, and ``interrupted`` too when the kernel's
    interrupt asked for it). Work that finds it may not start (a trainer busy elsewhere) sets
    ``refused`` to the refusal, which :meth:`wait` re-raises too.
    """

    def __init__(self, work: Callable[["BackgroundRun"], Any], name: str = "composer_lab-run",
                 on_done: Optional[Callable[[], None]] = None) -> None:
        self.work = work
        self.on_done = on_done
        self.error: Optional[BaseException] = None
        self.refused: Optional[BaseException] = None
        self.interrupted = False
        self.stop_requested = threading.Event()
        self._resume = threading.Event()
        self._resume.set()
        self._paused = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._restore_interrupt: Callable[[], None] = _nothing

    def start(self) -> "BackgroundRun":
        self._restore_interrupt = relay_interrupt(self.interrupt)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.work(self)
        except KeyboardInterrupt as err:  # RunStopped, or the trainer's FitInterrupted in its place
            if not self.stop_requested.is_set():  # an interrupt nobody here asked for is the work's failure
                self.error = err
        except BaseException as err:  # kept for wait() / await, which re-raise it in the notebook
            self.error = err
        finally:
            if self.on_done is not None:
                self.on_done()
            self._done.set()
            self._restore_interrupt()

    # -- called in the work's thread --------------------------------------------------------
    def runs_here(self) -> bool:
        """Whether the caller is this work's thread."""
        return threading.current_thread() is self._thread

    def will_pause(self) -> bool:
        """Whether :meth:`boundary` pauses now (and stays until resumed)."""
        return not self._resume.is_set()

    def boundary(self, while_paused: Callable[[], None] = _nothing,
                 note: Callable[[str], None] = lambda what: None) -> None:
        """A point where the work may pause or stop: wait here while paused (calling
        ``while_paused()`` every 50 ms), then raise :class:`RunStopped` if asked to stop.
        ``note(what)`` hears 'paused', 'resumed', 'stopped' or 'interrupted (kernel interrupt)'."""
        if not self._resume.is_set():
            note("paused")
            self._paused.set()
            while not self._resume.wait(0.05):
                while_paused()
            while_paused()
            self._paused.clear()
            if not self.stop_requested.is_set():
                note("resumed")
        if self.stop_requested.is_set():
            note("interrupted (kernel interrupt)" if self.interrupted else "stopped")
            raise RunStopped("stopped at a boundary")

    # -- called from the notebook -----------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def paused(self) -> bool:
        """True while the work waits at a boundary."""
        return self._paused.is_set()

    @property
    def stopped(self) -> bool:
        """Whether a stop was asked for (the Stop button, :meth:`stop`, the kernel's interrupt)."""
        return self.stop_requested.is_set()

    def pause(self) -> None:
        """Pause at the next boundary."""
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    def stop(self) -> None:
        """End the work at its next boundary (also when paused)."""
        self.stop_requested.set()
        self._resume.set()

    def interrupt(self) -> None:
        """What the kernel's interrupt does: :meth:`stop`, noted as an interrupt."""
        if not self.done:
            self.interrupted = True
            self.stop()

    def wait_paused(self, timeout: Optional[float] = None) -> bool:
        """Block until the work is paused (or over); True if it is paused."""
        while not self._done.is_set():
            if self._paused.wait(0.01 if timeout is None else min(timeout, 0.01)):
                return True
            if timeout is not None:
                timeout -= 0.01
                if timeout <= 0:
                    return False
        return False

    def wait(self, timeout: Optional[float] = None) -> None:
        """Block until the work ends; re-raise its failure or refusal, if any. An interrupt while
        waiting (Ctrl-C) stops the work too."""
        try:
            if not self._done.wait(timeout):
                raise TimeoutError(f"the work is still going after {timeout} s; wait longer or call stop()")
        except KeyboardInterrupt:
            self.interrupt()
            raise
        self._finish()

    def _finish(self) -> None:
        self._restore_interrupt()
        if self.error is not None:
            raise self.error
        if self.refused is not None:
            raise self.refused

    def __await__(self) -> Generator[Any, None, None]:
        async def finish() -> None:
            try:
                while not self._done.is_set():
                    await asyncio.sleep(0.05)
            except (KeyboardInterrupt, asyncio.CancelledError):  # the cell awaiting the work was interrupted
                self.interrupt()
                raise
            self._finish()
        return finish().__await__()
