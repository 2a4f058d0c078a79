"""A sweep folder: the experiment it belongs to, one run folder and one result row per trial.

Layout: ``sweep.json`` (the experiment: algorithms and factory), ``rows/<key>.json`` (one
result row per finished (order, seed), each written atomically: into a temporary file, then
renamed), ``runs/<key>/`` (the run folder, as ``Run.save`` writes it) and ``results.parquet``
(all rows, rewritten when a sweep's ``run()`` ends). A trial counts as finished when its row
exists, so a sweep resumed on the folder skips exactly those.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["SweepFolder", "SWEEP_FORMAT"]

SWEEP_FORMAT = "composer_lab.sweep/1"


class SweepFolder:
    """The files of one sweep under ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def claim(self, experiment: dict[str, Any]) -> None:
        """Mark the folder as ``experiment``'s, or refuse if it holds another experiment's results."""
        info_path = self.path / "sweep.json"
        if info_path.is_file():
            info = json.loads(info_path.read_text())
            differs = [k for k in experiment if info.get("experiment", {}).get(k) != experiment[k]]
            if differs:
                key = differs[0]
                raise ValueError(f"the sweep folder {self.path} holds results of another experiment (its {key} is "
                                 f"{info.get('experiment', {}).get(key)!r}, this sweep's is {experiment[key]!r}); "
                                 f"results of different experiments are not mixed: choose a new folder, or delete "
                                 f"this one to start over")
            return
        if self.path.exists() and any(self.path.iterdir()):
            raise ValueError(f"the folder {self.path} is not a sweep folder (no sweep.json) and is not empty; choose "
                             f"a new or empty folder for the sweep")
        (self.path / "rows").mkdir(parents=True, exist_ok=True)
        _write_atomically(info_path, {"format": SWEEP_FORMAT, "experiment": experiment})

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
