"""The statistics of a sweep: paired tests, equivalence, multiplicity, the global test, power.

A seed fixes the initial weights and the data order, so the runs of two orders with one seed
form a pair, and every comparison here works on the paired differences. The functions are
pure (arrays in, numbers out) so the ranking, the race and the plots share one definition of
each test:

- :func:`paired`: the paired t-test of the differences against 0 and its t-interval, with the
  cases where it is undefined labelled (``degenerate``) instead of returned as NaN or as a
  zero-width interval;
- :func:`tost_p_value`: two one-sided tests, for "the difference lies within +-delta";
- :func:`holm`: Holm-Bonferroni adjustment of a family of p-values;
- :func:`friedman`: Friedman's test that any order differs, seeds as blocks;
- :func:`seeds_needed`: how many seeds a paired test needs to resolve a difference of delta;
- :func:`compare`: every order against a reference (the best by default) with the tests above
  and a verdict, the one table the ranking and the race both read.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["VERDICTS", "Paired", "paired", "paired_columns", "tost_p_value", "holm", "friedman", "seeds_needed",
           "compare", "summary", "metric_bounds", "COMPARE_COLUMNS", "check_delta", "check_alpha"]

VERDICTS = ("best", "worse", "equivalent", "racing", "undecided")
"""The words a comparison ends with: the current best; worse than it (paired test, Holm-adjusted);
equivalent to it within +-delta (TOST); still racing; undecided (the seeds ran out)."""

_RELATIVE_SPREAD = 1e-9
"""Differences whose spread is below this fraction of their size are equal (float rounding)."""


@dataclass(frozen=True)
class Paired:
    """A paired comparison: n pairs, the mean difference, its interval and the t-test's p-value.

    ``degenerate`` is None for a regular test, or why the t-test is undefined: ``"n < 2"`` (no
    spread to estimate; interval and p-value NaN) or ``"zero spread"`` (every difference equal:
    the difference is known exactly, so ``ci_low == ci_high == mean`` and ``p_value`` is 0.0 if
    the mean is not 0, else 1.0)."""

    n: int
    mean: float
    ci_low: float
    ci_high: float
    p_value: float
    degenerate: Optional[str]


def paired(diffs: np.ndarray, confidence: float = 0.95) -> Paired:
    """The paired t-test of ``diffs`` (one difference per seed; NaN pairs dropped) against 0,
    with the t-interval of the mean difference at ``confidence``."""
    n, mean, low, high, p_value, degenerate = (column[0] for column in
                                               paired_columns(np.asarray(diffs, float).reshape(-1, 1), confidence))
    return Paired(int(n), float(mean), float(low), float(high), float(p_value), degenerate)


def paired_columns(diffs: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, ...]:
    """:func:`paired` of each column of ``diffs`` (seeds x comparisons) at once: arrays of n,
    mean, ci_low, ci_high, p_value and degenerate (an object array of labels and None)."""
    d = np.asarray(diffs, dtype=float)
    n = (~np.isnan(d)).sum(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # columns of fewer than 2 pairs: NaN, labelled below
        mean = np.nanmean(d, axis=0)
        se = np.nanstd(d, axis=0, ddof=1) / np.sqrt(n)
        zero = (n >= 2) & _zero_spread(d, axis=0)
        t = np.abs(mean) / se
    few = n < 2
    df = np.maximum(n - 1, 1)
    half = np.where(few, math.nan, np.where(zero, 0.0, stats.t.ppf(0.5 + confidence / 2, df) * se))
    p_value = np.where(few, math.nan, np.where(zero, np.where(mean != 0, 0.0, 1.0), 2 * stats.t.sf(t, df)))
    degenerate = np.array(["n < 2" if f else "zero spread" if z else None for f, z in zip(few, zero)], dtype=object)
    return n, mean, mean - half, mean + half, p_value, degenerate


def tost_p_value(diffs: np.ndarray, delta: float) -> float:
    """The paired two one-sided tests' p-value for ``|true mean difference| < delta``: the larger
    of the p-values of "mean <= -delta" and "mean >= delta". Small means equivalent within delta.
    Zero spread: 0.0 if ``|mean| < delta`` else 1.0; fewer than 2 pairs: NaN."""
    check_delta(delta)
    d = _finite(diffs)
    n = len(d)
    if n < 2:
        return math.nan
    mean = float(d.mean())
    if _zero_spread(d):
        return 0.0 if abs(mean) < delta else 1.0
    se = float(d.std(ddof=1)) / math.sqrt(n)
    below = stats.t.sf((mean + delta) / se, n - 1)  # H0: mean <= -delta
    above = stats.t.cdf((mean - delta) / se, n - 1)  # H0: mean >= +delta
    return float(max(below, above))


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values, in the order given. NaN entries stay NaN and do not
    count in the family; the adjusted values are monotone in the raw ones and at most 1."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full(p.shape, math.nan)
    valid = np.flatnonzero(~np.isnan(p))
    order = valid[np.argsort(p[valid], kind="stable")]
    m = len(order)
    scaled = (m - np.arange(m)) * p[order]
    adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted


def friedman(values: np.ndarray) -> tuple[float, float]:
    """Friedman's chi-square and p-value for "some order differs": rows are seeds (blocks),
    columns orders; seeds with a missing value are left out. (NaN, NaN) when undefined: fewer
    than 3 orders (for 2, the paired test is the answer) or fewer than 2 complete seeds.
    Every seed giving every order the same value: (0.0, 1.0)."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError(f"friedman needs a 2-d table, seeds x orders, got shape {v.shape}; "
                         "e.g. results.pivot(index='seed', columns='order', values=metric)")
    v = v[~np.isnan(v).any(axis=1)]
    if v.shape[1] < 3 or v.shape[0] < 2:
        return math.nan, math.nan
    if all(_zero_spread(row) for row in v):
        return 0.0, 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = stats.friedmanchisquare(*v.T)
    return float(result.statistic), float(result.pvalue)


def seeds_needed(diffs: np.ndarray, delta: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Seeds a two-sided paired t-test at level ``alpha`` needs to detect a true difference of
    ``delta`` with probability ``power``, the spread of the differences being the one observed
    in ``diffs``. Computed with the noncentral t distribution (the t-test's own power), searched
    upward from the normal approximation. Zero spread: 2 (the fewest a test needs)."""
    check_delta(delta)
    check_alpha(alpha)
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), got {power!r}; e.g. power=0.8")
    d = _finite(diffs)
    if len(d) < 2:
        raise ValueError(f"seeds_needed estimates the spread of the paired differences, so it needs at least 2 "
                         f"pairs (seeds both orders finished), got {len(d)}; run the sweep with 2 or more seeds first")
    if _zero_spread(d):
        return 2
    effect = delta / float(d.std(ddof=1))
    normal = (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / effect
    n = max(2, math.ceil(normal ** 2))
    while _t_power(n, effect, alpha) < power:
        n += 1
    return n


COMPARE_COLUMNS = ["n", "mean", "std", "ci_low", "ci_high", "diff", "diff_ci_low", "diff_ci_high", "p_value",
                   "p_adjusted", "tost_p_value", "tost_p_adjusted", "degenerate", "ci_clipped", "diff_ci_clipped",
                   "verdict"]


def compare(values: pd.DataFrame, higher_is_better: bool = True, reference: Optional[str] = None,
            delta: Optional[float] = None, alpha: float = 0.05, confidence: float = 0.95,
            bounds: Optional[tuple[float, float]] = None, family: str = "best") -> pd.DataFrame:
    """Every order (a column of ``values``, seeds x orders) against ``reference`` (default: the
    best mean), one row per order in the columns' order (:data:`COMPARE_COLUMNS`).

    Per order: its own mean and t-interval over its seeds; the paired difference ``order -
    reference`` over the seeds both have, with its interval, the paired t-test's p-value
    (``degenerate`` says why where that test is undefined, else it is missing) and its
    Holm-adjusted p-value, the family being ``family``: ``"best"``, the orders compared with the
    reference, or ``"pairs"``, every pair of orders (the adjusted p-value of the pair (order,
    reference) is reported). When the reference is the best *of these data*, only ``"pairs"``
    keeps the chance of any wrong ``worse`` at ``alpha``: picking the best makes the others look
    worse than they are (no true difference, 5 seeds: "best" gives some wrong ``worse`` in 7% of
    sweeps of 4 orders, 11% of 12). With ``delta``, the TOST p-value of "within +-delta",
    Holm-adjusted over the orders compared with the reference (the selection only makes it
    harder to pass). The verdict: ``best`` for the reference, ``equivalent`` when the adjusted
    TOST p-value is below ``alpha`` (a difference too small to matter, even if a test could tell
    it from 0), ``worse`` when the adjusted paired p-value is below ``alpha`` in the worse
    direction, else ``undecided``. With ``bounds`` (the metric's range, e.g. (0, 1) for an
    accuracy) the intervals are cut at the range and ``ci_clipped`` / ``diff_ci_clipped`` say
    where that happened (a difference is cut at +-the range's width)."""
    reference, delta = _check_compare(values, higher_is_better, reference, delta, alpha, family)
    v = values.to_numpy(float)
    is_reference = values.columns == reference
    diffs = v - v[:, is_reference]
    n, mean, ci_low, ci_high, _, _ = paired_columns(v, confidence)
    _, diff, diff_ci_low, diff_ci_high, p_value, degenerate = paired_columns(diffs, confidence)
    tost = [math.nan if delta is None else tost_p_value(d, delta) for d in diffs.T]
    table = pd.DataFrame({"n": n, "mean": mean, "std": values.std(ddof=1).to_numpy(), "ci_low": ci_low,
                          "ci_high": ci_high, "diff": diff, "diff_ci_low": diff_ci_low, "diff_ci_high": diff_ci_high,
                          "p_value": p_value, "tost_p_value": tost, "degenerate": degenerate},
                         index=pd.Index(values.columns, name="order"))
    table.loc[is_reference, ["diff_ci_low", "diff_ci_high", "p_value", "tost_p_value", "degenerate"]] = math.nan
    table.loc[is_reference, "diff"] = 0.0
    table["p_adjusted"] = _holm_over_pairs(values, reference) if family == "pairs" else holm(table["p_value"])
    table["tost_p_adjusted"] = holm(table["tost_p_value"])
    table["ci_clipped"] = _clip(table, ["ci_low", "ci_high"], bounds)
    width = None if bounds is None else bounds[1] - bounds[0]
    table["diff_ci_clipped"] = _clip(table, ["diff_ci_low", "diff_ci_high"], None if width is None else (-width, width))
    worse = np.sign(table["diff"]) == (-1 if higher_is_better else 1)
    table["verdict"] = np.select(
        [table.index == reference, table["tost_p_adjusted"] < alpha, (table["p_adjusted"] < alpha) & worse],
        ["best", "equivalent", "worse"], "undecided")
    return table[COMPARE_COLUMNS]


def _check_compare(values: pd.DataFrame, higher_is_better: bool, reference: Optional[str], delta: Optional[float],
                   alpha: float, family: str) -> tuple[str, Optional[float]]:
    """:func:`compare`'s settings checked: the reference (default: the best mean) and ``delta``."""
    check_alpha(alpha)
    delta = None if delta is None else check_delta(delta)
    if family not in ("best", "pairs"):
        raise ValueError(f"family must be 'best' (the orders compared with the reference) or 'pairs' (every pair of "
                         f"orders), got {family!r}")
    if values.shape[1] == 0:
        raise ValueError("no orders to compare: values has no columns; give a seeds x orders table, e.g. "
                         "results.pivot(index='seed', columns='order', values=metric)")
    if reference is None:
        means = values.mean()
        return (means.idxmax() if higher_is_better else means.idxmin()), delta
    if reference not in values.columns:
        raise ValueError(f"reference {reference!r} is not one of the orders compared; give one of "
                         f"{list(values.columns)}")
    return reference, delta


def _holm_over_pairs(values: pd.DataFrame, reference: str) -> np.ndarray:
    """Each order's Holm-adjusted p-value against ``reference`` in the family of every pair of
    orders (paired t-tests; NaN for the reference)."""
    columns = list(values.columns)
    pairs = list(itertools.combinations(range(len(columns)), 2))
    v = values.to_numpy(float)
    first = np.array([i for i, _ in pairs], dtype=int)
    second = np.array([j for _, j in pairs], dtype=int)
    adjusted = dict(zip(pairs, holm(paired_columns(v[:, second] - v[:, first])[4])))
    r = columns.index(reference)
    return np.array([math.nan if i == r else adjusted[(min(i, r), max(i, r))] for i in range(len(columns))])


def summary(table: pd.DataFrame, global_test: tuple[float, float] = (math.nan, math.nan), alpha: float = 0.05,
            delta: Optional[float] = None) -> str:
    """One line that states the answer of a :func:`compare` table (and Friedman's ``global_test``),
    for the command line and notebooks."""
    best = table.index[table["verdict"] == "best"][0]
    seeds = int(table["n"].max())
    if len(table) == 1:
        return f"one order ('{best}', {seeds} seeds): nothing to compare; a sweep ranks two or more orders"
    head = f"{len(table)} orders x {seeds} seeds"
    if len(table) == 2:
        row = table.drop(index=best).iloc[0]
        degenerate = row["degenerate"] if isinstance(row["degenerate"], str) else None
        interval = "" if degenerate else f" [{row['diff_ci_low']:.4g}, {row['diff_ci_high']:.4g}]"
        how = f"paired t-test, {degenerate}" if degenerate else "paired t-test"
        within = f" (delta={delta:g})" if row["verdict"] == "equivalent" else ""
        return (f"{head}: '{table.index[table.index != best][0]}' minus '{best}' = {row['diff']:+.4g}{interval}, "
                f"p = {row['p_value']:.2g} ({how}): {row['verdict']}{within}")
    statistic, p_value = global_test
    if math.isnan(p_value):
        found = "Friedman's test undefined (fewer than 2 seeds with every order)"
    else:
        found = (f"Friedman chi2 = {statistic:.3g}, p = {p_value:.2g}: "
                 + ("some order differs" if p_value < alpha else "no evidence that any order differs"))
    counts = table["verdict"].value_counts()
    words = [f"{counts[v]} {v}" + (f" within delta={delta:g}" if v == "equivalent" else "")
             for v in ("worse", "equivalent", "undecided") if v in counts]
    return (f"{head}: {found}; best '{best}' ({table.loc[best, 'mean']:.4g}); against it: {', '.join(words)} "
            f"(Holm-adjusted paired tests, alpha={alpha:g})")


def metric_bounds(metric: str, bounds: Optional[Sequence[float]] = None) -> Optional[tuple[float, float]]:
    """The range a metric's values lie in: ``bounds`` if given, (0, 1) for an accuracy (a name
    whose last part contains 'accuracy', any case), else None (unbounded)."""
    if bounds is None:
        return (0.0, 1.0) if "accuracy" in metric.rsplit("/", 1)[-1].lower() else None
    try:
        low, high = (float(b) for b in bounds)
    except (TypeError, ValueError):
        low = high = math.nan
    if not low < high:
        raise ValueError(f"bounds must be (low, high) with low < high, the range of the metric's values, got "
                         f"{bounds!r}; e.g. bounds=(0, 1) for a fraction, (0, math.inf) for a loss")
    return low, high


def _clip(table: pd.DataFrame, columns: list[str], bounds: Optional[tuple[float, float]]) -> pd.Series:
    """Cut the interval ``columns`` at ``bounds``, in place; where it cut."""
    if bounds is None:
        return pd.Series(False, index=table.index)
    cut = table[columns].clip(*bounds)
    clipped = (cut != table[columns]).any(axis=1) & table[columns].notna().all(axis=1)
    table[columns] = cut
    return clipped


def check_delta(delta: float) -> float:
    """``delta`` as a positive float, or a ValueError that says what delta is."""
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating, np.integer)) \
            or not math.isfinite(delta) or delta <= 0:
        raise ValueError(f"delta must be a positive number, got {delta!r}: the smallest difference of the metric "
                         "that matters, in the metric's units, e.g. delta=0.005 for half a point of accuracy")
    return float(delta)


def check_alpha(alpha: float) -> float:
    """``alpha`` as a float in (0, 1), or a ValueError."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}: the error rate a test accepts, e.g. alpha=0.05")
    return float(alpha)


def _t_power(n: int, effect: float, alpha: float) -> float:
    """Power of the two-sided one-sample t-test with n pairs at a standardised effect."""
    df = n - 1
    critical = stats.t.ppf(1 - alpha / 2, df)
    shift = effect * math.sqrt(n)
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def _finite(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=float).ravel()
    return v[~np.isnan(v)]


def _zero_spread(d: np.ndarray, axis: Optional[int] = None) -> Any:
    """Every value equal (NaN left out), up to float rounding of values of their size."""
    spread = np.nanmax(d, axis=axis, initial=-np.inf) - np.nanmin(d, axis=axis, initial=np.inf)
    return spread <= _RELATIVE_SPREAD * np.nanmax(np.abs(d), axis=axis, initial=0.0)
