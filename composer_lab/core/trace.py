"""The trace: a record of every event fired and every algorithm / callback call, as pandas.

Rows go into plain Python lists during the run (one O(1) append per row, no pandas on the
hot path); :attr:`Trace.events`, :attr:`Trace.invocations` and :attr:`Trace.notes` build
DataFrames when read. The buffers survive an exception, so the trace of a run that failed
is readable up to the failure.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from collections import namedtuple
from typing import Any, Callable, Optional, Union

import pandas as pd

from composer_lab.core.event import _PHASE, Event

__all__ = ["Trace", "TRACE_LEVELS", "EVENT_COLUMNS", "INVOCATION_COLUMNS", "NOTE_COLUMNS",
           "EventRecord", "InvocationRecord", "NoteRecord", "write_parquet", "read_parquet"]


class EventRecord(namedtuple("EventRecord", "seq event epoch batch batch_in_epoch microbatch t_start t_end asked")):
    """One fired event, as the engine records it: ``event`` is the Event's value, ``t_start`` and
    ``t_end`` perf_counter readings; ``asked``, at level 'all', the labels of the algorithms
    listening at this event (those without an invocation at ``seq`` did not match: worked out
    when read, so the run pays nothing more), else None."""

    __slots__ = ()


class InvocationRecord(namedtuple("InvocationRecord",
                                  "seq event batch name kind order exit_code duration changed error")):
    """One algorithm or callback call: ``name`` its trace label, ``kind`` 'algorithm' or
    'callback', ``exit_code`` what it returned (as returned), ``changed`` a tuple of the State
    fields it changed, ``error`` 'Type: message' if it raised."""

    __slots__ = ()


class NoteRecord(namedtuple("NoteRecord", "seq epoch batch kind text")):
    """Something that is not an event (a setting changed from a widget, a resume), tied to the
    last event fired (``seq``)."""

    __slots__ = ()


TRACE_FORMAT = "composer_lab.trace/2"
"""What :meth:`Trace.save` writes into trace.json: 2 since ``changed`` is a list column and exit
codes JSON text."""

TRACE_LEVELS = ("all", "ran", "off")
"""'all': every event and call, also the ``match`` calls that said no; 'ran': events and the
calls that ran; 'off': nothing."""

_PHASE_OF = {e.value: phase for e, phase in _PHASE.items()}
_EVENT_DTYPE = pd.CategoricalDtype([e.value for e in Event], ordered=False)
_PHASE_DTYPE = pd.CategoricalDtype(["fit", "eval", "predict"])
_KIND_DTYPE = pd.CategoricalDtype(["algorithm", "callback"])
_DTYPES = {
    "events": {"seq": "int64", "phase": _PHASE_DTYPE, "event": _EVENT_DTYPE, "epoch": "int64", "batch": "int64",
               "batch_in_epoch": "int64", "microbatch": "Int64", "t_start": "float64", "duration": "float64"},
    "invocations": {"seq": "int64", "event": _EVENT_DTYPE, "batch": "int64", "name": "category",
                    "cls": "category", "kind": _KIND_DTYPE, "matched": "bool", "order": "Int64",
                    "exit_code": "object", "duration": "float64", "changed": "object", "error": "string"},
    "notes": {"seq": "int64", "epoch": "Int64", "batch": "Int64", "kind": "string", "text": "string"},
}
"""Each frame's columns, in order, and their dtypes (``name``'s categories are the trace's labels)."""

EVENT_COLUMNS, INVOCATION_COLUMNS, NOTE_COLUMNS = (tuple(columns) for columns in _DTYPES.values())


class Trace:
    """What happened in a run, in order. ``level`` is one of :data:`TRACE_LEVELS`."""

    def __init__(self, level: str = "all") -> None:
        if level not in TRACE_LEVELS:
            raise ValueError(f"trace level {level!r} is not one of {TRACE_LEVELS}: 'all' records also "
                             f"the algorithms that did not match, 'ran' only what ran, 'off' nothing")
        self.level = level
        self.recording = level != "off"  # (plain attributes, read at every event)
        self.records_unmatched = level == "all"
        self.seq = -1
        self._t0 = time.perf_counter()
        self.event_rows: list[tuple] = []
        self.invocation_rows: list[tuple] = []
        self._notes: list[tuple] = []
        self._labels: dict[int, tuple[Any, str]] = {}
        self._label_counts: dict[str, int] = {}
        self._cache: dict[str, tuple[tuple, pd.DataFrame]] = {}
        self.meta: dict[str, Any] = {}
        self._loaded: Optional[dict[str, pd.DataFrame]] = None

    # -- recording (called by the engine) ---------------------------------------------------
    def label(self, obj: Any) -> str:
        """A name unique to this object in this trace: the class name, then 'Name#2', 'Name#3'
        for further instances of the same class, in the order they were first seen."""
        entry = self._labels.get(id(obj))
        if entry is None:
            cls = type(obj).__name__
            count = self._label_counts[cls] = self._label_counts.get(cls, 0) + 1
            entry = self._labels[id(obj)] = (obj, cls if count == 1 else f"{cls}#{count}")
        return entry[1]

    # -- rows (appended by the engine) -------------------------------------------------------
    # The engine appends rows to event_rows and invocation_rows directly (a method call per row
    # would cost more than the row), as plain tuples in the field order of EventRecord and
    # InvocationRecord: the garbage collector stops tracking a plain tuple of numbers and strings,
    # not a tuple subclass, and a long trace of tracked rows made every collection, so every
    # row, about ten times slower. Read them as records (by name) with the methods below.
    def event_records(self) -> list[EventRecord]:
        """The fired events so far, as records."""
        return list(map(EventRecord._make, self.event_rows))

    def invocation_records(self) -> list[InvocationRecord]:
        """The calls so far, as records."""
        return list(map(InvocationRecord._make, self.invocation_rows))

    def note(self, kind: str, text: str, timestamp: Any = None) -> None:
        """Record something that is not an event: a setting changed from a widget, an
        interruption, a resumed checkpoint. It is tied to the last event fired."""
        epoch, batch = (timestamp.epoch, timestamp.batch) if timestamp is not None else (None, None)
        self._notes.append((self.seq, epoch, batch, kind, text))

    # -- reading ----------------------------------------------------------------------------
    @property
    def events(self) -> pd.DataFrame:
        """One row per fired event: ``seq``, ``phase``, ``event``, ``epoch``, ``batch`` (global),
        ``batch_in_epoch``, ``microbatch``, ``t_start`` (s since the trace began), ``duration`` (s)."""
        return self._frame("events", self._build_events)

    @property
    def invocations(self) -> pd.DataFrame:
        """One row per algorithm or callback call: ``seq`` (the event's), ``event``, ``batch``,
        ``name`` (unique per instance), ``cls``, ``kind``, ``matched``, ``order`` (position after
        the passes), ``exit_code`` (what ``apply`` returned, as returned), ``duration`` (s),
        ``changed`` (a tuple of the State fields replaced or mutated in place), ``error``. At
        level 'all', algorithms whose ``match`` said no appear with ``matched=False``."""
        return self._frame("invocations", self._build_invocations)

    @property
    def notes(self) -> pd.DataFrame:
        """Annotations: ``seq`` of the last event before them, ``epoch``, ``batch``, ``kind``, ``text``."""
        return self._frame("notes", self._build_notes)

    def _frame(self, key: str, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        """The DataFrame ``key``, built again only when rows were added since it was built."""
        if self._loaded is not None:
            return self._loaded[key]
        sizes = (len(self.event_rows), len(self.invocation_rows), len(self._notes))
        cached = self._cache.get(key)
        if cached is None or cached[0] != sizes:
            cached = self._cache[key] = (sizes, build())
        return cached[1]

    def _build_events(self) -> pd.DataFrame:
        t0 = self._t0
        rows = [(r.seq, _PHASE_OF[r.event], r.event, r.epoch, r.batch, r.batch_in_epoch, r.microbatch,
                 r.t_start - t0, r.t_end - r.t_start) for r in self.event_records()]
        df = pd.DataFrame.from_records(rows, columns=list(EVENT_COLUMNS))
        df = df.sort_values("seq", kind="stable", ignore_index=True)
        return df.astype(_DTYPES["events"])

    def _build_invocations(self) -> pd.DataFrame:
        # Within an event: what ran, in its order, then what did not match, in list order.
        cls = {label: type(obj).__name__ for obj, label in self._labels.values()}
        calls = self.invocation_records()
        rows = [((r.seq, 0, r.order), r.seq, r.event, r.batch, r.name, cls[r.name], r.kind, True, r.order,
                 r.exit_code, r.duration, r.changed, r.error) for r in calls]
        ran = {(r.seq, r.name) for r in calls if r.kind == "algorithm"}
        rows += [((e.seq, 1, pos), e.seq, e.event, e.batch, name, cls[name], "algorithm", False, None, None, None,
                  (), None)
                 for e in self.event_records() for pos, name in enumerate(e.asked or ())
                 if (e.seq, name) not in ran]
        rows.sort(key=lambda r: r[0])
        df = pd.DataFrame.from_records([r[1:] for r in rows], columns=list(INVOCATION_COLUMNS))
        names = [label for _, label in self._labels.values()]
        return df.astype({**_DTYPES["invocations"], "name": pd.CategoricalDtype(names)})

    def _build_notes(self) -> pd.DataFrame:
        df = pd.DataFrame.from_records(self._notes, columns=list(NOTE_COLUMNS))
        return df.astype(_DTYPES["notes"])

    # -- persistence --------------------------------------------------------------------------
    def save(self, folder: Union[str, os.PathLike]) -> Path:
        """Write events, invocations and notes as parquet files (plus trace.json) in ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("events", "invocations", "notes"):
            write_parquet(getattr(self, name), folder / f"{name}.parquet")
        info = {"format": TRACE_FORMAT, "level": self.level, "meta": self.meta,
                "names": list(self.invocations["name"].cat.categories)}
        (folder / "trace.json").write_text(json.dumps(info, default=str))
        return folder

    @classmethod
    def load(cls, folder: Union[str, os.PathLike]) -> "Trace":
        """Read a trace written by :meth:`save`; its DataFrames equal the saved ones."""
        folder = Path(folder)
        missing = [n for n in ("events.parquet", "invocations.parquet", "notes.parquet", "trace.json")
                   if not (folder / n).exists()]
        if missing:
            raise FileNotFoundError(f"{folder} is not a saved trace: {', '.join(missing)} missing; "
                                    f"write one with Trace.save(folder) or Trainer(save_folder=...)")
        info = json.loads((folder / "trace.json").read_text())
        if info.get("format") != TRACE_FORMAT:
            raise ValueError(f"{folder} holds a trace saved by an older composer_lab (format "
                             f"{info.get('format', 1)!r}, not {TRACE_FORMAT!r}: 'changed' as text); run it again "
                             f"and save it with this version")
        # Parquet keeps dtypes, except the categories of empty columns: restore them.
        frames = {name: read_parquet(folder / f"{name}.parquet").astype(dtypes) for name, dtypes in _DTYPES.items()}
        frames["invocations"]["name"] = frames["invocations"]["name"].astype(pd.CategoricalDtype(info["names"]))
        trace = cls.from_frames(info["level"], **frames)
        trace.meta = info.get("meta", {})
        return trace

    @classmethod
    def from_frames(cls, level: str = "all", **frames: pd.DataFrame) -> "Trace":
        """A trace that reads the frames given (``events``, ``invocations``, ``notes``; a missing
        one is empty) instead of recording: a loaded trace, or frames handed to the lab."""
        trace = cls(level)
        trace._loaded = {**{name: getattr(trace, name) for name in _DTYPES}, **frames}
        return trace

    def __repr__(self) -> str:
        return (f"Trace(level={self.level!r}, events={len(self.event_rows)}, "
                f"invocations={len(self.invocation_rows)}, unmatched_calls="
                f"{sum(len(r.asked or ()) for r in self.event_records())}, notes={len(self._notes)})")


def write_parquet(frame: pd.DataFrame, target: Any) -> None:
    """Write a trace frame (or any frame) to parquet, ``target`` a path or a binary file: an
    ``exit_code`` column goes as JSON text, so whatever ``apply`` returned can be written (what
    JSON cannot hold, as its repr); ``changed`` is a native list column. :func:`read_parquet`
    reads it back. Every writer of trace frames (Trace.save, checkpoints, runs) goes through it."""
    if "exit_code" in frame.columns:
        codes = [None if code is None else json.dumps(code, default=repr) for code in frame["exit_code"]]
        frame = frame.assign(exit_code=pd.Series(codes, index=frame.index, dtype="string"))
    frame.to_parquet(target, index=False)


def read_parquet(source: Any) -> pd.DataFrame:
    """Read what :func:`write_parquet` wrote: exit codes as the values they were, ``changed``
    as tuples of field names."""
    frame = pd.read_parquet(source)
    if "changed" in frame.columns:
        if any(isinstance(fields, str) for fields in frame["changed"]):
            raise ValueError("these trace frames were written by an older composer_lab ('changed' as text); "
                             "run the experiment again with this version")
        frame["changed"] = pd.Series([tuple(fields) for fields in frame["changed"]], index=frame.index, dtype=object)
    if "exit_code" in frame.columns:
        frame["exit_code"] = pd.Series([None if pd.isna(code) else json.loads(code) for code in frame["exit_code"]],
                                       index=frame.index, dtype=object)
    return frame
