"""The kernel's interrupt (Jupyter's stop button) reaching a run that trains in a thread.

Interrupting a kernel sends SIGINT to its process, and Python delivers signals to the main
thread only: a run in a background thread never sees it. :func:`relay_interrupt` installs,
from the main thread, a SIGINT handler that asks the run to stop at its next batch boundary,
then passes the signal on to the handler it replaced (so a cell that is running is
interrupted as usual; an idle kernel ignores SIGINT). ipykernel puts its own handler in place
while it handles a message and its saved one back after; the relay takes the saved one's
place there, so it holds between messages too.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable

__all__ = ["relay_interrupt"]


def _kernel() -> Any:
    """The running ipykernel, or None outside one."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return getattr(get_ipython(), "kernel", None)


def relay_interrupt(stop: Callable[[], None]) -> Callable[[], None]:
    """Call ``stop()`` on SIGINT until the returned function is called, which puts the previous
    handler back. Python installs signal handlers from the main thread only: called from
    another thread (a widget's click handled off the main thread), the relay is installed, and
    later taken away, on the kernel's main event loop; outside a kernel, nothing is installed."""
    kernel = _kernel()
    if threading.current_thread() is threading.main_thread():
        return _install(stop, kernel)
    loop = getattr(kernel, "io_loop", None)
    if loop is None:
        return lambda: None
    installed: list[Callable[[], None]] = []
    loop.add_callback(lambda: installed.append(_install(stop, kernel)))  # (thread-safe)

    def restore() -> None:
        loop.add_callback(lambda: [undo() for undo in installed])
    return restore


def _install(stop: Callable[[], None], kernel: Any) -> Callable[[], None]:
    """:func:`relay_interrupt` on the main thread; returns what takes the relay away (from any thread)."""
    in_kernel_handler = kernel is not None and signal.getsignal(signal.SIGINT) is signal.default_int_handler \
        and hasattr(kernel, "saved_sigint_handler")
    previous = kernel.saved_sigint_handler if in_kernel_handler else signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        stop()
        if callable(previous):
            previous(signum, frame)

    if in_kernel_handler:
        kernel.saved_sigint_handler = handler  # what ipykernel installs once this message is handled
    else:
        signal.signal(signal.SIGINT, handler)

    def restore() -> None:
        if in_kernel_handler and kernel.saved_sigint_handler is handler:
            kernel.saved_sigint_handler = previous
        if signal.getsignal(signal.SIGINT) is handler:
            signal.signal(signal.SIGINT, previous)

    def restore_from_any_thread() -> None:
        if threading.current_thread() is threading.main_thread():
            restore()
        elif getattr(kernel, "io_loop", None) is not None:
            kernel.io_loop.add_callback(restore)
    return restore_from_any_thread
