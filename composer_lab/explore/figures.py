"""Figures the explorer returns: matplotlib Figures built without pyplot (so they work from a
worker thread and outside Jupyter) that IPython shows as PNG through their own ``_repr_png_``.
(The lab's ``LabFigure`` does the same one layer up; the explorer sits below the lab.)"""

from __future__ import annotations

import io

from matplotlib.figure import Figure

__all__ = ["ExploreFigure"]


class ExploreFigure(Figure):
    """A Figure that shows itself in IPython as PNG, with no formatter registered."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        return buffer.getvalue()
