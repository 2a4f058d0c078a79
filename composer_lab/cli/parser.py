"""The command line's options: one argparse parser with a subcommand per task, each option with
its help and its default said once."""

from __future__ import annotations

import argparse

__all__ = ["build_parser", "positive_int", "DEFAULT_ALGORITHMS", "DEFAULT_SWEEP_ALGORITHMS", "DESCRIPTION"]

DEFAULT_ALGORITHMS = "selective_backprop,label_smoothing"
DEFAULT_SWEEP_ALGORITHMS = "cutout,mixup,label_smoothing"
"""Algorithms whose order is free somewhere (CutOut and MixUp at after_dataloader): 2 distinct orders."""

DESCRIPTION = ("Train and compare Composer-style algorithm runs: `run` trains a small experiment and writes a run "
               "folder; `sweep` trains every distinct order of some algorithms with several seeds and ranks the "
               "orders; `frontier` asks whether compositions of algorithms are a speed-up: quality against "
               "cost beside the baseline's own curve; `lab` opens JupyterLab on a working copy of the bundled "
               "notebooks; `check-notebooks` validates notebooks as CI validates the bundled ones.")


class HelpFormatter(argparse.HelpFormatter):
    """Each option's default said once: added as '(default: X)' unless its help already says it,
    and left out where there is nothing to say (no value, an off switch)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_ = action.help or ""
        if "default" in help_ or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return help_
        return f"{help_} (default: %(default)s)"


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 1, refused in the command line's terms."""
    from composer_lab.core.checks import check_positive_int

    try:
        return check_positive_int("the value", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    from composer_lab.cli.frontier import add_frontier_command
    from composer_lab.cli.notebooks import check_notebooks_command, lab_command
    from composer_lab.cli.run import run_command
    from composer_lab.cli.sweep import sweep_command

    parser = argparse.ArgumentParser(prog="composer-lab", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run(commands).set_defaults(handler=run_command)
    _add_check(commands).set_defaults(handler=check_notebooks_command)
    _add_sweep(commands).set_defaults(handler=sweep_command)
    _add_lab(commands).set_defaults(handler=lab_command)
    add_frontier_command(commands)
    return parser


def _add_training(command: argparse.ArgumentParser, data: list[str], models: list[str], epochs: int) -> None:
    """The options ``run`` and ``sweep`` share: what trains, how long, how fast."""
    command.add_argument("--data", default="digits", choices=data,
                         help="dataset: digits (scikit-learn's 8x8 digits), synthetic (random images)"
                              + (", cifar10 (reads data/cifar-10-batches-py), text (characters of Python's standard "
                                 "library, for --model gpt)" if "text" in data else ""))
    command.add_argument("--model", default="cnn", choices=models,
                         help="model: a small CNN, an MLP" + (", a ResNet, a small GPT (with --data text)"
                                                              if "gpt" in models else ""))
    command.add_argument("--epochs", type=positive_int, default=epochs, help="epochs each run trains")
    command.add_argument("--batch-size", type=positive_int, default=64, help="training batch size")
    command.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (momentum 0.9)")


def _add_run(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    run = commands.add_parser("run", help="train an experiment and write a run folder", formatter_class=HelpFormatter,
                              description="Train one experiment, write RUNS_DIR/NAME (config.json, metrics.parquet, "
                                          "trace/, loss.png, timeline.png) and print a summary.")
    _add_training(run, ["digits", "synthetic", "cifar10", "text"], ["cnn", "mlp", "resnet", "gpt"], epochs=6)
    run.add_argument("--algorithms", default=DEFAULT_ALGORITHMS,
                     help="comma-separated names, snake_case or as the classes (label_smoothing or "
                          "LabelSmoothing), or 'none'")
    run.add_argument("--seed", type=int, default=0, help="seed of the run's random generators")
    run.add_argument("--device", default=None, help="cpu or gpu (by default gpu when available)")
    run.add_argument("--precision", default=None, choices=["fp32", "amp_bf16", "amp_fp16"],
                     help="numeric precision (by default fp32 on CPU; on GPU amp_bf16, or amp_fp16 without bf16)")
    run.add_argument("--microbatch-size", type=positive_int, default=None,
                     help="split each batch into microbatches of this size (by default none)")
    run.add_argument("--threads", type=positive_int, default=1,
                     help="torch CPU threads; one suits the small default models and does not stall when "
                          "other work holds a core (see the README)")
    run.add_argument("--trace", default="all", choices=["all", "ran", "off"],
                     help="what the trace records: every event and call (also the matches that said no), the events "
                          "and the calls that ran, or nothing")
    run.add_argument("--name", default=None, help="run name (by default the start time)")
    run.add_argument("--runs-dir", default="runs", help="run folders go to RUNS_DIR/NAME")
    run.add_argument("--overwrite", action="store_true", help="replace an existing run folder of that name")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--no-plots", action="store_true", help="skip loss.png and timeline.png")
    return run


def _add_sweep(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    sweep = commands.add_parser("sweep", help="train every distinct order of some algorithms with several seeds "
                                "and rank the orders", formatter_class=HelpFormatter,
                                description="Check which pairs of --algorithms commute, train every order that can "
                                            "differ with --seeds seeds (or race them with --race), write the "
                                            "sweep folder and print the ranking or the race's decision.")
    sweep.add_argument("--algorithms", default=DEFAULT_SWEEP_ALGORITHMS,
                       help="comma-separated snake_case names; two or more must meet at an event where their "
                            "order is free (CutOut and MixUp do, at after_dataloader)")
    sweep.add_argument("--seeds", type=positive_int, default=None, help="how many seeds (0, 1, ...) each order "
                       "trains with (default 5; with --race, the most an order may train: default 20)")
    sweep.add_argument("--workers", type=positive_int, default=None,
                       help="local worker processes (by default one per core)")
    sweep.add_argument("--scheduler", default=None, help="a Dask scheduler's address: train there instead")
    _add_training(sweep, ["digits", "synthetic"], ["cnn", "mlp"], epochs=3)
    sweep.add_argument("--metric", default="metrics/eval/Accuracy", help="the final metric ranked")
    sweep.add_argument("--folder", default=None, help="the sweep folder (by default sweeps/<start time>); "
                       "run again on it to resume")
    sweep.add_argument("--restart", action="store_true", help="start over: delete the runs and results an "
                       "earlier sweep left in --folder (other files stay), then train every run")
    sweep.add_argument("--race", action="store_true", help="race the orders: train seed by seed and stop each "
                       "order once it is worse than the best or equivalent to it within --delta")
    sweep.add_argument("--delta", type=float, default=0.005, help="with --race: the smallest difference of the "
                       "metric that matters, in its units (for accuracy, 0.01 is one point)")
    sweep.add_argument("--alpha", type=float, default=0.05, help="with --race: the error rate a verdict accepts")
    sweep.add_argument("--min-seeds", type=positive_int, default=3,
                       help="with --race: the seeds every order trains before the first verdict")
    sweep.add_argument("--mlflow", default=None, metavar="URI", help="also log the sweep to this MLflow tracking "
                       "store (e.g. sqlite:///mlflow.db): a parent run, a child per (order, seed); the mlflow extra")
    return sweep


def _add_lab(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    lab = commands.add_parser("lab", help="open JupyterLab on a working copy of the bundled notebooks "
                              "(copied there the first time; the shipped ones stay clean)",
                              epilog="Any other option goes to JupyterLab, e.g. --no-browser, --port 8890, "
                                     "--ServerApp.token=SECRET, --allow-root (added for you when run as root); "
                                     "after -- everything does.")
    lab.add_argument("folder", nargs="?", default=None,
                     help="the working folder for the notebooks (default: ./composer-lab-notebooks)")
    lab.add_argument("--print-command", action="store_true",
                     help="prepare the folder and print the JupyterLab command instead of running it")
    return lab


def _add_check(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    check = commands.add_parser("check-notebooks", help="validate executed notebooks with nbval and the "
                                "shipped sanitize rules, on this CPU's kernels and on the scalar ones")
    check.add_argument("paths", nargs="+", help="notebook files or folders")
    check.add_argument("--kernels", default="native,default",
                       help="comma-separated CPU kernel sets to validate on: native (this CPU's), or an "
                            "ATEN_CPU_CAPABILITY value (default = scalar, avx2, avx512)")
    return check
