"""One trial of a sweep: train one order of the algorithms with one seed, in a worker process.

:func:`run_trial` is what an executor runs: it builds the trainer with the user's factory,
trains it with torch at one thread, saves the run folder and writes the result row atomically
into the sweep folder, so a run that finished is never lost, whatever happens to the others.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import torch

from composer_lab.core.algorithm import Algorithm
from composer_lab.explore.results import SweepFolder
from composer_lab.trainer.trainer import Trainer

__all__ = ["Trial", "run_trial", "check_trainer", "final_metrics"]


@dataclass(frozen=True)
class Trial:
    """One (order, seed) pair of a sweep. ``attempt`` tells one submission from another, so an
    executor that caches results by their arguments (Dask) never answers with an old one."""

    order: str
    positions: tuple[int, ...]
    seed: int
    key: str
    attempt: str


def check_trainer(trainer: Any, make_trainer: Callable) -> Trainer:
    """``trainer`` if it is a Trainer, else a TypeError naming the factory."""
    if not isinstance(trainer, Trainer):
        name = getattr(make_trainer, "__qualname__", type(make_trainer).__name__)
        raise TypeError(f"make_trainer ({name}) returned {type(trainer).__name__}, not a Trainer; the factory "
                        f"must build and return the Trainer for the algorithms and seed it is given: "
                        f"def make_trainer(algorithms, seed): return Trainer(..., algorithms=algorithms, seed=seed)")
    return trainer


def final_metrics(metrics: pd.DataFrame) -> dict[str, float]:
    """The last value logged of each metric name."""
    last = metrics.groupby("name", sort=True)["value"].last()
    return {str(name): float(value) for name, value in last.items()}


def run_trial(make_trainer: Callable[[list, int], Any], algorithms: Sequence[Algorithm], trial: Trial,
              folder: str, metric: str) -> dict[str, Any]:
    """Train ``algorithms`` (copied, in this order) with ``trial.seed``; save the run and its row."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # runs share the cores with each other, not with their own threads
    try:
        trainer = check_trainer(make_trainer(copy.deepcopy(list(algorithms)), trial.seed), make_trainer)
        start = time.perf_counter()
        trainer.fit()
        seconds = time.perf_counter() - start
        trainer.close()
    finally:
        torch.set_num_threads(threads)
    final = final_metrics(trainer.metrics)
    if metric not in final:
        raise ValueError(f"the runs do not record the metric {metric!r}; they record {sorted(final)}: pass one "
                         f"of those as Sweep(metric=...), or give the factory's Trainer an eval_dataloader for "
                         f"'metrics/eval/Accuracy'")
    sweep = SweepFolder(Path(folder))
    run_folder = sweep.run_folder(trial.key)
    trainer.to_run().save(run_folder, overwrite=True)  # a run cut short before may have left a partial one
    row = {"order": trial.order, "positions": list(trial.positions), "seed": trial.seed, **final,
           "samples": int(trainer.state.timestamp.sample), "wall_time": seconds,
           "run_folder": str(run_folder.relative_to(sweep.path))}
    sweep.write_row(trial.key, row)
    return row
