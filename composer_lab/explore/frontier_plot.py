"""The frontier's picture: quality against cost, one curve per candidate, the baseline's drawn bold.

Each point is a (candidate, duration): the mean cost and mean metric over its seeds, with the
metric's interval drawn; the Pareto set (no point both cheaper and better) is ringed; a dotted
line marks the reference quality (the baseline's at the reference duration), so where each
curve crosses it is the cost to reach it. The cost axis is logarithmic (durations usually
double) and labelled with its unit and how time was taken.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd

from composer_lab.explore.cost import TIMING
from composer_lab.explore.speedup import COSTS
from composer_lab.figures import LabFigure

__all__ = ["plot_frontier"]

_VERDICT_STYLE = {"speed-up": "-", "slower": ":", "no gain": "--", "undecided": "-.", "racing": "-.",
                  "reference": "-"}


def plot_frontier(frontier: Any, reference: Optional[str] = None, speedups: Optional[pd.DataFrame] = None) -> LabFigure:
    """Quality against cost for every candidate of ``frontier`` (a :class:`~composer_lab.explore.frontier.Frontier`
    with finished runs); the legend gives each candidate's verdict and cost ratio at ``reference``
    (default: the second longest duration) when every candidate has a run at every duration."""
    table = frontier.curves()
    verdicts = speedups if speedups is not None else _speedups(frontier, reference)
    fig = LabFigure(figsize=(8, 5))
    ax = fig.subplots()
    colors = _colors(list(dict.fromkeys(table["candidate"])), frontier.baseline)
    for name, points in table.groupby("candidate", sort=False):
        points = points.set_index("duration").reindex([d for d in frontier.durations if d in set(points["duration"])])
        ax.errorbar(points["cost"], points["metric"],
                    yerr=[points["metric"] - points["metric_ci_low"], points["metric_ci_high"] - points["metric"]],
                    color=colors[name], marker="o", capsize=3, linewidth=3 if name == frontier.baseline else 1.5,
                    linestyle=_style(verdicts, name), label=_legend(verdicts, name))
        for duration, point in points.iterrows():
            ax.annotate(duration, (point["cost"], point["metric"]), textcoords="offset points", xytext=(4, -10),
                        fontsize=7, color=colors[name])
    on = table[table["pareto"]]
    ax.plot(on["cost"], on["metric"], linestyle="none", marker="o", markersize=14, markerfacecolor="none",
            color="black", label="Pareto set")
    if verdicts is not None:
        ax.axhline(verdicts.attrs["target"], color="grey", linestyle=":", linewidth=1,
                   label=f"baseline at {verdicts.attrs['reference']}")
    ax.set_xscale("log")
    ax.set_xlabel(f"cost: {COSTS[frontier.cost]}, mean over seeds (log scale)"
                  + ("\n" + TIMING[:TIMING.index(";")] if frontier.cost == "time" else ""))
    ax.set_ylabel(f"{frontier.metric}\nmean over seeds, 95% interval")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def _speedups(frontier: Any, reference: Optional[str]) -> Optional[pd.DataFrame]:
    """The frontier's speed-up table, or None while some candidate lacks a duration."""
    try:
        return frontier.speedups(reference)
    except ValueError:
        return None


def _colors(names: list[str], baseline: str) -> dict[str, Any]:
    from matplotlib import colormaps

    palette = colormaps["tab10"](np.arange(10))
    others = [name for name in names if name != baseline]
    return {baseline: "black", **{name: palette[i % 10] for i, name in enumerate(others)}}


def _style(verdicts: Optional[pd.DataFrame], name: str) -> str:
    if verdicts is None or name not in set(verdicts["candidate"]):
        return "-"
    return _VERDICT_STYLE.get(verdicts.set_index("candidate").loc[name, "verdict"], "-")


def _legend(verdicts: Optional[pd.DataFrame], name: str) -> str:
    if verdicts is None or name not in set(verdicts["candidate"]):
        return name
    row = verdicts.set_index("candidate").loc[name]
    if row["verdict"] == "reference":
        return f"{name} (reference)"
    return f"{name}: {row['verdict']}, {row['cost_ratio']:.2f}x [{row['ratio_ci_low']:.2f}, {row['ratio_ci_high']:.2f}]"
