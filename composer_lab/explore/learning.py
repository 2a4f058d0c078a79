"""Did the runs learn? A ranking or a race compares orders as if every run had learned; an order
whose metric stays at chance (or below a floor the user sets) has not, and a verdict over it
would rank noise. Such orders are named first, and their verdicts withheld ('not learned').

Chance is what the runs record of their task: an accuracy's is 1 / the number of classes (each
trial records it as ``chance``); an order is at chance when its mean over its seeds is within
:data:`CHANCE_MARGIN` of it (0.11 for 10 classes). ``floor`` sets the bar instead, for any metric.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

__all__ = ["NOT_LEARNED", "CHANCE_MARGIN", "chance_level", "not_learned", "withhold"]

NOT_LEARNED = "not learned"
CHANCE_MARGIN = 1.1
"""An order whose mean accuracy is at most this times chance is at chance."""


def chance_level(trainer: Any) -> Optional[float]:
    """The accuracy of guessing for ``trainer``'s task: 1 / its classes, where it evaluated accuracy."""
    accuracy = getattr(getattr(trainer, "eval_metrics", None), "accuracy", None)
    classes = getattr(accuracy, "num_classes", None)
    return 1.0 / classes if classes else None


def not_learned(results: pd.DataFrame, metric: str, floor: Optional[float] = None,
                higher_is_better: bool = True) -> dict[str, str]:
    """The orders of ``results`` that did not learn, each with why: the mean of ``metric`` over its
    seeds at or below ``floor`` (given; at or above it for a metric where lower is better, a loss),
    else at chance (the ``chance`` the trials recorded, for a metric where higher is better)."""
    if results.empty or metric not in results.columns:
        return {}
    sign = 1.0 if higher_is_better else -1.0
    means = results.groupby("order", sort=False)[metric].mean()
    if floor is not None:
        bar = pd.Series(float(floor), index=means.index)
        why = f"at or {'below' if higher_is_better else 'above'} the floor {{bar:.4g}}"
    elif higher_is_better and "chance" in results.columns:
        bar = results.groupby("order", sort=False)["chance"].max() * CHANCE_MARGIN
        why = "at chance ({chance:.4g} for its task: within 10% of it)"
    else:
        return {}
    chance = results.groupby("order", sort=False)["chance"].max() if "chance" in results.columns else bar
    return {order: f"{metric} {means[order]:.4g} " + why.format(bar=bar[order], chance=chance[order])
            for order in means.index if sign * means[order] <= sign * bar[order]}


def withhold(table: pd.DataFrame, flagged: dict[str, str], answer: str) -> tuple[pd.DataFrame, str]:
    """``table`` with the verdicts of the ``flagged`` orders withheld ('not learned'), and
    ``answer`` preceded by which orders did not learn (replaced when none did)."""
    if not flagged:
        return table, answer
    table = table.copy()
    table.loc[table["order"].isin(list(flagged)), "verdict"] = NOT_LEARNED
    named = "; ".join(f"{order}: {why}" for order, why in flagged.items())
    if len(flagged) == len(table):
        return table, (f"no order learned, so no verdict is given ({named}): check the data, the learning rate "
                       f"and the duration before comparing orders")
    return table, (f"{len(flagged)} of {len(table)} orders did not learn, their verdicts withheld ({named}); "
                   f"the others: {answer}")
