"""What the plots read: one run's trace and metrics, from a trainer, a run, a folder or frames.

:func:`run_data` turns any of those into a :class:`RunData`, so each plot function accepts
them all and is written once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional

import pandas as pd

from composer_lab.core.engine import Engine
from composer_lab.core.logger import METRIC_COLUMNS
from composer_lab.core.state import State
from composer_lab.core.time import Time, TimeUnit
from composer_lab.core.trace import EVENT_COLUMNS, INVOCATION_COLUMNS, NOTE_COLUMNS, Trace
from composer_lab.trainer.duration import total_batches
from composer_lab.trainer.run import Run

__all__ = ["RunData", "run_data"]

_FRAMES = {"events": EVENT_COLUMNS, "invocations": INVOCATION_COLUMNS, "notes": NOTE_COLUMNS,
           "metrics": METRIC_COLUMNS}
_ACCEPTED = ("a Trainer, a Run, a saved run folder, a Trace, a trace or metrics DataFrame, or a dict "
             "of them ({'events': ..., 'invocations': ..., 'notes': ..., 'metrics': ...})")


def _empty(kind: str) -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in _FRAMES[kind]})


@dataclass
class RunData:
    """One run's frames (missing ones are empty), its name, and what is known of its setup:
    ``algorithms`` (live objects, from a trainer) and ``total_batches`` (the run's length)."""

    name: str = "run"
    events: pd.DataFrame = field(default_factory=lambda: _empty("events"))
    invocations: pd.DataFrame = field(default_factory=lambda: _empty("invocations"))
    notes: pd.DataFrame = field(default_factory=lambda: _empty("notes"))
    metrics: pd.DataFrame = field(default_factory=lambda: _empty("metrics"))
    config: dict = field(default_factory=dict)
    algorithms: list = field(default_factory=list)
    total_batches: Optional[int] = None

    def metric(self, name: str, phase: Optional[str] = None) -> pd.Series:
        """The values of metric ``name`` by batch (the mean where a batch logged several)."""
        m = self.metrics
        rows = m[m["name"] == name] if phase is None else m[(m["name"] == name) & (m["phase"] == phase)]
        return rows.groupby("batch", sort=True)["value"].mean()


def _saved_length(config: Mapping, events: pd.DataFrame) -> Optional[int]:
    """A saved run's length in batches: its max_duration if given in batches, else the
    training steps its trace recorded."""
    duration = Time.from_timestring(config["max_duration"]) if "max_duration" in config else None
    if duration is not None and duration.unit is TimeUnit.BATCH:
        return duration.value
    steps = (events["event"].astype(str) == "batch_end") & (events["phase"].astype(str) == "fit")
    return int(steps.sum()) or None


def _from_trace(trace: Trace, **extra: Any) -> RunData:
    return RunData(events=trace.events, invocations=trace.invocations, notes=trace.notes, **extra)


def _from_frame(frame: pd.DataFrame, name: str) -> RunData:
    for kind, columns in _FRAMES.items():
        if set(columns) <= set(frame.columns):
            return RunData(name=name, **{kind: frame})
    raise ValueError(f"cannot tell what this DataFrame is: its columns {list(frame.columns)} are not those "
                     f"of trace.events, trace.invocations, trace.notes or trainer.metrics")


def _from_folder(folder: Path) -> RunData:
    return run_data(Run.load(folder))


def run_data(source: Any, name: Optional[str] = None) -> RunData:
    """Read a run from ``source``: a Trainer (``.state``, ``.trace``, ``.metrics``) or an
    Engine, a Run
    (``.name``, ``.config``, ``.trace``, ``.metrics``), a saved run folder, a Trace, a
    DataFrame (told apart by its columns) or a dict of frames. ``name`` overrides its name."""
    if isinstance(source, RunData):
        data = source
    elif isinstance(source, (str, os.PathLike)):
        folder = Path(source)
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a folder; give a folder written by Run.save(folder)")
        data = _from_folder(folder)
    elif isinstance(source, Trace):
        data = _from_trace(source)
    elif isinstance(source, pd.DataFrame):
        data = _from_frame(source, name or "run")
    elif isinstance(source, Mapping):
        unknown = set(source) - set(_FRAMES)
        if unknown:
            raise ValueError(f"unknown frames {sorted(unknown)}; a dict of frames uses the keys {list(_FRAMES)}")
        data = RunData(**dict(source))
    elif isinstance(getattr(source, "state", None), State) and isinstance(getattr(source, "trace", None), Trace):
        state = source.state
        metrics = source.logger.metrics if isinstance(source, Engine) else source.metrics
        data = _from_trace(source.trace, name=state.run_name, metrics=metrics,
                           algorithms=list(state.algorithms), total_batches=total_batches(state))
    elif isinstance(source, Run):
        config = dict(source.config)
        data = _from_trace(source.trace, name=source.name, metrics=source.metrics, config=config)
        data.total_batches = _saved_length(config, data.events)
    else:
        raise TypeError(f"cannot read a run from {type(source).__name__}; give {_ACCEPTED}")
    return data if name is None else replace(data, name=name)
