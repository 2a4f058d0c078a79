"""The notebook commands: ``lab`` opens JupyterLab on a working copy of the bundled notebooks,
``check-notebooks`` validates notebooks as CI validates the bundled ones."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

__all__ = ["lab_command", "check_notebooks_command"]


def check_notebooks_command(args: argparse.Namespace) -> int:
    """Validate the notebooks ``args.paths`` once per kernel set; pytest's exit code."""
    from composer_lab.notebook_check import check_notebooks

    return check_notebooks(args.paths, kernels=[k.strip() for k in args.kernels.split(",") if k.strip()])


def lab_command(args: argparse.Namespace) -> int:
    """Copy the notebooks into ``args.folder`` (those not there yet) and run JupyterLab on it,
    with ``args.jupyter`` (the options this command does not know) passed on."""
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
