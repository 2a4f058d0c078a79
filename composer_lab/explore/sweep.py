"""Sweeps: train every order of a list of algorithms with several seeds, and rank the orders.

One seed per order is noise: two seeds of one order differ by more than most order effects.
A :class:`Sweep` trains every (order, seed) pair through an executor (a local process pool by
default, a Dask ``Client`` on a cluster), saves each run under its folder as it ends, and ranks
the orders with confidence intervals and paired differences: a seed fixes the initial weights
and the data order, so the runs of two orders with one seed form a pair.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import threading
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import pandas as pd

from composer_lab.core.algorithm import Algorithm
from composer_lab.explore.data_identity import data_fingerprint
from composer_lab.explore.diff import diff_runs
from composer_lab.explore.executors import check_executor, check_sendable
from composer_lab.explore.identity import experiment_identity
from composer_lab.explore.learning import not_learned, withhold
from composer_lab.explore.orderings import (algorithm_names, check_algorithms, question)
from composer_lab.explore.precedence import precedence as pair_effects
from composer_lab.explore.race import Decision, Race, race_values
from composer_lab.explore.ranking import plot_ranking, rank_orders
from composer_lab.explore.results import SweepFolder
from composer_lab.explore.scheduler import Scheduler, SweepFailed
from composer_lab.explore.sweep_orders import check_seeds, sweep_orders, trial_key
from composer_lab.explore import stats
from composer_lab.explore.trials import Trial, run_trial
from composer_lab.figures import LabFigure
from composer_lab.trainer.run import Run

__all__ = ["Sweep", "DEFAULT_METRIC"]

DEFAULT_METRIC = "metrics/eval/Accuracy"


class Sweep:
    """Every order of ``algorithms`` trained with every seed of ``seeds``.

    Args:
        make_trainer: ``make_trainer(algorithms, seed) -> Trainer``; the algorithms arrive as
            fresh copies, in the order to try. It runs in a worker process, so it is pickled
            (cloudpickle: a function defined in a notebook cell is fine).
        algorithms: the algorithms to order, each instance once.
        seeds: the seeds, e.g. ``range(5)``.
        metric: the final metric ranked (a name the runs log, e.g. 'metrics/eval/Accuracy').
        orders: the orders to train: None for every distinct order under the default passes
            (:func:`orderings`; for a factory that changes the passes, pass
            ``orderings(algorithms, passes=...)``), an ``orderings(...)`` table, or a list of
            orders given as positions into ``algorithms``, or an int N: N permutations drawn at
            random (None does so with :data:`SAMPLED_ORDERS` past 8 algorithms, with a warning;
            :meth:`precedence` then says which pairs' order matters). Each is named by what runs
            (:func:`~composer_lab.explore.orderings.run_label`), its list order kept beside it;
            algorithms that run in one order only are refused (nothing to compare), and so are
            two orders that run alike.
        executor: anything with ``submit(fn, *args) -> future`` and ``future.result()``; None for
            a local process pool with one worker per core (see :mod:`~composer_lab.explore.executors`).
        folder: the sweep folder (None: a new temporary one). Run again on the same folder, a
            sweep skips what finished. The folder belongs to one experiment
            (:mod:`~composer_lab.explore.identity`: the algorithms' classes, code and
            hyperparameters, the factory's code and the values it reads, the metric, the
            version); a folder of another experiment is refused with what differs.
        resume: False to start over: deletes the folder's sweep.json, rows/, runs/ and
            results.parquet (whatever experiment they belong to; other files stay), then
            trains every run again.
        higher_is_better: rank larger values of ``metric`` first (False for a loss).
    """

    def __init__(self, make_trainer: Callable[[list, int], Any], algorithms: Sequence[Algorithm],
                 seeds: Iterable[int] = range(5), metric: str = DEFAULT_METRIC, orders: Any = None,
                 executor: Any = None, folder: Union[str, Path, None] = None, higher_is_better: bool = True,
                 resume: bool = True) -> None:
        if not callable(make_trainer):
            raise TypeError(f"make_trainer must be a function (algorithms, seed) -> Trainer, got "
                            f"{type(make_trainer).__name__} {make_trainer!r}")
        self.make_trainer = make_trainer
        self.algorithms = check_algorithms(algorithms)
        self.seeds = check_seeds(seeds)
        self.metric = metric
        self.names = algorithm_names(self.algorithms)
        self.orders, self.out_of_question, self.passes = sweep_orders(orders, self.algorithms, self.names)
        self.executor = executor
        self.higher_is_better = higher_is_better
        check_executor(executor)
        check_sendable(executor, make_trainer=make_trainer, algorithms=self.algorithms)
        self.folder = SweepFolder(Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="sweep-")))
        self.folder.claim(experiment_identity(make_trainer, self.algorithms, self.names, metric), resume)

    @property
    def labels(self) -> list[str]:
        """The orders' labels: what runs at each event where the order is free."""
        return [order.label for order in self.orders]

    def describe(self) -> str:
        """What the sweep compares: its orders (what runs, and the list order that runs so),
        its seeds and metric, and the algorithms out of the question with why."""
        lines = [f"{len(self.orders)} orders of {', '.join(self.names)} x {len(self.seeds)} seeds, ranked by "
                 f"{self.metric}:"]
        lines += [f"  {order.label}  (list {order.list_order})" for order in self.orders]
        lines += [f"out of the question: {name} ({reason})" for name, reason in self.out_of_question.values]
        return "\n".join(lines)

    # -- the trials ---------------------------------------------------------------------------
    def trials(self) -> list[Trial]:
        """Every (order, seed) pair, orders first."""
        return [Trial(order.label, order.positions, seed, trial_key(order.positions, seed), "", tuple(self.passes))
                for order in self.orders for seed in self.seeds]

    def pending(self) -> list[Trial]:
        """The trials whose result row is not in the folder yet."""
        done = self.folder.rows()
        return [trial for trial in self.trials() if trial.key not in done]

    def run(self, on_result: Optional[Callable[[dict], None]] = None,
            stop: Optional[threading.Event] = None) -> pd.DataFrame:
        """Train the pending trials and return :attr:`results`.

        ``on_result(row)`` is called in this thread as each run finishes. No more runs are handed
        to the executor than its workers can start, so setting ``stop`` cancels every run not yet
        training; those training finish and are reported. A worker process that dies costs only
        its runs: a local pool is replaced and they train again
        (:mod:`~composer_lab.explore.scheduler`). A failed run stops the sweep the same way and is
        raised; what finished stays saved, and ``run()`` again trains only the rest."""
        pending = iter(self.pending())
        self._collect(lambda: next(pending, None), on_result, stop, "run")
        results = self.results
        results.to_parquet(self.folder.path / "results.parquet", index=False)
        return results

    def race(self, delta: float, alpha: float = 0.05, min_seeds: int = 3,
             on_result: Optional[Callable[[dict], None]] = None, stop: Optional[threading.Event] = None,
             floor: Optional[float] = None) -> Decision:
        """Race the orders over the seeds (:mod:`~composer_lab.explore.race`): every order still
        racing trains the next seed; after each seed, an order worse than the best (paired t-test)
        or equivalent to it within +-``delta`` (paired TOST), both Holm-adjusted across the orders
        and tested at a level that keeps the error over all looks at ``alpha``, stops training.
        Returns the :class:`~composer_lab.explore.race.Decision`: the decision table (order as
        run, list order, n, mean, difference from the best with its interval, adjusted p-values,
        verdict) and one sentence. Runs already in the folder count; race again to go on where it
        stopped. ``on_result`` and ``stop`` as in :meth:`run`. Orders that did not learn (at chance,
        or past ``floor``: :mod:`~composer_lab.explore.learning`) are named first, their verdicts
        withheld ('not learned')."""
        race = self.racer(delta, alpha, min_seeds)

        def record(row: dict) -> None:
            race.record(row)
            if on_result is not None:
                on_result(row)

        self._collect(race.next_trial, record, stop, "race")
        self.results.to_parquet(self.folder.path / "results.parquet", index=False)
        decision = race.decision()
        decision.table, decision.answer = withhold(decision.table, self._not_learned(floor), decision.answer)
        decision.table.insert(1, "list_order", decision.table["order"].map(
            {order.label: order.list_order for order in self.orders}))
        return decision

    def _not_learned(self, floor: Optional[float]) -> dict[str, str]:
        """The orders whose finished runs did not learn, with why (:func:`~.learning.not_learned`)."""
        return not_learned(self.results, self.metric, floor, self.higher_is_better)

    def racer(self, delta: float, alpha: float = 0.05, min_seeds: int = 3) -> Race:
        """A :class:`~composer_lab.explore.race.Race` over this sweep's orders and seeds, from the
        results already in its folder: what :meth:`race` drives, and where a race stands
        (``sweep.racer(delta).decision()``)."""
        out = set(self.out_of_question["algorithm"])
        asked = [name for name in self.names if name not in out] or self.names  # whose order is in question
        return Race(race_values(self.results, self.labels, self.seeds, self.metric),
                    {(trial.order, trial.seed): trial for trial in self.trials()}, self.metric, asked, delta,
                    alpha, min_seeds, self.higher_is_better)

    def _collect(self, next_trial: Callable[[], Optional[Trial]], on_result: Optional[Callable[[dict], None]],
                 stop: Optional[threading.Event], method: str) -> None:
        """Train what ``next_trial()`` gives through a :class:`Scheduler`; raise the first failure."""
        self._claim_data()
        def submit(executor: Any, trial: Trial) -> Any:
            trial = dataclasses.replace(trial, attempt=uuid.uuid4().hex)
            return executor.submit(run_trial, self.make_trainer, [self.algorithms[i] for i in trial.positions],
                                   trial, str(self.folder.path), self.metric)

        with Scheduler(self.executor, submit, lambda trial: self.folder.rows().get(trial.key)) as scheduler:
            failure = scheduler.run(next_trial, lambda trial, row: on_result and on_result(row),
                                    stop or threading.Event())
        if failure is not None:
            trial, error = failure
            if isinstance(error, (ValueError, TypeError)):
                raise error  # bad input (the factory, the metric): as the worker raised it
            raise self._failure(trial, error, method) from error

    def _claim_data(self) -> None:
        """The data the runs read, part of the folder's experiment; a warning where it cannot be."""
        data = data_fingerprint(self.make_trainer, self.algorithms, self.seeds[0])
        left_out = {name: why for name, why in data.items() if why.startswith("not part of the identity")}
        if left_out:
            warnings.warn(f"the data this sweep's runs read is not part of its identity "
                          f"({'; '.join(f'{name}: {why}' for name, why in left_out.items())}): finished runs in "
                          f"{self.folder.path} are reused even if the data changed; start the sweep over after "
                          f"changing the data", stacklevel=3)
        self.folder.claim_data({name: value for name, value in data.items() if name not in left_out})

    def _failure(self, trial: Trial, error: BaseException, method: str) -> SweepFailed:
        """A failed run (a crash, a worker lost too often), with what finished and what to do."""
        return SweepFailed(trial, error, len(self.folder.rows()), len(self.trials()), self.folder.path, method)

    # -- what came out ------------------------------------------------------------------------
    @property
    def results(self) -> pd.DataFrame:
        """One row per finished trial: order (what ran), list_order, seed, each final metric,
        samples, wall time (s), run folder."""
        rows = self.folder.rows()
        by_key = {trial_key(order.positions, seed): order for order in self.orders for seed in self.seeds}
        found = [{**rows[key], "order": order.label, "list_order": order.list_order}
                 for key, order in by_key.items() if key in rows]
        frame = pd.DataFrame(found)
        if frame.empty:
            return pd.DataFrame(columns=["order", "list_order", "seed", self.metric, "samples", "wall_time",
                                         "run_folder"])
        frame["run_folder"] = [str(self.folder.path / path) for path in frame["run_folder"]]
        frame = frame.drop(columns="positions")
        firsts, ends = ["order", "list_order", "seed"], ["samples", "wall_time", "run_folder"]
        return frame[firsts + [c for c in frame.columns if c not in firsts + ends] + ends]

    def ranking(self, delta: Optional[float] = None, alpha: float = 0.05,
                bounds: Optional[Sequence[float]] = None, floor: Optional[float] = None) -> pd.DataFrame:
        """The orders ranked best first (ties share a rank): n, mean, standard deviation and 95%
        interval of the metric; the paired difference from the best order (same seeds) with its
        interval, the paired t-test's p-value raw and Holm-adjusted over every pair of orders
        (the best is picked from these data), ``degenerate`` where that test is undefined, and a
        verdict (worse; with ``delta``, equivalent within +-delta by TOST; else undecided).
        Intervals of an accuracy,
        or of a metric with ``bounds=(low, high)``, are cut at its range (``ci_clipped``, ``diff_ci_clipped``).
        ``ranking.attrs['friedman']`` is Friedman's test that some order differs, seeds as
        blocks; ``ranking.attrs['summary']`` one line that states the answer. See
        :func:`~composer_lab.explore.ranking.rank_orders`. Orders that did not learn (at chance, or
        past ``floor``: :mod:`~composer_lab.explore.learning`) get the verdict 'not learned', named
        first in the summary."""
        ranking = rank_orders(self._finished(), self.metric, self.higher_is_better, delta, alpha, bounds, self.labels)
        ranking, summary = withhold(ranking, self._not_learned(floor), ranking.attrs["summary"])
        ranking.attrs["summary"] = summary
        return ranking

    def plot(self, delta: Optional[float] = None, alpha: float = 0.05,
             bounds: Optional[Sequence[float]] = None, floor: Optional[float] = None) -> LabFigure:
        """The ranking drawn (:func:`~composer_lab.explore.ranking.plot_ranking`): means with their
        95% intervals, paired differences from the best with theirs and each order's verdict;
        degenerate comparisons as labelled marks, best order on top."""
        return plot_ranking(self.ranking(delta, alpha, bounds, floor), self.metric)

    def seeds_needed(self, delta: float, alpha: float = 0.05, power: float = 0.8) -> int:
        """Seeds per order for the paired t-test to tell a difference of ``delta`` from the best
        order with probability ``power``, given the spread of the paired differences so far: the
        most that any order's comparison with the best needs, at level ``alpha`` divided by the
        number of pairs of orders (the first step of Holm's adjustment over every pair, the
        ranking's family). See :func:`~composer_lab.explore.stats.seeds_needed`."""
        results = self._finished()
        values = results.pivot(index="seed", columns="order", values=self.metric)
        best = self.ranking()["order"].iloc[0]
        others = [order for order in values.columns if order != best]
        if not others:
            raise ValueError(f"only one order ({best!r}) finished: seeds_needed compares orders; run the sweep "
                             "with two or more orders first")
        level = stats.check_alpha(alpha) / math.comb(len(others) + 1, 2)
        return max(stats.seeds_needed((values[order] - values[best]).to_numpy(), delta, level, power)
                   for order in others)

    def precedence(self, confidence: float = 0.95) -> pd.DataFrame:
        """Which pairs' relative order matters: the metric fitted on one indicator per pair
        ("first runs before second at the events they share") plus a seed effect, each pair's
        effect with its interval and Holm-adjusted p-value
        (:func:`~composer_lab.explore.precedence.precedence`). It reads every finished run at
        once, so it answers where the orders are sampled (past 8 algorithms) and each order has
        too few runs to rank; pairs the orders swept cannot tell apart are named, not estimated."""
        asked = question(self.algorithms)
        plans = {}
        for order in self.orders:
            if asked.label(order.positions) != order.label:
                raise ValueError(f"the order {order.label!r} was named under other passes than the engine's default "
                                 f"ones; precedence() reads the default passes' plans: build the sweep with orders "
                                 f"from orderings(algorithms) or positions")
            plans[order.label] = asked.plans(order.positions)
        return pair_effects(self._finished(), plans, self.metric, self.names, confidence)

    def _finished(self) -> pd.DataFrame:
        """:attr:`results`, or a ValueError when no run has finished."""
        results = self.results
        if self.metric not in results.columns or results.empty:
            raise ValueError(f"no finished runs in {self.folder.path} to rank yet; call run() first")
        return results

    def run_of(self, order: Union[str, Sequence[int]], seed: Optional[int] = None) -> Run:
        """The saved run of ``order`` (its label, its list order or its positions) with ``seed``
        (default: the first seed it finished with)."""
        label = self._label(order)
        rows = self.results[self.results["order"] == label]
        if seed is not None:
            rows = rows[rows["seed"] == seed]
        if rows.empty:
            raise ValueError(f"no finished run of {label!r}{'' if seed is None else f' with seed {seed}'} in "
                             f"{self.folder.path}; finished: {sorted(set(self.results['order']))}")
        return Run.load(rows["run_folder"].iloc[0])

    def diff(self, a: Union[str, Sequence[int]], b: Union[str, Sequence[int]],
             seed: Optional[int] = None) -> pd.DataFrame:
        """The trace diff (:func:`~composer_lab.explore.diff.diff_runs`) of orders ``a`` and ``b``
        trained with one seed (default: the first seed both finished with)."""
        if seed is None:
            results = self.results
            seeds = [set(results.loc[results["order"] == self._label(o), "seed"]) for o in (a, b)]
            common = sorted(seeds[0] & seeds[1])
            seed = common[0] if common else None
        return diff_runs(self.run_of(a, seed), self.run_of(b, seed))

    def to_mlflow(self, tracking_uri: Optional[str] = None, experiment_name: str = "composer_lab") -> str:
        """Log the finished runs to MLflow (the ``mlflow`` extra): the sweep as a parent run, each
        (order, seed) as a child with ``order``, ``list_order`` and ``seed`` as parameters and its
        order's :meth:`ranking` row (rank, verdict, ...) as tags. Exported again, only the runs new
        since are added (:func:`~composer_lab.tracking.sweep_to_mlflow`). Returns the parent's id."""
        from composer_lab.tracking.mlflow_export import sweep_to_mlflow

        about = {"metric": self.metric, "algorithms": ", ".join(self.names), "seeds": self.seeds,
                 "higher_is_better": self.higher_is_better}
        return sweep_to_mlflow(self.folder.path, self._finished(), self.ranking(), about, tracking_uri,
                               experiment_name)

    def _label(self, order: Union[str, Sequence[int]]) -> str:
        """The label of ``order``: a label, a list order or positions of one of this sweep's orders."""
        for known in self.orders:
            if (order in (known.label, known.list_order) if isinstance(order, str)
                    else tuple(order) == known.positions):
                return known.label
        raise ValueError(f"{order!r} is not one of this sweep's orders; they are {self.labels} (list orders "
                         f"{[known.list_order for known in self.orders]})")
