"""One trial of a sweep: train one order of the algorithms with one seed, in a worker process.

:func:`run_trial` is what an executor runs: it builds the trainer with the user's factory,
trains it with torch at one thread, saves the run folder and writes the result row atomically
into the sweep folder, so a run that finished is never lost, whatever happens to the others.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd
import torch

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.passes import pass_name
from composer_lab.explore.learning import chance_level
from composer_lab.explore.cost import CostMeter
from composer_lab.explore.orderings import algorithm_names
from composer_lab.explore.results import SweepFolder
from composer_lab.trainer.trainer import Trainer

__all__ = ["Trial", "run_trial", "check_trainer", "check_passes", "final_metrics"]

_ONE_AT_A_TIME = threading.Lock()
"""Held while a trial trains: two in one process would seed each other's runs."""


@dataclass(frozen=True)
class Trial:
    """One (order, seed) pair of a sweep. ``attempt`` tells one submission from another, so an
    executor that caches results by their arguments (Dask) never answers with an old one;
    ``passes``: the names of the passes the order's label assumes (empty: not checked);
    ``duration``: a frontier's trial, built by ``make_trainer(algorithms, seed, duration)`` and
    measured by a :class:`~composer_lab.explore.cost.CostMeter` (None: a sweep's)."""

    order: str
    positions: tuple[int, ...]
    seed: int
    key: str
    attempt: str
    passes: tuple[str, ...] = ()
    duration: Optional[str] = None


def check_trainer(trainer: Any, make_trainer: Callable, algorithms: Optional[Sequence[Algorithm]] = None) -> Trainer:
    """``trainer`` if it is a Trainer holding exactly ``algorithms`` (the very objects, in that
    order), else a TypeError / ValueError naming the factory: a factory that drops, copies or
    reorders what it is given would train one order under every label."""
    name = getattr(make_trainer, "__qualname__", type(make_trainer).__name__)
    if not isinstance(trainer, Trainer):
        raise TypeError(f"make_trainer ({name}) returned {type(trainer).__name__}, not a Trainer; the factory "
                        f"must build and return the Trainer for the algorithms and seed it is given: "
                        f"def make_trainer(algorithms, seed): return Trainer(..., algorithms=algorithms, seed=seed)")
    held = list(trainer.state.algorithms)
    if algorithms is not None and [id(a) for a in held] != [id(a) for a in algorithms]:
        raise ValueError(f"make_trainer ({name}) built a Trainer holding {algorithm_names(held) or 'no algorithms'}, "
                         f"not the algorithms it was given ({algorithm_names(algorithms)}, in that order): every order "
                         f"would train alike. Pass them through as they come: Trainer(..., algorithms=algorithms)")
    return trainer


def check_passes(trainer: Trainer, make_trainer: Callable, passes: Sequence[str]) -> None:
    """A ValueError if ``trainer`` runs other passes than ``passes`` (names; empty: unchecked),
    under which the sweep's orders were named: the labels would not say what ran."""
    running = [pass_name(p) for p in trainer.engine.passes]
    if passes and running != list(passes):
        name = getattr(make_trainer, "__qualname__", type(make_trainer).__name__)
        raise ValueError(f"make_trainer ({name}) builds a Trainer whose engine runs the passes {running}, but the "
                         f"sweep's orders were worked out under {list(passes)}, so their labels would not say what "
                         f"ran: pass orders=orderings(algorithms, passes=<the passes the factory sets>)")


def final_metrics(metrics: pd.DataFrame) -> dict[str, float]:
    """The last value logged of each metric name, except keep ratios (names ending in
    '/keep_ratio', as 'sb/keep_ratio'): their last value is 1.0 once the algorithm's interval
    is over, which reads as 'never selected', so a keep ratio is the mean over the batches the
    algorithm selected on (ratio below 1), and is left out for a run where it never did."""
    names = metrics["name"].astype(str)
    ratio = names.str.endswith("/keep_ratio")
    last = metrics[~ratio].groupby(names[~ratio], sort=True)["value"].last()
    selected = metrics[ratio & (metrics["value"] < 1)]
    kept = selected.groupby(names[selected.index], sort=True)["value"].mean()
    return dict(sorted({str(name): float(value) for name, value in [*last.items(), *kept.items()]}.items()))


def run_trial(make_trainer: Callable[[list, int], Any], algorithms: Sequence[Algorithm], trial: Trial,
              folder: str, metric: str) -> dict[str, Any]:
    """Train ``algorithms`` (copied, in this order) with ``trial.seed``; save the run and its row.

    A trial sets process-wide state (the global random generators, torch's thread count), so
    trials in one process train one at a time (a Dask worker with several threads, say)."""
    with _ONE_AT_A_TIME:
        threads, meter = torch.get_num_threads(), None
        torch.set_num_threads(1)  # runs share the cores with each other, not with their own threads
        try:
            copies = copy.deepcopy(list(algorithms))
            built = make_trainer(copies, trial.seed, *([] if trial.duration is None else [trial.duration]))
            trainer = check_trainer(built, make_trainer, copies)
            check_passes(trainer, make_trainer, trial.passes)
            meter = None if trial.duration is None else CostMeter.attach(trainer)
            start = time.perf_counter()
            trainer.fit()
            seconds = time.perf_counter() - start
            trainer.close()
        finally:
            torch.set_num_threads(threads)
            if meter is not None:
                meter.stop_counting()
    final = final_metrics(trainer.metrics)
    if metric not in final:
        raise ValueError(f"the runs do not record the metric {metric!r}; they record {sorted(final)}: pass one "
                         f"of those as metric=... (Sweep, Frontier), or give the factory's Trainer an eval_dataloader "
                         f"for 'metrics/eval/Accuracy'")
    sweep = SweepFolder(Path(folder))
    run_folder = sweep.run_folder(trial.key)
    trainer.to_run().save(run_folder, overwrite=True)  # a run cut short before may have left a partial one
    row = {"order": trial.order, "positions": list(trial.positions), "seed": trial.seed, **final,
           "samples": int(trainer.state.timestamp.sample), "wall_time": seconds,
           **({"chance": chance} if (chance := chance_level(trainer)) is not None else {}),
           "run_folder": str(run_folder.relative_to(sweep.path))}
    if meter is not None:
        row.update(duration=trial.duration, **meter.row())
    sweep.write_row(trial.key, row)
    return row
