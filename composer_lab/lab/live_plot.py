"""The run panel's live plot: a figure updated in place, redrawn within a share of the run's time."""

from __future__ import annotations

import time
from typing import Any, Optional

from composer_lab.lab.plots import LabFigure, draw_notes, draw_selection_bands, figure_png
from composer_lab.explore.sources import run_data

__all__ = ["RedrawBudget", "LivePlot"]


class RedrawBudget:
    """When the live plot may be drawn again: a drawing that took ``t`` seconds waits
    ``t / share`` seconds, so drawing takes at most ``share`` of the run's time whatever the
    figure costs (a step budget would cost more on a fast model than on a slow one). The first
    drawing waits ``first_after`` seconds from the first question (a short run is drawn once,
    at its end)."""

    def __init__(self, share: float, first_after: float = 2.0) -> None:
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ValueError(f"redraw_share is the share of the run's time the live plot may take, in (0, 1], "
                             f"got {share!r}; pass e.g. redraw_share=0.05")
        self.share = float(share)
        self.first_after = first_after
        self.next_at: Optional[float] = None

    def due(self) -> bool:
        now = time.perf_counter()
        if self.next_at is None:
            self.next_at = now + self.first_after
        return now >= self.next_at

    def spent(self, started: float) -> None:
        """A drawing that began at ``started`` (``time.perf_counter()``) is over."""
        ended = time.perf_counter()
        self.next_at = ended + (ended - started) / self.share


class LivePlot:
    """The run panel's figure: loss so far and, once logged, Selective Backprop's keep ratio.
    Built once (again when the keep ratio appears); each drawing updates its lines' data."""

    def __init__(self) -> None:
        self.figure: Optional[LabFigure] = None
        self._lines: dict[str, Any] = {}
        self._extras: list[Any] = []  # notes and bands, drawn again each time

    def _build(self, keep_ratio: bool) -> None:
        fig = LabFigure(figsize=(9 if keep_ratio else 5, 3.2), layout="constrained")
        axes = fig.subplots(1, 2 if keep_ratio else 1, squeeze=False)[0]
        loss = axes[0]
        self._lines = {"train": loss.plot([], [], color="C0", linewidth=1, label="train")[0],
                       "eval": loss.plot([], [], "o--", color="C1", label="eval")[0]}
        loss.set(xlabel="batch", ylabel="loss")
        loss.legend(fontsize=8, loc="upper right")
        if keep_ratio:
            keep = axes[1]
            self._lines["keep"] = keep.plot([], [], "o", color="C0", markersize=3, label="selecting batch")[0]
            keep.set(xlabel="batch", ylabel="keep ratio", ylim=(0, 1.08))
        self.figure = fig

    def draw(self, trainer: Any) -> bytes:
        """The figure, updated to ``trainer``'s metrics and notes, as PNG bytes."""
        run = run_data(trainer)
        keep_ratio = (run.metrics["name"] == "sb/keep_ratio").any()
        if self.figure is None or ("keep" in self._lines) != keep_ratio:
            self._build(keep_ratio)
        for artist in self._extras:
            artist.remove()
        self._extras = []
        train, evaluation = run.metric("loss/train", "fit"), run.metric("loss/eval")
        self._lines["train"].set_data(train.index, train.values)
        self._lines["eval"].set_data(evaluation.index, evaluation.values)
        axes = self.figure.axes
        if keep_ratio:
            ratio = run.metric("sb/keep_ratio", "fit")
            selecting = ratio[ratio < 1.0]
            self._lines["keep"].set_data(selecting.index, selecting.values)
            self._extras += draw_selection_bands(axes[1], ratio)
            axes[1].set_xlim(0, max(run.total_batches or 0, len(ratio), 1))
        for ax in axes:
            self._extras += draw_notes(ax, run, "C3", strip=ax is axes[0])
            ax.relim()
            ax.autoscale_view()
        return figure_png(self.figure)
