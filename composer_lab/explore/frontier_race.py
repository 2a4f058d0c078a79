"""Deciding early: a race over a frontier's candidates, seed by seed.

Every candidate still racing trains the next seed at every duration, the baseline with them (so
the runs of one seed stay paired). At each look (``min_seeds`` seeds, then each seed more that
all of them have) :func:`~composer_lab.explore.speedup.speedup_table` compares each candidate
with the baseline's curve; a candidate whose verdict is reached (speed-up, slower or no gain)
stops training with that look's numbers. Each look tests at the race's Pocock level
(:func:`~composer_lab.explore.race.look_level`, one-sided ``alpha/2`` over all looks), so that
looking after every seed does not multiply the error rate. The verdicts are a pure function of
the runs in the folder, so a race resumed on its folder reaches the same ones.
"""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd

from composer_lab.explore.race import look_level
from composer_lab.explore.speedup import speedup_table
from composer_lab.explore.stats import check_alpha
from composer_lab.explore.trials import Trial

__all__ = ["FrontierRace", "DECIDED"]

DECIDED = ("speed-up", "slower", "no gain")


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

    def record(self, row: dict) -> None:
        """A finished run's result row (the race reads the folder; this counts it)."""
        self.trained += 1

    def runs(self) -> int:
        """The runs the race's verdicts could use (those of earlier calls too)."""
        return len(self.frontier.results())

    def _replay(self) -> tuple[dict[str, pd.Series], list[str], int, Optional[pd.DataFrame]]:
        """The looks so far: decided rows, the candidates still racing, the seeds looked at, the last look."""
        frontier = self.frontier
        results = frontier.results()
        racing = [name for name in frontier.candidates if name != frontier.baseline]
        decided, looked, last = {}, 0, None
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
                if row["candidate"] in racing and row["verdict"] in DECIDED:
                    decided[row["candidate"]] = row
                    racing.remove(row["candidate"])
            if not racing:
                break
        return decided, racing, looked, last

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
        """The verdicts: each decided candidate's row from the look that decided it; the others'
        from the last look (``racing`` while seeds are left, else ``undecided``)."""
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
