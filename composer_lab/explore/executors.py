"""Where the runs of a sweep train: any object with ``submit(fn, *args)`` returning a future
with ``result()`` (the ``concurrent.futures`` protocol, which a Dask ``distributed.Client``
speaks too).

:func:`local_pool` is the default: loky's process pool (it ships with joblib), which sends
functions with cloudpickle, so a factory defined in a notebook cell reaches the workers;
``concurrent.futures.ProcessPoolExecutor`` pickles functions by name and cannot send those.
:class:`InlineExecutor` trains in this process, one run at a time (for debugging a factory).
A trial sets process-wide state (the global random generators, torch's thread count), so
executors that would train several runs at once in one process are refused
(:func:`check_executor`); and a worker process trains one run at a time whatever its threads.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
from concurrent.futures import Executor, Future
from typing import Any, Callable, Optional

import cloudpickle

from composer_lab.core.checks import check_positive_int

__all__ = ["local_pool", "InlineExecutor", "check_sendable", "check_executor", "default_workers"]


def default_workers() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def local_pool(workers: Optional[int] = None) -> Executor:
    """A pool of ``workers`` processes (default: one per core), each with one thread per library."""
    from joblib.externals.loky import ProcessPoolExecutor

    workers = default_workers() if workers is None else workers
    check_positive_int("workers", workers, "is how many processes train at once, a positive int",
                       "e.g. workers=2 (default: one per core)")
    return ProcessPoolExecutor(max_workers=workers, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})


class InlineExecutor(Executor):
    """Runs each submitted call at once, in this process; its future is already done."""

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as err:  # the future carries it, as a pool's would (an interrupt stops the sweep)
            future.set_exception(err)
        return future


_IN_PROCESS = (InlineExecutor, concurrent.futures.ThreadPoolExecutor)
_FIX = ("use the default executor (executor=None: a local process pool), a Dask Client whose workers are processes "
        "(e.g. Client(LocalCluster(processes=True, threads_per_worker=1))), or InlineExecutor() to train here one run "
        "at a time")


def check_executor(executor: Any) -> None:
    """ValueError if ``executor`` would train several runs at once in this process (a thread
    pool of more than one thread, a Dask client whose workers are threads of this process): they
    would seed each other's runs, as a run sets the global random generators."""
    if isinstance(executor, concurrent.futures.ThreadPoolExecutor) and executor._max_workers > 1:
        raise ValueError(f"ThreadPoolExecutor(max_workers={executor._max_workers}) would train several runs at once in "
                         f"this process, where a run sets process-wide state (the global random generators, torch's "
                         f"thread count) and would seed the others: {_FIX}")
    if type(executor).__module__.split(".")[0] == "distributed" and callable(getattr(executor, "scheduler_info", None)):
        workers = executor.scheduler_info().get("workers", {})
        here = sum(w.get("nthreads", 1) for address, w in workers.items() if str(address).startswith("inproc://"))
        if here > 1:
            raise ValueError(f"this Dask Client's workers are threads of this process ({here} threads, "
                             f"processes=False), so they would train several runs at once in it, where a run sets "
                             f"process-wide state (the global random generators) and would seed the others: {_FIX}")


def check_sendable(executor: Any, **objects: Any) -> None:
    """TypeError if ``executor`` runs calls in other processes and one of ``objects`` cannot be
    sent there (cloudpickle, as loky and Dask send; plain pickle for the standard process pool)."""
    if isinstance(executor, _IN_PROCESS):
        return
    by_name = type(executor) is concurrent.futures.ProcessPoolExecutor
    for name, obj in objects.items():
        try:
            (pickle if by_name else cloudpickle).dumps(obj)
        except Exception as err:
            hint = ("concurrent.futures.ProcessPoolExecutor pickles functions by name, so a factory defined in a "
                    "notebook cell cannot be sent: use the default executor (loky, which uses cloudpickle) or a "
                    "Dask Client" if by_name else
                    "build what cannot be pickled (open files, locks, generators, dataloader iterators, live "
                    "trainers) inside the factory instead of referring to it from outside, or pass "
                    "executor=InlineExecutor() to train in this process")
            raise TypeError(f"{name} cannot be sent to a worker process ({type(err).__name__}: {err}); each run "
                            f"trains in another process, which receives {name} pickled: {hint}") from None
