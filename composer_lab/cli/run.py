"""``composer-lab run``: train one experiment, write its run folder, print a summary.

With no options it trains a small CNN on scikit-learn's digits for 6 epochs with Selective
Backprop and label smoothing, on one torch thread (``--threads``; well under a minute on 2 CPU
cores), and writes ``runs/<name>/``: config.json, metrics.parquet, trace/, loss.png and
timeline.png. A folder that is taken is refused before anything trains.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from composer_lab.cli.algorithms import parse_algorithms
from composer_lab.cli.experiment import build_model

__all__ = ["run_command", "check_run_folder"]


def check_run_folder(folder: Path) -> None:
    """Refuse ``folder`` for a new run unless it is new or empty: the rule ``Run.save`` applies
    at the end (a new run never matches the one a folder holds), checked before any work, in the
    command line's terms."""
    if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
        return
    if not folder.is_dir():
        raise ValueError(f"cannot write the run to {folder}: it is a file; give the run another --name "
                         f"(or another --runs-dir)")
    holds = "a run" if (folder / "config.json").is_file() else "other files"
    raise ValueError(f"the run folder {folder} already holds {holds}; give this run another --name, or pass "
                     f"--overwrite to replace the folder's run")


def run_command(args: argparse.Namespace) -> int:
    """Train the experiment ``args`` describe, save its run folder, print a summary."""
    from composer_lab.trainer.run import default_run_name

    if (args.data == "text") != (args.model == "gpt"):
        raise ValueError(f"--data {args.data} --model {args.model} do not go together: the language model reads "
                         f"text and the text needs it; use --data text --model gpt, or an image dataset with "
                         f"cnn, mlp or resnet")
    algorithms = parse_algorithms(args.algorithms, fixed_input_size=args.model == "mlp")
    name = args.name or default_run_name()
    if not args.overwrite:
        check_run_folder(Path(args.runs_dir) / name)
    trainer = _trainer(args, algorithms, name)
    start = time.perf_counter()
    trainer.fit()
    seconds = time.perf_counter() - start
    if trainer.state.rank != 0:
        return 0  # under torchrun, rank 0 saves the run (with every rank's trace) and reports
    run = trainer.to_run()
    folder = run.save(Path(args.runs_dir) / run.name, overwrite=args.overwrite)
    if not args.no_plots:
        _save_plots(run, folder)
    print(_summary(trainer, seconds, folder))
    return 0


def _trainer(args: argparse.Namespace, algorithms: list, name: str) -> Any:
    """The trainer of the run ``args`` describe, its data loaded and its model built."""
    from composer_lab.data import DATASETS
    from composer_lab.models import language_model_loss
    from composer_lab.trainer import Trainer
    from composer_lab.trainer.rng import seed_all

    torch.set_num_threads(args.threads)
    seed_all(args.seed)
    train, evaluation = DATASETS[args.data](batch_size=args.batch_size)
    x, y = train.dataset[0]
    num_classes = (int(train.dataset.tensors[1].max()) + 1 if hasattr(train.dataset, "tensors")
                   else getattr(train.dataset, "vocab_size", 10))
    model = build_model(args.model, x, num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    loss_fn = language_model_loss if args.model == "gpt" else torch.nn.functional.cross_entropy
    return Trainer(model, train, f"{args.epochs}ep", loss_fn=loss_fn,
                   optimizers=optimizer, eval_dataloader=evaluation, algorithms=algorithms,
                   device=args.device, precision=args.precision,
                   device_train_microbatch_size=args.microbatch_size, seed=args.seed, trace=args.trace,
                   progress_bar=not args.no_progress, run_name=name)


def _summary(trainer: Any, seconds: float, folder: Path) -> str:
    """Accuracy, time, and how often each algorithm ran."""
    metrics, ts = trainer.metrics, trainer.state.timestamp
    accuracy = metrics.loc[metrics["name"] == "metrics/eval/Accuracy", "value"]
    lines = [f"run {trainer.state.run_name}: {ts.epoch} epochs, {ts.batch} batches, {ts.sample} samples "
             f"trained in {seconds:.1f} s",
             f"eval accuracy: {accuracy.iloc[-1]:.4f}" if len(accuracy) else "eval accuracy: n/a"]
    eval_loss = metrics.loc[metrics["name"] == "loss/eval", "value"]
    if len(eval_loss) and not len(accuracy):
        lines.append(f"eval loss: {eval_loss.iloc[-1]:.4f}")
    calls = trainer.trace.invocations
    if len(calls):
        ran = calls[calls["matched"] & (calls["kind"] == "algorithm")]
        for name, per_event in ran.groupby("name", observed=True)["event"]:
            counts = per_event.astype(str).value_counts()
            lines.append(f"  {name}: {len(per_event)} calls ({', '.join(f'{e} x{c}' for e, c in counts.items())})")
    lines.append(f"run folder: {folder}")
    return "\n".join(lines)


def _save_plots(run: Any, folder: Path) -> None:
    from composer_lab.lab import plot_loss, plot_timeline

    plot_loss(run).savefig(folder / "loss.png", dpi=100)
    if run.trace.recording:
        plot_timeline(run).savefig(folder / "timeline.png", dpi=100)

