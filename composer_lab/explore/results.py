"""A sweep folder: the experiment it belongs to, one run folder and one result row per trial.

Layout: ``sweep.json`` (the experiment: :mod:`~composer_lab.explore.identity`),
``rows/<key>.json`` (one result row per finished (order, seed), each written atomically: into a
temporary file, then renamed), ``runs/<key>/`` (the run folder, as ``Run.save`` writes it) and
``results.parquet`` (all rows, rewritten when a sweep's ``run()`` ends). A key names the list
order by its positions and the seed (``o1-0-2__seed3``). A trial counts as finished when its row
exists, so a sweep resumed on the folder skips exactly those.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from composer_lab.explore.identity import differences

__all__ = ["SweepFolder", "SWEEP_FORMAT", "OWNED"]

SWEEP_FORMAT = "composer_lab.sweep/2"
OWNED = ("sweep.json", "rows", "runs", "results.parquet")
"""What a sweep writes in its folder, and what starting over deletes."""


class SweepFolder:
    """The files of one sweep under ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def claim(self, experiment: dict[str, Any], resume: bool = True) -> None:
        """Mark the folder as ``experiment``'s; refuse it if it holds another experiment's results,
        with what differs. ``resume=False`` first deletes what a sweep wrote there (:data:`OWNED`)."""
        info_path = self.path / "sweep.json"
        started_over = info_path.is_file() and not resume
        if started_over:
            self.clear()
        if info_path.is_file():
            info = json.loads(info_path.read_text())
            if info.get("format") != SWEEP_FORMAT:
                raise ValueError(f"the sweep folder {self.path} was written by another version of composer_lab "
                                 f"(format {info.get('format')!r}, this one writes {SWEEP_FORMAT!r}); its results are "
                                 f"not reused: choose a new folder, or pass resume=False to delete its runs and "
                                 f"start over")
            changed = differences(info.get("experiment", {}), experiment)
            if changed:
                shown = "; ".join(changed[:8]) + (f"; and {len(changed) - 8} more" if len(changed) > 8 else "")
                raise ValueError(f"the sweep folder {self.path} holds results of another experiment: {shown}. Results "
                                 f"of different experiments are not mixed: choose a new folder, or pass resume=False "
                                 f"to delete its runs and start over")
            return
        if not started_over and self.path.exists() and any(self.path.iterdir()):
            raise ValueError(f"the folder {self.path} is not a sweep folder (no sweep.json) and is not empty; choose "
                             f"a new or empty folder for the sweep")
        (self.path / "rows").mkdir(parents=True, exist_ok=True)
        _write_atomically(info_path, {"format": SWEEP_FORMAT, "experiment": experiment})

    def clear(self) -> None:
        """Delete what a sweep wrote in the folder (:data:`OWNED`); other files stay."""
        for name in OWNED:
            path = self.path / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def run_folder(self, key: str) -> Path:
        return self.path / "runs" / key

    def write_row(self, key: str, row: dict[str, Any]) -> None:
        """Write a trial's result row: all of it or nothing, even if the process dies meanwhile."""
        _write_atomically(self.path / "rows" / f"{key}.json", row)

    def rows(self) -> dict[str, dict[str, Any]]:
        """Every finished trial's row, by key."""
        return {path.stem: json.loads(path.read_text()) for path in sorted((self.path / "rows").glob("*.json"))}


def _write_atomically(path: Path, data: Any) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as file:
            json.dump(data, file, default=str)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
