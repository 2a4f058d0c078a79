"""``composer-lab sweep``: check which pairs commute, sweep (or race) the orders that can differ,
write the sweep folder, print the ranking or the race's decision."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
import warnings
from typing import Any, Iterator

from composer_lab.cli.algorithms import parse_algorithms
from composer_lab.cli.experiment import SweepExperiment

__all__ = ["sweep_command", "result_line"]

_AGAIN = "run the same command again to finish (finished runs are kept)"


def sweep_command(args: argparse.Namespace) -> int:
    """Check which pairs commute, sweep (or race) the orders that can differ, write the sweep
    folder (results.parquet, ranking.csv or decision.csv, ranking.png, commutation.parquet), print
    the ranking or the race's decision. A failed run or an interrupt ends with one line that says
    what finished and how to go on."""
    from composer_lab.explore import commutation, local_pool, orderings
    from composer_lab.explore.scheduler import SweepFailed

    seeds = _sweep_seeds(args)
    if args.mlflow:  # (an unreachable store fails now, before any training)
        from composer_lab.tracking.mlflow_store import MLflowStore
        MLflowStore(args.mlflow)
    algorithms = parse_algorithms(args.algorithms, fixed_input_size=args.model == "mlp")
    experiment = SweepExperiment(args.data, args.model, args.epochs, args.batch_size, args.lr)
    table = commutation(experiment, algorithms)
    orders = orderings(algorithms, commutation=table)
    executor = _dask_client(args.scheduler) if args.scheduler else local_pool(args.workers)
    sweep = None
    try:
        sweep = _open_sweep(args, experiment, algorithms, orders, executor, seeds)
        plain = table.copy()
        plain.attrs = {}  # (what commutation() says about the table, not columns parquet can keep)
        plain.to_parquet(sweep.folder.path / "commutation.parquet", index=False)
        outcome = _train(args, sweep, len(orders), seeds)
    except SweepFailed as err:
        print(f"composer-lab: error: {err.advice(_AGAIN)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if sweep is None:
            raise
        print(f"composer-lab: interrupted; {len(sweep.results)} of {len(sweep.trials())} runs finished and are "
              f"saved in {sweep.folder.path}: {_AGAIN}", file=sys.stderr)
        return 130
    finally:
        executor.close() if args.scheduler else executor.shutdown()  # (a Client closes, a pool shuts down)
    _write_outcome(args, sweep, outcome)
    return 0


def _open_sweep(args: argparse.Namespace, experiment: SweepExperiment, algorithms: list, orders: Any,
                executor: Any, seeds: int) -> Any:
    """The sweep on ``--folder`` (resumed, or with ``--restart`` started over); a folder it may not
    reuse is refused naming the flags: ``--restart``, and each setting that changed."""
    from composer_lab.explore import Sweep, SweepFolderTaken

    try:
        return Sweep(experiment, algorithms, seeds=range(seeds), metric=args.metric, orders=orders,
                     executor=executor, folder=args.folder or time.strftime("sweeps/sweep-%Y%m%d-%H%M%S"),
                     resume=not args.restart)
    except SweepFolderTaken as err:
        raise ValueError(err.worded("pass --restart", _FLAGS)) from None


_FLAGS = {f"SweepExperiment.{field.name}": "--" + field.name.replace("_", "-")
          for field in dataclasses.fields(SweepExperiment)}
_FLAGS.update(metric="--metric", algorithms="--algorithms")
"""The command line's name for each setting a sweep folder's experiment records."""


def _train(args: argparse.Namespace, sweep: Any, orders: int, seeds: int) -> Any:
    """Sweep or race, printing each run's result as it comes."""
    print(f"{orders} distinct orders x {seeds} seeds{' at most (race)' if args.race else ''}, "
          f"{len(sweep.pending())} runs {'left' if args.race else 'to train'} in {sweep.folder.path}")

    def report(row: dict) -> None:
        print(result_line(row, args.metric), flush=True)

    with _once_per_sweep_warnings():
        if args.race:
            return sweep.race(args.delta, args.alpha, args.min_seeds, on_result=report)
        return sweep.run(on_result=report)


def result_line(row: dict, metric: str) -> str:
    """One finished run as the sweep prints it: its order, seed and ``metric`` to 4 decimals."""
    value = row.get(metric)
    shown = f"{value:.4f}" if isinstance(value, float) else "n/a" if value is None else str(value)
    return f"  {row['order']}  seed {row['seed']}: {shown}"


def _write_outcome(args: argparse.Namespace, sweep: Any, outcome: Any) -> None:
    """The decision (a race) or the ranking, printed and written; the plot; the MLflow log."""
    folder = sweep.folder.path
    if args.race:
        outcome.table.to_csv(folder / "decision.csv", index=False)
        print(outcome.table.to_string(index=False))
        print(outcome.answer)
    else:
        ranking = sweep.ranking()
        ranking.to_csv(folder / "ranking.csv", index=False)
        print(ranking.to_string(index=False))
        print(ranking.attrs["summary"])
    sweep.plot().savefig(folder / "ranking.png", dpi=100)
    if args.mlflow:
        print(f"logged to MLflow {args.mlflow}: parent run {sweep.to_mlflow(args.mlflow)} "
              f"(mlflow ui --backend-store-uri {args.mlflow})")


def _sweep_seeds(args: argparse.Namespace) -> int:
    """How many seeds the sweep or race may train; its settings refused in the command line's
    terms before any work."""
    seeds = args.seeds if args.seeds is not None else 20 if args.race else 5
    if not args.race:
        return seeds
    if args.min_seeds < 2:
        raise ValueError(f"--min-seeds must be 2 or more, got {args.min_seeds}: a paired test needs 2 seeds of "
                         f"every order; e.g. --min-seeds 3")
    if seeds < args.min_seeds:
        raise ValueError(f"--seeds {seeds} is fewer than --min-seeds {args.min_seeds}, so the race could not reach "
                         f"a verdict; give more seeds (a race trains only what it needs), e.g. --seeds 20")
    if not args.delta > 0:
        raise ValueError(f"--delta must be a positive number, got {args.delta:g}: the smallest difference of the "
                         f"metric that matters, in its units; e.g. --delta 0.005 (half a point of accuracy)")
    if not 0 < args.alpha < 1:
        raise ValueError(f"--alpha must lie between 0 and 1, got {args.alpha:g}: the error rate a verdict "
                         f"accepts; e.g. --alpha 0.05")
    return seeds


@contextlib.contextmanager
def _once_per_sweep_warnings() -> Iterator[None]:
    """Show each warning (its text and category) once for the whole sweep, not once per run.
    Python's own 'once' forgets what it showed whenever code changes the warning filters, as a
    run does; so here a show-once wrapper, and PYTHONWARNINGS=once for the worker processes
    started meanwhile (once per worker)."""
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = "once"
    shown: set[tuple[str, type]] = set()
    try:
        with warnings.catch_warnings():
            show = warnings.showwarning

            def show_once(message: Any, category: type, *args: Any, **kwargs: Any) -> None:
                if (str(message), category) not in shown:
                    shown.add((str(message), category))
                    show(message, category, *args, **kwargs)

            warnings.showwarning = show_once
            yield
    finally:
        if before is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = before


def _dask_client(address: str) -> Any:
    try:
        from distributed import Client
    except ModuleNotFoundError:
        raise ModuleNotFoundError("composer-lab sweep --scheduler needs Dask: pip install 'composer_lab[dask]'") \
            from None
    return Client(address)
