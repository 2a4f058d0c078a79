"""The pass editor: the engine's passes in order, each switchable, movable, and new ones added."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import ipywidgets as widgets

from composer_lab.lab.algorithms_panel import css_name
from composer_lab.lab.control import Control

__all__ = ["PassEditor", "PassRow"]


def _user_namespace() -> Mapping[str, Any]:
    """The notebook's variables (IPython's user namespace), or ``__main__``'s outside IPython."""
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None:
        return shell.user_ns
    import __main__
    return vars(__main__)


class PassRow:
    """The widgets of one pass: ``enabled`` checkbox, ``up`` and ``down`` buttons."""

    def __init__(self, editor: "PassEditor", index: int, name: str, enabled: bool) -> None:
        self.name = name
        self.enabled = widgets.Checkbox(value=enabled, description=f"{index}. {name}", indent=False)
        self.up = widgets.Button(description="↑", tooltip=f"run {name} earlier", layout={"width": "36px"})
        self.down = widgets.Button(description="↓", tooltip=f"run {name} later", layout={"width": "36px"})
        for w, part in ((self.enabled, "pass"), (self.up, "pass-up"), (self.down, "pass-down")):
            w.add_class(f"cl-{part}-{css_name(name)}")
        self.enabled.observe(lambda c: editor.control.set_pass_enabled(index, c["new"]), names="value")
        self.up.on_click(lambda _: editor.control.move_pass(index, -1))
        self.down.on_click(lambda _: editor.control.move_pass(index, +1))
        self.box = widgets.HBox([self.up, self.down, self.enabled])


class PassEditor(widgets.VBox):
    """The passes of the engine, in the order they run, through a :class:`Control`.

    ``rows`` holds one :class:`PassRow` per pass (rebuilt after every change). A custom pass
    is added with :meth:`add` from Python, or by typing the name of a function defined in
    the notebook into ``new_pass`` and clicking ``add_button``.
    """

    def __init__(self, control: Control) -> None:
        self.control = control
        self.rows: list[PassRow] = []
        self.list = widgets.VBox()
        self.new_pass = widgets.Text(placeholder="name of a pass function in the notebook", description="new pass",
                                     layout={"width": "380px"})
        self.new_pass.add_class("cl-new-pass")
        self.add_button = widgets.Button(description="Add pass")
        self.add_button.add_class("cl-add-pass")
        self.add_button.on_click(lambda _: self._add_by_name(self.new_pass.value.strip()))
        self.status = widgets.HTML()
        super().__init__([widgets.HTML("<b>Passes</b> (run top to bottom)"), self.list,
                          widgets.HBox([self.new_pass, self.add_button]), self.status])
        self.add_class("cl-pass-editor")
        control.on_change(lambda kind: self.refresh() if kind == "pass" else None)
        self.refresh()

    def refresh(self) -> None:
        """Rebuild the rows from the control's pass list."""
        self.rows = [PassRow(self, i, name, on) for i, (name, (_, on))
                     in enumerate(zip(self.control.pass_names, self.control.passes))]
        self.list.children = [row.box for row in self.rows]

    def add(self, algorithm_pass: Callable, index: int = -1) -> None:
        """Add a custom pass ``(algorithms, event) -> algorithms`` (-1: last)."""
        self.control.add_pass(algorithm_pass, index)

    def _add_by_name(self, name: str, namespace: Optional[Mapping[str, Any]] = None) -> None:
        namespace = _user_namespace() if namespace is None else namespace
        try:
            if name not in namespace:
                raise ValueError(f"no function {name!r} in the notebook; define "
                                 f"def {name or 'my_pass'}(algorithms, event): ... and run its cell first")
            self.add(namespace[name])
            self.status.value = ""
            self.new_pass.value = ""
        except (TypeError, ValueError) as err:
            self.status.value = f"<span style='color:#b00'>{err}</span>"
