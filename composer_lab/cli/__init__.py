"""The command line, ``composer-lab`` (and ``python -m composer_lab``): ``run`` trains a small
experiment and writes a run folder (:mod:`.run`); ``sweep`` trains every distinct order of some
algorithms with several seeds and ranks the orders (:mod:`.sweep`); ``lab`` opens JupyterLab on
a working copy of the bundled notebooks and ``check-notebooks`` validates notebooks as CI
validates the bundled ones (:mod:`.notebooks`). Every refusal is one line in the command line's
terms (:mod:`.terms`) and exit status 2.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from composer_lab.cli.algorithms import parse_algorithms
from composer_lab.cli.experiment import SweepExperiment
from composer_lab.cli.parser import DEFAULT_ALGORITHMS, DEFAULT_SWEEP_ALGORITHMS, build_parser, positive_int
from composer_lab.cli.run import check_run_folder
from composer_lab.cli.terms import reword

__all__ = ["main", "execute", "build_parser", "parse_algorithms", "positive_int", "check_run_folder",
           "SweepExperiment", "DEFAULT_ALGORITHMS", "DEFAULT_SWEEP_ALGORITHMS"]

REFUSALS = (ValueError, TypeError, FileNotFoundError, ModuleNotFoundError)
"""What a command raises for input it refuses: printed as one line, exit status 2."""


def execute(argv: Sequence[str]) -> int:
    """Run the command ``argv`` names (``['run', '--epochs', '1']``); its refusals are raised with
    their message in the command line's terms."""
    argv = list(argv)
    jupyter: list[str] = []
    if argv[:1] == ["lab"]:  # what `lab` does not know goes to JupyterLab
        from composer_lab.lab.launch import split_jupyter_options

        ours, jupyter = split_jupyter_options(argv[1:], ours=("--print-command", "-h", "--help"))
        argv = ["lab", *ours]
    args = build_parser().parse_args(argv)
    args.jupyter = jupyter
    try:
        return args.handler(args)
    except REFUSALS as err:
        reword(err)
        raise


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``composer-lab`` and ``python -m composer_lab``: :func:`execute`, a refusal
    printed as ``composer-lab: error: <message>`` with exit status 2."""
    try:
        return execute(sys.argv[1:] if argv is None else argv)
    except REFUSALS as err:
        print(f"composer-lab: error: {err}", file=sys.stderr)
        return 2
