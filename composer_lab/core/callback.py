"""Callbacks: code that observes the loop at every event, one method per event."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from composer_lab.core.event import Event

if TYPE_CHECKING:
    from composer_lab.core.logger import Logger
    from composer_lab.core.state import State

__all__ = ["Callback", "listened_events", "INTERNAL_PREFIX"]

INTERNAL_PREFIX = "lab."
"""The trace labels a callback marked :attr:`Callback._internal` with this prefix (``lab.RunMonitor``),
so diffs and plots can leave the tool's own calls out."""


class Callback:
    """Base class for callbacks: override ``after_loss(state, logger)`` and friends, one
    method per :class:`Event`, or :meth:`run_event` to see every event.

    Callbacks run after the algorithms of an event (before them on ``INIT``) and, unlike
    algorithms, are not reordered by passes. The engine calls only the methods a subclass
    overrides, so an unused event costs nothing and leaves no row in the trace.

    The public names are the event methods and the lifecycle ones, as in Composer:
    :meth:`run_event`, :meth:`state_dict`, :meth:`load_state_dict`, :meth:`close`,
    :meth:`post_close`; any other name is free for a subclass. A subclass that changes no State
    field the trace watches, or none but a few, may say so as an algorithm does, with a class
    attribute ``writes = frozenset()`` (see :attr:`Algorithm.writes`): its calls then cost the
    trace the same whatever the model's size. ``writes`` is read only when it is a frozenset or
    a dict of Event members to frozensets (fields event by event, as on an algorithm).

    Two lifecycle names are this tool's own: :meth:`attach` (the trainer that runs the callback)
    and :meth:`fit_failed` (a fit that ended in an error).
    """

    _internal: ClassVar[bool] = False
    """True for a callback of the tool, not of the experiment (the lab's run monitor): the trace
    labels it with :data:`INTERNAL_PREFIX`, and diffs and plots leave its calls out. (Underscored:
    every public name but the events' and the lifecycle's is free for a subclass.)"""

    def run_event(self, event: Event, state: State, logger: Logger) -> None:
        """Dispatch ``event`` to the method of the same name."""
        getattr(self, event.value)(state, logger)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores of this callback."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""

    def close(self, state: State, logger: Logger) -> None:
        """Release resources (files, progress bars); :meth:`Engine.close` calls it once, at the
        trainer's close or at interpreter exit."""

    def post_close(self) -> None:
        """Runs after every callback's :meth:`close` (Composer's order: close all, then post-close)."""

    def attach(self, trainer: Any) -> None:
        """The trainer that runs this callback, told once before INIT (a tracker reads its run)."""

    def fit_failed(self, error: BaseException) -> None:
        """The fit ended with ``error`` (an exception or an interrupt), already noted in the trace:
        release what the fit opened (a tracker ends its run as FAILED or KILLED)."""


def _noop(self: Callback, state: State, logger: Logger) -> None:
    """Does nothing; override to act on this event."""


for _event in Event:
    setattr(Callback, _event.value, _noop)


def listened_events(callback: Callback) -> frozenset[Event]:
    """The events ``callback`` acts on: all of them if it overrides :meth:`Callback.run_event`,
    otherwise those whose method it overrides (on its class or as an instance attribute)."""
    if type(callback).run_event is not Callback.run_event:
        return frozenset(Event)
    return frozenset(e for e in Event if getattr(getattr(callback, e.value), "__func__", None) is not _noop)
