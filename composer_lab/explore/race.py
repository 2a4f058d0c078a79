"""Racing: train the orders seed by seed and stop training each order once it is decided.

A full sweep trains every order with every seed, although most orders are clearly worse than
the best, or clearly within +-delta of it, after a few seeds. A race (after irace's F-Race)
trains the seeds in their order, every order still racing getting the same next seed, so the
runs of one seed stay a pair. At each look (``min_seeds`` seeds, then every further seed that
all the orders still racing have) :func:`~composer_lab.explore.stats.compare` compares them with
the best so far: an order is ``equivalent`` when the paired two one-sided tests put the
difference within +-delta, ``worse`` when the paired t-test rejects "no difference" (both
Holm-adjusted across the orders compared), and stops training; the others race on. The race
ends when only the best races, or the seeds run out (the rest: ``undecided``).

The verdicts are a pure function of the results (:func:`decide`): they use only complete
seeds, replayed look by look, so a race resumed on its folder, or one whose runs finished in
another order on more workers, reaches the same verdicts from the same results. An order may
train one seed past the next look while the others finish (:func:`next_trials`): the workers
stay busy, and the verdicts still use only seeds every compared order has.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from composer_lab.explore.stats import check_alpha, check_delta, compare, metric_bounds
from composer_lab.explore.trials import Trial

__all__ = ["Race", "Decision", "decide", "next_trials", "answer", "check_race", "race_values", "look_level",
           "DECISION_COLUMNS"]

DECISION_COLUMNS = ["order", "n", "mean", "diff", "diff_ci_low", "diff_ci_high", "p_adjusted", "tost_p_adjusted",
                    "verdict"]
DECIDED = ("worse", "equivalent")
_DRAWS = 20_000  # simulated races behind look_level: its alpha-quantile is known to about +-7%


def check_race(delta: float, alpha: float, min_seeds: int, seeds: int) -> tuple[float, float, int]:
    """The race's settings, checked: a ValueError says which one is wrong and what it means."""
    delta, alpha = check_delta(delta), check_alpha(alpha)
    if isinstance(min_seeds, bool) or not isinstance(min_seeds, (int, np.integer)) or min_seeds < 2:
        raise ValueError(f"min_seeds must be an int >= 2, got {min_seeds!r}: the seeds every order trains before "
                         f"the first verdict (a paired test needs 2 or more), e.g. min_seeds=3")
    if seeds < min_seeds:
        raise ValueError(f"the sweep has {seeds} seeds, fewer than min_seeds={min_seeds}, so the race could not "
                         f"reach a verdict: give the Sweep more seeds (e.g. seeds=range(20): a race trains only "
                         f"what it needs), or a smaller min_seeds")
    return delta, alpha, int(min_seeds)


def decide(values: pd.DataFrame, delta: float, alpha: float = 0.05, min_seeds: int = 3,
           higher_is_better: bool = True, bounds: Optional[tuple[float, float]] = None,
           memo: Optional[dict] = None) -> pd.DataFrame:
    """The race's decision table from the results so far.

    ``values``: seeds x orders, rows in the race's seed order, NaN where a run has not finished.
    Looks at the first ``min_seeds`` seeds, then one seed more at a time, while every order still
    racing has them; at each look, the orders found worse or equivalent leave the race with that
    look's numbers. Each look tests at :func:`look_level`, so that looking after every seed does
    not multiply the error rate. One row per order
    (:data:`DECISION_COLUMNS`), best mean first: ``n`` is the seeds its verdict used, ``diff`` its
    paired difference from the best of that look. ``memo``: a dict kept between calls on growing
    results, so that a look is computed once (a recorded result never changes)."""
    memo = {} if memo is None else memo
    level = look_level(alpha, min_seeds, len(values))
    rows, racing = _looks(values, min_seeds, memo,
                          lambda block: compare(block, higher_is_better, delta=delta, alpha=level, bounds=bounds))
    finished = len(racing) == 1 or (bool(rows) and rows[racing[0]]["n"] == len(values))
    table = pd.DataFrame([{"order": order, **_standing(order, rows.get(order), values, racing, finished)}
                          for order in values.columns])
    table = table.reindex(columns=DECISION_COLUMNS)
    table["n"] = table["n"].astype(int)
    return table.sort_values("mean", ascending=not higher_is_better, kind="stable",
                             na_position="last").reset_index(drop=True)


def _looks(values: pd.DataFrame, min_seeds: int, memo: dict,
           test: Callable[[pd.DataFrame], pd.DataFrame]) -> tuple[dict[str, pd.Series], list[str]]:
    """Replay the looks on ``values``: each order's row from the look that decided it (or the
    last it was in), and the orders still racing. ``test`` compares a block of complete seeds."""
    racing, rows = list(values.columns), {}
    for k in range(min_seeds, len(values) + 1):
        key = (k, tuple(racing))
        if key not in memo:
            block = values.iloc[:k][racing]
            if block.isna().to_numpy().any():
                break
            memo[key] = test(block)
        table = memo[key]
        rows.update((order, row.copy()) for order, row in table.iterrows())
        racing = [order for order in racing if table.loc[order, "verdict"] not in DECIDED]
        if len(racing) == 1:
            break
    return rows, racing


def _standing(order: str, row: Optional[pd.Series], values: pd.DataFrame, racing: list[str],
              finished: bool) -> pd.Series:
    """``order``'s row: what it has so far before the first look; 'undecided' for one still
    racing when the race is over, 'racing' while it goes on."""
    if row is None:
        known = values[order].dropna()
        return pd.Series({"n": len(known), "mean": known.mean() if len(known) else math.nan, "verdict": "racing"})
    if order in racing and row["verdict"] != "best":
        row["verdict"] = "undecided" if finished else "racing"
    return row


@functools.lru_cache(maxsize=64)
def look_level(alpha: float, min_seeds: int, seeds: int) -> float:
    """The level each look of a race tests at, so that over all its looks (at ``min_seeds`` seeds,
    then at each seed more, up to ``seeds``) a one-sided paired t-test of a difference that is
    not there rejects with probability ``alpha``: Pocock's constant boundary, for the t-test.
    Found by simulation (the alpha-quantile of the smallest p-value over the looks, on normal
    differences: their t statistics' joint law does not depend on the spread); one look: alpha.
    Both tests of a look use it: TOST is two one-sided tests, and the two-sided test at this
    level errs less often than the one-sided one."""
    if seeds <= min_seeds:
        return alpha
    z = np.random.default_rng(0).standard_normal((_DRAWS, seeds))
    n = np.arange(1, seeds + 1)
    mean = z.cumsum(axis=1) / n
    spread = np.sqrt(np.maximum((np.square(z).cumsum(axis=1) - n * mean ** 2), 0.0)[:, min_seeds - 1:]
                     / (n[min_seeds - 1:] - 1))
    t = mean[:, min_seeds - 1:] / (spread / np.sqrt(n[min_seeds - 1:]))
    smallest = stats.t.sf(t, n[min_seeds - 1:] - 1).min(axis=1)
    return float(np.quantile(smallest, alpha))


def next_trials(table: pd.DataFrame, values: pd.DataFrame, min_seeds: int, ahead: int = 1) -> list[tuple[str, Any]]:
    """The (order, seed) pairs the race wants trained, first first: the missing runs of the
    orders still racing, lowest seed first, up to ``ahead`` seeds past the next look. Empty
    when the race is over."""
    verdicts = table.set_index("order")["verdict"]
    if not (verdicts == "racing").any():
        return []
    racing = [order for order in values.columns if verdicts[order] in ("racing", "best")]
    looked = int(table.loc[table["order"].isin(racing), "n"].min()) if (table["n"] >= min_seeds).any() else 0
    horizon = min(len(values), max(min_seeds, looked + 1) + ahead)
    missing = values.iloc[:horizon][racing].isna()
    return [(order, seed) for seed, row in missing.iterrows() for order in racing if row[order]]


def answer(table: pd.DataFrame, delta: float, metric: str, names: Sequence[str]) -> str:
    """One sentence that states what the race found."""
    size = _size(metric)
    seeds = int(table["n"].max())
    verdicts = table.set_index("order")["verdict"]
    others = verdicts[verdicts != "best"]
    if not (verdicts == "best").any():
        return "racing: no verdict yet (the first comes once every order has min_seeds seeds); race again to go on"
    if (others == "racing").any():
        return (f"racing: {others.isin(DECIDED).sum()} of {len(others)} orders decided against the best so far "
                f"after {seeds} seeds; race again to go on (finished runs are kept)")
    if (others == "equivalent").all():
        algorithms = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
        what = "accuracy" if metric_bounds(metric) == (0.0, 1.0) else metric
        return (f"the order of {algorithms} changes {what} by less than {size(delta)} (equivalent within "
                f"delta={delta:g}, {seeds} seeds)")
    found = _found(table, others, delta, size)
    best = verdicts.index[verdicts == "best"][0]
    if (others == "undecided").any():
        return (f"undecided after {seeds} seeds: {(others == 'undecided').sum()} of {len(others)} orders neither "
                f"worse than the best so far ({best}) nor within delta={delta:g} of it" +
                (f" ({found})" if found else "") + "; race again with more seeds to decide them")
    return f"best: {best}; against it {found} ({seeds} seeds, Holm-adjusted paired tests)"


def _size(metric: str) -> Callable[[float], str]:
    """How a difference of ``metric`` reads: accuracy points, else the metric's own units."""
    if metric_bounds(metric) == (0.0, 1.0):
        return lambda x: f"{abs(x) * 100:.2g} points"
    return lambda x: f"{abs(x):.3g}"


def _found(table: pd.DataFrame, others: pd.Series, delta: float, size: Callable[[float], str]) -> str:
    """'2 worse (by 1.2 to 3.4 points), 1 equivalent within delta=0.01': the decided orders."""
    gaps = sorted({size(d) for d in table.loc[table["verdict"] == "worse", "diff"]})
    worse = [f"{(others == 'worse').sum()} worse (by {' to '.join(gaps[::max(1, len(gaps) - 1)])})"] if gaps else []
    same = ([f"{(others == 'equivalent').sum()} equivalent within delta={delta:g}"]
            if (others == "equivalent").any() else [])
    return ", ".join(worse + same)


@dataclass
class Decision:
    """What a race found: the decision table, the sentence that states it, and the runs it trained
    (``trained``; ``runs``: all the runs its verdicts could use, those from earlier calls too)."""

    table: pd.DataFrame
    answer: str
    trained: int
    runs: int

    def __str__(self) -> str:
        return f"{self.answer}\n{self.table.to_string(index=False)}"

    __repr__ = __str__  # (a notebook's text form: the answer and the table, not the dataclass's fields)

    def _repr_html_(self) -> str:
        return f"<p>{self.answer}</p>" + self.table.to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="")


class Race:
    """One race over a sweep's trials: hands out the next trial (:meth:`next_trial`), takes each
    result (:meth:`record`), and says where it stands (:meth:`decision`).

    ``values``: the results so far (seeds x orders, NaN where missing), in the race's seed order;
    ``trials``: the trial of each (order, seed)."""

    def __init__(self, values: pd.DataFrame, trials: dict[tuple[str, int], Trial], metric: str,
                 names: Sequence[str], delta: float, alpha: float = 0.05, min_seeds: int = 3,
                 higher_is_better: bool = True) -> None:
        self.delta, self.alpha, self.min_seeds = check_race(delta, alpha, min_seeds, len(values))
        self.values, self.trials = values.astype(float), trials
        self.metric, self.names, self.higher_is_better = metric, list(names), higher_is_better
        self.started: set[tuple[str, int]] = set()
        self.trained = 0
        self._table: Optional[pd.DataFrame] = None
        self._looks: dict = {}

    @property
    def table(self) -> pd.DataFrame:
        """The decision table of the results so far (:func:`decide`)."""
        if self._table is None:
            self._table = decide(self.values, self.delta, self.alpha, self.min_seeds, self.higher_is_better,
                                 metric_bounds(self.metric), self._looks)
        return self._table

    def next_trial(self) -> Optional[Trial]:
        """The next trial to start, or None while the race wants nothing more now."""
        for pair in next_trials(self.table, self.values, self.min_seeds):
            if pair not in self.started:
                self.started.add(pair)
                return self.trials[pair]
        return None

    def record(self, row: dict) -> None:
        """A finished run's result row."""
        self.values.loc[row["seed"], row["order"]] = float(row[self.metric])
        self.trained += 1
        self._table = None

    def decision(self) -> Decision:
        return Decision(self.table, answer(self.table, self.delta, self.metric, self.names), self.trained,
                        int(self.values.notna().to_numpy().sum()))


def race_values(results: pd.DataFrame, orders: Sequence[str], seeds: Sequence[int], metric: str) -> pd.DataFrame:
    """Seeds x orders of ``metric`` from a sweep's results (NaN where missing), in the given orders."""
    if results.empty:
        return pd.DataFrame(math.nan, index=pd.Index(seeds, name="seed"), columns=list(orders))
    values = results.pivot(index="seed", columns="order", values=metric)
    return values.reindex(index=pd.Index(seeds, name="seed"), columns=list(orders)).astype(float)

