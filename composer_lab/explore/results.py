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
from typing import Any, Mapping, Sequence

from composer_lab.explore.identity import differences, source_diffs

__all__ = ["SweepFolder", "SweepFolderTaken", "SWEEP_FORMAT", "OWNED", "RESTART"]

SWEEP_FORMAT = "composer_lab.sweep/2"
OWNED = ("sweep.json", "rows", "runs", "results.parquet")
"""What a sweep writes in its folder, and what starting over deletes."""
RESTART = "pass resume=False"
"""How the Python API starts a sweep over (the command line: ``--restart``)."""


class SweepFolderTaken(ValueError):
    """A sweep folder whose results a sweep may not reuse: another version's (``changes`` empty) or
    another experiment's (``changes``: what differs, one line each; ``diffs``: the changed lines of
    the code). :meth:`worded` says it in the caller's terms: the command line names its flags."""

    def __init__(self, folder: Path, problem: str, changes: Sequence[str] = (), diffs: Sequence[str] = ()) -> None:
        self.folder, self.problem, self.changes, self.diffs = folder, problem, list(changes), list(diffs)
        super().__init__(self.worded())

    def worded(self, restart: str = RESTART, names: Mapping[str, str] = {}) -> str:
        """The message, with ``restart`` as the way to start over and each setting in ``names``
        (e.g. ``{'SweepExperiment.epochs': '--epochs'}``) named so."""
        changes = [_renamed(line, names) for line in self.changes]
        shown = "; ".join(changes[:8]) + (f"; and {len(changes) - 8} more" if len(changes) > 8 else "")
        what = (f"holds results of another experiment: {shown}. Results of different experiments are not mixed"
                if changes else self.problem)
        return (f"the sweep folder {self.folder} {what}: choose a new folder, or {restart} to delete its runs and "
                f"start over" + "".join(f"\n{diff}" for diff in self.diffs))


def _renamed(line: str, names: Mapping[str, str]) -> str:
    """``line`` with the setting it starts with named as ``names`` says."""
    for key, name in names.items():
        if line.startswith(f"{key}:"):
            return name + line[len(key):]
    return line



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
                raise SweepFolderTaken(self.path, f"was written by another version of composer_lab (format "
                                                  f"{info.get('format')!r}, this one writes {SWEEP_FORMAT!r}); its "
                                                  f"results are not reused")
            changed = differences(info.get("experiment", {}), experiment)
            if changed:
                raise SweepFolderTaken(self.path, "", changed, source_diffs(info.get("experiment", {}), experiment))
            return
        if not started_over and self.path.exists() and any(self.path.iterdir()):
            raise ValueError(f"the folder {self.path} is not a sweep folder (no sweep.json) and is not empty; choose "
                             f"a new or empty folder for the sweep")
        (self.path / "rows").mkdir(parents=True, exist_ok=True)
        _write_atomically(info_path, {"format": SWEEP_FORMAT, "experiment": experiment})

    def claim_data(self, data: Mapping[str, str]) -> None:
        """Record the fingerprints of the data the runs read (:mod:`~composer_lab.explore.data_identity`)
        the first time; later, refuse the folder when a data set fingerprinted both times changed."""
        info_path = self.path / "sweep.json"
        info = json.loads(info_path.read_text())
        known = info.get("data")
        if known is None:
            _write_atomically(info_path, {**info, "data": dict(data)})
            return
        changed = [f"{name} data: {known[name]} -> {data[name]}" for name in sorted(set(known) & set(data))
                   if known[name] != data[name]]
        if changed:
            raise SweepFolderTaken(self.path, "", changed)

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
