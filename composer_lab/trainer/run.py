"""A run folder: the record of one training run, to compare runs side by side.

Layout: ``config.json`` (name and settings), ``metrics.parquet`` (the logger's tidy metrics)
and ``trace/`` (:meth:`Trace.save`: events, invocations and notes as parquet); a run trained
under torchrun adds ``ranks/`` (:meth:`RankTraces.save`: every rank's trace as ``rank<r>/``).
Folders written before that hold ``ranks/events.parquet`` etc., frames with a ``rank`` column,
and still load.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import pandas as pd

from composer_lab.core.algorithm import describe
from composer_lab.core.passes import pass_name
from composer_lab.core.trace import Trace, read_parquet, write_parquet
from composer_lab.trainer import distributed
from composer_lab.trainer.rank_traces import RankTraces

__all__ = ["Run", "RUN_FORMAT", "run_config", "default_run_name", "check_run_folder", "RunFolderTaken"]

RUN_FORMAT = "composer_lab.run/1"


@dataclass
class Run:
    """One run: its ``name``, ``config`` (JSON-ready settings), ``trace`` and ``metrics``;
    ``rank_traces`` holds every rank's trace for a run trained under torchrun (a
    :class:`RankTraces`; the frames themselves when read from a folder written before it).

    Exporters are functions over a run, in :mod:`composer_lab.tracking` (``to_mlflow(run, ...)``,
    ``to_tensorboard(run, ...)``): this layer knows no tracker.

    The lab reads every run through this type (:func:`~composer_lab.explore.sources.run_data`),
    which also fills in what it knows of the setup: ``algorithms`` (live objects, from a
    trainer) and ``total_batches`` (the run's length)."""

    name: str
    config: dict[str, Any]
    trace: Trace
    metrics: pd.DataFrame = field(repr=False)
    rank_traces: Optional[Mapping[str, pd.DataFrame]] = field(default=None, repr=False)
    algorithms: list = field(default_factory=list, repr=False)
    total_batches: Optional[int] = None

    @property
    def events(self) -> pd.DataFrame:
        """The trace's events (likewise :attr:`invocations` and :attr:`notes`)."""
        return self.trace.events

    @property
    def invocations(self) -> pd.DataFrame:
        return self.trace.invocations

    @property
    def notes(self) -> pd.DataFrame:
        return self.trace.notes

    def metric(self, name: str, phase: Optional[str] = None) -> pd.Series:
        """The values of metric ``name`` by batch (the mean where a batch logged several)."""
        m = self.metrics
        rows = m[m["name"] == name] if phase is None else m[(m["name"] == name) & (m["phase"] == phase)]
        return rows.groupby("batch", sort=True)["value"].mean()

    def save(self, folder: Union[str, os.PathLike], overwrite: bool = False) -> Path:
        """Write the run to ``folder``; a folder that holds another run (or other files) is
        only replaced with ``overwrite=True``."""
        folder = Path(folder)
        if folder.exists() and not overwrite:
            _refuse_foreign(folder, self.name, self.config.get("run_id"))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(
            {"format": RUN_FORMAT, "name": self.name, "config": self.config}, indent=2, default=str))
        self.metrics.to_parquet(folder / "metrics.parquet", index=False)
        self.trace.save(folder / "trace")
        if isinstance(self.rank_traces, RankTraces):
            self.rank_traces.save(folder / "ranks")  # (replacing what ranks/ held)
            return folder
        # Ranks left by a distributed run saved here before must not pass for this run's.
        shutil.rmtree(folder / "ranks", ignore_errors=True)
        if self.rank_traces is not None:  # frames read from a folder written before RankTraces
            (folder / "ranks").mkdir()
            for name, frame in self.rank_traces.items():
                write_parquet(frame, folder / "ranks" / f"{name}.parquet")
        return folder

    @classmethod
    def load(cls, folder: Union[str, os.PathLike]) -> "Run":
        """Read a run written by :meth:`save`."""
        folder = Path(folder)
        info = _read_config(folder)
        if info is None:
            raise FileNotFoundError(f"{folder} is not a run folder (no config.json from Run.save); write one "
                                    f"with trainer.to_run().save(folder) or `composer-lab run`")
        return cls(info["name"], info.get("config", {}), Trace.load(folder / "trace"),
                   pd.read_parquet(folder / "metrics.parquet"), _load_rank_traces(folder / "ranks"))


def _load_rank_traces(ranks: Path) -> Optional[Mapping[str, pd.DataFrame]]:
    """The rank traces in ``ranks`` (:meth:`RankTraces.load`, read when asked); the frames of a
    folder written before them; None when the run has none."""
    if not ranks.is_dir():
        return None
    if any(ranks.glob("*.parquet")):
        return {path.stem: read_parquet(path) for path in sorted(ranks.glob("*.parquet"))}
    return RankTraces.load(ranks)


def run_config(trainer: Any) -> dict[str, Any]:
    """The settings of ``trainer``'s run, as JSON-ready values (``config.json``)."""
    state = trainer.state
    return {
        "run_name": state.run_name,
        "run_id": trainer.run_id,
        "model": type(state.model).__name__,
        "loss_fn": getattr(state.loss_fn, "__name__", repr(state.loss_fn)) if state.loss_fn else None,
        "max_duration": str(state.max_duration),
        "optimizers": [type(o).__name__ for o in state.optimizers],
        "lr": state.optimizers[0].param_groups[0]["lr"] if state.optimizers else None,
        "schedulers": [type(s).__name__ for s in state.schedulers],
        "algorithms": [describe(a) for a in state.algorithms],
        "passes": [pass_name(p) for p in trainer.engine.passes],
        "device": str(state.device),
        "precision": state.precision,
        "device_train_microbatch_size": trainer.microbatch_size,
        "seed": state.seed,
        "eval_interval": str(trainer.eval_interval.time),
        "batch_size": getattr(state.dataloader, "batch_size", None),  # per rank under torchrun
        "world_size": distributed.get_world_size(),
        "shard_dataloaders": trainer.shard_dataloaders,
        "trace": trainer.trace.level,
        "stop_on_nonfinite_loss": trainer.nonfinite.mode,
        "flush_interval": trainer.flush_interval,
        "started_at": trainer.trace.meta.get("started_at"),  # (unix seconds when the trace began: its times' origin)
    }


def default_run_name() -> str:
    """A run's name when none is given: the start time, to the millisecond."""
    return time.strftime("run-%Y%m%d-%H%M%S-") + f"{time.time_ns() // 1_000_000 % 1000:03d}"


def _read_config(folder: Path) -> Any:
    path = folder / "config.json"
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


def check_run_folder(folder: Union[str, os.PathLike], name: str, run_id: Any = None) -> None:
    """Refuse now what :meth:`Run.save` would refuse at the end: saving run ``name`` (``run_id``;
    None for a run not made yet, which no folder holds) into ``folder`` without ``overwrite``. A
    caller checks before any training so that no run is lost to a name clash."""
    folder = Path(folder)
    if folder.exists():
        _refuse_foreign(folder, name, run_id)


class RunFolderTaken(ValueError):
    """A folder :meth:`Run.save` will not write over without ``overwrite``: ``holds`` says what it
    holds ('other files', "the run 'x'", 'another run of the same name'); :meth:`worded` says the
    fixes in the caller's terms (the command line: ``--name``, ``--overwrite``)."""

    def __init__(self, folder: Path, name: str, holds: str) -> None:
        self.folder, self.name, self.holds = folder, name, holds
        super().__init__(self.worded())

    def worded(self, rename: str = "Trainer(run_name=...)", overwrite: str = "pass overwrite=True") -> str:
        """The message, with ``rename`` as the way to name the run and ``overwrite`` as the way to write over."""
        start = f"cannot save run {self.name!r} to {self.folder}: "
        if self.holds == "other files":
            return start + f"the folder holds other files; choose an empty or new folder, or {overwrite} to write " \
                           f"over it"
        if self.holds == "another run of the same name":
            return start + (f"it holds another run of the same name; give this run another name ({rename}), or "
                            f"{overwrite} to replace that run")
        return start + f"it holds {self.holds}; choose another folder, or {overwrite} to replace that run"


def _refuse_foreign(folder: Path, name: str, run_id: Any) -> None:
    if not folder.is_dir():
        raise ValueError(f"cannot save run {name!r} to {folder}: it is a file; choose a folder path")
    info = _read_config(folder)
    if info is None and not any(folder.iterdir()):
        return
    if info is None or info.get("format") != RUN_FORMAT:
        raise RunFolderTaken(folder, name, "other files")
    if info.get("name") != name:
        raise RunFolderTaken(folder, name, f"the run {info.get('name')!r}")
    if info.get("config", {}).get("run_id") != run_id:
        raise RunFolderTaken(folder, name, "another run of the same name")
