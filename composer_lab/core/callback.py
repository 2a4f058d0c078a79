"""Callbacks: code that observes the loop at every event, one method per event."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from composer_lab.core.event import Event

if TYPE_CHECKING:
    from composer_lab.core.logger import Logger
    from composer_lab.core.state import State

__all__ = ["Callback"]


class Callback:
    """Base class for callbacks: override ``after_loss(state, logger)`` and friends, one
    method per :class:`Event`, or :meth:`run_event` to see every event.

    Callbacks run after the algorithms of an event (before them on ``INIT``) and, unlike
    algorithms, are not reordered by passes. The engine calls only the methods a subclass
    overrides, so an unused event costs nothing and leaves no row in the trace.
    """

    def run_event(self, event: Event, state: State, logger: Logger) -> None:
        """Dispatch ``event`` to the method of the same name."""
        getattr(self, event.value)(state, logger)

    def events(self) -> frozenset[Event]:
        """The events this callback does something on."""
        cls = type(self)
        if cls.run_event is not Callback.run_event:
            return frozenset(Event)
        return frozenset(e for e in Event if getattr(cls, e.value) is not getattr(Callback, e.value))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""

    def close(self) -> None:
        """Release resources (files, progress bars) at the end of the run."""


def _noop(self: Callback, state: State, logger: Logger) -> None:
    """Does nothing; override to act on this event."""


for _event in Event:
    setattr(Callback, _event.value, _noop)
