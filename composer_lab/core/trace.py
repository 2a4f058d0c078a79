"""The trace: a record of every event fired and every algorithm / callback call, as pandas.

Rows go into two flat Python lists during the run, field after field (one O(1) extend per
row, no pandas on the hot path, no object per row for the garbage collector to visit). Every
``chunk_rows`` events :meth:`Trace.spill` turns them into columns and writes them to parquet
(a :class:`~composer_lab.chunks.ChunkStore`), so the memory a trace holds is bounded however
long the run; at level 'all' an event keeps the labels of the algorithms that did not match as
one dictionary-encoded value, not as rows. :meth:`Trace.query` reads only the chunks and rows a
question needs; :attr:`Trace.events`, :attr:`Trace.invocations` and
:attr:`Trace.notes` are the whole DataFrames. The rows survive an exception, so the trace of a
run that failed is readable up to the failure. Another thread may read it while a run writes it:
each read sees the trace as it was at one moment (:meth:`Trace._snapshot`), with no lock on the
engine's appends.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from collections import namedtuple
from typing import Any, Callable, NamedTuple, Optional, Union

import numpy as np
import pandas as pd

from composer_lab import chunks
from composer_lab.chunks import Bounds
from composer_lab.core.callback import INTERNAL_PREFIX
from composer_lab.core.event import _PHASE, Event

__all__ = ["Trace", "TRACE_LEVELS", "Column", "EVENT_SCHEMA", "INVOCATION_SCHEMA", "NOTE_SCHEMA", "EVENT_COLUMNS",
           "INVOCATION_COLUMNS", "NOTE_COLUMNS", "EventRecord", "InvocationRecord", "NoteRecord", "write_parquet",
           "read_parquet"]


class Column(NamedTuple):
    """One column of a trace table, the only place it is described. ``dtype``: its pandas dtype in
    the frame (None: not in the frame); ``stored``: its type in a parquet chunk, a name of
    :mod:`composer_lab.chunks`' types (None: not stored); ``recorded``: whether the engine's row
    holds it (in the schema's order); ``encode`` / ``decode``: how its recorded values are
    written to a chunk and read back (None: as they are)."""

    name: str
    dtype: Any = None
    stored: Optional[str] = None
    recorded: bool = True
    encode: Optional[Callable[[list], list]] = None
    decode: Optional[Callable[[Any], Any]] = None


def _from_json(text: Any) -> Any:
    return json.loads(text) if isinstance(text, str) else None


def _field_names(fields: Any) -> tuple:
    if isinstance(fields, str):
        raise ValueError("these trace frames were written by an older composer_lab ('changed' as text); "
                         "run the experiment again with this version")
    return () if isinstance(fields, float) or fields is None else tuple(fields)


_EVENT_DTYPE = pd.CategoricalDtype([e.value for e in Event], ordered=False)
_PHASE_DTYPE = pd.CategoricalDtype(["fit", "eval", "predict"])
_KIND_DTYPE = pd.CategoricalDtype(["algorithm", "callback"])

EVENT_SCHEMA = (
    Column("seq", "int64", "int64"),
    Column("phase", _PHASE_DTYPE, recorded=False),  # (the event's, when read)
    Column("event", _EVENT_DTYPE, "category"),  # (recorded as the Event's value)
    Column("epoch", "int64", "int64"),
    Column("batch", "int64", "int64"),
    Column("batch_in_epoch", "int64", "int64"),
    Column("microbatch", "Int64", "Int64"),
    Column("t_start", "float64", "float64"),  # (recorded: perf_counter; stored: seconds since the trace began)
    Column("t_end"),  # (perf_counter)
    Column("duration", "float64", "float64", recorded=False),
    Column("asked"),  # (level 'all': the labels of the algorithms asked match, else None)
    Column("unmatched", stored="string", recorded=False),  # (those asked without a call, space-separated)
)
"""One row per fired event."""

INVOCATION_SCHEMA = (
    Column("seq", "int64", "int64"),
    Column("event", _EVENT_DTYPE, "category"),
    Column("batch", "int64", "int64"),
    Column("name", "category", "category"),  # (the trace's label of the instance)
    Column("cls", "category", recorded=False),
    Column("kind", _KIND_DTYPE, "category"),
    Column("matched", "bool", recorded=False),  # (False: asked, said no; only at level 'all')
    Column("order", "Int64", "Int64"),
    Column("exit_code", "object", "object", encode=chunks.to_json, decode=_from_json),  # (what the call returned)
    Column("duration", "float64", "float64"),
    Column("changed", "object", "strings", decode=_field_names),  # (a tuple of TRACKED_FIELDS)
    Column("error", "string", "string"),  # ('Type: message' if it raised)
    Column("epoch", stored="int64", recorded=False),  # (its event's: both tables filter on it)
)
"""One row per algorithm or callback call: in chunks only the calls that ran; the algorithms
that said no are worked out from their event's ``unmatched`` when read."""

NOTE_SCHEMA = (Column("seq", "int64"), Column("epoch", "Int64"), Column("batch", "Int64"), Column("kind", "string"),
               Column("text", "string"))
"""Something that is not an event, tied to the last event fired."""

_SCHEMAS = {"events": EVENT_SCHEMA, "invocations": INVOCATION_SCHEMA, "notes": NOTE_SCHEMA}
_DTYPES = {table: {c.name: c.dtype for c in schema if c.dtype is not None} for table, schema in _SCHEMAS.items()}
"""Each frame's columns, in order, and their dtypes (``name``'s categories are the trace's labels)."""
_STORED = {table: {c.name: c.stored for c in _SCHEMAS[table] if c.stored} for table in ("events", "invocations")}
"""The columns of a chunk and their types."""
EVENT_COLUMNS, INVOCATION_COLUMNS, NOTE_COLUMNS = (tuple(columns) for columns in _DTYPES.values())
_KEYS = dict.fromkeys(_STORED, ("seq", "batch", "epoch"))
"""The columns whose range each chunk notes, to skip the chunks a query cannot need."""


def _recorded(schema: tuple) -> list[str]:
    return [c.name for c in schema if c.recorded]


class EventRecord(namedtuple("EventRecord", _recorded(EVENT_SCHEMA))):
    """An event's row as the engine records it (:data:`EVENT_SCHEMA`), read by name."""

    __slots__ = ()


class InvocationRecord(namedtuple("InvocationRecord", _recorded(INVOCATION_SCHEMA))):
    """A call's row as the engine records it (:data:`INVOCATION_SCHEMA`), read by name."""

    __slots__ = ()


class NoteRecord(namedtuple("NoteRecord", _recorded(NOTE_SCHEMA))):
    """A note's row (:data:`NOTE_SCHEMA`)."""

    __slots__ = ()


EVENT_WIDTH, CALL_WIDTH = len(EventRecord._fields), len(InvocationRecord._fields)
"""How many fields an event's row, a call's row holds: the rows in memory are flat lists of them."""

TRACE_FORMAT = "composer_lab.trace/3"
"""What :meth:`Trace.save` writes into trace.json: 3 since the rows are parquet chunks."""

TRACE_LEVELS = ("all", "ran", "off")
"""'all': every event and call, also the ``match`` calls that said no; 'ran': events and the
calls that ran; 'off': nothing."""

_PHASE_OF = {e.value: phase for e, phase in _PHASE.items()}


class _Snapshot(NamedTuple):
    """The trace at one moment, what a read works from while a run in another thread writes on:
    the chunks written then, the rows in memory then (copies), the labels' classes then."""

    key: tuple  # (chunks, last event started, event fields, call fields, notes): equal keys, equal contents
    last: int  # the seq of the last event started: rows of later events are left out
    store: chunks.ChunkStore
    events: list  # (flat, as Trace.event_fields)
    calls: list
    notes: list
    classes: dict


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
        self.level, self.seq, self._t0, self.chunk_rows = level, -1, time.perf_counter(), chunk_rows
        self.recording, self.records_unmatched = level != "off", level == "all"  # (plain: read at every event)
        self.event_fields, self.call_fields, self._notes = [], [], []
        """The rows in memory, flat: an event's :data:`EVENT_WIDTH` fields, then the next event's (a
        call's :data:`CALL_WIDTH`); read as rows: :attr:`event_rows`, :attr:`invocation_rows`."""
        self.add_event, self.add_call = self.event_fields.extend, self.call_fields.extend
        """Record an event's row, a call's row: an :class:`EventRecord`'s, an :class:`InvocationRecord`'s
        fields as a tuple (an event's after its calls'; its ``seq`` the one set as :attr:`seq` when
        it started: a read leaves out the rows of a seq above :attr:`seq`, events started after it began)."""
        self._store, self._tail = chunks.ChunkStore(folder, _KEYS), (None, {})  # (the rows in memory as columns)
        self._labels, self._label_counts, self._classes = {}, {}, {}  # id -> (obj, label), cls -> count, label -> cls
        self._cache: dict[str, tuple[tuple, pd.DataFrame]] = {}
        self._spilling = threading.Lock()  # (taken by a spill and a reader's snapshot, never by an append)
        self.meta: dict[str, Any] = {}
        self._loaded: Optional[dict[str, pd.DataFrame]] = None  # frames given to from_frames

    # -- recording (called by the engine) ---------------------------------------------------
    def label(self, obj: Any) -> str:
        """A name unique to this object in this trace: the class name, then 'Name#2', 'Name#3'
        for further instances of the same class, in the order they were first seen."""
        entry = self._labels.get(id(obj))
        if entry is None:
            cls = (INTERNAL_PREFIX if getattr(obj, "_internal", False) is True else "") + type(obj).__name__
            count = self._label_counts[cls] = self._label_counts.get(cls, 0) + 1
            entry = self._labels[id(obj)] = (obj, cls if count == 1 else f"{cls}#{count}")
            self._classes[entry[1]] = cls
        return entry[1]

    # -- rows (recorded by the engine) ---------------------------------------------------------
    # A row is its fields in the order of the schema's recorded columns, extended onto a flat list:
    # the tuple the engine builds is freed at once. A tuple kept per row is an object the garbage
    # collector tracks: 23 of them a step set off a collection every 30 steps of a traced fit (3 us
    # a step, and the caches it cleared), and each cost 120 bytes against 72 flat. The engine
    # builds the rows where it has their values and adds them with the lists' own extends,
    # add_event and add_call (a Python method per row would cost more than the row), then calls
    # spill() when event_fields holds chunk_fields. Read them by name: EventRecord._make(row).
    @property
    def chunk_rows(self) -> int:
        """How many events' rows a chunk holds (the engine reads :attr:`chunk_fields`, as many fields)."""
        return self.chunk_fields // EVENT_WIDTH

    @chunk_rows.setter
    def chunk_rows(self, rows: int) -> None:
        self.chunk_fields = rows * EVENT_WIDTH

    @property
    def event_rows(self) -> list[tuple]:
        """The rows in memory of the events not yet spilled, as tuples (built at each read)."""
        return _rows(self.event_fields[:], EVENT_WIDTH)

    @property
    def invocation_rows(self) -> list[tuple]:
        """The rows in memory of the calls not yet spilled, as tuples (built at each read)."""
        return _rows(self.call_fields[:], CALL_WIDTH)

    def note(self, kind: str, text: str, timestamp: Any = None) -> None:
        """Record something that is not an event: a setting changed from a widget, an
        interruption, a resumed checkpoint. It is tied to the last event fired."""
        epoch, batch = (timestamp.epoch, timestamp.batch) if timestamp is not None else (None, None)
        self._notes.append((self.seq, epoch, batch, kind, text))  # (a NoteRecord's fields)

    def spill(self) -> None:
        """Write the rows of the events that finished as one parquet chunk per table and empty the
        lists (in place, so a call in flight appends to the new chunk). The engine calls it every
        ``chunk_rows`` events. The calls of an event still running (one whose call fired the nested
        event that filled the chunk) stay for the next chunk, which gets that event's row: a chunk
        holds whole events, so each one's non-matches are worked out from all of its calls."""
        events, calls, running = self.event_fields[:], self.call_fields[:], []
        done = set(events[::EVENT_WIDTH])
        if not done.issuperset(calls[::CALL_WIDTH]):  # (rare: an event whose call fired this one)
            rows = _rows(calls, CALL_WIDTH)
            running = [value for row in rows if row[0] not in done for value in row]
            calls = [value for row in rows if row[0] in done for value in row]
        chunk = _stored(events, calls, self._t0)  # (not cached: memory)
        with self._spilling:  # a reader sees the rows either in memory or in the chunk, never both or neither
            self._store.write(chunk)
            del self.event_fields[:]
            self.call_fields[:] = running

    def spill_to(self, folder: Union[str, os.PathLike]) -> None:
        """Keep the chunks in ``folder`` from now on, moving those written so far (a trainer's
        ``save_folder``, where its checkpoints refer to them)."""
        with self._spilling:
            self._store.move_to(folder)

    def _snapshot(self) -> _Snapshot:
        """The trace up to the last event started, taken together with a spill's lock (a spill
        moves rows from the lists to a chunk). The engine appends without a lock: it extends by whole
        rows, so a copy of a list holds whole rows; the seq of the last event started, read
        first, leaves out the rows of the events that started while the lists were copied, so
        every call read belongs to an event read or to one in flight."""
        with self._spilling:
            last, store = self.seq, self._store.view()
            events, calls, notes = self.event_fields[:], self.call_fields[:], self._notes[:]
            classes = dict(self._classes)  # (after the calls: every call's label is there)
        key = (len(store.chunks), last, len(events), len(calls), len(notes))
        return _Snapshot(key, last, store, events, calls, notes, classes)

    def _key(self) -> tuple:
        """The key a :meth:`_snapshot` taken now would have, without copying the rows (a frame
        built under it is still the trace's: equal keys, equal contents)."""
        with self._spilling:
            last, chunks_written = self.seq, len(self._store.chunks)
            return chunks_written, last, len(self.event_fields), len(self.call_fields), len(self._notes)

    def _columns(self, snapshot: _Snapshot) -> dict[str, Any]:
        """The rows in memory of ``snapshot`` as arrow tables laid out as the chunks (:data:`_STORED`)."""
        key, tail = self._tail  # (one read: another reader may replace it)
        if key != snapshot.key:
            last = snapshot.last
            events, calls = _up_to(snapshot.events, EVENT_WIDTH, last), _up_to(snapshot.calls, CALL_WIDTH, last)
            tail = _stored(events, calls, self._t0)
            self._tail = (snapshot.key, tail)
        return tail

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
        built, frame = self._cache.get(key, (None, None))  # (one read: another reader may replace it)
        if built != self._key():  # (rows added since: a snapshot, whose copy of the rows holds up a run that writes)
            snapshot = self._snapshot()
            frame = self._query(snapshot, key) if key != "notes" else _notes_frame(snapshot.notes)
            self._cache[key] = (snapshot.key, frame)
        return frame

    def query(self, table: str = "invocations", batches: Bounds = None, seqs: Bounds = None, epoch: Any = None,
              event: Any = None, name: Any = None, matched: Optional[bool] = None) -> pd.DataFrame:
        """The rows of ``table`` ('events' or 'invocations', as in those frames) with ``batch`` in
        ``batches`` and ``seq`` in ``seqs`` (half-open ``(lo, hi)``), at ``epoch``, at ``event``
        and of ``name`` (each a value or a list), and ``matched`` (True: calls that ran, False:
        algorithms that did not match, None: both). Reads only the chunks whose ranges meet
        the question, with the filter pushed into the parquet read, and the rows in memory. From
        another thread while a run writes: the trace up to the last event started (that one's
        calls so far)."""
        if self._loaded is not None:
            raise ValueError("this trace reads the frames it was given (Trace.from_frames): filter them in pandas")
        return self._query(self._snapshot(), table, batches, seqs, epoch, event, name, matched)

    def _query(self, snapshot: _Snapshot, table: str, batches: Bounds = None, seqs: Bounds = None,
               epoch: Any = None, event: Any = None, name: Any = None, matched: Optional[bool] = None) -> pd.DataFrame:
        """:meth:`query` of ``snapshot``: every table it reads is of the same moment."""
        event, name = ([v] if isinstance(v, str) else v for v in (event, name))
        ranges = {"batch": batches, "seq": seqs, "epoch": None if epoch is None else (epoch, epoch + 1)}
        if table == "events":
            found = self._read(snapshot, "events", ranges, {"event": event}).sort_values("seq", kind="stable",
                                                                                         ignore_index=True)
            return found.assign(phase=found["event"].map(_PHASE_OF))[list(EVENT_COLUMNS)].astype(_DTYPES["events"])
        among = {"event": event, "name": name}
        ran = self._read(snapshot, "invocations", ranges, among) if matched is not False else None
        missed = None if matched is True else chunks.explode(self._read(snapshot, "events", ranges, {"event": event}, [
            "seq", "event", "batch", "unmatched"]), "unmatched", "name", "_at", name)
        calls = pd.concat([ran, missed], ignore_index=True).reindex(columns=[*_STORED["invocations"], "_at"])
        calls = calls.sort_values(["seq", "order", "_at"], kind="stable")  # within an event: what ran, then what not
        ran, classes = calls["order"].notna(), snapshot.classes
        calls = _decoded(calls, INVOCATION_SCHEMA).assign(cls=calls["name"].map(classes), matched=ran,
                                             kind=np.where(ran, calls["kind"], "algorithm"))
        dtypes = {**_DTYPES["invocations"], "name": pd.CategoricalDtype(list(classes)),
                  "cls": pd.CategoricalDtype(sorted(set(classes.values())))}
        return calls[list(INVOCATION_COLUMNS)].reset_index(drop=True).astype(dtypes)

    def _read(self, snapshot: _Snapshot, table: str, ranges: dict, among: dict,
              columns: Optional[list] = None) -> pd.DataFrame:
        tail = self._columns(snapshot).get(table)
        return snapshot.store.read(table, _STORED[table], ranges, among, columns, tail).to_pandas()

    # -- persistence --------------------------------------------------------------------------
    def save(self, folder: Union[str, os.PathLike]) -> Path:
        """Write the trace to ``folder``: its chunks (hard links where the file system allows),
        the rows in memory as one more chunk per table, notes.parquet and trace.json."""
        snapshot = self._snapshot()
        folder, chunks = Path(folder), snapshot.store.saved_into(folder, self._columns(snapshot))
        write_parquet(_notes_frame(snapshot.notes), folder / "notes.parquet")
        (folder / "trace.json").write_text(json.dumps(self._info(chunks, snapshot.classes)))
        return folder

    def checkpoint(self) -> dict[str, Any]:
        """The trace as plain values for a checkpoint: its chunks by reference (their files stay
        where they are), the rows in memory and the notes as parquet bytes, so its size and
        the time to write it do not grow with the run. :meth:`from_checkpoint` reads it."""
        snapshot = self._snapshot()
        return {**self._info([], snapshot.classes), **snapshot.store.snapshot(self._columns(snapshot)),
                "notes": _notes_frame(snapshot.notes).to_parquet()}

    def _info(self, chunks: list, classes: dict) -> dict[str, Any]:
        return json.loads(json.dumps({"format": TRACE_FORMAT, "level": self.level, "meta": self.meta,
                                      "classes": classes, "chunks": chunks, "chunk_rows": self.chunk_rows},
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
        trace._store = chunks.ChunkStore.restored(saved, _KEYS)
        trace._notes = list(chunks.table_from_bytes(saved["notes"]).to_pandas().itertuples(index=False, name=None))
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
        snapshot = self._snapshot()
        store, memory = snapshot.store, {"events": len(snapshot.events) // EVENT_WIDTH,
                                         "invocations": len(snapshot.calls) // CALL_WIDTH}
        rows = {t: store.rows(t) + new + (store.tail[t].num_rows if t in store.tail else 0)
                for t, new in memory.items()}
        return (f"Trace(level={self.level!r}, events={rows['events']}, calls={rows['invocations']}, "
                f"notes={len(snapshot.notes)}, chunks={len(store.chunks)})")


def _stored(events: list, calls: list, t0: float) -> dict[str, Any]:
    """Rows of the engine (flat, as :attr:`Trace.event_fields`) as arrow tables laid out as the
    chunks: times from the trace's start, an event's ``asked`` as ``unmatched`` (the labels asked
    without a call at its seq; a callback is never asked, so its calls are no answer), each call
    with its event's ``epoch`` (None while that event still runs)."""
    ev, cl = _columns(events, EVENT_SCHEMA), _columns(calls, INVOCATION_SCHEMA)
    t_start = np.asarray(ev["t_start"], dtype=float)
    ev.update(t_start=t_start - t0, duration=np.asarray(ev["t_end"], dtype=float) - t_start,
              unmatched=chunks.absent(ev["seq"], ev["asked"], cl["seq"], cl["name"]))
    cl["epoch"] = list(map(dict(zip(ev["seq"], ev["epoch"])).get, cl["seq"]))
    return {table: chunks.to_table([columns[name] for name in _STORED[table]], _STORED[table])
            for table, columns in (("events", ev), ("invocations", cl))}


def _notes_frame(notes: list) -> pd.DataFrame:
    """The notes' rows as the :attr:`Trace.notes` frame."""
    return pd.DataFrame.from_records(notes, columns=NOTE_COLUMNS).astype(_DTYPES["notes"])


def _rows(fields: list, width: int) -> list[tuple]:
    """Flat ``fields`` as rows of ``width``."""
    return list(zip(*[iter(fields)] * width))


def _up_to(fields: list, width: int, last: int) -> list:
    """The rows of flat ``fields`` whose seq is at most ``last``, flat."""
    if not fields or max(fields[::width]) <= last:  # (the usual read: no event started while the lists were copied)
        return fields
    return [value for row in _rows(fields, width) if row[0] <= last for value in row]


def _columns(fields: list, schema: tuple) -> dict[str, Any]:
    """The recorded rows, flat, as columns by name, each encoded as its chunk stores it."""
    names = _recorded(schema)
    columns = {name: fields[i::len(names)] for i, name in enumerate(names)}
    return {c.name: c.encode(columns[c.name]) if c.encode else columns[c.name] for c in schema if c.recorded}


def _decoded(frame: pd.DataFrame, schema: tuple = INVOCATION_SCHEMA) -> pd.DataFrame:
    """``frame`` with each column the schema decodes (``exit_code`` JSON text, ``changed``
    lists) read back as the values recorded."""
    for c in schema:
        if c.decode is not None and c.name in frame.columns:
            frame[c.name] = pd.Series([c.decode(value) for value in frame[c.name]], index=frame.index, dtype=object)
    return frame


def write_parquet(frame: pd.DataFrame, target: Any) -> None:
    """Write a trace frame (or any frame) to parquet, ``target`` a path or a binary file, each
    column the schema encodes as its chunks store it (``exit_code`` as JSON text, so whatever
    ``apply`` returned can be written; ``changed`` a native list column). :func:`read_parquet`
    reads it back."""
    encoded = {c.name: pd.Series(c.encode(frame[c.name]), index=frame.index, dtype="string")
               for c in INVOCATION_SCHEMA if c.encode is not None and c.name in frame.columns}
    frame.assign(**encoded).to_parquet(target, index=False)


def read_parquet(source: Any) -> pd.DataFrame:
    """Read what :func:`write_parquet` wrote, its columns decoded."""
    return _decoded(pd.read_parquet(source))
