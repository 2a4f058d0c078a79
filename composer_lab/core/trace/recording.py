"""The trace: a record of every event fired and every algorithm / callback call, as pandas.

The engine records an event or a call by naming its fields (:meth:`Trace.add_event`,
:meth:`Trace.add_call`; the columns of :data:`EVENT_SCHEMA` and :data:`INVOCATION_SCHEMA`, read
back as :class:`EventRecord` and :class:`InvocationRecord`); the trace holds them as columns
(:class:`~composer_lab.core.trace.columns.Columns`: a row costs bytes, not objects), and every
``chunk_rows`` events :meth:`Trace.spill` writes them to parquet (a
:class:`~composer_lab.core.trace.storage.ChunkStore`), so the memory a trace holds is bounded
however long the run. :attr:`Trace.events`, :attr:`Trace.invocations` and :attr:`Trace.notes`
are the whole DataFrames; :meth:`Trace.query` reads only the chunks and rows a question needs.
The rows survive an exception, so the trace of a run that failed is readable up to the failure.
Another thread may read it while a run writes it: one lock is held around each append, spill
and the copy a read starts from.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple, Optional, Union

import pandas as pd

from composer_lab.core.callback import INTERNAL_PREFIX
from composer_lab.core.trace import queries
from composer_lab.core.trace.columns import Columns, Rows
from composer_lab.core.trace.schema import (DTYPES, EVENT_ROW, EVENT_SCHEMA, INVOCATION_ROW, INVOCATION_SCHEMA, KEYS,
                                            STORED, TRACE_FORMAT, TRACE_LEVELS, EventRecord, InvocationRecord,
                                            NoteRecord)
from composer_lab.core.trace.storage import Bounds, ChunkStore, table_from_bytes

__all__ = ["Trace"]


class Snapshot(NamedTuple):
    """The trace at one moment, what a read works from while a run in another thread writes on:
    the chunks written then, the rows in memory then, the labels' classes then."""

    store: ChunkStore
    events: Rows
    calls: Rows
    notes: list
    classes: dict
    version: int


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
        self.recording, self.records_unmatched = level != "off", level == "all"
        self.meta: dict[str, Any] = {}
        self._events, self._calls = Columns(EVENT_SCHEMA), Columns(INVOCATION_SCHEMA)
        self._notes: list[NoteRecord] = []
        self._store = ChunkStore(folder, KEYS)
        self._lock = threading.Lock()
        self._version = 0  # moved by every append and spill: a frame built at one version is the trace's until it moves
        self._labels: dict[int, tuple[Any, str]] = {}  # id -> (the object, held so that its id stays its own; label)
        self._label_counts: dict[str, int] = {}
        self._classes: dict[str, str] = {}  # label -> class name
        self._cache: dict[str, tuple[int, pd.DataFrame]] = {}  # (frames read since the last event)
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
            with self._lock:
                self._classes[entry[1]] = cls
        return entry[1]

    def add_call(self, **fields: Any) -> None:
        """Record a call (or, at level 'all', an algorithm asked that did not run): each of
        :data:`INVOCATION_SCHEMA`'s recorded columns by name (a KeyError names one left out)."""
        row = INVOCATION_ROW(fields)
        with self._lock:
            self._calls.append(row)
            self._version += 1

    def add_event(self, **fields: Any) -> None:
        """Record an event, after its calls: each of :data:`EVENT_SCHEMA`'s recorded columns by
        name. Every ``chunk_rows`` events the rows go to a chunk. The frames read before it are let
        go: an outdated frame of a whole trace held on would outweigh the rows in memory (a read
        after it builds the frame again)."""
        row = EVENT_ROW(fields)
        with self._lock:
            self._events.append(row)
            self._version += 1
            if self._cache:
                self._cache.clear()
            if len(self._events) >= self.chunk_rows:
                self._spill()

    @property
    def event_rows(self) -> list[EventRecord]:
        """The records in memory of the events not yet spilled (a copy)."""
        with self._lock:
            rows = self._events.rows()
        return rows.records(EventRecord)

    @property
    def invocation_rows(self) -> list[InvocationRecord]:
        """The records in memory of the calls not yet spilled (a copy)."""
        with self._lock:
            rows = self._calls.rows()
        return rows.records(InvocationRecord)

    def note(self, kind: str, text: str, timestamp: Any = None) -> None:
        """Record something that is not an event: a setting changed from a widget, an
        interruption, a resumed checkpoint. It is tied to the last event fired."""
        epoch, batch = (timestamp.epoch, timestamp.batch) if timestamp is not None else (None, None)
        with self._lock:
            self._notes.append(NoteRecord(self.seq, epoch, batch, kind, text))
            self._version += 1

    def spill(self) -> None:
        """Write the rows in memory as one parquet chunk per table and let go of them."""
        with self._lock:
            self._spill()

    def _spill(self) -> None:
        self._store.write(queries.to_tables(self._events.rows(), self._calls.rows(), self._t0))
        self._events, self._calls = Columns(EVENT_SCHEMA), Columns(INVOCATION_SCHEMA)
        self._version += 1

    def spill_to(self, folder: Union[str, os.PathLike]) -> None:
        """Keep the chunks in ``folder`` from now on, moving those written so far (a trainer's
        ``save_folder``, where its checkpoints refer to them)."""
        with self._lock:
            self._store.move_to(folder)

    def _snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(self._store.view(), self._events.rows(), self._calls.rows(), list(self._notes),
                            dict(self._classes), self._version)

    # -- reading ----------------------------------------------------------------------------
    @property
    def events(self) -> pd.DataFrame:
        """One row per fired event: ``seq``, ``phase``, ``event``, ``epoch``, ``batch`` (global),
        ``batch_in_epoch``, ``microbatch``, ``t_start`` (s since the trace began), ``duration``
        (s), ``closure_call`` (which call of the optimizer's closure in the batch: 0, or 1 for
        SAM's second forward and backward)."""
        return self._frame("events")

    @property
    def invocations(self) -> pd.DataFrame:
        """One row per algorithm or callback call: ``seq`` (the event's), ``event``, ``batch``,
        ``name`` (unique per instance), ``cls``, ``kind``, ``matched``, ``order`` (position after
        the passes), ``exit_code`` (what ``apply`` returned, as JSON reads it back: what JSON
        cannot hold, as its repr), ``duration`` (s), ``changed`` (a tuple of the State fields
        replaced or mutated in place), ``error``, ``closure_call`` (as in :attr:`events`). At
        level 'all', algorithms asked that did not run appear with ``matched=False``."""
        return self._frame("invocations")

    @property
    def notes(self) -> pd.DataFrame:
        """Annotations: ``seq`` of the last event before them, ``epoch``, ``batch``, ``kind``, ``text``."""
        return self._frame("notes")

    def _frame(self, key: str) -> pd.DataFrame:
        """The DataFrame ``key``, built again only when rows were added since it was built."""
        if self._loaded is not None:
            return self._loaded[key]
        version, frame = self._cache.get(key, (None, None))
        if version != self._version:
            snapshot = self._snapshot()
            frame = queries.notes_frame(snapshot.notes) if key == "notes" else self._query(snapshot, key)
            self._cache[key] = (snapshot.version, frame)
        return frame

    def query(self, table: str = "invocations", batches: Bounds = None, seqs: Bounds = None, epoch: Any = None,
              event: Any = None, name: Any = None, matched: Optional[bool] = None) -> pd.DataFrame:
        """The rows of ``table`` ('events' or 'invocations', as in those frames) with ``batch`` in
        ``batches`` and ``seq`` in ``seqs`` (half-open ``(lo, hi)``), at ``epoch``, at ``event``
        and of ``name`` (each a value or a list), and ``matched`` (True: calls that ran, False:
        algorithms that did not, None: both). Reads only the chunks whose ranges meet the
        question, with the filter pushed into the parquet read, and the rows in memory."""
        if self._loaded is not None:
            raise ValueError("this trace reads the frames it was given (Trace.from_frames): filter them in pandas")
        return self._query(self._snapshot(), table, batches=batches, seqs=seqs, epoch=epoch, event=event, name=name,
                           matched=matched)

    def _query(self, snapshot: Snapshot, table: str, **question: Any) -> pd.DataFrame:
        tail = queries.to_tables(snapshot.events, snapshot.calls, self._t0)
        return queries.read(snapshot.store, tail, snapshot.classes, table, **question)

    # -- persistence --------------------------------------------------------------------------
    def save(self, folder: Union[str, os.PathLike]) -> Path:
        """Write the trace to ``folder``: its chunks (hard links where the file system allows),
        the rows in memory as one more chunk per table, notes.parquet and trace.json."""
        snapshot = self._snapshot()
        folder = Path(folder)
        chunks = snapshot.store.saved_into(folder, queries.to_tables(snapshot.events, snapshot.calls, self._t0))
        queries.write_parquet(queries.notes_frame(snapshot.notes), folder / "notes.parquet")
        (folder / "trace.json").write_text(json.dumps(self._info(chunks, snapshot.classes)))
        return folder

    def checkpoint(self) -> dict[str, Any]:
        """The trace as plain values for a checkpoint: its chunks by reference (their files stay
        where they are), the rows in memory and the notes as parquet bytes, so its size and
        the time to write it do not grow with the run. :meth:`from_checkpoint` reads it."""
        snapshot = self._snapshot()
        tail = queries.to_tables(snapshot.events, snapshot.calls, self._t0)
        return {**self._info([], snapshot.classes), **snapshot.store.snapshot(tail),
                "notes": queries.notes_frame(snapshot.notes).to_parquet()}

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
            trace._store.into_memory(STORED)
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
        trace._store = ChunkStore.restored(saved, KEYS)
        notes = table_from_bytes(saved["notes"]).to_pandas().itertuples(index=False, name=None)
        trace._notes = [NoteRecord(*row) for row in notes]
        return trace

    @classmethod
    def from_frames(cls, level: str = "all", **frames: pd.DataFrame) -> "Trace":
        """A trace that reads the frames given (``events``, ``invocations``, ``notes``; a missing
        one is empty) instead of recording: frames handed to the lab."""
        trace = cls(level)
        trace._loaded = {**{name: getattr(trace, name) for name in DTYPES}, **frames}
        return trace

    def __repr__(self) -> str:
        """The counts, without building a frame: events, calls that ran, notes, chunks on disk."""
        snapshot = self._snapshot()
        store = snapshot.store
        events = store.rows("events") + store.tail_rows("events") + len(snapshot.events)
        calls = (store.rows("invocations", "matched") + store.tail_rows("invocations", "matched")
                 + sum(snapshot.calls.column("matched")))
        return (f"Trace(level={self.level!r}, events={events}, calls={calls}, "
                f"notes={len(snapshot.notes)}, chunks={len(store.chunks)})")
