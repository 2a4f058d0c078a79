"""Conflicts: algorithms that change the same State field at the same event.

When two algorithms replace or mutate the same field (``batch``, ``loss``, ``model``...) at
one event, the order they run in decides the result. The trace's ``changed`` column says
which fields each call changed; :func:`find_conflicts` pairs the calls of each fired event
and, given the lab's :class:`Control`, names the pass that decides their order.
"""

from __future__ import annotations

import html
from itertools import combinations
from typing import Any, Optional

import ipywidgets as widgets
import pandas as pd

from composer_lab.lab.control import Control
from composer_lab.explore.sources import run_data

__all__ = ["find_conflicts", "deciding_pass", "ConflictView", "CONFLICT_COLUMNS"]

CONFLICT_COLUMNS = ("event", "field", "first", "second", "times", "first_batch", "last_batch", "pass")
_WAITING = "<p><i>a fit is training: the table is refreshed when it ends</i></p>"
_TABLE_STYLE = ("<style>.cl-conflict-table{border-collapse:collapse}.cl-conflict-table td,.cl-conflict-table th"
                "{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}</style>")


def deciding_pass(control: Control, event: str, first: str, second: str) -> str:
    """The last pass, under the current passes, that changed the relative order of ``first``
    and ``second`` at ``event``; 'list order' if none did (their order in the algorithm list)."""
    pair = [a for a, n in zip(control.algorithms, control.names) if n in (first, second)]
    decided, previous = "list order", None
    for name, order in control.engine.plan_steps(event, pair, assume_matched=True):
        current = [control.names[control.algorithms.index(a)] for a in order if a in pair]
        if previous is not None and current != previous:
            decided = name
        previous = current
    return decided


def find_conflicts(source: Any, control: Optional[Control] = None) -> pd.DataFrame:
    """Pairs of algorithms that changed the same State field at the same fired event.

    One row per (event, field, first, second): ``first`` ran before ``second``; ``times``
    counts the events where it happened, between ``first_batch`` and ``last_batch``; ``pass``
    is :func:`deciding_pass` when a ``control`` is given (None for a saved run)."""
    inv = run_data(source).invocations
    calls = inv[inv["matched"] & (inv["kind"].astype(str) == "algorithm") & (inv["changed"].map(len) > 0)]
    calls = calls[calls.duplicated("seq", keep=False)].sort_values(["seq", "order"])
    rows = []
    for (seq, event, batch), group in calls.groupby(["seq", "event", "batch"], observed=True, sort=False):
        changes = [(str(n), set(c)) for n, c in zip(group["name"], group["changed"])]
        for (first, fields_a), (second, fields_b) in combinations(changes, 2):
            rows += [(str(event), f, first, second, batch) for f in sorted(fields_a & fields_b)]
    pairs = pd.DataFrame(rows, columns=["event", "field", "first", "second", "batch"])
    table = (pairs.groupby(["event", "field", "first", "second"], sort=False)["batch"]
             .agg(times="count", first_batch="min", last_batch="max").reset_index())
    table["pass"] = [deciding_pass(control, e, a, b) if control is not None else None
                     for e, a, b in zip(table["event"], table["first"], table["second"])]
    return table[list(CONFLICT_COLUMNS)]


class ConflictView(widgets.VBox):
    """The conflicts of a trainer's run so far, as a table; ``refresh_button`` recomputes."""

    def __init__(self, trainer: Any, control: Optional[Control] = None) -> None:
        self.trainer = trainer
        self.control = control
        self.conflicts = pd.DataFrame(columns=list(CONFLICT_COLUMNS))
        self.table = widgets.HTML()
        self.table.add_class("cl-conflicts")
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.refresh_button.on_click(lambda _: self.refresh())
        super().__init__([widgets.HTML("<b>Conflicts</b>: algorithms changing the same field at one event"),
                          self.refresh_button, self.table])
        self.refresh()

    def refresh(self) -> None:
        """Recompute the table; while the trainer trains in another thread (the run panel's), the
        trace is being written there, so the table is recomputed when that fit ends (the lab
        refreshes it then) and a click meanwhile costs the kernel nothing."""
        if getattr(self.trainer, "busy", False):
            if _WAITING not in self.table.value:
                self.table.value = _WAITING + self.table.value
            return
        self.conflicts = find_conflicts(self.trainer, self.control)
        if self.conflicts.empty:
            self.table.value = "<i>no two algorithms changed the same field at the same event (yet)</i>"
            return
        head = "".join(f"<th>{c}</th>" for c in ("event", "field", "order they ran in", "times", "batches", "pass"))
        body = "".join(
            f"<tr><td><code>{r['event']}</code></td><td>{r['field']}</td><td>{html.escape(r['first'])} &rarr; "
            f"{html.escape(r['second'])}</td><td>{r['times']}</td><td>{r['first_batch']}-{r['last_batch']}</td>"
            f"<td>{html.escape(str(r['pass']))}</td></tr>"
            for r in self.conflicts.to_dict("records"))
        self.table.value = f"<table class='cl-conflict-table'>{_TABLE_STYLE}<tr>{head}</tr>{body}</table>"
