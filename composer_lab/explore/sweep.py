"""Sweeps: train every order of a list of algorithms with several seeds, and rank the orders.

One seed per order is noise: two seeds of one order differ by more than most order effects.
A :class:`Sweep` trains every (order, seed) pair through an executor (a local process pool by
default, a Dask ``Client`` on a cluster), saves each run under its folder as it ends, and ranks
the orders with confidence intervals and paired differences: a seed fixes the initial weights
and the data order, so the runs of two orders with one seed form a pair.
"""

from __future__ import annotations

import dataclasses
import hashlib
import queue
import re
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd

from composer_lab.core.algorithm import Algorithm
from composer_lab.explore.diff import diff_runs
from composer_lab.explore.executors import check_sendable, local_pool
from composer_lab.explore.orderings import algorithm_names, check_algorithms, order_label, orderings
from composer_lab.explore.ranking import plot_ranking, rank_orders
from composer_lab.explore.results import SweepFolder
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
            orders given as positions into ``algorithms``.
        executor: anything with ``submit(fn, *args) -> future`` and ``future.result()``; None for
            a local process pool with one worker per core (see :mod:`~composer_lab.explore.executors`).
        folder: the sweep folder (None: a new temporary one). Run again on the same folder, a
            sweep skips what finished; a folder of another experiment is refused.
        higher_is_better: rank larger values of ``metric`` first (False for a loss).
    """

    def __init__(self, make_trainer: Callable[[list, int], Any], algorithms: Sequence[Algorithm],
                 seeds: Iterable[int] = range(5), metric: str = DEFAULT_METRIC, orders: Any = None,
                 executor: Any = None, folder: Union[str, Path, None] = None, higher_is_better: bool = True) -> None:
        if not callable(make_trainer):
            raise TypeError(f"make_trainer must be a function (algorithms, seed) -> Trainer, got "
                            f"{type(make_trainer).__name__} {make_trainer!r}")
        self.make_trainer = make_trainer
        self.algorithms = check_algorithms(algorithms)
        self.seeds = _check_seeds(seeds)
        self.metric = metric
        self.names = algorithm_names(self.algorithms)
        self.orders = _orders(orders, self.algorithms, self.names)
        self.executor = executor
        self.higher_is_better = higher_is_better
        check_sendable(executor, make_trainer=make_trainer, algorithms=self.algorithms)
        self.folder = SweepFolder(Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="sweep-")))
        self.folder.claim(_experiment(make_trainer, self.algorithms))

    # -- the trials ---------------------------------------------------------------------------
    def trials(self) -> list[Trial]:
        """Every (order, seed) pair, orders first."""
        return [Trial(label, positions, seed, _key(label, seed), "")
                for label, positions in self.orders for seed in self.seeds]

    def pending(self) -> list[Trial]:
        """The trials whose result row is not in the folder yet."""
        done = self.folder.rows()
        return [trial for trial in self.trials() if trial.key not in done]

    def run(self, on_result: Optional[Callable[[dict], None]] = None,
            stop: Optional[threading.Event] = None) -> pd.DataFrame:
        """Train the pending trials and return :attr:`results`.

        ``on_result(row)`` is called in this thread as each run finishes; setting ``stop``
        cancels the runs that have not started and returns what finished. A failed run stops
        the sweep (the runs still queued are cancelled); what finished stays saved, and
        ``run()`` again trains only the rest."""
        pending = self.pending()
        executor = self.executor if self.executor is not None else local_pool()
        try:
            self._collect(executor, pending, on_result or (lambda row: None), stop or threading.Event())
        finally:
            if self.executor is None:
                executor.shutdown(wait=True)
        results = self.results
        results.to_parquet(self.folder.path / "results.parquet", index=False)
        return results

    def _collect(self, executor: Any, pending: list[Trial], on_result: Callable, stop: threading.Event) -> None:
        finished: "queue.Queue[Any]" = queue.Queue()
        futures = {}
        for trial in pending:
            algorithms = [self.algorithms[i] for i in trial.positions]
            trial = dataclasses.replace(trial, attempt=uuid.uuid4().hex)
            future = executor.submit(run_trial, self.make_trainer, algorithms, trial, str(self.folder.path),
                                     self.metric)
            futures[future] = trial
            future.add_done_callback(finished.put)
        left = len(futures)
        while left:
            if stop.is_set():
                _cancel(futures)
                return
            try:
                future = finished.get(timeout=0.1)
            except queue.Empty:
                continue
            left -= 1
            if future.cancelled():
                continue
            error = future.exception()
            if error is not None:
                _cancel(futures)
                if isinstance(error, (ValueError, TypeError)):
                    raise error  # bad input (the factory, the metric): as the worker raised it
                raise self._failure(futures[future], error) from error
            on_result(future.result())

    def _failure(self, trial: Trial, error: BaseException) -> RuntimeError:
        """A failed run (a crash, a lost worker), with what finished and what to do."""
        done = len(self.folder.rows())
        return RuntimeError(f"the run of {trial.order!r} with seed {trial.seed} failed ({type(error).__name__}: "
                            f"{error}); {done} of {len(self.trials())} runs finished and are saved in "
                            f"{self.folder.path}: call run() again to train the rest (finished runs are skipped)")

    # -- what came out ------------------------------------------------------------------------
    @property
    def results(self) -> pd.DataFrame:
        """One row per finished trial: order, seed, each final metric, samples, wall time (s),
        run folder."""
        rows = self.folder.rows()
        found = [rows[trial.key] for trial in self.trials() if trial.key in rows]
        frame = pd.DataFrame(found)
        if frame.empty:
            return pd.DataFrame(columns=["order", "seed", self.metric, "samples", "wall_time", "run_folder"])
        frame["run_folder"] = [str(self.folder.path / path) for path in frame["run_folder"]]
        frame = frame.drop(columns="positions")
        ends = ["samples", "wall_time", "run_folder"]
        return frame[[c for c in frame.columns if c not in ends] + ends]

    def ranking(self, delta: Optional[float] = None, alpha: float = 0.05,
                bounds: Optional[Sequence[float]] = None) -> pd.DataFrame:
        """The orders ranked best first (ties share a rank): n, mean, standard deviation and 95%
        interval of the metric; the paired difference from the best order (same seeds) with its
        interval, the paired t-test's p-value raw and Holm-adjusted over the orders compared with
        the best, ``degenerate`` where that test is undefined, and a verdict (worse; with
        ``delta``, equivalent within +-delta by TOST; else undecided). Intervals of an accuracy,
        or of a metric with ``bounds=(low, high)``, are cut at its range (``clipped``).
        ``ranking.attrs['friedman']`` is Friedman's test that some order differs, seeds as
        blocks; ``ranking.attrs['summary']`` one line that states the answer. See
        :func:`~composer_lab.explore.ranking.rank_orders`."""
        return rank_orders(self._finished(), self.metric, self.higher_is_better, delta, alpha, bounds,
                           [label for label, _ in self.orders])

    def plot(self, delta: Optional[float] = None, alpha: float = 0.05,
             bounds: Optional[Sequence[float]] = None) -> LabFigure:
        """The ranking drawn (:func:`~composer_lab.explore.ranking.plot_ranking`): means with their
        95% intervals, paired differences from the best with theirs and each order's verdict;
        degenerate comparisons as labelled marks, best order on top."""
        return plot_ranking(self.ranking(delta, alpha, bounds), self.metric)

    def seeds_needed(self, delta: float, alpha: float = 0.05, power: float = 0.8) -> int:
        """Seeds per order for the paired t-test to tell a difference of ``delta`` from the best
        order with probability ``power``, given the spread of the paired differences so far: the
        most that any order's comparison with the best needs, at level ``alpha`` divided by the
        number of comparisons (the first step of Holm's adjustment). See
        :func:`~composer_lab.explore.stats.seeds_needed`."""
        results = self._finished()
        values = results.pivot(index="seed", columns="order", values=self.metric)
        best = self.ranking()["order"].iloc[0]
        others = [order for order in values.columns if order != best]
        if not others:
            raise ValueError(f"only one order ({best!r}) finished: seeds_needed compares orders; run the sweep "
                             "with two or more orders first")
        level = stats.check_alpha(alpha) / len(others)
        return max(stats.seeds_needed((values[order] - values[best]).to_numpy(), delta, level, power)
                   for order in others)

    def _finished(self) -> pd.DataFrame:
        """:attr:`results`, or a ValueError when no run has finished."""
        results = self.results
        if self.metric not in results.columns or results.empty:
            raise ValueError(f"no finished runs in {self.folder.path} to rank yet; call run() first")
        return results

    def run_of(self, order: Union[str, Sequence[int]], seed: Optional[int] = None) -> Run:
        """The saved run of ``order`` (its label or positions) with ``seed`` (default: the first
        seed it finished with)."""
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

    def _label(self, order: Union[str, Sequence[int]]) -> str:
        labels = [label for label, _ in self.orders]
        label = order if isinstance(order, str) else order_label([self.names[i] for i in order])
        if label not in labels:
            raise ValueError(f"{label!r} is not one of this sweep's orders; they are {labels}")
        return label


def _check_seeds(seeds: Any) -> list[int]:
    if isinstance(seeds, (int, str)) or not isinstance(seeds, Iterable):
        raise TypeError(f"seeds must be a list of seeds, e.g. range(5), got {type(seeds).__name__} {seeds!r}")
    seeds = list(seeds)
    if not seeds:
        raise ValueError("no seeds: a sweep trains every order once per seed; give at least one, e.g. seeds=range(5) "
                         "(5 or more to tell order effects from seed noise)")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0]
    if bad or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct non-negative ints, got {seeds!r}; e.g. seeds=range(5)")
    return [int(s) for s in seeds]


def _orders(orders: Any, algorithms: list[Algorithm], names: list[str]) -> list[tuple[str, tuple[int, ...]]]:
    """(label, positions) of each order to train."""
    if orders is None:
        orders = orderings(algorithms)
    if isinstance(orders, pd.DataFrame):
        orders = list(orders["positions"])
    result = []
    for order in orders:
        positions = tuple(order) if isinstance(order, (list, tuple)) else None
        if positions is None or sorted(positions) != list(range(len(algorithms))):
            raise ValueError(f"each order lists the positions of all {len(algorithms)} algorithms once, e.g. "
                             f"{tuple(range(len(algorithms)))[::-1]}; got {order!r}")
        result.append((order_label([names[i] for i in positions]), positions))
    if not result:
        raise ValueError("orders is empty; give at least one order, or None for every distinct order")
    return result


def _experiment(make_trainer: Callable, algorithms: list[Algorithm]) -> dict[str, Any]:
    """What makes two sweeps one experiment: the algorithms and the factory (name and code)."""
    return {"algorithms": [repr(a) for a in algorithms],
            "factory": getattr(make_trainer, "__qualname__", type(make_trainer).__qualname__),
            "factory_code": _code_digest(make_trainer)}


def _code_digest(fn: Callable) -> str:
    """A digest of a function's code and constants (or an object's repr, addresses left out)."""
    code = getattr(fn, "__code__", None)
    text = _code_text(code) if code is not None else re.sub(r" at 0x[0-9a-f]+", "", repr(fn))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _code_text(code: Any) -> str:
    consts = [_code_text(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{consts}|{code.co_names}"


def _key(label: str, seed: int) -> str:
    """A file name for a trial: 'CutOut_LabelSmoothing-2__seed3'."""
    return re.sub(r"[^A-Za-z0-9_-]", "", label.replace(" > ", "_").replace("#", "-")) + f"__seed{seed}"


def _cancel(futures: dict) -> None:
    for future in futures:
        if not future.done():
            future.cancel()
