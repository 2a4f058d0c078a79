"""``composer-lab frontier``: is a composition of algorithms a speed-up on the bundled data?

Trains the baseline and every composition of ``--algorithms`` (up to ``--max-size``) for each of
``--durations`` with ``--seeds`` seeds (a :class:`~composer_lab.explore.Frontier`; ``--race
[ALPHA]`` races at level ALPHA, 0.05 by default: each candidate stops training once its verdict
is in), writes results.csv, speedups.csv and frontier.png in the folder, and prints the verdicts
and the sentence (a race also how many of the grid's runs it trained).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["add_frontier_command", "FrontierExperiment"]


def add_frontier_command(commands: Any) -> None:
    """The ``frontier`` subcommand, on the CLI's subparsers."""
    from composer_lab.cli.parser import HelpFormatter, positive_int

    frontier = commands.add_parser("frontier", help="is a composition a speed-up? every composition of some "
                                   "algorithms against the baseline's time-quality curve, with seeds and a verdict",
                                   formatter_class=HelpFormatter)
    options = [
        ("--algorithms", str, "selective_backprop,label_smoothing",
         "comma-separated snake_case names; every composition of them is a candidate"),
        ("--max-size", positive_int, None, "the most algorithms in one composition (default: all of them)"),
        ("--durations", str, "1ep,2ep,4ep", "two or more growing durations"),
        ("--seeds", positive_int, 3, "seeds per candidate and duration"),
        ("--batch-size", positive_int, 64, "examples per batch"),
        ("--lr", float, 0.1, "SGD's peak learning rate, decayed to 0 over each run"),
        ("--workers", positive_int, None, "local worker processes (default: one per core)"),
        ("--folder", str, "frontier", "the frontier folder; run again on it to resume"),
    ]
    for flag, kind, default, text in options:
        frontier.add_argument(flag, type=kind, default=default, help=text)
    frontier.add_argument("--cost", default="flops", choices=["time", "flops", "samples"], help="the cost axis")
    frontier.add_argument("--race", type=race_level, nargs="?", const=0.05, default=None, metavar="ALPHA",
                          help="race at level ALPHA (default 0.05): stop training each candidate once its verdict "
                               "is in, --seeds the most seeds one trains (at least 3)")
    frontier.set_defaults(handler=frontier_command)


def race_level(text: str) -> float:
    """``--race``'s ALPHA: a level in (0, 1), or argparse's error naming the flag."""
    try:
        alpha = float(text)
    except ValueError:
        alpha = float("nan")
    if not 0 < alpha < 1:
        raise argparse.ArgumentTypeError(f"the race's level must lie in (0, 1), got {text!r}: the error rate its "
                                         f"verdicts accept, e.g. --race 0.05")
    return alpha


@dataclass(frozen=True)
class FrontierExperiment:
    """The command's factory ``(algorithms, seed, duration) -> Trainer``: a small CNN on the digits,
    SGD whose learning rate decays linearly to 0 over the duration given."""

    batch_size: int = 64
    lr: float = 0.1

    def __call__(self, algorithms: list, seed: int, duration: str) -> Any:
        from composer_lab.core.time import Time
        from composer_lab.data import digits_dataloaders
        from composer_lab.models import SmallCNN
        from composer_lab.trainer import Trainer
        from composer_lab.trainer.rng import seed_all

        seed_all(seed)
        train, evaluation = digits_dataloaders(batch_size=self.batch_size)
        model = SmallCNN(in_channels=1, num_classes=10, width=16)
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9)
        length = Time.from_timestring(duration)
        steps = length.value * len(train) if length.unit.value == "ep" else length.value
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / steps))
        return Trainer(model, train, duration, loss_fn=torch.nn.functional.cross_entropy, optimizers=optimizer,
                       schedulers=schedule, eval_dataloader=evaluation, eval_interval=duration,
                       algorithms=algorithms, seed=seed, progress_bar=False, trace="off")


def frontier_command(args: argparse.Namespace) -> int:
    """Run (or race) the frontier, save its tables and plot, print the verdicts and the answer."""
    from composer_lab.cli.algorithms import parse_algorithms
    from composer_lab.explore import Frontier, compositions, local_pool
    from composer_lab.explore.speedup import answer

    candidates = compositions(parse_algorithms(args.algorithms), max_size=args.max_size)
    executor = local_pool(args.workers)
    try:
        frontier = Frontier(FrontierExperiment(args.batch_size, args.lr), candidates,
                            [d.strip() for d in args.durations.split(",")], seeds=range(args.seeds),
                            folder=args.folder, cost=args.cost, executor=executor)
    except BaseException:
        executor.shutdown()
        raise
    print(frontier.describe(), flush=True)

    def report(row: dict) -> None:
        print(f"  {row['order']}  {row['duration']}  seed {row['seed']}: {row.get(frontier.metric):.4f}", flush=True)

    try:
        if args.race is None:
            frontier.run(on_result=report)
            table = frontier.speedups()
        else:
            table = frontier.race(args.race, on_result=report)
    finally:
        frontier.executor.shutdown()
    folder = Path(args.folder)
    frontier.results().to_csv(folder / "results.csv", index=False)
    table.to_csv(folder / "speedups.csv", index=False)
    frontier.plot().savefig(folder / "frontier.png", dpi=100, bbox_inches="tight")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    if args.race is not None:
        print(f"the race trained {table.attrs['runs']} of the grid's {table.attrs['grid']} runs")
    print(answer(table, frontier.metric, frontier.higher_is_better))
    return 0
