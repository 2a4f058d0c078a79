"""How many runs a frontier's race saves against the full grid, and how often its verdicts are wrong.

A synthetic experiment of known curves (no training): quality = 0.5 + 0.1 * log2(cost * speed)
+ a seed effect shared by every candidate (sd 0.01) + each run's own noise, cost = 2**i at
duration i (plus 2% noise), so a candidate of speed s reaches any quality at 1/s of the cost.
:class:`~composer_lab.explore.frontier_race.FrontierRace` runs unchanged against a stand-in
frontier that reveals a run of the pre-drawn grid when the race asks for it. A verdict is wrong
when the truth contradicts it: ``speed-up`` for a true cost ratio of 1 or more, ``slower`` for
1 or less, ``no gain`` for a ratio outside [1/(1+tolerance), 1+tolerance]; ``undecided`` is never
wrong, and is counted apart: stopped for futility before the last seed (the seeds could hardly
decide it), or still undecided at the last seed. Each noise level prints the runs trained (and the
baseline's share of them), the wrong verdicts, and per candidate its verdicts and mean seeds used.

    python benchmarks/frontier_race.py                 # 200 experiments per noise level
    python benchmarks/frontier_race.py --experiments 50 --noise 0.005
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Optional

import numpy as np
import pandas as pd

from composer_lab.explore.frontier_race import DECIDED, FrontierRace
from composer_lab.explore.trials import Trial

SPEEDS = {"baseline": 1.0, "same": 1.0, "close": 1.02, "faster": 1.25, "fast": 2.0, "slower": 0.8}
DURATIONS = ["1ep", "2ep", "4ep", "8ep"]


class _Folder:
    def __init__(self, revealed: dict) -> None:
        self.revealed = revealed

    def rows(self) -> dict:
        return self.revealed


class StandIn:
    """What a race reads of a Frontier, over a pre-drawn grid of results revealed on request."""

    def __init__(self, grid: pd.DataFrame, seeds: int) -> None:
        self.candidates = {name: [] for name in dict.fromkeys(grid["candidate"])}
        self.baseline, self.durations, self.seeds = "baseline", DURATIONS, list(range(seeds))
        self.cost, self.higher_is_better = "time", True
        self.grid = {(row.candidate, row.duration, row.seed): row._asdict() for row in grid.itertuples(index=False)}
        self.folder = _Folder({})

    def trial(self, candidate: str, duration: str, seed: int) -> Trial:
        return Trial(candidate, (), seed, f"{candidate}|{duration}|{seed}", "", duration=duration)

    def reveal(self, trial: Trial) -> None:
        self.folder.revealed[trial.key] = self.grid[(trial.order, trial.duration, trial.seed)]

    def results(self) -> pd.DataFrame:
        return pd.DataFrame(list(self.folder.revealed.values()),
                            columns=["candidate", "duration", "seed", "time", "metric"])


def grid(seeds: int, noise: float, rng: np.random.Generator, speeds: Optional[dict] = None) -> pd.DataFrame:
    """Every run's result, drawn in advance: candidates ``speeds`` (default :data:`SPEEDS`, the baseline first)."""
    rows = []
    for seed in range(seeds):
        shared = rng.normal(0, 0.01)
        for name, speed in (speeds or SPEEDS).items():
            for i, duration in enumerate(DURATIONS):
                cost = 2.0 ** i * (1 + rng.normal(0, 0.02))
                rows.append({"candidate": name, "duration": duration, "seed": seed, "time": cost,
                             "metric": 0.5 + 0.1 * math.log2(2.0 ** i * speed) + shared + rng.normal(0, noise)})
    return pd.DataFrame(rows)


def wrong(verdict: str, ratio: float, tolerance: float) -> bool:
    return ((verdict == "speed-up" and ratio >= 1) or (verdict == "slower" and ratio <= 1)
            or (verdict == "no gain" and not 1 / (1 + tolerance) <= ratio <= 1 + tolerance))


def experiment(seeds: int, noise: float, alpha: float, tolerance: float, rng: np.random.Generator) -> dict:
    """One race over a fresh grid: the runs it trained (the baseline's among them), and per
    candidate its verdict, the seeds it used and whether that verdict is wrong."""
    frontier = StandIn(grid(seeds, noise, rng), seeds)
    race = FrontierRace(frontier, alpha, 3, "4ep", tolerance)
    while (trial := race.next_trial()) is not None:
        frontier.reveal(trial)
    table = race.table().set_index("candidate").drop(index="baseline")
    verdicts = table["verdict"]
    trained = frontier.results()
    return {"runs": len(trained), "grid": len(frontier.grid),
            "baseline_runs": int((trained["candidate"] == "baseline").sum()),
            "wrong": sum(wrong(v, 1 / SPEEDS[name], tolerance) for name, v in verdicts.items()),
            "verdicts": len(verdicts), "decided": int(verdicts.isin(DECIDED).sum()),
            "stopped_undecided": int(((verdicts == "undecided") & (table["n"] < seeds)).sum()),
            "wrong_same": wrong(verdicts["same"], 1.0, tolerance),
            **{f"{name}/verdict": v for name, v in verdicts.items()},
            **{f"{name}/n": int(n) for name, n in table["n"].items()}}


def summary(found: pd.DataFrame) -> str:
    """The figures of one noise level's experiments."""
    decided, wrong_count = found["decided"].sum(), found["wrong"].sum()
    verdicts = found["verdicts"].sum()
    lines = [f"runs {found['runs'].sum() / found['grid'].sum():.1%} of the full grid (the baseline's "
             f"{found['baseline_runs'].sum() / found['runs'].sum():.0%} of them); wrong verdicts {wrong_count} of "
             f"{decided} decided ({wrong_count / max(1, decided):.2%}; experiments with any wrong verdict "
             f"{(found['wrong'] > 0).mean():.1%}; the null candidate 'same' wrong in {found['wrong_same'].mean():.1%}"
             f"); undecided {1 - decided / verdicts:.1%} of verdicts (stopped for futility before the last seed: "
             f" {found['stopped_undecided'].sum() / verdicts:.1%}; at the last seed: "
             f"{(verdicts - decided - found['stopped_undecided'].sum()) / verdicts:.1%})"]
    for name in SPEEDS:
        if f"{name}/verdict" in found:
            counts = found[f"{name}/verdict"].value_counts()
            lines.append(f"  {name} (true ratio {1 / SPEEDS[name]:.3g}): mean seeds {found[f'{name}/n'].mean():.1f}; "
                         + ", ".join(f"{v} {c}" for v, c in counts.items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.005, 0.01, 0.02])
    args = parser.parse_args()
    print(f"candidates (speed): {SPEEDS}; durations {DURATIONS}; up to {args.seeds} seeds, min_seeds 3, "
          f"alpha {args.alpha}, tolerance {args.tolerance}; {args.experiments} experiments per noise level")
    for noise in args.noise:
        rng = np.random.default_rng(0)
        start = time.perf_counter()
        found = pd.DataFrame([experiment(args.seeds, noise, args.alpha, args.tolerance, rng)
                              for _ in range(args.experiments)])
        print(f"noise sd {noise} ({time.perf_counter() - start:.0f} s): {summary(found)}", flush=True)


if __name__ == "__main__":
    main()
