"""Reading the trace: its records as arrow tables laid out as the chunks, and the DataFrames a
question asks for, read from the chunks that may hold its rows and from the rows in memory."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pandas as pd
import pyarrow as pa

from composer_lab.core.event import Event
from composer_lab.core.trace.columns import Rows
from composer_lab.core.trace.schema import (DTYPES, EVENT_COLUMNS, INVOCATION_COLUMNS, INVOCATION_SCHEMA,
                                            NOTE_COLUMNS, SCHEMAS, STORED, Column)
from composer_lab.core.trace.storage import Bounds, ChunkStore, to_table

__all__ = ["to_tables", "read", "notes_frame", "write_parquet", "read_parquet"]

_PHASE_OF = {e.value: e.phase for e in Event}


def _columns(rows: Rows, table: str) -> dict[str, Any]:
    """The rows' columns by name, each as its chunk stores it (:func:`_stored`)."""
    return {c.name: _stored(c, rows.column(c.name)) for c in SCHEMAS[table] if c.recorded}


def _stored(column: Column, values: Any) -> Any:
    """A column's values as its chunk stores them: encoded as the schema says, or an array (a copy
    of the column's) read by numpy as the stored type."""
    if column.encode is not None:
        return column.encode(values)
    if column.held is None:
        return values
    numbers = np.frombuffer(values, values.typecode)
    return numbers.astype(column.stored, copy=False) if column.stored else numbers


def to_tables(events: Rows, calls: Rows, t0: float) -> dict[str, pa.Table]:
    """The engine's rows as arrow tables laid out as the chunks: times from the trace's start."""
    ev, cl = _columns(events, "events"), _columns(calls, "invocations")
    t_start = np.asarray(ev["t_start"], dtype=float)
    ev.update(t_start=t_start - t0, duration=np.asarray(ev["t_end"], dtype=float) - t_start)
    return {table: to_table([columns[name] for name in STORED[table]], STORED[table])
            for table, columns in (("events", ev), ("invocations", cl))}


def read(store: ChunkStore, tail: dict[str, pa.Table], classes: dict[str, str], table: str, batches: Bounds = None,
         seqs: Bounds = None, epoch: Any = None, event: Any = None, name: Any = None,
         matched: Optional[bool] = None) -> pd.DataFrame:
    """The rows of ``table`` the question keeps (see :meth:`Trace.query`), as in the trace's frames."""
    event, name = ([v] if isinstance(v, str) else v for v in (event, name))
    ranges = {"batch": batches, "seq": seqs, "epoch": None if epoch is None else (epoch, epoch + 1)}
    if table == "events":
        found = store.read("events", STORED["events"], ranges, {"event": event}, tail=tail["events"]).to_pandas()
        found = found.sort_values("seq", kind="stable", ignore_index=True)
        return found.assign(phase=found["event"].map(_PHASE_OF))[list(EVENT_COLUMNS)].astype(DTYPES["events"])
    among = {"event": event, "name": name, "matched": None if matched is None else [matched]}
    calls = store.read("invocations", STORED["invocations"], ranges, among, tail=tail["invocations"]).to_pandas()
    calls = calls.sort_values(["seq", "order"], kind="stable", na_position="last")  # what ran, then what did not
    calls = decoded(calls).assign(cls=calls["name"].map(classes))
    dtypes = {**DTYPES["invocations"], "name": pd.CategoricalDtype(list(classes)),
              "cls": pd.CategoricalDtype(sorted(set(classes.values())))}
    return calls[list(INVOCATION_COLUMNS)].reset_index(drop=True).astype(dtypes)


def notes_frame(notes: list) -> pd.DataFrame:
    """The notes' records as the :attr:`Trace.notes` frame."""
    return pd.DataFrame.from_records(notes, columns=NOTE_COLUMNS).astype(DTYPES["notes"])


def decoded(frame: pd.DataFrame, schema: tuple = INVOCATION_SCHEMA) -> pd.DataFrame:
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
    return decoded(pd.read_parquet(source))
