"""``composer-lab lab``: JupyterLab on a working copy of the bundled notebooks.

The notebooks shipped with the kit stay clean: the first time, each is copied into a folder
of the user's choice; later launches copy only notebooks that are not there yet, so the
user's edits and outputs are kept.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Union

__all__ = ["bundled_notebooks", "prepare_folder", "lab_command", "DEFAULT_FOLDER"]

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


def lab_command(folder: Union[str, Path], open_browser: bool = True) -> list[str]:
    """The command that serves JupyterLab on ``folder`` with this Python (so its kernel sees
    composer_lab)."""
    command = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={Path(folder).resolve()}"]
    return command + ([] if open_browser else ["--no-browser"])
