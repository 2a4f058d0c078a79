"""Plots of runs: loss, keep ratio, event timeline, algorithm x event map, run comparison.

Each ``plot_*`` takes what :func:`~composer_lab.explore.sources.run_data` reads (a Trainer, a
Run, a saved run folder, trace or metrics DataFrames) and returns a :class:`LabFigure`, a
matplotlib Figure built without pyplot (so it works outside Jupyter and from a worker thread)
that IPython displays as PNG through its own ``_repr_png_`` (:mod:`composer_lab.figures`). The
``draw_*`` functions draw the same into a given Axes (the run panel and :func:`plot_runs` reuse them).
"""

from __future__ import annotations

import textwrap
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from composer_lab.core.event import Event
from composer_lab.figures import LabFigure, figure_png
from composer_lab.explore.diff import diff_runs, without_internal
from composer_lab.explore.sources import RunData, run_data

__all__ = ["plot_loss", "plot_keep_ratio", "plot_timeline", "plot_algorithm_events", "plot_runs",
           "draw_loss", "draw_keep_ratio", "draw_notes", "draw_selection_bands", "selection_bands", "figure_png",
           "step_events", "LabFigure"]

_STATUS_COLORS = {"moved": "#f0a030", "appeared": "#40a040", "vanished": "#d04040"}


def _runs(sources: Sequence[Any]) -> list[RunData]:
    if len(sources) == 1 and isinstance(sources[0], (list, tuple)):
        sources = sources[0]
    if not sources:
        raise ValueError("no run given; pass a trainer, a run, a run folder or trace / metrics frames")
    return [run_data(s) for s in sources]


def draw_notes(ax: Axes, run: RunData, color: str, strip: bool = True) -> list[Artist]:
    """Each change noted during the run (lab changes, pauses, a longer duration) as a dotted
    line with its number at the top (one line for the notes of one batch); with ``strip``, the
    numbers' texts listed under the axis (readable however close the changes are). Returns the
    artists drawn."""
    notes = run.notes.dropna(subset=["batch"])
    artists: list[Artist] = []
    numbers_at: dict[Any, list[int]] = {}  # notes at one batch share a line, labelled '2-3'
    for number, batch in enumerate(notes["batch"], start=1):
        numbers_at.setdefault(batch, []).append(number)
    for batch, numbers in numbers_at.items():
        label = str(numbers[0]) if len(numbers) == 1 else f"{numbers[0]}-{numbers[-1]}"
        artists.append(ax.axvline(batch, color=color, linestyle=":", linewidth=1))
        artists.append(ax.annotate(label, (batch, 1), xycoords=("data", "axes fraction"), xytext=(0, 2),
                                   textcoords="offset points", ha="center", va="bottom", fontsize=7, color=color))
    if strip and len(notes):
        lines = [f"{number} (batch {int(batch)}): {textwrap.shorten(str(text), 70)}"
                 for number, (batch, text) in enumerate(zip(notes["batch"], notes["text"]), start=1)]
        artists.append(ax.annotate("\n".join(lines), (0, 0), xycoords="axes fraction", xytext=(0, -36),
                                   textcoords="offset points", ha="left", va="top", fontsize=7, color=color))
    return artists


# -- loss ------------------------------------------------------------------------------------
def draw_loss(ax: Axes, runs: Sequence[RunData]) -> None:
    """Train loss per step (line) and eval loss per evaluation (dots) of each run."""
    for i, run in enumerate(runs):
        color = f"C{i}"
        train, evaluation = run.metric("loss/train", "fit"), run.metric("loss/eval")
        if train.empty and evaluation.empty:
            raise ValueError(f"run {run.name!r} logged no 'loss/train' or 'loss/eval'; give a run's metrics "
                             f"(trainer.metrics or a Run), not only its trace")
        ax.plot(train.index, train.values, color=color, linewidth=1, label=f"{run.name} train")
        if not evaluation.empty:
            ax.plot(evaluation.index, evaluation.values, "o--", color=color, label=f"{run.name} eval")
        draw_notes(ax, run, color, strip=len(runs) == 1)
    ax.set_xlabel("batch")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)


def plot_loss(*sources: Any, title: str = "Loss") -> Figure:
    """Loss curves of one or several runs, overlaid: train per step, eval per evaluation; the
    changes made from the lab during a run are marked with dotted lines."""
    fig = LabFigure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    draw_loss(ax, _runs(sources))
    ax.set_title(title, pad=14)  # (room for the notes' numbers)
    return fig


# -- keep ratio ------------------------------------------------------------------------------
_BAND_GAP = 2
"""Selecting batches at most this far apart are one band (SB's ``interrupt`` lets every
other batch through whole inside its interval)."""


def selection_bands(ratio: pd.Series) -> list[tuple[int, int]]:
    """The ``[first, last + 1)`` batch ranges where the keep ratio ``ratio`` (by batch) shows
    selection (< 1): what happened, read from the metrics, so a run continued with a longer
    duration keeps the bands it had."""
    selecting = [int(b) for b in ratio.index[ratio < 1.0]]
    bands: list[list[int]] = []
    for batch in selecting:
        if bands and batch - bands[-1][1] <= _BAND_GAP - 1:
            bands[-1][1] = batch + 1
        else:
            bands.append([batch, batch + 1])
    return [(a, b) for a, b in bands]


def draw_selection_bands(ax: Axes, ratio: pd.Series) -> list[Artist]:
    """Shade each of :func:`selection_bands`; returns the artists drawn."""
    return [ax.axvspan(a, b, color="C0", alpha=0.12, label="selecting" if i == 0 else None)
            for i, (a, b) in enumerate(selection_bands(ratio))]


def draw_keep_ratio(ax: Axes, run: RunData, metric: str = "sb/keep_ratio") -> None:
    """The keep ratio of the selecting batches as points, the stretches where selection
    happened shaded; plain (full-batch) steps are the white between (no line through them, so
    no saw-tooth)."""
    ratio = run.metric(metric, "fit")
    if ratio.empty:
        raise ValueError(f"run {run.name!r} logged no {metric!r}; train with an algorithm that logs it "
                         f"(SelectiveBackprop logs 'sb/keep_ratio') or pass metric=...")
    draw_selection_bands(ax, ratio)
    selective = ratio < 1.0
    ax.plot(ratio.index[selective], ratio.values[selective], "o", color="C0", markersize=3, label="selecting batch")
    draw_notes(ax, run, "C3")
    ax.set_xlim(0, max(run.total_batches or 0, int(ratio.index.max()) + 1))
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("batch")
    ax.set_ylabel("keep ratio")
    ax.legend(fontsize=8, loc="lower left")


def plot_keep_ratio(source: Any, metric: str = "sb/keep_ratio") -> Figure:
    """Selective Backprop's keep ratio on the batches where it selected, those stretches
    shaded (:func:`selection_bands`, read from what was logged, not from today's settings)."""
    run = run_data(source)
    fig = LabFigure(figsize=(7, 3), layout="constrained")
    ax = fig.add_subplot()
    draw_keep_ratio(ax, run, metric)
    ax.set_title(f"{metric} ({run.name})", pad=14)
    return fig


# -- timeline --------------------------------------------------------------------------------
def step_events(events: pd.DataFrame) -> pd.Series:
    """The training step each event belongs to: a step starts at a fit ``before_dataloader``
    and runs to the next one (its evaluations included); events before the first step get -1."""
    starts = (events["event"].astype(str) == "before_dataloader") & (events["phase"].astype(str) == "fit")
    step = events["batch"].where(starts).ffill()
    return step.fillna(-1).astype("int64")


def _chosen_steps(steps: Union[int, Iterable[int], None], available: np.ndarray) -> list[int]:
    available = sorted(int(s) for s in available if s >= 0)
    if not available:
        raise ValueError("the trace has no training step (no fit 'before_dataloader' event); trace a fit with "
                         "trace='all' or 'ran'")
    if steps is None or isinstance(steps, int):
        count = 2 if steps is None else steps
        return available[-count - 1:-1] if len(available) > count else available[:count]
    chosen = sorted({int(s) for s in steps})
    missing = [s for s in chosen if s not in available]
    if missing:
        raise ValueError(f"steps {missing} are not in the trace; it has steps {available[0]} to {available[-1]}: "
                         f"pick steps among those, or pass steps=N for the last N complete steps")
    return chosen


def _invocation_starts(events: pd.DataFrame, invocations: pd.DataFrame) -> pd.DataFrame:
    """Each call's start: its event's start plus the calls before it (algorithms in their
    order, then callbacks; callbacks first on INIT)."""
    calls = invocations[invocations["matched"]].merge(events[["seq", "t_start"]], on="seq")
    callbacks_first = (calls["event"].astype(str) == "init") == (calls["kind"].astype(str) == "callback")
    calls = calls.assign(_rank=~callbacks_first).sort_values(["seq", "_rank", "order"], kind="stable")
    before = calls.groupby("seq")["duration"].cumsum() - calls["duration"]
    return calls.assign(start=calls["t_start"] + before)


def plot_timeline(source: Any, steps: Union[int, Iterable[int], None] = None, internal: bool = False) -> Figure:
    """The events of chosen training steps along time (ms). The top lane shows each event
    until the next one fires, so the loop's own work shows as the phase it follows (the
    forward pass as ``before_forward``); below, one lane per algorithm and callback shows
    its calls. ``steps``: step numbers, or how many of the last complete steps (default 2).
    The lab's own callbacks get no lane unless ``internal``."""
    run = run_data(source)
    events = run.events.assign(step=step_events(run.events))
    chosen = _chosen_steps(steps, events["step"].unique())
    events = events.assign(t_end=events["t_start"].shift(-1).fillna(events["t_start"] + events["duration"]))
    events = events[events["step"].isin(chosen)]
    t0 = events["t_start"].min()
    calls = _invocation_starts(events, run.invocations[run.invocations["seq"].isin(events["seq"])])
    if not internal:
        calls = without_internal(calls)
    lanes = list(dict.fromkeys(calls["name"].astype(str)))
    fig = LabFigure(figsize=(10, 1.2 + 0.45 * (len(lanes) + 1)), layout="constrained")
    ax = fig.add_subplot()
    kinds = list(dict.fromkeys(events["event"].astype(str)))
    colors = {kind: _cmap_color(i, len(kinds)) for i, kind in enumerate(kinds)}
    for kind in kinds:
        rows = events[events["event"].astype(str) == kind]
        _bars(ax, rows, rows["t_start"], rows["t_end"] - rows["t_start"], t0, (-0.4, 0.8), [colors[kind]] * len(rows),
              label=kind)
    for lane, name in enumerate(lanes, start=1):
        rows = calls[calls["name"].astype(str) == name]
        _bars(ax, rows, rows["start"], rows["duration"], t0, (lane - 0.4, 0.8),
              [colors.get(e, "0.5") for e in rows["event"].astype(str)], edgecolor="k", linewidth=0.3)
    for step in chosen:
        start = events.loc[events["step"] == step, "t_start"].min()
        ax.axvline((start - t0) * 1e3, color="k", linewidth=0.6, linestyle="--")
        ax.annotate(f"step {step}", ((start - t0) * 1e3, 1), xycoords=("data", "axes fraction"), fontsize=8,
                    va="bottom")
    ax.set_yticks(range(len(lanes) + 1), ["events", *lanes])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(f"Timeline of steps {chosen} ({run.name})", pad=14)
    handles, _ = ax.get_legend_handles_labels()
    if (events["closure_call"] > 0).any():
        handles.append(Patch(facecolor="white", edgecolor="k", hatch=_REPEAT_HATCH, label="closure call 1 (hatched)"))
    ax.legend(handles=handles, fontsize=7, ncols=1, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


_REPEAT_HATCH = "////"
"""How the timeline marks a repeated call of the optimizer's closure (SAM's second pass)."""


def _bars(ax: Axes, rows: pd.DataFrame, start: pd.Series, width: pd.Series, t0: float, lane: tuple[float, float],
          colors: list, label: Optional[str] = None, **style: Any) -> None:
    """The bars of ``rows`` in one lane (times in seconds, drawn in ms from ``t0``): those of the
    optimizer closure's first call plain, those of a later call (``closure_call`` > 0) hatched."""
    repeat = (rows["closure_call"] > 0).to_numpy()
    spans = np.column_stack([(start - t0).to_numpy() * 1e3, width.to_numpy() * 1e3])
    for part, hatch in ((~repeat, None), (repeat, _REPEAT_HATCH)):
        if part.any():
            ax.broken_barh([tuple(span) for span in spans[part]], lane, hatch=hatch, label=label,
                           facecolors=[color for color, keep in zip(colors, part) if keep], **style)
            label = None


def _cmap_color(i: int, n: int) -> Any:
    return colormaps["tab20"](i % 20) if n > 10 else colormaps["tab10"](i)


# -- algorithm x event -----------------------------------------------------------------------
def plot_algorithm_events(source: Any) -> Figure:
    """How often (calls) and how long (total ms) each algorithm ran at each event, the events
    in the order the loop fires them."""
    run = run_data(source)
    inv = run.invocations
    ran = inv[inv["matched"] & (inv["kind"].astype(str) == "algorithm")]
    if ran.empty:
        raise ValueError(f"run {run.name!r} has no algorithm calls in its trace; train with algorithms "
                         f"and trace='all' or 'ran'")
    ran = ran.assign(event=ran["event"].astype(str), name=ran["name"].astype(str))
    grouped = ran.groupby(["name", "event"])["duration"]
    loop_order = [e.value for e in Event if e.value in set(ran["event"])]  # as the loop fires them
    calls = grouped.count().unstack(fill_value=0)[loop_order]
    total_ms = (grouped.sum() * 1e3).unstack(fill_value=0.0)[loop_order]
    fig = LabFigure(figsize=(3 + 1.1 * calls.shape[1] * 2, 1.5 + 0.5 * calls.shape[0]), layout="constrained")
    for ax, table, title, fmt in zip(fig.subplots(1, 2), (calls, total_ms), ("calls", "total time (ms)"),
                                     ("{:.0f}", "{:.2f}")):
        image = ax.imshow(table.values, aspect="auto", cmap="Blues")
        ax.set_xticks(range(table.shape[1]), table.columns, rotation=45, ha="right")
        ax.set_yticks(range(table.shape[0]), table.index)
        for (r, c), value in np.ndenumerate(table.values):  # white on the dark cells, black on the light
            dark = image.norm(value) > 0.5
            ax.text(c, r, fmt.format(value), ha="center", va="center", fontsize=8, color="white" if dark else "black")
        ax.set_title(title)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(f"Algorithms by event ({run.name})")
    return fig


# -- two runs --------------------------------------------------------------------------------
def plot_runs(a: Any, b: Any, diff: Optional[pd.DataFrame] = None, internal: bool = False,
              max_rows: int = 12) -> Figure:
    """The same experiment twice (two pass orders, two algorithm sets): both loss curves on
    the left; on the right, one row per event and call that moved, appeared or vanished
    (:func:`diff_runs`; the lab's own callbacks left out unless ``internal``), a mark at each
    batch where it did, the counts in the row's label; the ``max_rows`` rows with the most
    differences are drawn, and the title says how many more there are."""
    runs = _runs([a, b])
    if runs[0].name == runs[1].name:
        runs = [run_data(runs[0], f"{runs[0].name} (a)"), run_data(runs[1], f"{runs[1].name} (b)")]
    diff = diff_runs(*runs, internal=internal) if diff is None else diff
    fig = LabFigure(figsize=(12, 4), layout="constrained")
    loss_ax, diff_ax = fig.subplots(1, 2)
    draw_loss(loss_ax, runs)
    loss_ax.set_title("Loss")
    _draw_diff(diff_ax, diff, f"{runs[1].name} vs {runs[0].name}", max_rows)
    return fig


def _draw_diff(diff_ax: Axes, diff: pd.DataFrame, title: str, max_rows: int = 12) -> None:
    """:func:`plot_runs`'s right side: one row per event and call of ``diff`` that moved,
    appeared or vanished, a mark at each batch where it did (the ``max_rows`` busiest rows)."""
    changed = diff[diff["status"].astype(str) != "same"].assign(event=lambda d: d["event"].astype(str),
                                                                  name=lambda d: d["name"].astype(str))
    if changed.empty:
        diff_ax.text(0.5, 0.5, "same calls in the same order", ha="center", va="center", transform=diff_ax.transAxes)
        diff_ax.set_axis_off()
        diff_ax.set_title(title)
        return
    rows = changed.groupby(["event", "name"], sort=False).size().nlargest(max_rows)
    rank = {e.value: i for i, e in enumerate(Event)}
    rows = rows.sort_index(key=lambda level: level.map(rank) if level.name == "event" else level)
    for y, (event, name) in enumerate(rows.index):
        calls = changed[(changed["event"] == event) & (changed["name"] == name)]
        for status, color in _STATUS_COLORS.items():
            batches = calls.loc[calls["status"].astype(str) == status, "batch"]
            diff_ax.scatter(batches, np.full(len(batches), y), marker="|", s=120, color=color,
                            label=status if y == 0 else None)
    labels = []
    for event, name in rows.index:
        counts = changed[(changed["event"] == event) & (changed["name"] == name)]["status"].astype(str).value_counts()
        labels.append(f"{event} · {name}\n" + ", ".join(f"{n} {s}" for s, n in counts.items()))
    diff_ax.set_yticks(range(len(rows)), labels, fontsize=8)
    diff_ax.set_ylim(len(rows) - 0.5, -0.5)
    diff_ax.set_xlabel("batch")
    more = len(changed.groupby(["event", "name"])) - len(rows)
    diff_ax.set_title(title + (f" ({more} more rows not shown)" if more > 0 else ""))
    diff_ax.legend(handles=[Line2D([], [], marker="|", linestyle="", markersize=10, color=c, label=s)
                            for s, c in _STATUS_COLORS.items()], fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
