"""Where a run comes from: one run's trace and metrics, from a trainer, a run, a folder or frames.

:func:`run_data` turns any of those into a :class:`~composer_lab.trainer.run.Run`, the one type
the lab and the explorer read runs through, so each plot and diff accepts them all and is written once.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Optional

import pandas as pd

from composer_lab.core.engine import Engine
from composer_lab.core.logger import METRIC_COLUMNS, Logger
from composer_lab.core.state import State
from composer_lab.core.time import Time, TimeUnit
from composer_lab.core.trace import EVENT_COLUMNS, INVOCATION_COLUMNS, NOTE_COLUMNS, Trace
from composer_lab.trainer.duration import total_batches
from composer_lab.trainer.run import Run

__all__ = ["RunData", "run_data"]

RunData = Run
"""The lab's name for :class:`~composer_lab.trainer.run.Run` (the same type, not a copy)."""

_FRAMES = {"events": EVENT_COLUMNS, "invocations": INVOCATION_COLUMNS, "notes": NOTE_COLUMNS,
           "metrics": METRIC_COLUMNS}
_ACCEPTED = ("a Trainer, a Run, a saved run folder, a Trace, a trace or metrics DataFrame, or a dict "
             "of them ({'events': ..., 'invocations': ..., 'notes': ..., 'metrics': ...})")


def _saved_length(config: Mapping, events: pd.DataFrame) -> Optional[int]:
    """A saved run's length in batches: its max_duration if given in batches, else the
    training steps its trace recorded."""
    duration = Time.from_timestring(config["max_duration"]) if "max_duration" in config else None
    if duration is not None and duration.unit is TimeUnit.BATCH:
        return duration.value
    steps = (events["event"].astype(str) == "batch_end") & (events["phase"].astype(str) == "fit")
    return int(steps.sum()) or None


def _from_frames(frames: Mapping[str, pd.DataFrame], name: str = "run") -> Run:
    """A run of the frames given (missing ones empty), with no config."""
    metrics = frames.get("metrics", Logger().metrics)
    trace = Trace.from_frames(**{kind: frame for kind, frame in frames.items() if kind != "metrics"})
    return Run(name, {}, trace, metrics)


def _from_frame(frame: pd.DataFrame, name: str) -> Run:
    for kind, columns in _FRAMES.items():
        if set(columns) <= set(frame.columns):
            return _from_frames({kind: frame}, name)
    raise ValueError(f"cannot tell what this DataFrame is: its columns {list(frame.columns)} are not those "
                     f"of trace.events, trace.invocations, trace.notes or trainer.metrics")


def run_data(source: Any, name: Optional[str] = None) -> Run:
    """Read a run from ``source``: a Trainer (``.state``, ``.trace``, ``.metrics``) or an
    Engine, a Run, a saved run folder, a Trace, a DataFrame (told apart by its columns) or a
    dict of frames. ``name`` overrides its name. A run's ``total_batches``, unless a live
    trainer gives it, is read from its config's max_duration, else from its trace."""
    if isinstance(getattr(source, "state", None), State) and isinstance(getattr(source, "trace", None), Trace):
        data = _from_live(source)
    else:
        data = _from_record(source, name)
        if data.total_batches is None:
            data = replace(data, total_batches=_saved_length(data.config, data.events))
    return data if name is None else replace(data, name=name)


def _from_live(source: Any) -> Run:
    """The run a live Trainer or Engine is training."""
    state = source.state
    metrics = source.logger.metrics if isinstance(source, Engine) else source.metrics
    return Run(state.run_name, {}, source.trace, metrics, algorithms=list(state.algorithms),
               total_batches=total_batches(state))


def _from_record(source: Any, name: Optional[str]) -> Run:
    """The run recorded in ``source``: a folder, a Run, a Trace, a DataFrame or a dict of frames."""
    if isinstance(source, (str, os.PathLike)):
        return _from_folder(Path(source))
    if isinstance(source, Run):
        return source
    if isinstance(source, Trace):
        return Run("run", {}, source, Logger().metrics)
    if isinstance(source, pd.DataFrame):
        return _from_frame(source, name or "run")
    if isinstance(source, Mapping):
        unknown = set(source) - set(_FRAMES)
        if unknown:
            raise ValueError(f"unknown frames {sorted(unknown)}; a dict of frames uses the keys {list(_FRAMES)}")
        return _from_frames(source)
    raise TypeError(f"cannot read a run from {type(source).__name__}; give {_ACCEPTED}")


def _from_folder(folder: Path) -> Run:
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder; give a folder written by Run.save(folder)")
    return Run.load(folder)
