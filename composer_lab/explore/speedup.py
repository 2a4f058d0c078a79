"""Is it a speed-up? Each candidate's cost to reach the baseline's quality, with an interval and a verdict.

MosaicML's method: a method is a speed-up only if it beats the baseline's *trade-off curve*
(the baseline trained for several durations), not one baseline run. Here the reference quality
is the baseline's mean metric at a chosen duration; a candidate's *cost to reach* it is read off
its own curve (mean metric against mean cost over the seeds, durations in order), interpolated
linearly in the metric and logarithmically in the cost between the two durations where it first
crosses the reference. The cost ratio is that cost over the baseline's own cost to reach it,
read off its curve the same way (its cost at the reference duration, or less where its curve is
flat before it; below 1: cheaper); the speed-up is its inverse.

The interval comes from a paired bootstrap over seeds: a seed fixes the initial weights and the
data order of every candidate's runs, so whole seeds are drawn with replacement, every curve and
the reference recomputed from the draw. Where every draw crosses the reference between two
durations, the interval is Student's t (n - 1 degrees of freedom) on the log ratio with the
draws' standard error (scaled by sqrt(n / (n - 1))): with 3 seeds a percentile interval cannot
reach past the seeds' own range, so it would call a true ratio of 1 a speed-up or slower in 1 of
4 experiments. Where some draw only bounds the cost (see below), the interval is the bounds'
percentiles, expanded for few seeds (:func:`expanded_tail`). A curve
that reaches the reference already at its shortest duration gives an upper bound (its cost
there; the lower end of the interval is then 0); one that never reaches it a lower bound (its
cost at the longest duration; the upper end is infinite). The verdict, with ``tolerance`` the
smallest gain that matters: ``no gain`` when the interval lies within ``[1/(1+tolerance),
1+tolerance]``, else ``speed-up`` when it lies below 1, ``slower`` above 1, else ``undecided``
with how many more seeds would decide (:func:`seeds_to_decide`: the fewest at which the
interval, its spread per seed unchanged, would fit; its width shrinks as Student's quantile and
one over the root of the seeds).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from composer_lab.explore.stats import check_alpha

__all__ = ["COSTS", "SPEEDUP_COLUMNS", "curves", "pareto", "speedup_table", "answer", "reach_bounds", "expanded_tail",
           "seeds_to_decide"]

COSTS = {"time": "training-loop seconds", "flops": "FLOPs", "samples": "samples"}
"""The cost axes a frontier records, and their units."""
SPEEDUP_COLUMNS = ["candidate", "n", "cost_to_reach", "reach", "cost_ratio", "ratio_ci_low", "ratio_ci_high",
                   "speedup", "verdict", "more_seeds"]
DRAWS = 2000
"""Bootstrap draws behind each interval."""


def curves(results: pd.DataFrame, cost: str, confidence: float = 0.95) -> pd.DataFrame:
    """One row per (candidate, duration): n seeds, the metric's mean and t-interval, the cost's mean."""
    from scipy import stats

    grouped = results.groupby(["candidate", "duration"], sort=False)
    table = grouped.agg(n=("metric", "count"), metric=("metric", "mean"), sd=("metric", "std"),
                        cost=(cost, "mean")).reset_index()
    half = stats.t.ppf(0.5 + confidence / 2, np.maximum(table["n"] - 1, 1)) * table["sd"] / np.sqrt(table["n"])
    table["metric_ci_low"], table["metric_ci_high"] = table["metric"] - half, table["metric"] + half
    return table.drop(columns="sd")


def pareto(table: pd.DataFrame, higher_is_better: bool = True) -> pd.Series:
    """Which points of a :func:`curves` table no other point beats: as cheap or cheaper and as
    good or better, one of them strictly."""
    sign = 1 if higher_is_better else -1
    cost, quality = table["cost"].to_numpy(float), sign * table["metric"].to_numpy(float)
    beaten = [bool(((cost <= c) & (quality >= q) & ((cost < c) | (quality > q))).any()) for c, q in zip(cost, quality)]
    return pd.Series(~np.array(beaten, dtype=bool), index=table.index, name="pareto")


def reach_bounds(cost: np.ndarray, quality: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of the cost at which each curve first reaches ``target`` (quality oriented so
    higher is better): ``cost`` and ``quality`` are (..., durations), ``target`` (...). Crossed
    between two durations: both bounds the interpolated cost; reached at the first duration:
    (0, its cost); never: (the last cost, inf)."""
    ok = quality >= target[..., None]
    first = ok.argmax(axis=-1)
    reached = ok.any(axis=-1)
    j = first[..., None]
    i = np.maximum(first - 1, 0)[..., None]
    q_i, q_j = np.take_along_axis(quality, i, -1)[..., 0], np.take_along_axis(quality, j, -1)[..., 0]
    c_i, c_j = np.take_along_axis(cost, i, -1)[..., 0], np.take_along_axis(cost, j, -1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.clip(np.where(q_j > q_i, (target - q_i) / (q_j - q_i), 1.0), 0.0, 1.0)
        between = np.exp(np.log(c_i) + fraction * (np.log(c_j) - np.log(c_i)))
    at_first = reached & (first == 0)
    low = np.where(reached, np.where(at_first, 0.0, between), cost[..., -1])
    high = np.where(reached, np.where(at_first, c_j, between), np.inf)
    return low, high


def speedup_table(results: pd.DataFrame, baseline: str, reference: str, durations: list[str], cost: str,
                  higher_is_better: bool = True, alpha: float = 0.05, tolerance: float = 0.05,
                  draws: int = DRAWS, seed: int = 0) -> pd.DataFrame:
    """One row per candidate (:data:`SPEEDUP_COLUMNS`; the module's docstring says how): the
    baseline's first, marked ``reference``. ``results`` has one row per run (candidate, duration,
    seed, metric, the ``cost`` column); each candidate is compared on the seeds where it and the
    baseline have every duration."""
    check_alpha(alpha)
    if not (isinstance(tolerance, (int, float)) and 0 < tolerance < 1):
        raise ValueError(f"tolerance must lie in (0, 1), got {tolerance!r}: the smallest saving that matters, a "
                         f"share of the cost, e.g. tolerance=0.05")
    names = [baseline] + [c for c in dict.fromkeys(results["candidate"]) if c != baseline]
    quality, spent = _cube(results, names, durations, "metric"), _cube(results, names, durations, cost)
    rows = [_candidate_row(quality[[0, k]], spent[[0, k]], name, durations.index(reference),
                           1.0 if higher_is_better else -1.0, alpha, tolerance, draws, seed)
            for k, name in enumerate(names)]
    table = pd.DataFrame([row for row, _ in rows], columns=SPEEDUP_COLUMNS)
    target, reference_cost = rows[0][1]
    table.loc[0, ["cost_to_reach", "cost_ratio", "ratio_ci_low", "ratio_ci_high", "speedup"]] = \
        [reference_cost, 1.0, 1.0, 1.0, 1.0]
    table.loc[0, "verdict"], table.loc[0, "more_seeds"] = "reference", None
    table.attrs.update(reference=reference, target=target, reference_cost=reference_cost, cost=cost, alpha=alpha,
                       tolerance=tolerance, seeds=int(table["n"].max()), baseline=baseline)
    return table


def _candidate_row(quality: np.ndarray, spent: np.ndarray, name: str, r: int, sign: float, alpha: float,
                   tolerance: float, draws: int, seed: int) -> tuple[list, tuple]:
    """``name``'s row against the baseline (``quality``, ``spent``: baseline and candidate x
    durations x seeds) on the seeds where both have every duration, and the reference (quality,
    cost) of those seeds."""
    keep = ~(np.isnan(quality).any(axis=(0, 1)) | np.isnan(spent).any(axis=(0, 1)))
    quality, spent = quality[..., keep], spent[..., keep]
    n = int(keep.sum())
    if n == 0:
        raise ValueError(f"no seed has a finished run of {name!r} and the baseline at every duration yet; run() "
                         f"first")
    draw = np.random.default_rng(seed).integers(0, n, size=(draws, n))
    pick = np.concatenate([np.arange(n)[None], draw])  # the first draw is the data itself
    q, c = sign * quality[..., pick].mean(axis=-1), spent[..., pick].mean(axis=-1)  # 2 x durations x draws
    target = q[0, r]
    base_low, base_high = reach_bounds(c[0].T, q[0].T, target)  # the baseline's own cost to reach it
    low, high = reach_bounds(c[1].T, q[1].T, target)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio_low, ratio_high = low / base_high, np.where(base_low > 0, high / base_low, np.inf)
    reach = ("interpolated" if low[0] == high[0] else "at or below the shortest duration" if low[0] == 0
             else "not reached")
    row = _row(name, n, ratio_low, ratio_high, base_high[0], alpha, tolerance, reach)
    return row, (float(sign * target[0]), float(base_high[0]))


def _cube(results: pd.DataFrame, names: list[str], durations: list[str], column: str) -> np.ndarray:
    """candidates x durations x seeds of ``column`` (NaN where a run is missing)."""
    seeds = sorted(set(results["seed"]))
    table = results.pivot_table(index=["candidate", "duration"], columns="seed", values=column, aggfunc="first")
    index = pd.MultiIndex.from_product([names, durations], names=["candidate", "duration"])
    values = table.reindex(index=index, columns=seeds).to_numpy(float)
    return values.reshape(len(names), len(durations), len(seeds))


def _row(name: str, n: int, low: np.ndarray, high: np.ndarray, reference_cost: float, alpha: float,
         tolerance: float, reach: str) -> list:
    """A candidate's row from its ratio bounds (the data first, then the bootstrap draws) and how
    its own curve reached the reference (``reach``)."""
    point = high[0] if math.isfinite(high[0]) else low[0] if low[0] > 0 else math.nan  # (a bound where censored)
    ci_low, ci_high = _ratio_interval(point, low[1:], high[1:], alpha, n)
    verdict, more = _verdict(point, ci_low, ci_high, n, tolerance, alpha)
    return [name, n, point * reference_cost, reach, point, ci_low, ci_high, 1 / point if point > 0 else math.nan,
            verdict, more]


def _ratio_interval(point: float, low: np.ndarray, high: np.ndarray, alpha: float, n: int) -> tuple[float, float]:
    """The ratio's interval: Student's t on the log scale with the bootstrap's standard error where
    every draw crossed between durations; else (bounds) the expanded percentile interval."""
    from scipy import stats

    crossed = bool(n >= 2 and np.isfinite(high).all() and (low > 0).all() and (low == high).all() and point > 0)
    if crossed:
        half = stats.t.isf(alpha / 2, n - 1) * math.sqrt(n / (n - 1)) * float(np.log(high).std(ddof=1))
        return math.exp(math.log(point) - half), math.exp(math.log(point) + half)
    tail = expanded_tail(alpha, n)
    return (float(np.quantile(low, tail, method="inverted_cdf")),
            float(np.quantile(high, 1 - tail, method="inverted_cdf")))


def expanded_tail(alpha: float, n: int) -> float:
    """The tail of the bootstrap distribution each end of the interval cuts: Hesterberg's expanded
    percentile interval, whose normal quantile is ``sqrt(n / (n - 1))`` times Student's ``t`` of
    n - 1 degrees of freedom at ``alpha / 2`` (the plain percentile interval runs narrow with few
    seeds: 10% misses instead of 5% at 8 seeds)."""
    from scipy import stats

    if n < 2:
        return 0.0
    return float(stats.norm.sf(math.sqrt(n / (n - 1)) * stats.t.isf(alpha / 2, n - 1)))


def _verdict(point: float, low: float, high: float, n: int, tolerance: float,
             alpha: float) -> tuple[str, Optional[int]]:
    """The verdict of a ratio interval, and for ``undecided`` about how many more seeds would decide."""
    band = math.log1p(tolerance)
    if 1 / (1 + tolerance) <= low and high <= 1 + tolerance:
        return "no gain", None
    if high < 1:
        return "speed-up", None
    if low > 1:
        return "slower", None
    if not (math.isfinite(high) and low > 0 and point > 0):  # (NaN fails too)
        return "undecided", None  # a bound, not an estimate: train longer or shorter durations to decide
    half, centre = (math.log(high) - math.log(low)) / 2, abs(math.log(point))
    gap = max(centre, band - centre)
    return "undecided", seeds_to_decide(half, gap, n, alpha) - n if gap > 0 and n >= 2 else None


def seeds_to_decide(half: float, gap: float, n: int, alpha: float) -> int:
    """The fewest seeds (more than ``n``) at which a t-interval of half-width ``half`` at ``n``
    seeds, its spread unchanged, would shrink to ``gap``: its half-width at m seeds is
    ``half * t(m-1) / t(n-1) * sqrt(n / m)`` (Student's quantiles at ``alpha / 2``)."""
    from scipy import stats

    t_n = stats.t.isf(alpha / 2, n - 1)

    def decides(m: int) -> bool:
        return half * stats.t.isf(alpha / 2, m - 1) / t_n * math.sqrt(n / m) <= gap

    low, high = n, n + 1
    while not decides(high):
        low, high = high, 2 * high
    while high - low > 1:  # decides(high), not decides(low)
        middle = (low + high) // 2
        low, high = (low, middle) if decides(middle) else (middle, high)
    return high


def answer(table: pd.DataFrame, metric: str, higher_is_better: bool = True) -> str:
    """One sentence that states what a :func:`speedup_table` found."""
    attrs = table.attrs
    what = metric.rsplit("/", 1)[-1].lower() or metric
    cost = {"time": "time", "flops": "FLOPs", "samples": "samples"}.get(attrs["cost"], attrs["cost"])
    confidence = f"{100 * (1 - attrs['alpha']):g}% CI"
    quality = f"the baseline's {attrs['reference']} {what} ({attrs['target']:.4g})"
    others = table[table["verdict"] != "reference"]
    gains = others[others["verdict"] == "speed-up"].sort_values("cost_ratio")
    head = []
    for _, row in gains.iterrows():
        head.append(f"{row['candidate']} reaches {quality if not head else 'it'} at {row['cost_ratio']:.2f}x its "
                    f"{cost} ({confidence} {_interval(row)})")
    if not head:
        head.append(f"no candidate reaches {quality} at less {cost} with confidence")
    tail = []
    for verdict, words in (("no gain", "shows no gain"), ("slower", "is slower"), ("undecided", "is undecided")):
        for _, row in others[others["verdict"] == verdict].iterrows():
            more = row["more_seeds"]
            hint = (f" (about {int(more)} more seeds would decide)" if verdict == "undecided" and pd.notna(more)
                    else " (its curve does not cross the reference: train other durations)"
                    if verdict == "undecided" else f" ({row['cost_ratio']:.2f}x, {confidence} {_interval(row)})")
            tail.append(f"{row['candidate']} {words}{hint}")
    return "; ".join(head + tail) + f" ({attrs['seeds']} seeds, cost: {COSTS[attrs['cost']]})"


def _interval(row: pd.Series) -> str:
    return f"{row['ratio_ci_low']:.2f}-{row['ratio_ci_high']:.2f}"
