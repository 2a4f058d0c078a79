"""The trace: a record of every event fired and every algorithm / callback call, as pandas.

Rows go into plain Python lists during the run (one O(1) append per row, no pandas on the
hot path). Every ``chunk_rows`` events :meth:`Trace.spill` turns them into columns and writes
them to parquet (a :class:`~composer_lab.tables.ChunkStore`), so the memory a trace holds is
bounded however long the run; at level 'all' an event keeps the labels of the algorithms that
did not match as one dictionary-encoded value, not as rows. :meth:`Trace.query` reads only the
chunks and rows a question needs; :attr:`Trace.events`, :attr:`Trace.invocations` and
:attr:`Trace.notes` are the whole DataFrames. The rows survive an exception, so the trace of a
run that failed is readable up to the failure.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from collections import namedtuple
from operator import itemgetter
from typing import Any, Optional, Union

import numpy as np
import pandas as pd

from composer_lab import tables
from composer_lab.tables import Bounds, read_parquet, write_parquet
from composer_lab.core.event import _PHASE, Event

__all__ = ["Trace", "TRACE_LEVELS", "EVENT_COLUMNS", "INVOCATION_COLUMNS", "NOTE_COLUMNS",
           "EventRecord", "InvocationRecord", "NoteRecord", "write_parquet", "read_parquet"]


class EventRecord(namedtuple("EventRecord", "seq event epoch batch batch_in_epoch microbatch t_start t_end asked")):
    """One fired event, as the engine records it: ``event`` is the Event's value, ``t_start`` and
    ``t_end`` perf_counter readings; ``asked``, at level 'all', the labels of the algorithms
    listening at this event (those without an invocation at ``seq`` did not match: worked out
    when spilled or read, so the run pays nothing more), else None."""

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


TRACE_FORMAT = "composer_lab.trace/3"
"""What :meth:`Trace.save` writes into trace.json: 3 since the rows are parquet chunks."""

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
_STORED = {table: {col: "strings" if col == "changed" else str(dtype) for col, dtype in _DTYPES[table].items()
                   if col not in ("phase", "cls", "matched")} for table in ("events", "invocations")}
_STORED["events"]["unmatched"], _STORED["invocations"]["epoch"] = "string", "int64"
"""The columns of a chunk, as the frames' without those worked out when read (``phase``, ``cls``,
``matched``): only calls that ran are rows, and an event's ``unmatched`` holds the labels,
space-separated, of the algorithms that did not match there (level 'all'); calls carry their
event's ``epoch``, so both tables filter on it; exit codes are JSON text."""
_KEYS = dict.fromkeys(_STORED, ("seq", "batch", "epoch"))
"""The columns whose range each chunk notes, to skip the chunks a query cannot need."""


class Trace:
    """What happened in a run, in order. ``level`` is one of :data:`TRACE_LEVELS`. Every
    ``chunk_rows`` events the rows in memory go to a parquet chunk in ``folder`` (default: a
    temporary folder removed with the trace; a trainer with a ``save_folder`` spills into its
    ``trace_chunks`` from the start)."""

    def __init__(self, level: str = "all", folder: Union[str, os.PathLike, None] = None,
                 chunk_rows: int = 1 << 16) -> None:
        if level not in TRACE_LEVELS:
            raise ValueError(f"trace level {level!r} is not one of {TRACE_LEVELS}: 'all' records also "
                             f"the algorithms that did not match, 'ran' only what ran, 'off' nothing")
        self.level, self.chunk_rows, self.seq, self._t0 = level, chunk_rows, -1, time.perf_counter()
        self.recording, self.records_unmatched = level != "off", level == "all"  # (plain: read at every event)
        self.event_rows, self.invocation_rows, self._notes = [], [], []  # lists of plain tuples (see below)
        self._store, self._tail = tables.ChunkStore(folder, _KEYS), (None, {})  # (the rows in memory as columns)
        self._labels, self._label_counts, self._classes = {}, {}, {}  # id -> (obj, label), cls -> count, label -> cls
        self._cache: dict[str, tuple[tuple, pd.DataFrame]] = {}
        self.meta: dict[str, Any] = {}
        self._loaded: Optional[dict[str, pd.DataFrame]] = None  # frames given to from_frames

    # -- recording (called by the engine) ---------------------------------------------------
    def label(self, obj: Any) -> str:
        """A name unique to this object in this trace: the class name, then 'Name#2', 'Name#3'
        for further instances of the same class, in the order they were first seen."""
        entry = self._labels.get(id(obj))
        if entry is None:
            cls = type(obj).__name__
            count = self._label_counts[cls] = self._label_counts.get(cls, 0) + 1
            entry = self._labels[id(obj)] = (obj, cls if count == 1 else f"{cls}#{count}")
            self._classes[entry[1]] = cls
        return entry[1]

    # -- rows (appended by the engine) -------------------------------------------------------
    # The engine appends rows to event_rows and invocation_rows directly (a method call per row
    # would cost more than the row), as plain tuples in the field order of EventRecord and
    # InvocationRecord: the garbage collector stops tracking a plain tuple of numbers and strings,
    # not a tuple subclass, and a long trace of tracked rows made every collection, so every
    # row, about ten times slower. Read them as records by name: EventRecord._make(row). Every
    # chunk_rows events the engine calls spill(), which writes them to parquet and empties the lists.
    def note(self, kind: str, text: str, timestamp: Any = None) -> None:
        """Record something that is not an event: a setting changed from a widget, an
        interruption, a resumed checkpoint. It is tied to the last event fired."""
        epoch, batch = (timestamp.epoch, timestamp.batch) if timestamp is not None else (None, None)
        self._notes.append((self.seq, epoch, batch, kind, text))

    def spill(self) -> None:
        """Write the rows of the events that finished as one parquet chunk per table and empty the
        lists (in place, so a call in flight appends to the new chunk). The engine calls it every
        ``chunk_rows`` events. The calls of an event still running (one whose call fired the nested
        event that filled the chunk) stay for the next chunk, which gets that event's row: a chunk
        holds whole events, so each one's non-matches are worked out from all of its calls."""
        done = set(map(itemgetter(0), self.event_rows))
        calls, running = [], []
        for row in self.invocation_rows:
            (calls if row[0] in done else running).append(row)
        self._store.write(_stored(self.event_rows, calls, self._t0))  # (not cached: memory)
        del self.event_rows[:]
        self.invocation_rows[:] = running

    def spill_to(self, folder: Union[str, os.PathLike]) -> None:
        """Keep the chunks in ``folder`` from now on, moving those written so far (a trainer's
        ``save_folder``, where its checkpoints refer to them)."""
        self._store.move_to(folder)

    def _columns(self) -> dict[str, Any]:
        """The rows in memory as arrow tables laid out as the chunks (:data:`_STORED`)."""
        key = (len(self.event_rows), len(self.invocation_rows), len(self._store.chunks))
        if self._tail[0] != key:
            self._tail = (key, _stored(self.event_rows, self.invocation_rows, self._t0))
        return self._tail[1]

    # -- reading ----------------------------------------------------------------------------
    @property
    def events(self) -> pd.DataFrame:
        """One row per fired event: ``seq``, ``phase``, ``event``, ``epoch``, ``batch`` (global),
        ``batch_in_epoch``, ``microbatch``, ``t_start`` (s since the trace began), ``duration`` (s)."""
        return self._frame("events")

    @property
    def invocations(self) -> pd.DataFrame:
        """One row per algorithm or callback call: ``seq`` (the event's), ``event``, ``batch``,
        ``name`` (unique per instance), ``cls``, ``kind``, ``matched``, ``order`` (position after
        the passes), ``exit_code`` (what ``apply`` returned, as JSON reads it back: what JSON
        cannot hold, as its repr), ``duration`` (s),
        ``changed`` (a tuple of the State fields replaced or mutated in place), ``error``. At
        level 'all', algorithms whose ``match`` said no appear with ``matched=False``."""
        return self._frame("invocations")

    @property
    def notes(self) -> pd.DataFrame:
        """Annotations: ``seq`` of the last event before them, ``epoch``, ``batch``, ``kind``, ``text``."""
        return self._frame("notes")

    def _frame(self, key: str) -> pd.DataFrame:
        """The DataFrame ``key``, built again only when rows were added since it was built."""
        if self._loaded is not None:
            return self._loaded[key]
        sizes = (len(self._store.chunks), len(self.event_rows), len(self.invocation_rows), len(self._notes))
        if self._cache.get(key, (None,))[0] != sizes:
            self._cache[key] = (sizes, self.query(key) if key != "notes" else pd.DataFrame.from_records(
                self._notes, columns=NOTE_COLUMNS).astype(_DTYPES["notes"]))
        return self._cache[key][1]

    def query(self, table: str = "invocations", batches: Bounds = None, seqs: Bounds = None, epoch: Any = None,
              event: Any = None, name: Any = None, matched: Optional[bool] = None) -> pd.DataFrame:
        """The rows of ``table`` ('events' or 'invocations', as in those frames) with ``batch`` in
        ``batches`` and ``seq`` in ``seqs`` (half-open ``(lo, hi)``), at ``epoch``, at ``event``
        and of ``name`` (each a value or a list), and ``matched`` (True: calls that ran, False:
        algorithms that did not match, None: both). Reads only the chunks whose ranges meet
        the question, with the filter pushed into the parquet read, and the rows in memory."""
        if self._loaded is not None:
            raise ValueError("this trace reads the frames it was given (Trace.from_frames): filter them in pandas")
        event, name = ([v] if isinstance(v, str) else v for v in (event, name))
        ranges = {"batch": batches, "seq": seqs, "epoch": None if epoch is None else (epoch, epoch + 1)}
        if table == "events":
            found = self._read("events", ranges, {"event": event}).sort_values("seq", kind="stable", ignore_index=True)
            return found.assign(phase=found["event"].map(_PHASE_OF))[list(EVENT_COLUMNS)].astype(_DTYPES["events"])
        ran = self._read("invocations", ranges, {"event": event, "name": name}) if matched is not False else None
        missed = None if matched is True else tables.explode(self._read("events", ranges, {"event": event}, [
            "seq", "event", "batch", "unmatched"]), "unmatched", "name", "_at", name)
        calls = pd.concat([ran, missed], ignore_index=True).reindex(columns=[*_STORED["invocations"], "_at"])
        calls = calls.sort_values(["seq", "order", "_at"], kind="stable")  # within an event: what ran, then what not
        ran = calls["order"].notna()
        calls = tables.decoded(calls).assign(cls=calls["name"].map(self._classes), matched=ran,
                                             kind=np.where(ran, calls["kind"], "algorithm"))
        dtypes = {**_DTYPES["invocations"], "name": pd.CategoricalDtype(list(self._classes)),
                  "cls": pd.CategoricalDtype(sorted(set(self._classes.values())))}
        return calls[list(INVOCATION_COLUMNS)].reset_index(drop=True).astype(dtypes)

    def _read(self, table: str, ranges: dict, among: dict, columns: Optional[list] = None) -> pd.DataFrame:
        return self._store.read(table, _STORED[table], ranges, among, columns, self._columns().get(table)).to_pandas()

    # -- persistence --------------------------------------------------------------------------
    def save(self, folder: Union[str, os.PathLike]) -> Path:
        """Write the trace to ``folder``: its chunks (hard links where the file system allows),
        the rows in memory as one more chunk per table, notes.parquet and trace.json."""
        folder, chunks = Path(folder), self._store.saved_into(folder, self._columns())
        write_parquet(self.notes, folder / "notes.parquet")
        (folder / "trace.json").write_text(json.dumps(self._info(chunks)))
        return folder

    def checkpoint(self) -> dict[str, Any]:
        """The trace as plain values for a checkpoint: its chunks by reference (their files stay
        where they are), the rows in memory and the notes as parquet bytes, so its size and
        the time to write it do not grow with the run. :meth:`from_checkpoint` reads it."""
        return {**self._info([]), **self._store.snapshot(self._columns()), "notes": self.notes.to_parquet()}

    def _info(self, chunks: list) -> dict[str, Any]:
        return json.loads(json.dumps({"format": TRACE_FORMAT, "level": self.level, "meta": self.meta,
                                      "classes": self._classes, "chunks": chunks, "chunk_rows": self.chunk_rows},
                                     default=str))

    @classmethod
    def load(cls, folder: Union[str, os.PathLike]) -> "Trace":
        """Read a trace written by :meth:`save`; its DataFrames equal the saved ones. A trace of
        at most ``chunk_rows`` events (the saved trace's) is read into memory now, so the folder
        may go; a longer one reads its chunk files in ``folder`` when asked: keep the folder."""
        folder = Path(folder).resolve()
        if not (folder / "trace.json").is_file():
            raise FileNotFoundError(f"{folder} is not a saved trace: trace.json missing; write one with "
                                    f"Trace.save(folder) or Trainer(save_folder=...)")
        info = {**json.loads((folder / "trace.json").read_text()), "folder": str(folder), "tail": {}}
        trace = cls.from_checkpoint({**info, "notes": (folder / "notes.parquet").read_bytes()})
        if trace._store.rows("events") <= trace.chunk_rows:  # as much as a run holds: read now, the folder may go
            trace._store.into_memory(_STORED)
        return trace

    @classmethod
    def from_checkpoint(cls, saved: dict[str, Any]) -> "Trace":
        """The trace :meth:`checkpoint` gave (or :meth:`load` read), readable and queryable as it was."""
        if saved.get("format") != TRACE_FORMAT:
            raise ValueError(f"{saved.get('folder')} holds a trace saved by an older composer_lab (format "
                             f"{saved.get('format', 1)!r}, not {TRACE_FORMAT!r}); run it again and save it with "
                             f"this version")
        trace = cls(saved["level"], chunk_rows=saved.get("chunk_rows", 1 << 16))
        trace._classes, trace.meta = saved["classes"], saved.get("meta", {})
        trace._store = tables.ChunkStore.restored(saved, _KEYS)
        trace._notes = list(tables.table_from_bytes(saved["notes"]).to_pandas().itertuples(index=False, name=None))
        return trace

    @classmethod
    def from_frames(cls, level: str = "all", **frames: pd.DataFrame) -> "Trace":
        """A trace that reads the frames given (``events``, ``invocations``, ``notes``; a missing
        one is empty) instead of recording: frames handed to the lab."""
        trace = cls(level)
        trace._loaded = {**{name: getattr(trace, name) for name in _DTYPES}, **frames}
        return trace

    def __repr__(self) -> str:
        """The counts, without building a frame: events, calls that ran, notes, chunks on disk."""
        store, memory = self._store, {"events": self.event_rows, "invocations": self.invocation_rows}
        rows = {t: store.rows(t) + len(new) + (store.tail[t].num_rows if t in store.tail else 0)
                for t, new in memory.items()}
        return (f"Trace(level={self.level!r}, events={rows['events']}, calls={rows['invocations']}, "
                f"notes={len(self._notes)}, chunks={len(store.chunks)})")


def _stored(events: list, calls: list, t0: float) -> dict[str, Any]:
    """Rows of the engine as arrow tables laid out as the chunks; an event's ``asked`` becomes
    ``unmatched``, the labels of those asked without a call at its seq."""
    ev, cl = tables.columns(events, 9), tables.columns(calls, 10)
    t_start = np.asarray(ev[6], dtype=float)
    missed = tables.absent(ev[0], ev[8], cl[0], cl[3])  # (a callback is never asked: its calls are no answer)
    epoch = list(map(dict(zip(ev[0], ev[2])).get, cl[0]))  # (None for a call whose event is still running)
    return {"events": tables.to_table([*ev[:6], t_start - t0, np.asarray(ev[7], dtype=float) - t_start, missed],
                                      _STORED["events"]),
            "invocations": tables.to_table([*cl[:6], tables.to_json(cl[6]), *cl[7:], epoch], _STORED["invocations"])}
