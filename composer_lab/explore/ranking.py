"""The ranking of orders: the table (:func:`rank_orders`) and its figure (:func:`plot_ranking`).

The table ranks the orders of a results frame (one row per order and seed) by their mean, ties
sharing a rank, with every comparison with the best order from
:func:`~composer_lab.explore.stats.compare`, Friedman's global test and a one-line summary. The
figure reads any table with those columns (a sweep's ranking, a race's decision table), so both
are read the same way: a comparison the t-test cannot make is a labelled mark, never a
zero-width interval; an interval cut at the metric's range is dashed.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from composer_lab.explore.stats import COMPARE_COLUMNS, compare, friedman, metric_bounds, summary
from composer_lab.figures import LabFigure

__all__ = ["rank_orders", "plot_ranking", "RANKING_COLUMNS", "VERDICT_COLORS"]

RANKING_COLUMNS = ["rank", "order", *COMPARE_COLUMNS]

VERDICT_COLORS = {"best": "tab:blue", "worse": "tab:red", "equivalent": "tab:green", "racing": "tab:orange",
                  "undecided": "tab:grey", "not learned": "tab:brown"}
DEGENERATE_MARKERS = {"zero spread": "D", "n < 2": "x"}


def rank_orders(results: pd.DataFrame, metric: str, higher_is_better: bool = True, delta: Optional[float] = None,
                alpha: float = 0.05, bounds: Optional[Sequence[float]] = None,
                orders: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """The orders of ``results`` (columns ``order``, ``seed``, ``metric``; ``list_order`` kept
    if present), best first, ties sharing the better rank, each compared with the best order
    (:func:`~composer_lab.explore.stats.compare`; the Holm family is every pair of orders, since
    the best is picked from the same data). ``orders`` fixes the row order among ties (default:
    as they first appear).
    ``attrs['friedman']``: Friedman's test that some order differs (seeds as blocks);
    ``attrs['summary']``: one line that states the answer."""
    values = results.pivot(index="seed", columns="order", values=metric)
    present = list(dict.fromkeys(results["order"])) if orders is None else [o for o in orders if o in values]
    values = values[present]
    table = compare(values, higher_is_better, delta=delta, alpha=alpha, bounds=metric_bounds(metric, bounds),
                    family="pairs")
    ranking = table.reset_index()
    ranking.insert(0, "rank", ranking["mean"].rank(method="min", ascending=not higher_is_better).astype(int))
    ranking = ranking.sort_values("rank", kind="stable").reset_index(drop=True)
    if "list_order" in results.columns:
        list_orders = results.drop_duplicates("order").set_index("order")["list_order"]
        ranking.insert(2, "list_order", ranking["order"].map(list_orders))
    global_test = friedman(values.to_numpy())
    complete = int(values.notna().all(axis=1).sum())
    ranking.attrs["friedman"] = {"statistic": global_test[0], "p_value": global_test[1], "orders": values.shape[1],
                                 "seeds": complete}
    ranking.attrs["summary"] = summary(table, global_test, alpha, delta)
    return ranking


def plot_ranking(ranking: pd.DataFrame, metric: str, confidence: float = 0.95) -> LabFigure:
    """Means with their intervals (left) and paired differences from the best with theirs
    (right), one row per order of ``ranking`` from the top, coloured by verdict."""
    labels = [str(order).replace("; ", "\n") for order in ranking["order"]]
    lines = sum(label.count("\n") + 1 for label in labels)
    fig = LabFigure(figsize=(12, 1.6 + 0.3 * lines + 0.25 * len(labels)))
    means, diffs = fig.subplots(1, 2, sharey=True)
    y = np.arange(len(ranking))
    colors = [VERDICT_COLORS.get(v, "black") for v in ranking["verdict"]]
    _intervals(means, y, ranking["mean"], ranking["ci_low"], ranking["ci_high"], colors, ranking["ci_clipped"])
    regular = ranking["degenerate"].isna() & (ranking["verdict"] != "best")
    _intervals(diffs, y[regular], ranking["diff"][regular], ranking["diff_ci_low"][regular],
               ranking["diff_ci_high"][regular], np.array(colors)[regular.to_numpy()],
               ranking["diff_ci_clipped"][regular])
    for i, row in enumerate(ranking.itertuples()):
        if row.verdict == "best":
            diffs.plot([0], [i], marker="*", markersize=12, color=colors[i], linestyle="none")
        elif isinstance(row.degenerate, str):
            diffs.plot([row.diff], [i], marker=DEGENERATE_MARKERS.get(row.degenerate, "s"), markersize=8,
                       markerfacecolor="none", color=colors[i], linestyle="none")
        diffs.annotate(_verdict_text(row), xy=(1.02, i), xycoords=diffs.get_yaxis_transform(), va="center",
                       fontsize=8, color=colors[i])
    diffs.axvline(0, color="grey", linewidth=1)
    means.set_yticks(y, labels, fontsize=8)
    means.invert_yaxis()
    level = f"{confidence:.0%} interval"
    means.set_xlabel(f"{metric}\nmean over seeds, {level}")
    means.set_ylabel("order (as run)")
    diffs.set_xlabel(f"difference from the best order\n(paired by seed), {level}")
    for ax in (means, diffs):
        ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=_legend(ranking), loc="upper center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.9, 0.94))
    return fig


def _intervals(ax: Any, y: np.ndarray, centre: pd.Series, low: pd.Series, high: pd.Series, colors: Sequence[str],
               clipped: pd.Series) -> None:
    """One point per row with its interval where the interval is defined; cut intervals dashed."""
    for yi, c, lo, hi, color, cut in zip(y, centre, low, high, colors, clipped):
        ax.plot([c], [yi], marker="o", color=color, linestyle="none")
        if not (math.isnan(lo) or math.isnan(hi)):
            bars = ax.errorbar([c], [yi], xerr=[[c - lo], [hi - c]], fmt="none", ecolor=color, capsize=4)
            if cut:
                bars.lines[2][0].set_linestyle("--")


def _verdict_text(row: Any) -> str:
    """The words beside a row: its verdict, the adjusted p-value, a degenerate test's reason."""
    text = row.verdict
    if not math.isnan(row.p_adjusted):
        text += f"  p_adj={row.p_adjusted:.2g}"
    if isinstance(row.degenerate, str):
        text += f"  ({row.degenerate})"
    return text


def _legend(ranking: pd.DataFrame) -> list[Line2D]:
    """The verdicts present, the degenerate marks and the cut intervals, if any."""
    handles = [Line2D([], [], marker="o", color=VERDICT_COLORS[v], linestyle="none", label=v)
               for v in VERDICT_COLORS if (ranking["verdict"] == v).any()]
    handles += [Line2D([], [], marker=DEGENERATE_MARKERS.get(d, "s"), markerfacecolor="none", color="black",
                       linestyle="none", label=f"{d}: no interval")
                for d in ranking["degenerate"].dropna().unique()]
    if (ranking["ci_clipped"] | ranking["diff_ci_clipped"]).any():
        handles.append(Line2D([], [], color="black", linestyle="--", label="interval cut at the metric's range"))
    return handles
