"""Is it a speed-up? Candidates x durations x seeds, against the baseline's own time-quality frontier.

A :class:`Frontier` trains every candidate (a named composition of algorithms, the baseline
among them) for every duration with every seed, on the sweep's machinery: the same trials
(:func:`~composer_lab.explore.trials.run_trial`), folder, identity and resume rules
(:mod:`~composer_lab.explore.results`, :mod:`~composer_lab.explore.identity`) and scheduler (a
local process pool, any executor, a Dask ``Client``). Each run records its costs
(:mod:`~composer_lab.explore.cost`); :meth:`Frontier.speedups` says, per candidate, what it costs
to reach the baseline's quality at a reference duration, the speed-up with its interval and a
verdict (:mod:`~composer_lab.explore.speedup`); :meth:`Frontier.race` stops training the
candidates it has decided (:mod:`~composer_lab.explore.frontier_race`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import pandas as pd

from composer_lab.core.time import Time
from composer_lab.explore.candidates import BASELINE, check_candidates
from composer_lab.explore.cost import TIMING
from composer_lab.explore.executors import check_executor, check_sendable
from composer_lab.explore.identity import experiment_identity
from composer_lab.explore.orderings import algorithm_names
from composer_lab.explore.results import SweepFolder
from composer_lab.explore.scheduler import Scheduler, SweepFailed
from composer_lab.explore.speedup import COSTS, SPEEDUP_COLUMNS, answer, curves, pareto, speedup_table
from composer_lab.explore.sweep import DEFAULT_METRIC
from composer_lab.explore.sweep_orders import check_seeds
from composer_lab.explore.trials import Trial, run_trial
from composer_lab.figures import LabFigure

__all__ = ["Frontier", "RESULT_COLUMNS"]

RESULT_COLUMNS = ["candidate", "duration", "seed", "metric", "time", "flops", "samples", "batches", "flops_counted",
                  "run_folder"]


class Frontier:
    """Every candidate trained for every duration with every seed, and the verdict: is it a speed-up?

    Args:
        make_trainer: ``make_trainer(algorithms, seed, duration) -> Trainer``; ``duration`` is one
            of ``durations`` ('4ep'): train for it (``max_duration=duration``) and scale the
            schedules to it, as a baseline trained for that long would be. Sent to worker processes
            like a sweep's factory (cloudpickle).
        candidates: ``{name: [algorithms]}``, the baseline among them (``[]``), or
            :func:`~composer_lab.explore.candidates.compositions` / ``ablations``.
        durations: two or more growing durations of one unit, e.g. ``['2ep', '4ep', '8ep']``.
        seeds: the seeds, e.g. ``range(3)``.
        folder, executor, resume: as for :class:`~composer_lab.explore.sweep.Sweep` (one experiment
            per folder, finished runs skipped, ``resume=False`` starts over).
        metric: the final metric that measures quality.
        cost: the cost axis: 'time' (the training loop's seconds), 'flops' or 'samples'.
        baseline: the baseline candidate's name (default: 'baseline', or the only candidate
            without algorithms).
        higher_is_better: False for a loss.
    """

    def __init__(self, make_trainer: Callable[[list, int, str], Any], candidates: dict, durations: Sequence[str],
                 seeds: Iterable[int] = range(3), folder: Union[str, Path, None] = None,
                 metric: str = DEFAULT_METRIC, cost: str = "time", baseline: Optional[str] = None,
                 executor: Any = None, higher_is_better: bool = True, resume: bool = True) -> None:
        if not callable(make_trainer):
            raise TypeError(f"make_trainer must be a function (algorithms, seed, duration) -> Trainer, got "
                            f"{type(make_trainer).__name__} {make_trainer!r}")
        self.make_trainer, self.metric, self.higher_is_better = make_trainer, metric, higher_is_better
        self.candidates = check_candidates(candidates)
        self.baseline = _baseline(self.candidates, baseline)
        self.durations = _check_durations(durations)
        self.seeds = check_seeds(seeds)
        self.cost = _check_cost(cost)
        self.executor = executor
        self.algorithms = [a for algorithms in self.candidates.values() for a in algorithms]
        self._positions = _positions(self.candidates)
        check_executor(executor)
        check_sendable(executor, make_trainer=make_trainer, algorithms=self.algorithms)
        self.folder = SweepFolder(Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="frontier-")))
        names = [f"{name}/{label}" for name, algorithms in self.candidates.items()
                 for label in algorithm_names(algorithms)]
        self.folder.claim(experiment_identity(make_trainer, self.algorithms, names, metric), resume)

    def describe(self) -> str:
        """What the frontier compares, and how it takes time."""
        lines = [f"{len(self.candidates)} candidates x {len(self.durations)} durations ({', '.join(self.durations)}) "
                 f"x {len(self.seeds)} seeds, quality {self.metric}, cost {self.cost} ({COSTS[self.cost]}); "
                 f"baseline {self.baseline!r}:"]
        lines += [f"  {name}: {', '.join(algorithm_names(held)) or 'no algorithms'}"
                  for name, held in self.candidates.items()]
        return "\n".join(lines + [f"time: {TIMING}"])

    # -- the trials ---------------------------------------------------------------------------
    def trials(self) -> list[Trial]:
        """Every (candidate, duration, seed), seeds first, then candidates, then durations."""
        return [self.trial(name, duration, seed) for seed in self.seeds for name in self.candidates
                for duration in self.durations]

    def trial(self, candidate: str, duration: str, seed: int) -> Trial:
        return Trial(candidate, self._positions[candidate], seed, _key(candidate, duration, seed), "",
                     duration=duration)

    def pending(self) -> list[Trial]:
        """The trials whose result row is not in the folder yet."""
        done = self.folder.rows()
        return [trial for trial in self.trials() if trial.key not in done]

    def run(self, on_result: Optional[Callable[[dict], None]] = None,
            stop: Optional[threading.Event] = None) -> pd.DataFrame:
        """Train the pending runs (``on_result``, ``stop`` as for :meth:`Sweep.run`) and return :meth:`results`."""
        pending = iter(self.pending())
        self.collect(lambda: next(pending, None), on_result, stop, "run")
        return self.results()

    def race(self, alpha: float = 0.05, min_seeds: int = 3, reference: Optional[str] = None,
             tolerance: float = 0.05, on_result: Optional[Callable[[dict], None]] = None,
             stop: Optional[threading.Event] = None) -> pd.DataFrame:
        """Train seed by seed and stop training each candidate once its verdict is reached, or once
        the seeds could hardly reach it (``undecided``; :mod:`~composer_lab.explore.frontier_race`);
        returns :meth:`speedups` of what ran, the runs the race trained and the full grid's count
        in ``attrs['runs']``, ``attrs['grid']`` (no rows when ``stop`` ended it before its first look)."""
        from composer_lab.explore.frontier_race import FrontierRace

        race = FrontierRace(self, alpha, min_seeds, self._reference(reference), tolerance)

        def record(row: dict) -> None:
            race.record(row)
            if on_result is not None:
                on_result(row)

        self.collect(race.next_trial, record, stop, "race")
        try:
            table = race.table()
        except ValueError:
            if stop is None or not stop.is_set():
                raise
            table = pd.DataFrame(columns=SPEEDUP_COLUMNS)  # stopped before the first look: no verdict yet
        table.attrs.update(runs=race.runs(), grid=len(self.trials()), trained=race.trained)
        return table

    def collect(self, next_trial: Callable[[], Optional[Trial]], on_result: Optional[Callable[[dict], None]],
                stop: Optional[threading.Event], method: str) -> None:
        """Train what ``next_trial()`` gives through the sweep's :class:`Scheduler`; raise the first failure."""
        def submit(executor: Any, trial: Trial) -> Any:
            trial = dataclasses.replace(trial, attempt=uuid.uuid4().hex)
            return executor.submit(run_trial, self.make_trainer, [self.algorithms[i] for i in trial.positions],
                                   trial, str(self.folder.path), self.metric)

        def finished(trial: Trial, row: dict) -> None:
            self._check_durations_trained(row)
            if on_result is not None:
                on_result(row)

        with Scheduler(self.executor, submit, lambda trial: self.folder.rows().get(trial.key)) as scheduler:
            failure = scheduler.run(next_trial, finished, stop or threading.Event())
        if failure is not None:
            trial, error = failure
            if isinstance(error, (ValueError, TypeError)):
                raise error
            raise SweepFailed(trial, error, len(self.folder.rows()), len(self.trials()), self.folder.path,
                              method) from error

    def _check_durations_trained(self, row: dict) -> None:
        """A ValueError when two durations of one candidate and seed trained the same number of
        batches: the factory ignores the duration it is given."""
        rows = self.folder.rows()
        for duration in self.durations:
            other = rows.get(_key(row["order"], duration, row["seed"]))
            if other is not None and other["duration"] != row["duration"] and other["batches"] == row["batches"]:
                name = getattr(self.make_trainer, "__qualname__", type(self.make_trainer).__name__)
                raise ValueError(f"make_trainer ({name}) ignores the duration: the runs of {row['order']!r} with seed "
                                 f"{row['seed']} for {other['duration']} and {row['duration']} both trained "
                                 f"{row['batches']} batches. Train for the duration given: def make_trainer("
                                 f"algorithms, seed, duration): return Trainer(..., max_duration=duration, ...), its "
                                 f"schedules scaled to it")

    # -- what came out ------------------------------------------------------------------------
    def results(self) -> pd.DataFrame:
        """One row per finished run (:data:`RESULT_COLUMNS`): candidate, duration, seed, metric (the
        value of :attr:`metric`), time (s), flops, samples, batches, flops_counted, run folder."""
        rows = self.folder.rows()
        found = []
        for trial in self.trials():
            row = rows.get(trial.key)
            if row is not None:
                if self.metric not in row:
                    raise ValueError(f"the runs do not record the metric {self.metric!r}; they record "
                                     f"{sorted(k for k in row if '/' in k)}: pass one of those as metric=...")
                found.append({**row, "candidate": trial.order, "duration": trial.duration, "metric": row[self.metric],
                              "run_folder": str(self.folder.path / row["run_folder"])})
        return pd.DataFrame(found, columns=RESULT_COLUMNS).astype({"seed": int}) if found else \
            pd.DataFrame(columns=RESULT_COLUMNS)

    def curves(self) -> pd.DataFrame:
        """Per (candidate, duration): seeds, the metric's mean and interval, the mean cost, and
        whether the point is on the Pareto set."""
        table = curves(self._finished(), self.cost)
        table["pareto"] = pareto(table, self.higher_is_better)
        return table

    def speedups(self, reference: Optional[str] = None, alpha: float = 0.05, tolerance: float = 0.05) -> pd.DataFrame:
        """One row per candidate: the cost to reach the baseline's quality at ``reference`` (a
        baseline duration; default the second longest, so that a candidate as good as the baseline
        crosses it within the durations trained), the cost ratio and speed-up with a
        ``1-alpha`` bootstrap interval over seeds, and the verdict (speed-up, no gain, slower, or
        undecided with about how many more seeds would decide); see
        :mod:`~composer_lab.explore.speedup`. ``attrs['answer']`` is the sentence."""
        table = speedup_table(self._finished(), self.baseline, self._reference(reference), self.durations, self.cost,
                              self.higher_is_better, alpha, tolerance)
        table.attrs["answer"] = answer(table, self.metric, self.higher_is_better)
        return table

    @property
    def answer(self) -> str:
        """The sentence: which candidates reach the baseline's quality at its second longest
        duration sooner, at what share of its cost, with the interval; the rest's verdicts."""
        return self.speedups().attrs["answer"]

    def plot(self, reference: Optional[str] = None) -> LabFigure:
        """Quality against cost (:func:`~composer_lab.explore.frontier_plot.plot_frontier`)."""
        from composer_lab.explore.frontier_plot import plot_frontier

        return plot_frontier(self, reference=reference)

    def to_mlflow(self, tracking_uri: Optional[str] = None, experiment_name: str = "composer_lab",
                  reference: Optional[str] = None) -> str:
        """Log the finished runs to MLflow (the ``mlflow`` extra) as a sweep's are: the frontier a
        parent run (the :meth:`speedups` table, the :attr:`answer`), each (candidate, duration, seed)
        a child with its metric and costs; exported again, only the runs new since are added
        (:func:`~composer_lab.tracking.frontier_to_mlflow`). Returns the parent's id."""
        from composer_lab.tracking.mlflow_export import frontier_to_mlflow

        about = {"metric": self.metric, "cost": self.cost, "baseline": self.baseline,
                 "candidates": ", ".join(self.candidates), "durations": ", ".join(self.durations),
                 "seeds": self.seeds, "higher_is_better": self.higher_is_better}
        table = self.speedups(reference)
        return frontier_to_mlflow(self.folder.path, self._finished(), table, about, tracking_uri, experiment_name)

    def _reference(self, reference: Optional[str]) -> str:
        if reference is None:
            return self.durations[-2]
        if reference not in self.durations:
            raise ValueError(f"reference {reference!r} is not one of the frontier's durations; give one of "
                             f"{self.durations}, the baseline duration whose quality the candidates must reach")
        return reference

    def _finished(self) -> pd.DataFrame:
        """The results, checked: runs there, and the cost axis recorded."""
        results = self.results()
        if results.empty:
            raise ValueError(f"no finished runs in {self.folder.path} yet; call run() or race() first")
        if results[self.cost].isna().all():
            raise ValueError(f"the runs did not record the cost {self.cost!r} (no FLOP was counted: the model's "
                             f"operations have no FLOP formula in torch's counter); choose another axis, "
                             f"cost='time' or cost='samples'")
        return results


def _check_durations(durations: Any) -> list[str]:
    """Two or more growing durations of one unit, as time strings."""
    if isinstance(durations, str) or not isinstance(durations, Sequence):
        raise TypeError(f"durations must be a list of durations, e.g. ['2ep', '4ep', '8ep'], got "
                        f"{type(durations).__name__} {durations!r}")
    times = [Time.from_timestring(d) if isinstance(d, str) else d for d in durations]
    if len(times) < 2:
        raise ValueError(f"a frontier needs at least two baseline durations to draw the baseline's curve, got "
                         f"{list(durations)!r}; e.g. durations=['2ep', '4ep', '8ep']")
    if len({t.unit for t in times}) > 1 or any(b.value <= a.value for a, b in zip(times, times[1:])):
        raise ValueError(f"durations must grow, in one unit, e.g. ['2ep', '4ep', '8ep'], got {list(durations)!r}: "
                         f"sort them and write them in one unit")
    return [t.to_timestring() for t in times]


def _check_cost(cost: Any) -> str:
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {list(COSTS)}, got {cost!r}: 'time' (the training loop's seconds), "
                         f"'flops' (forward and backward FLOPs counted by torch) or 'samples' (examples trained on)")
    return cost


def _baseline(candidates: dict, baseline: Optional[str]) -> str:
    if baseline is None:
        empty = [name for name, algorithms in candidates.items() if not algorithms]
        baseline = BASELINE if BASELINE in candidates else empty[0] if len(empty) == 1 else None
    if baseline not in candidates:
        raise ValueError(f"the candidates need a baseline to compare against: name one with baseline=..., or add "
                         f"'baseline': [] (candidates: {list(candidates)})")
    return baseline


def _positions(candidates: dict) -> dict[str, tuple[int, ...]]:
    """Each candidate's algorithms as positions in the frontier's list of every algorithm."""
    positions, start = {}, 0
    for name, algorithms in candidates.items():
        positions[name] = tuple(range(start, start + len(algorithms)))
        start += len(algorithms)
    return positions


def _key(candidate: str, duration: str, seed: int) -> str:
    """A file name for a run: the candidate's name made safe and a digest of it, duration, seed."""
    safe = re.sub(r"[^A-Za-z0-9]+", "-", candidate).strip("-")[:40]
    digest = hashlib.sha256(candidate.encode()).hexdigest()[:6]
    return f"{safe}-{digest}__{duration}__seed{seed}"
