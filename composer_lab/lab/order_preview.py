"""The order preview: per event, the order the enabled algorithms would run in, and what moved.

An algorithm's ``match`` depends on the state (Selective Backprop only matches inside its
``[start, end)`` interval), so the preview asks ``match`` on copies of the state placed at
points spread over the whole run: an algorithm is listed at every event it matches at some
point of the run, and the engine's passes order those lists (``engine.plan(...,
assume_matched=True)``). Algorithms that would not run at the current batch, or that listen
but whose schedule lets this batch through untouched (:meth:`Algorithm.active`), are drawn dashed.
"""

from __future__ import annotations

import copy
import html
from dataclasses import dataclass, field
from typing import Optional, Sequence

import ipywidgets as widgets

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.engine import Engine
from composer_lab.core.event import Event
from composer_lab.core.state import State
from composer_lab.core.time import Timestamp
from composer_lab.lab.control import Control
from composer_lab.trainer.duration import total_batches

__all__ = ["OrderPreview", "OrderChange", "preview_orders", "running_next", "possible_events", "order_changes"]

_PROBE_POINTS = 64
_ALL = "all events"


def _probe_states(state: State) -> list[State]:
    """The state itself and shallow copies of it placed at batches spread over the run (in
    pairs of neighbours, so alternating rules such as SB's ``interrupt`` show both sides)."""
    total = total_batches(state)
    if not total:
        return [state]
    per_epoch = state.dataloader_len or total
    batch_size = getattr(state.dataloader, "batch_size", None) or 0
    starts = {round(i * (total - 1) / max(_PROBE_POINTS - 1, 1)) for i in range(_PROBE_POINTS)}
    batches = sorted({b + k for b in starts for k in (0, 1) if b + k < total})
    probes = [state]
    for b in batches:
        probe = copy.copy(state)
        probe.timestamp = Timestamp(epoch=b // per_epoch, batch=b, sample=b * batch_size,
                                    batch_in_epoch=b % per_epoch, sample_in_epoch=(b % per_epoch) * batch_size)
        probes.append(probe)
    return probes


def _matches(algorithm: Algorithm, event: Event, state: State) -> bool:
    try:
        return bool(algorithm.match(event, state))
    except Exception:  # a probe state lacks a batch or outputs: the algorithm cannot run there
        return False


def possible_events(algorithm: Algorithm, state: State, probes: Optional[Sequence[State]] = None) -> list[Event]:
    """The events ``algorithm`` can match during the run (in loop order): the ones it declares
    in ``events``, else those where its ``match`` says yes on states probed across the run."""
    if algorithm.events is not None:
        return [e for e in Event if e in algorithm.events]
    probes = _probe_states(state) if probes is None else probes
    return [e for e in Event if any(_matches(algorithm, e, s) for s in probes)]


def preview_orders(engine: Engine, algorithms: Sequence[Algorithm]) -> dict[Event, list[Algorithm]]:
    """For each event some of ``algorithms`` can run at, the order the engine's current
    passes give them (events in loop order; events no algorithm runs at are left out)."""
    probes = _probe_states(engine.state)
    events_of = [(a, set(possible_events(a, engine.state, probes))) for a in algorithms]
    orders = {}
    for event in Event:
        candidates = [a for a, events in events_of if event in events]
        if candidates:
            orders[event] = engine.plan(event, candidates, assume_matched=True)
    return orders


def running_next(engine: Engine, orders: dict[Event, list[Algorithm]]) -> dict[Event, list[Algorithm]]:
    """Per event of ``orders`` (:func:`preview_orders`), the algorithms that would run (and
    act) there at the next batch.

    Asked between batches, ``match`` sees the state as it is then; a match that depends on
    what the batch itself does first (LabelSmoothing puts the targets back at AFTER_LOSS only
    after changing them at BEFORE_LOSS) says no at every point of the run. Such an event is
    decided inside the batch: the algorithm counts as running there when it acts at some
    event of the next batch (its schedule lets it)."""
    state, probes = engine.state, _probe_states(engine.state)
    listed = {id(a): a for algos in orders.values() for a in algos}.values()
    acting = {id(a) for a in listed if any(_active(a, e, state) for e in Event)}
    return {event: [a for a in candidates if _active(a, event, state) or (
        id(a) in acting and not any(_matches(a, event, p) for p in probes))] for event, candidates in orders.items()}


def _active(algorithm: Algorithm, event: Event, state: State) -> bool:
    try:
        return _matches(algorithm, event, state) and bool(algorithm.active(event, state))
    except Exception:  # as in _matches: a state the algorithm cannot look at
        return False


@dataclass
class OrderChange:
    """How an event's order differs from the one shown before."""

    moved: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.moved or self.added or self.removed)


def order_changes(previous: Sequence[str], current: Sequence[str]) -> OrderChange:
    """Which names appeared, vanished, or changed place relative to the others kept."""
    kept_before = [n for n in previous if n in current]
    kept_now = [n for n in current if n in previous]
    return OrderChange(moved=[n for i, n in enumerate(kept_now) if kept_before[i] != n],
                       added=[n for n in current if n not in previous],
                       removed=[n for n in previous if n not in current])


_CHIP = ("display:inline-block;margin:1px 3px;padding:0 6px;border-radius:8px;"
         "border:1px {border} #888;background:{bg};{extra}")


def _chip(name: str, change: OrderChange, now: bool) -> str:
    bg = "#ffd27f" if name in change.moved else "#b6f0b6" if name in change.added else "#eef"
    return (f'<span class="cl-chip" style="{_CHIP.format(border="solid" if now else "dashed", bg=bg, extra="")}">'
            f"{html.escape(name)}</span>")


def _removed_chip(name: str) -> str:
    style = _CHIP.format(border="solid", bg="#f6c0c0", extra="text-decoration:line-through;")
    return f'<span class="cl-chip cl-removed" style="{style}">{html.escape(name)}</span>'


def _event_label(event: str, runs: int) -> str:
    """The event's name, with how many times a step fires it when the optimizer's closure runs more than once."""
    if runs == 1:
        return f"<code>{event}</code>"
    return (f"<code>{event}</code> <span class='cl-runs' title='fired {runs} times a step: the optimizer calls its "
            f"closure {runs} times (SAM)'>×{runs}</span>")


class OrderPreview(widgets.VBox):
    """Per event, the enabled algorithms in the order they would run; redrawn on every change
    made through the :class:`Control`, with moved (orange), new (green) and vanished
    (struck through) algorithms marked against the previous drawing.

    ``orders`` maps event names to the names in order; ``changes`` to the last
    :class:`OrderChange` of each event; ``now`` to the names that would run (solid chips) at
    the next batch (:func:`running_next`).
    """

    def __init__(self, control: Control, event: Optional[str] = None) -> None:
        self.control = control
        self.orders: dict[str, list[str]] = {}
        self.changes: dict[str, OrderChange] = {}
        self.event = widgets.Dropdown(options=[_ALL] + [e.value for e in Event], value=event or _ALL,
                                      description="event", layout={"width": "260px", "max_width": "100%"},
                                      style={"description_width": "initial"})
        self.event.add_class("cl-preview-event")
        self.table = widgets.HTML()
        self.table.add_class("cl-order-preview")
        super().__init__([widgets.HTML("<b>Order preview</b>"), self.event, self.table])
        self.event.observe(lambda _: self._draw(), names="value")
        control.on_change(lambda _: self.refresh())
        self.refresh()

    def refresh(self) -> None:
        """Recompute the orders from the engine and redraw, marking differences."""
        names = {id(a): n for a, n in zip(self.control.algorithms, self.control.names)}
        enabled = self.control.enabled_algorithms
        planned = preview_orders(self.control.engine, enabled)
        orders = {e.value: [names[id(a)] for a in algos] for e, algos in planned.items()}
        self.changes = {e: order_changes(self.orders.get(e, []), orders.get(e, []))
                        for e in {**self.orders, **orders}} if self.orders else {}
        self.orders = orders
        self.now = {e.value: {names[id(a)] for a in algos}
                    for e, algos in running_next(self.control.engine, planned).items()}
        self.runs = {e.value: self.control.engine.runs_per_step(e) for e in Event}
        self._draw()

    def _draw(self) -> None:
        shown = [e.value for e in Event if (e.value in self.orders or self.changes.get(e.value))
                 and self.event.value in (_ALL, e.value)]
        rows = []
        for e in shown:
            change = self.changes.get(e, OrderChange())
            chips = "".join(_chip(n, change, n in self.now.get(e, ())) for n in self.orders.get(e, []))
            chips += "".join(_removed_chip(n) for n in change.removed)
            rows.append(f"<tr><td style='padding-right:8px'>{_event_label(e, self.runs.get(e, 1))}</td>"
                        f"<td>{chips or '-'}</td></tr>")
        body = "".join(rows) or "<tr><td>no enabled algorithm runs at this event</td></tr>"
        self.table.value = (f"<table>{body}</table><small>orange: moved, green: new, struck: gone; "
                            f"dashed: would not run, or not act, at the current batch</small>")
