"""The lab: every panel of a trainer in one widget."""

from __future__ import annotations

from typing import Any, Optional

import ipywidgets as widgets

from composer_lab.lab.algorithms_panel import AlgorithmPanel
from composer_lab.lab.conflicts import ConflictView
from composer_lab.lab.control import Control
from composer_lab.lab.order_preview import OrderPreview
from composer_lab.lab.pass_editor import PassEditor
from composer_lab.lab.run_panel import RunPanel

__all__ = ["Lab"]


class Lab:
    """Algorithm toggles, pass editor, order preview, run panel and conflicts of ``trainer``.

    ``lab = Lab(trainer); lab`` (or ``lab.show()``) shows them; the parts are attributes
    (``control``, ``algorithms``, ``passes``, ``preview``, ``run``, ``conflicts``) for use
    from code. An Engine instead of a trainer gives the lab without the run panel. The lab
    follows its trainer whoever trains it: a ``fit()`` from a cell moves the progress bar and
    plot and refreshes the conflicts; so does a change of passes or of the algorithms' order
    (the conflict table's ``pass`` column says which pass decides each pair).
    """

    def __init__(self, trainer: Any, redraw_share: float = 0.05) -> None:
        self.control = Control(trainer)
        self.algorithms = AlgorithmPanel(self.control)
        self.passes = PassEditor(self.control)
        self.preview = OrderPreview(self.control)
        self.conflicts = ConflictView(trainer, self.control)
        self.run: Optional[RunPanel] = None
        parts: list[widgets.Widget] = [
            widgets.HBox([widgets.VBox([self.algorithms, self.passes]), self.preview]), self.conflicts]
        if callable(getattr(trainer, "fit", None)):
            self.run = RunPanel(trainer, redraw_share, on_finished=self.conflicts.refresh)
            parts.insert(1, self.run)
        self.control.on_change(lambda kind: self.conflicts.refresh() if kind in ("pass", "algorithm") else None)
        self.widget = widgets.VBox(parts)
        self.widget.add_class("cl-lab")

    def show(self) -> None:
        """Display the lab in the notebook."""
        from IPython.display import display
        display(self.widget)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
