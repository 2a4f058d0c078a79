"""Submitting a sweep's trials to an executor: never more at once than its workers can start, so
Stop cancels every run not yet training; a local pool broken by a killed worker is replaced.

A process pool moves what it is given into its workers' queue at once (loky keeps two calls per
worker there), and a call in that queue can no longer be cancelled: a sweep that submitted every
trial up front trained about three more runs per worker after Stop. The :class:`Scheduler`
submits one trial per free worker, so after Stop only the runs already training finish, and they
are reported like the others.

When a worker process dies (killed, out of memory), loky fails every run of the pool with
``TerminatedWorkerError`` and refuses new ones. The scheduler then starts a new pool of the same
size and submits those runs again (a run that finished writing its row is not trained twice); a
run that breaks the pool :data:`POOL_ATTEMPTS` times is reported as failed. A Dask cluster
reschedules the runs of a lost worker itself.
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import threading
from concurrent.futures import BrokenExecutor
from pathlib import Path
from typing import Any, Callable, Optional

from composer_lab.explore.executors import InlineExecutor, default_workers, local_pool
from composer_lab.explore.trials import Trial

__all__ = ["Scheduler", "SweepFailed", "workers_of", "POOL_ATTEMPTS"]

POOL_ATTEMPTS = 3
"""How often one trial may be lost to a broken pool before it counts as failed (Dask's default too)."""


class SweepFailed(RuntimeError):
    """A run of a sweep failed: which, why, how many runs finished and where they are saved.
    ``again`` says how to go on (:meth:`advice`: the command line says it in its own terms)."""

    def __init__(self, trial: Trial, error: BaseException, finished: int, total: int, folder: Path,
                 method: str = "run") -> None:
        self.trial, self.error, self.finished, self.total, self.folder = trial, error, finished, total, folder
        super().__init__(self.advice(f"call {method}() again to train the rest (finished runs are skipped)"))

    def advice(self, again: str) -> str:
        """The message, ending with ``again``."""
        why = (str(self.error).strip().splitlines() or [""])[0]  # loky's own goes on for lines
        return (f"the run of {self.trial.order!r} with seed {self.trial.seed} failed ({type(self.error).__name__}: "
                f"{why}); {self.finished} of {self.total} runs finished and are saved in {self.folder}: {again}")


def workers_of(executor: Any) -> int:
    """How many trials ``executor`` trains at once: its processes or threads (a Dask cluster's
    worker threads, read again at each call as workers join or leave)."""
    if isinstance(executor, InlineExecutor):
        return 1
    workers = getattr(executor, "_max_workers", None)  # concurrent.futures and loky pools
    if isinstance(workers, int):
        return workers
    info = getattr(executor, "scheduler_info", None)  # a Dask Client
    if callable(info):
        return max(1, sum(w.get("nthreads", 1) for w in info().get("workers", {}).values()))
    return default_workers()


def _replacement(executor: Any) -> Optional[Any]:
    """A new pool like the broken ``executor``, or None where the executor is not a local pool."""
    from joblib.externals.loky import ProcessPoolExecutor as LokyPool

    if isinstance(executor, LokyPool):
        return local_pool(executor._max_workers)
    if type(executor) is concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(executor._max_workers)
    return None


class Scheduler:
    """Trains trials on ``executor`` (None: a local pool it makes and shuts down), one per free
    worker. ``submit(executor, trial)`` starts one trial and returns its future; ``saved(trial)``
    is the trial's result row if it is in the sweep folder already, else None. Use it as a
    context manager: the pools it made are shut down at the end."""

    def __init__(self, executor: Any, submit: Callable[[Any, Trial], Any],
                 saved: Callable[[Trial], Optional[dict]]) -> None:
        self.executor = executor if executor is not None else local_pool()
        self._own = [self.executor] if executor is None else []
        self._submit, self._saved = submit, saved
        self._finished: "queue.Queue[Any]" = queue.Queue()
        self._in_flight: dict[Any, tuple[Trial, Any]] = {}
        self._retry: collections.deque[Trial] = collections.deque()
        self._lost: collections.Counter[str] = collections.Counter()

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *exc: Any) -> None:
        for pool in self._own:
            pool.shutdown(wait=True)

    @property
    def running(self) -> int:
        """Trials submitted and not finished."""
        return len(self._in_flight)

    def run(self, next_trial: Callable[[], Optional[Trial]], on_result: Callable[[Trial, dict], None],
            stop: threading.Event) -> Optional[tuple[Trial, BaseException]]:
        """Train what ``next_trial()`` gives (None: nothing to start now) until it gives nothing and
        nothing runs; ``on_result(trial, row)`` as each finishes, in this thread. After ``stop`` is
        set or a trial fails, nothing more starts: the runs not training are cancelled, those
        training finish and are reported. Returns the first failure, (trial, error), or None."""
        failure: Optional[tuple[Trial, BaseException]] = None
        while True:
            if stop.is_set() or failure is not None:
                self._cancel_waiting()
            else:
                self._fill(next_trial)
            if not self._in_flight:
                return failure
            try:
                future = self._finished.get(timeout=0.1)
            except queue.Empty:
                continue
            error = self._settle(future, on_result)
            if failure is None and error is not None:
                failure = error

    def _settle(self, future: Any, on_result: Callable[[Trial, dict], None]) -> Optional[tuple[Trial, BaseException]]:
        """A finished future: its row reported, its trial queued again when only its pool broke
        (a worker that died), or its failure returned."""
        trial, executor = self._in_flight.pop(future)
        if future.cancelled():
            return None
        error = future.exception()
        if error is None:
            on_result(trial, future.result())
        elif isinstance(error, BrokenExecutor) and self._saved(trial) is not None:
            on_result(trial, self._saved(trial))  # it finished before its pool broke
        elif isinstance(error, BrokenExecutor) and self._recover(trial, executor):
            self._retry.append(trial)
        else:
            return trial, error
        return None

    def _fill(self, next_trial: Callable[[], Optional[Trial]]) -> None:
        """Submit trials (those to try again first) until every worker has one."""
        while len(self._in_flight) < workers_of(self.executor):
            trial = self._retry.popleft() if self._retry else next_trial()
            if trial is None:
                return
            self._start(trial)

    def _start(self, trial: Trial) -> None:
        try:
            future = self._submit(self.executor, trial)
        except BrokenExecutor:  # the pool broke since the last run ended: replace it, once
            if not self._recover(trial, self.executor):
                raise
            future = self._submit(self.executor, trial)
        self._in_flight[future] = (trial, self.executor)
        future.add_done_callback(self._finished.put)

    def _recover(self, trial: Trial, broken: Any) -> bool:
        """After ``trial`` was lost with the pool ``broken``: make sure a working pool is in place;
        False if there is none to be had or the trial has broken pools too often."""
        self._lost[trial.key] += 1
        if self._lost[trial.key] >= POOL_ATTEMPTS:
            return False
        if broken is not self.executor:
            return True  # replaced already, for another run of the same pool
        replacement = _replacement(broken)
        if replacement is None:
            return False
        if broken in self._own:
            self._own.remove(broken)
            broken.shutdown(wait=False)
        self.executor = replacement
        self._own.append(replacement)
        return True

    def _cancel_waiting(self) -> None:
        """Cancel the submitted runs not yet training (a pool's future refuses once it runs; a Dask
        future is left alone: cancelling it would drop a result still being trained)."""
        for future in self._in_flight:
            if isinstance(future, concurrent.futures.Future) and not future.running():
                future.cancel()
