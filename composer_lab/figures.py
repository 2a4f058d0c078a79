"""Figures that show themselves: what the lab's plots and the explorer's charts return.

A :class:`LabFigure` is a matplotlib Figure built without pyplot, so it can be drawn outside
Jupyter and from a worker thread, and IPython displays it as PNG through its own
``_repr_png_``: no formatter is registered anywhere. ``fig.savefig('x.png')`` saves it.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure

__all__ = ["LabFigure", "figure_png"]


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (for IPython, or an ipywidgets Image)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


class LabFigure(Figure):
    """A Figure that shows itself in IPython (as PNG) without pyplot or a registered formatter."""

    def _repr_png_(self) -> bytes:
        return figure_png(self, dpi=100)
