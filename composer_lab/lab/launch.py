"""``composer-lab lab``: JupyterLab on a working copy of the bundled notebooks.

The notebooks shipped with the kit stay clean: the first time, each is copied into a folder
of the user's choice; later launches copy only notebooks that are not there yet, so the
user's edits and outputs are kept. Options the command does not know pass on to JupyterLab
(``--port 8890``, ``--no-browser``, ``--ServerApp.token=...``); run as root, ``--allow-root``
is added, with a note.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Sequence, Union

__all__ = ["bundled_notebooks", "prepare_folder", "lab_command", "split_jupyter_options", "allow_root",
           "running_as_root", "DEFAULT_FOLDER"]

DEFAULT_FOLDER = "composer-lab-notebooks"
"""Where ``composer-lab lab`` copies the notebooks when no folder is given (in the current one)."""


def bundled_notebooks() -> Path:
    """The folder of the notebooks shipped with the kit (``notebooks/`` of the checkout)."""
    folder = Path(__file__).resolve().parents[2] / "notebooks"
    if not any(folder.glob("*.ipynb")):
        raise FileNotFoundError(f"no bundled notebooks in {folder}; composer-lab lab needs the kit's checkout "
                                f"(pip install -e . from it), where notebooks/ holds them")
    return folder


def prepare_folder(folder: Union[str, Path]) -> list[Path]:
    """Copy into ``folder`` each bundled notebook it does not hold yet; returns those copied."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder; give a folder for the notebooks (it is made if "
                         f"missing), e.g. composer-lab lab my-notebooks")
    if folder.resolve() == bundled_notebooks():
        raise ValueError(f"{folder} is the bundled notebooks' own folder; give another one, so they stay clean "
                         f"(e.g. composer-lab lab {DEFAULT_FOLDER})")
    folder.mkdir(parents=True, exist_ok=True)
    copied = []
    for notebook in sorted(bundled_notebooks().glob("*.ipynb")):
        if not (folder / notebook.name).exists():
            copied.append(Path(shutil.copy2(notebook, folder / notebook.name)))
    return copied


def split_jupyter_options(arguments: Sequence[str], ours: Sequence[str]) -> tuple[list[str], list[str]]:
    """``arguments`` of ``composer-lab lab`` split into (ours, JupyterLab's): the options named in
    ``ours`` and the folder stay ours; every other option goes to JupyterLab with its value, so
    ``--port 8890`` passes on as a pair instead of 8890 being read as the folder; after ``--``
    everything is JupyterLab's."""
    mine: list[str] = []
    theirs: list[str] = []
    rest = list(arguments)
    while rest:
        token = rest.pop(0)
        if token == "--":
            theirs += rest
            break
        if token in ours or not token.startswith("-"):
            mine.append(token)
            continue
        theirs.append(token)
        if rest and not rest[0].startswith("-") and _takes_value(token):
            theirs.append(rest.pop(0))
    return mine, theirs


def _takes_value(option: str) -> bool:
    """Whether JupyterLab reads the next word as ``option``'s value: a ``--Class.trait`` setting or
    one of its aliases (``--port``, ``--ip``, ...); ``--name=value`` carries its value already.
    JupyterLab's table is imported only for a bare option followed by a word (about 3 s)."""
    name = option.lstrip("-")
    if "=" in name:
        return False
    if "." in name:
        return True
    from jupyterlab.labapp import LabApp

    return name in LabApp.aliases


def allow_root(options: Sequence[str], is_root: bool) -> tuple[list[str], str]:
    """``options`` with ``--allow-root`` added when running as root, and a note saying so (or
    ""). JupyterLab refuses to start as root without it, and containers and CI runners run as
    root; the note says what that means."""
    options = list(options)
    given = any(o == "--allow-root" or o.startswith("--ServerApp.allow_root") for o in options)
    if not is_root or given:
        return options, ""
    return options + ["--allow-root"], ("running as root: added --allow-root (JupyterLab refuses root without "
                                        "it); the server and its kernels run with root's rights, so keep it "
                                        "on 127.0.0.1 (the default --ip) and keep its token")


def running_as_root() -> bool:
    """Whether this process runs as root (never on systems without user ids)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(folder: Union[str, Path], options: Sequence[str] = ()) -> list[str]:
    """The command that serves JupyterLab on ``folder`` with this Python (so its kernel sees
    composer_lab), followed by ``options`` for JupyterLab."""
    return [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={Path(folder).resolve()}", *options]
