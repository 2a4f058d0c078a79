"""The algorithm panel: one row per algorithm, a checkbox to switch it, its hyperparameters."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from composer_lab.core.algorithm import hyperparameters
from composer_lab.lab.control import Control

__all__ = ["AlgorithmPanel", "css_name"]


def css_name(name: str) -> str:
    """A name made safe for a CSS class ('LabelSmoothing#2' -> 'LabelSmoothing-2')."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _field(value: Any, name: str) -> widgets.Widget:
    if isinstance(value, bool):
        return widgets.Checkbox(value=value, description=name, indent=False)
    if isinstance(value, int):
        return widgets.IntText(value=value, description=name)
    if isinstance(value, float):
        return widgets.FloatText(value=value, description=name)
    return widgets.Text(value=value, description=name)


class AlgorithmPanel(widgets.VBox):
    """Switch each algorithm on or off, move it up or down the list, and edit its
    hyperparameters, through a :class:`Control`.

    ``checkboxes[name]`` is an algorithm's switch, ``arrows[name]`` its (up, down) buttons,
    ``fields[name][hparam]`` its editors. A rejected value is put back and the reason shown in
    ``status``. The rows follow the list's order.
    """

    def __init__(self, control: Control) -> None:
        self.control = control
        self.checkboxes: dict[str, widgets.Checkbox] = {}
        self.arrows: dict[str, tuple[widgets.Button, widgets.Button]] = {}
        self.fields: dict[str, dict[str, widgets.Widget]] = {}
        self.status = widgets.HTML()
        self.rows = {name: self._row(algorithm, name) for algorithm, name in zip(control.algorithms, control.names)}
        self.title = widgets.HTML("<b>Algorithms</b>")  # (the arrows say what they do in their tooltips)
        super().__init__()
        self._place_rows()
        control.on_change(lambda kind: self._place_rows() if kind == "algorithm" else None)
        self.add_class("cl-algorithm-panel")

    def _place_rows(self) -> None:
        self.children = [self.title, *(self.rows[name] for name in self.control.names), self.status]

    def _row(self, algorithm: Any, name: str) -> widgets.HBox:
        box = widgets.Checkbox(value=self.control.is_enabled(algorithm), description=name, indent=False,
                               layout={"width": "auto"})
        box.add_class(f"cl-algorithm-{css_name(name)}")
        box.observe(lambda change: self.control.set_enabled(algorithm, change["new"]), names="value")
        self.checkboxes[name] = box
        up = widgets.Button(description="↑", tooltip=f"{name} earlier in the list", layout={"width": "32px"})
        down = widgets.Button(description="↓", tooltip=f"{name} later in the list", layout={"width": "32px"})
        up.on_click(lambda _: self.control.move_algorithm(algorithm, -1))
        down.on_click(lambda _: self.control.move_algorithm(algorithm, +1))
        up.add_class(f"cl-algorithm-up-{css_name(name)}")
        down.add_class(f"cl-algorithm-down-{css_name(name)}")
        self.arrows[name] = (up, down)
        editors = {}
        for hparam, value in hyperparameters(algorithm).items():
            editor = editors[hparam] = _field(value, hparam)
            editor.layout.width = "150px"
            editor.style.description_width = "initial"
            editor.observe(lambda change, h=hparam: self._edit(algorithm, h, change), names="value")
        self.fields[name] = editors
        return widgets.HBox([up, down, box, *editors.values()], layout={"flex_flow": "row wrap"})

    def _edit(self, algorithm: Any, hparam: str, change: dict) -> None:
        try:
            self.control.set_hyperparameter(algorithm, hparam, change["new"])
            self.status.value = ""
        except (TypeError, ValueError) as err:
            change["owner"].value = change["old"]  # fires _edit again with the old value: no-op
            self.status.value = f"<span style='color:#b00'>{err}</span>"
