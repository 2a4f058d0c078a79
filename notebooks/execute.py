"""Execute the notebooks in place, as CI validates them, and store them small.

    python notebooks/execute.py                  # every notebook in notebooks/
    python notebooks/execute.py 02_ordering      # those whose file name contains an argument

Each notebook runs top to bottom in a fresh kernel of the current environment, from the
notebooks folder (as ``pytest --nbval --nbval-current-env`` runs it). Widget state is not
stored (the widgets' text form is what nbval compares), so the files stay small and diffs
readable. Prints how long each notebook took.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

FOLDER = Path(__file__).resolve().parent
KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


def execute(path: Path) -> float:
    """Run the notebook at ``path`` and write it back with its outputs; returns the seconds taken."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = KERNEL
    start = time.perf_counter()
    NotebookClient(nb, kernel_name="python3", timeout=600, store_widget_state=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    return seconds


def main(names: list[str]) -> None:
    paths = [p for p in sorted(FOLDER.glob("*.ipynb")) if not names or any(n in p.name for n in names)]
    if not paths:
        raise SystemExit(f"no notebook in {FOLDER} matches {names}")
    total = 0.0
    for path in paths:
        seconds = execute(path)
        total += seconds
        print(f"{path.name}: {seconds:.1f} s")
    print(f"all: {total:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
