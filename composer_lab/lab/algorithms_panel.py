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
    """Switch each algorithm on or off and edit its hyperparameters, through a :class:`Control`.

    ``checkboxes[name]`` is an algorithm's switch, ``fields[name][hparam]`` its editors.
    A rejected value is put back and the reason shown in ``status``.
    """

    def __init__(self, control: Control) -> None:
        self.control = control
        self.checkboxes: dict[str, widgets.Checkbox] = {}
        self.fields: dict[str, dict[str, widgets.Widget]] = {}
        self.status = widgets.HTML()
        rows = [self._row(i, name) for i, name in enumerate(control.names)]
        super().__init__([widgets.HTML("<b>Algorithms</b>"), *rows, self.status])
        self.add_class("cl-algorithm-panel")

    def _row(self, index: int, name: str) -> widgets.HBox:
        box = widgets.Checkbox(value=self.control.is_enabled(index), description=name, indent=False)
        box.add_class(f"cl-algorithm-{css_name(name)}")
        box.observe(lambda change: self.control.set_enabled(index, change["new"]), names="value")
        self.checkboxes[name] = box
        editors = {}
        for hparam, value in hyperparameters(self.control.algorithms[index]).items():
            editor = editors[hparam] = _field(value, hparam)
            editor.layout.width = "150px"
            editor.style.description_width = "initial"
            editor.observe(lambda change, h=hparam: self._edit(index, h, change), names="value")
        self.fields[name] = editors
        return widgets.HBox([box, *editors.values()], layout={"flex_flow": "row wrap"})

    def _edit(self, index: int, hparam: str, change: dict) -> None:
        try:
            self.control.set_hyperparameter(index, hparam, change["new"])
            self.status.value = ""
        except (TypeError, ValueError) as err:
            change["owner"].value = change["old"]  # fires _edit again with the old value: no-op
            self.status.value = f"<span style='color:#b00'>{err}</span>"
