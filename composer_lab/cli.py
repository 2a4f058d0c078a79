"""The command line: ``composer-lab run`` trains a small experiment and writes a run folder;
``composer-lab lab`` opens JupyterLab on a working copy of the bundled notebooks;
``composer-lab check-notebooks`` validates notebooks as CI validates the bundled ones.

With no options it trains a small CNN on scikit-learn's digits for 6 epochs with Selective
Backprop and label smoothing, on one torch thread (``--threads``; well under a minute on 2 CPU
cores) and writes
``runs/<name>/``: config.json, metrics.parquet, trace/, loss.png and timeline.png.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import torch

__all__ = ["main", "build_parser", "parse_algorithms", "positive_int", "DEFAULT_ALGORITHMS"]

DEFAULT_ALGORITHMS = "selective_backprop,label_smoothing"
DEFAULT_SWEEP_ALGORITHMS = "cutout,mixup,label_smoothing"
"""Algorithms whose order is free somewhere (CutOut and MixUp at after_dataloader): 2 distinct orders."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="composer-lab", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="train an experiment and write a run folder",
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    run.add_argument("--data", default="digits", choices=["digits", "synthetic", "cifar10", "text"],
                     help="dataset (cifar10 reads data/cifar-10-batches-py; text: characters of Python's "
                          "standard library, for --model gpt)")
    run.add_argument("--model", default="cnn", choices=["cnn", "mlp", "resnet", "gpt"])
    run.add_argument("--algorithms", default=DEFAULT_ALGORITHMS,
                     help="comma-separated names, snake_case or as the classes (label_smoothing or "
                          "LabelSmoothing), or 'none'")
    run.add_argument("--epochs", type=positive_int, default=6)
    run.add_argument("--batch-size", type=positive_int, default=64)
    run.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (momentum 0.9)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--device", default=None, help="cpu or gpu (default: gpu when available)")
    run.add_argument("--precision", default=None, choices=["fp32", "amp_bf16", "amp_fp16"])
    run.add_argument("--microbatch-size", type=positive_int, default=None, help="device_train_microbatch_size")
    run.add_argument("--threads", type=positive_int, default=1,
                     help="torch CPU threads; one suits the small default models and does not stall when "
                          "other work holds a core (see the README)")
    run.add_argument("--trace", default="all", choices=["all", "ran", "off"])
    run.add_argument("--name", default=None, help="run name (default: the start time)")
    run.add_argument("--runs-dir", default="runs", help="run folders go to RUNS_DIR/NAME")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run folder of that name")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--no-plots", action="store_true", help="skip loss.png and timeline.png")
    run.set_defaults(handler=run_command)
    check = commands.add_parser("check-notebooks", help="validate executed notebooks with nbval and the "
                                "shipped sanitize rules, on this CPU's kernels and on the scalar ones")
    check.add_argument("paths", nargs="+", help="notebook files or folders")
    check.add_argument("--kernels", default="native,default",
                       help="comma-separated CPU kernel sets to validate on: native (this CPU's), or an "
                            "ATEN_CPU_CAPABILITY value (default = scalar, avx2, avx512)")
    check.set_defaults(handler=check_notebooks_command)
    sweep = commands.add_parser("sweep", help="train every distinct order of some algorithms with several seeds "
                                "and rank the orders", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sweep.add_argument("--algorithms", default=DEFAULT_SWEEP_ALGORITHMS,
                       help="comma-separated snake_case names; two or more must meet at an event where their "
                            "order is free (CutOut and MixUp do, at after_dataloader)")
    sweep.add_argument("--seeds", type=positive_int, default=None, help="how many seeds (0, 1, ...) each order "
                       "trains with (default 5; with --race, the most an order may train: default 20)")
    sweep.add_argument("--workers", type=positive_int, default=None,
                       help="local worker processes (default: one per core)")
    sweep.add_argument("--scheduler", default=None, help="a Dask scheduler's address: train there instead")
    sweep.add_argument("--data", default="digits", choices=["digits", "synthetic"])
    sweep.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    sweep.add_argument("--epochs", type=positive_int, default=3)
    sweep.add_argument("--batch-size", type=positive_int, default=64)
    sweep.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (momentum 0.9)")
    sweep.add_argument("--metric", default="metrics/eval/Accuracy", help="the final metric ranked")
    sweep.add_argument("--folder", default=None, help="the sweep folder (default: sweeps/<start time>); "
                       "run again on it to resume")
    sweep.add_argument("--race", action="store_true", help="race the orders: train seed by seed and stop each "
                       "order once it is worse than the best or equivalent to it within --delta")
    sweep.add_argument("--delta", type=float, default=0.005, help="with --race: the smallest difference of the "
                       "metric that matters (0.005: half a point of accuracy)")
    sweep.add_argument("--alpha", type=float, default=0.05, help="with --race: the error rate a verdict accepts")
    sweep.add_argument("--min-seeds", type=positive_int, default=3,
                       help="with --race: the seeds every order trains before the first verdict")
    sweep.add_argument("--mlflow", default=None, metavar="URI", help="also log the sweep to this MLflow tracking "
                       "store (e.g. sqlite:///mlflow.db): a parent run, a child per (order, seed); the mlflow extra")
    sweep.set_defaults(handler=sweep_command)
    from composer_lab.cli_frontier import add_frontier_command  # (its own module: composer-lab frontier ...)
    add_frontier_command(commands)
    lab = commands.add_parser("lab", help="open JupyterLab on a working copy of the bundled notebooks "
                              "(copied there the first time; the shipped ones stay clean)",
                              epilog="Any other option goes to JupyterLab, e.g. --no-browser, --port 8890, "
                                     "--ServerApp.token=SECRET, --allow-root (added for you when run as root); "
                                     "after -- everything does.")
    lab.add_argument("folder", nargs="?", default=None,
                     help="the working folder for the notebooks (default: ./composer-lab-notebooks)")
    lab.add_argument("--print-command", action="store_true",
                     help="prepare the folder and print the JupyterLab command instead of running it")
    lab.set_defaults(handler=lab_command)
    return parser


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 1, refused in the command line's terms."""
    from composer_lab.core.checks import check_positive_int

    try:
        return check_positive_int("the value", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None


def _key(name: str) -> str:
    """How a written algorithm name is looked up: 'LabelSmoothing', 'label-smoothing' and
    'label_smoothing' are one name."""
    return name.lower().replace("_", "").replace("-", "")


def parse_algorithms(text: str, fixed_input_size: bool = False) -> list:
    """Instances of the algorithms named in ``text`` ('selective_backprop,label_smoothing'); the
    class names as the README writes them ('CutOut,LabelSmoothing') are read too, and a name
    that is none of them is refused with the closest one (did you mean ...).
    ``fixed_input_size``: the model takes one input size only (the MLP), so Selective
    Backprop scores full-size inputs (scale_factor=1) instead of downsampled ones."""
    from composer_lab.algorithms import ALGORITHMS

    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return []
    by_key = {_key(name): name for name in ALGORITHMS}
    unknown = [n for n in names if _key(n) not in by_key]
    if unknown:
        guesses = {n: difflib.get_close_matches(_key(n), by_key, 1) for n in unknown}
        hints = [f"{n} (did you mean {by_key[guess[0]]}?)" if guess else n for n, guess in guesses.items()]
        raise ValueError(f"unknown algorithm(s) {', '.join(hints)}; choose from {', '.join(sorted(ALGORITHMS))} "
                         f"(comma-separated), or 'none'")
    options = {"selective_backprop": {"scale_factor": 1.0}} if fixed_input_size else {}
    return [ALGORITHMS[name](**options.get(name, {})) for name in (by_key[_key(n)] for n in names)]


def _build_model(name: str, example: torch.Tensor, num_classes: int) -> torch.nn.Module:
    from composer_lab.models import MODELS

    if name == "mlp":
        return MODELS[name](in_features=example.numel(), num_classes=num_classes)
    if name == "gpt":
        return MODELS[name](vocab_size=num_classes, max_sequence_length=example.shape[0])
    return MODELS[name](in_channels=example.shape[0], num_classes=num_classes)


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


def run_command(args: argparse.Namespace) -> int:
    """Train the experiment ``args`` describe, save its run folder, print a summary."""
    from composer_lab.data import DATASETS
    from composer_lab.models import language_model_loss
    from composer_lab.trainer import Trainer
    from composer_lab.trainer.rng import seed_all

    if (args.data == "text") != (args.model == "gpt"):
        raise ValueError(f"--data {args.data} --model {args.model} do not go together: the language model reads "
                         f"text and the text needs it; use --data text --model gpt, or an image dataset with "
                         f"cnn, mlp or resnet")
    algorithms = parse_algorithms(args.algorithms, fixed_input_size=args.model == "mlp")
    torch.set_num_threads(args.threads)
    seed_all(args.seed)
    train, evaluation = DATASETS[args.data](batch_size=args.batch_size)
    x, y = train.dataset[0]
    num_classes = (int(train.dataset.tensors[1].max()) + 1 if hasattr(train.dataset, "tensors")
                   else getattr(train.dataset, "vocab_size", 10))
    model = _build_model(args.model, x, num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    folder = Path(args.runs_dir)
    loss_fn = language_model_loss if args.model == "gpt" else torch.nn.functional.cross_entropy
    trainer = Trainer(model, train, f"{args.epochs}ep", loss_fn=loss_fn,
                      optimizers=optimizer, eval_dataloader=evaluation, algorithms=algorithms,
                      device=args.device, precision=args.precision,
                      device_train_microbatch_size=args.microbatch_size, seed=args.seed, trace=args.trace,
                      progress_bar=not args.no_progress, run_name=args.name)
    start = time.perf_counter()
    trainer.fit()
    seconds = time.perf_counter() - start
    if trainer.state.rank != 0:
        return 0  # under torchrun, rank 0 saves the run (with every rank's trace) and reports
    run = trainer.to_run()
    folder = run.save(folder / run.name, overwrite=args.overwrite)
    if not args.no_plots:
        _save_plots(run, folder)
    print(_summary(trainer, seconds, folder))
    return 0


def check_notebooks_command(args: argparse.Namespace) -> int:
    """Validate the notebooks ``args.paths`` once per kernel set; pytest's exit code."""
    from composer_lab.notebook_check import check_notebooks

    return check_notebooks(args.paths, kernels=[k.strip() for k in args.kernels.split(",") if k.strip()])


def lab_command(args: argparse.Namespace) -> int:
    """Copy the notebooks into ``args.folder`` (those not there yet) and run JupyterLab on it,
    with ``args.jupyter`` (the options this command does not know) passed on."""
    import os
    import shlex

    from composer_lab.lab.launch import (DEFAULT_FOLDER, allow_root, lab_command as command_for, prepare_folder,
                                         running_as_root)

    folder = Path(args.folder or DEFAULT_FOLDER)
    copied = prepare_folder(folder)
    options, note = allow_root(args.jupyter, running_as_root())
    command = command_for(folder, options)
    print(f"{len(copied)} notebook(s) copied to {folder}" if copied else f"notebooks in {folder} (kept as they are)")
    if note:
        print(note)
    if args.print_command:
        print(shlex.join(command))
        return 0
    sys.stdout.flush()
    os.execv(command[0], command)  # JupyterLab in this process's place: a stop or Ctrl-C reaches it directly


@dataclass(frozen=True)
class SweepExperiment:
    """The ``sweep`` command's factory ``(algorithms, seed) -> Trainer``: a module-level class, so
    worker processes import it by name."""

    data: str = "digits"
    model: str = "cnn"
    epochs: int = 3
    batch_size: int = 64
    lr: float = 0.05

    def __call__(self, algorithms: list, seed: int) -> Any:
        from composer_lab.data import DATASETS
        from composer_lab.trainer import Trainer
        from composer_lab.trainer.rng import seed_all

        seed_all(seed)
        train, evaluation = DATASETS[self.data](batch_size=self.batch_size)
        model = _build_model(self.model, train.dataset[0][0], int(train.dataset.tensors[1].max()) + 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9, weight_decay=5e-4)
        return Trainer(model, train, f"{self.epochs}ep", loss_fn=torch.nn.functional.cross_entropy,
                       optimizers=optimizer, eval_dataloader=evaluation, algorithms=algorithms, seed=seed,
                       progress_bar=False, run_name=f"seed{seed}")


def sweep_command(args: argparse.Namespace) -> int:
    """Check which pairs commute, sweep (or race) the orders that can differ, write the sweep
    folder (results.parquet, ranking.csv or decision.csv, ranking.png, commutation.parquet), print
    the ranking or the race's decision. A failed run or an interrupt ends with one line that says
    what finished and how to go on."""
    from composer_lab.explore import Sweep, commutation, local_pool, orderings
    from composer_lab.explore.scheduler import SweepFailed

    seeds = _sweep_seeds(args)
    if args.mlflow:  # (an unreachable store fails now, before any training)
        from composer_lab.tracking.mlflow_store import MLflowStore
        MLflowStore(args.mlflow)
    algorithms = parse_algorithms(args.algorithms, fixed_input_size=args.model == "mlp")
    experiment = SweepExperiment(args.data, args.model, args.epochs, args.batch_size, args.lr)
    table = commutation(experiment, algorithms)
    orders = orderings(algorithms, commutation=table)
    again = "run the same command again to finish (finished runs are kept)"

    def report(row: dict) -> None:
        print(f"  {row['order']}  seed {row['seed']}: {row.get(args.metric)}", flush=True)

    executor = _dask_client(args.scheduler) if args.scheduler else local_pool(args.workers)
    try:
        sweep = Sweep(experiment, algorithms, seeds=range(seeds), metric=args.metric, orders=orders,
                      executor=executor, folder=args.folder or time.strftime("sweeps/sweep-%Y%m%d-%H%M%S"))
        plain = table.copy()
        plain.attrs = {}  # (what commutation() says about the table, not columns parquet can keep)
        plain.to_parquet(sweep.folder.path / "commutation.parquet", index=False)
        print(f"{len(orders)} distinct orders x {seeds} seeds{' at most (race)' if args.race else ''}, "
              f"{len(sweep.pending())} runs {'left' if args.race else 'to train'} in {sweep.folder.path}")
        with _once_per_sweep_warnings():
            outcome = (sweep.race(args.delta, args.alpha, args.min_seeds, on_result=report) if args.race
                       else sweep.run(on_result=report))
    except SweepFailed as err:
        print(f"composer-lab: error: {err.advice(again)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"composer-lab: interrupted; {len(sweep.results)} of {len(sweep.trials())} runs finished and are "
              f"saved in {sweep.folder.path}: {again}", file=sys.stderr)
        return 130
    finally:
        executor.close() if args.scheduler else executor.shutdown()  # (a Client closes, a pool shuts down)
    if args.race:
        outcome.table.to_csv(sweep.folder.path / "decision.csv", index=False)
        print(outcome.table.to_string(index=False))
        print(outcome.answer)
    else:
        ranking = sweep.ranking()
        ranking.to_csv(sweep.folder.path / "ranking.csv", index=False)
        print(ranking.to_string(index=False))
        print(ranking.attrs["summary"])
    sweep.plot().savefig(sweep.folder.path / "ranking.png", dpi=100)
    if args.mlflow:
        print(f"logged to MLflow {args.mlflow}: parent run {sweep.to_mlflow(args.mlflow)} "
              f"(mlflow ui --backend-store-uri {args.mlflow})")
    return 0


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``composer-lab`` and ``python -m composer_lab``."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    jupyter: list[str] = []
    if argv[:1] == ["lab"]:  # what `lab` does not know goes to JupyterLab
        from composer_lab.lab.launch import split_jupyter_options

        ours, jupyter = split_jupyter_options(argv[1:], ours=("--print-command", "-h", "--help"))
        argv = ["lab", *ours]
    args = parser.parse_args(argv)
    args.jupyter = jupyter
    try:
        return args.handler(args)
    except (ValueError, TypeError, FileNotFoundError, ModuleNotFoundError) as err:
        print(f"composer-lab: error: {err}", file=sys.stderr)
        return 2
