"""Deciding early: a race over a frontier's candidates, seed by seed.

Every candidate still racing trains the next seed at every duration, the baseline with them (so
the runs of one seed stay paired; the baseline stops when the last candidate does). At each look
(``min_seeds`` seeds, then each seed more that all of them have)
:func:`~composer_lab.explore.speedup.speedup_table` compares each candidate with the baseline's
curve, and a candidate stops training with that look's numbers when

- its verdict is reached: its interval excludes 1 (``speed-up``, ``slower``) or lies within the
  tolerance band (``no gain``); each look tests at the race's Pocock level
  (:func:`~composer_lab.explore.race.look_level`, one-sided ``alpha/2`` over all the looks), so
  that looking after every seed does not multiply the error rate;
- or the frontier's seeds would hardly decide it (futility): were its ratio and spread what they
  are now, the chance that the interval at the last seed reaches a verdict (conditional power,
  :func:`decisive_chance`) is under :data:`FUTILITY`. It stops ``undecided``, its row saying how
  many more seeds would decide (``more_seeds``). A near-null candidate (a true ratio of about 1
  whose interval is still wider than the band) is what this stops: without it, it raced to the
  last seed and kept the baseline training with it.

Stopping for futility never makes a verdict, so it cannot add a wrong one: the error rate stays
that of the looks (a non-binding futility rule), and it costs power (a candidate it stops might
have been decided at the last seed; ``benchmarks/frontier_race.py`` counts both). The verdicts
are a pure function of the runs in the folder, so a race resumed on its folder reaches the same ones.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import pandas as pd

from composer_lab.explore.race import look_level
from composer_lab.explore.speedup import speedup_table
from composer_lab.explore.stats import check_alpha
from composer_lab.explore.trials import Trial

__all__ = ["FrontierRace", "DECIDED", "FUTILITY", "decisive_chance"]

DECIDED = ("speed-up", "slower", "no gain")


FUTILITY = 0.2
"""A candidate stops as ``undecided`` once the chance that the frontier's seeds decide it falls below this."""


def decisive_chance(row: pd.Series, seeds: int, level: float, tolerance: float) -> float:
    """The chance that ``row``'s candidate, with all ``seeds``, gets a verdict, were its ratio and
    spread what they are now (conditional power under the current trend): at n seeds its log
    ratio has estimate p and t-interval half-width h, so a spread per seed s = h sqrt(n) / t(n-1);
    at N seeds the half-width is H = t(N-1) s / sqrt(N) and the estimate is drawn about p with sd
    s sqrt(N-n) / N; a verdict comes when it lies beyond H of 0 (speed-up, slower) or within
    log(1 + tolerance) - H of it (no gain). 1 where the interval is a bound (train on: the curve
    may cross), 0 where no seed is left."""
    from scipy import stats

    n, low, high = int(row["n"]), float(row["ratio_ci_low"]), float(row["ratio_ci_high"])
    if n >= seeds:
        return 0.0
    if not (0 < low and math.isfinite(high)):
        return 1.0
    point, half = math.log(row["cost_ratio"]), (math.log(high) - math.log(low)) / 2
    spread = half * math.sqrt(n) / stats.t.isf(level / 2, n - 1)
    final, sd = stats.t.isf(level / 2, seeds - 1) * spread / math.sqrt(seeds), spread * math.sqrt(seeds - n) / seeds
    if sd == 0:
        return 0.0
    chance = stats.norm.sf((final - point) / sd) + stats.norm.cdf((-final - point) / sd)
    margin = math.log1p(tolerance) - final
    if margin > 0:
        chance += stats.norm.cdf((margin - point) / sd) - stats.norm.cdf((-margin - point) / sd)
    return float(chance)


class FrontierRace:
    """One race over ``frontier``'s trials: :meth:`next_trial`, :meth:`record`, :meth:`table`."""

    def __init__(self, frontier: Any, alpha: float, min_seeds: int, reference: str, tolerance: float) -> None:
        check_alpha(alpha)
        seeds = len(frontier.seeds)
        if isinstance(min_seeds, bool) or not isinstance(min_seeds, int) or not 2 <= min_seeds <= seeds:
            raise ValueError(f"min_seeds must be an int from 2 to the frontier's {seeds} seeds, got {min_seeds!r}: "
                             f"the seeds every candidate trains before the first verdict; give the Frontier more "
                             f"seeds (e.g. seeds=range(10): a race trains only what it needs) or a smaller min_seeds")
        self.frontier, self.alpha, self.min_seeds = frontier, alpha, min_seeds
        self.reference, self.tolerance = reference, tolerance
        self.level = 2 * look_level(alpha / 2, min_seeds, seeds)
        self.started: set[str] = set()
        self.trained = 0
        self._looks: dict = {}
        self._replayed: Optional[tuple[int, tuple]] = None

    def futile(self, row: pd.Series) -> bool:
        """Whether ``row``'s candidate, undecided, stops: the seeds left would hardly decide it."""
        return row["verdict"] == "undecided" and decisive_chance(row, len(self.frontier.seeds), self.level,
                                                                  self.tolerance) < FUTILITY

    def record(self, row: dict) -> None:
        """A finished run's result row (the race reads the folder; this counts it)."""
        self.trained += 1

    def runs(self) -> int:
        """The runs the race's verdicts could use (those of earlier calls too)."""
        return len(self.frontier.results())

    def _replay(self) -> tuple[dict[str, pd.Series], list[str], int, Optional[pd.DataFrame]]:
        """The looks so far: the stopped candidates' rows, the candidates still racing, the seeds
        looked at, the last look (computed once for each number of finished runs: runs are only added)."""
        count = len(self.frontier.folder.rows())
        if self._replayed is None or self._replayed[0] != count:
            self._replayed = count, self._looks_at(self.frontier.results())
        return self._replayed[1]

    def _looks_at(self, results: pd.DataFrame) -> tuple[dict[str, pd.Series], list[str], int, Optional[pd.DataFrame]]:
        frontier = self.frontier
        racing = [name for name in frontier.candidates if name != frontier.baseline]
        stopped, looked, last = {}, 0, None
        for k in range(self.min_seeds, len(frontier.seeds) + 1):
            seeds = frontier.seeds[:k]
            block = results[results["seed"].isin(seeds) & results["candidate"].isin([frontier.baseline, *racing])]
            if len(block) < k * (1 + len(racing)) * len(frontier.durations):
                break
            key = (k, tuple(racing))
            if key not in self._looks:
                self._looks[key] = speedup_table(block, frontier.baseline, self.reference, frontier.durations,
                                                 frontier.cost, frontier.higher_is_better, self.level, self.tolerance)
            last, looked = self._looks[key], k
            for _, row in last.iterrows():
                if row["candidate"] in racing and (row["verdict"] in DECIDED or self.futile(row)):
                    stopped[row["candidate"]] = row
                    racing.remove(row["candidate"])
            if not racing:
                break
        return stopped, racing, looked, last

    def next_trial(self) -> Optional[Trial]:
        """The next run to start, or None while the race wants nothing more now."""
        frontier = self.frontier
        _, racing, looked, _ = self._replay()
        if not racing:
            return None
        done = frontier.folder.rows()
        horizon = min(len(frontier.seeds), max(self.min_seeds, looked + 1))
        for seed in frontier.seeds[:horizon]:
            for name in [frontier.baseline, *racing]:
                for duration in frontier.durations:
                    trial = frontier.trial(name, duration, seed)
                    if trial.key not in done and trial.key not in self.started:
                        self.started.add(trial.key)
                        return trial
        return None

    def table(self) -> pd.DataFrame:
        """The verdicts: each stopped candidate's row from the look that stopped it (decided, or
        ``undecided`` when futile); the others' from the last look (``racing`` while seeds are
        left, else ``undecided``)."""
        decided, racing, looked, last = self._replay()
        if last is None:
            raise ValueError(f"the race has no verdict yet: every candidate needs {self.min_seeds} seeds at every "
                             f"duration first; race again to go on (finished runs are kept)")
        latest = last.set_index("candidate", drop=False)
        rows = [last.iloc[0]] + [decided[name] if name in decided else latest.loc[name]
                                 for name in self.frontier.candidates if name != self.frontier.baseline]
        table = pd.DataFrame([row.to_dict() for row in rows]).reset_index(drop=True)
        if looked < len(self.frontier.seeds):
            table.loc[table["candidate"].isin(racing), "verdict"] = "racing"
        table.attrs.update(last.attrs, level=self.level, alpha=self.alpha)
        return table
