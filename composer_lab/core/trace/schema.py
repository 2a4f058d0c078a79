"""The trace's one schema: each table's columns, what the engine records of them (a row laid out
from the fields given by name, and the records a row reads back as), their dtypes in the frames
and their types in the parquet chunks."""

from __future__ import annotations

import json
import operator
from collections import namedtuple
from typing import Any, Callable, NamedTuple, Optional

import pandas as pd

from composer_lab.core.event import Event
from composer_lab.core.trace.storage import to_json

__all__ = ["Column", "EVENT_SCHEMA", "INVOCATION_SCHEMA", "NOTE_SCHEMA", "EVENT_COLUMNS", "INVOCATION_COLUMNS",
           "NOTE_COLUMNS", "EventRecord", "InvocationRecord", "NoteRecord", "EVENT_ROW", "INVOCATION_ROW",
           "TRACE_LEVELS", "TRACE_FORMAT"]


class Column(NamedTuple):
    """One column of a trace table, the only place it is described. ``dtype``: its pandas dtype in
    the frame (None: not in the frame); ``stored``: its type in a parquet chunk, a name of
    :mod:`composer_lab.core.trace.storage`'s types (None: not stored); ``recorded``: whether the
    engine's record holds it; ``encode`` / ``decode``: how its recorded values are written to a
    chunk and read back (None: as they are); ``held``: the :mod:`array` type code of the column
    that holds its recorded values in memory, so that a row costs bytes, not objects: 'q' an int,
    'i' an int below 2**31, 'd' a float, 'b' a bool; None: a list (for values that may be None or
    are objects: nulls, the shared strings and tuples)."""

    name: str
    dtype: Any = None
    stored: Optional[str] = None
    recorded: bool = True
    encode: Optional[Callable[[list], list]] = None
    decode: Optional[Callable[[Any], Any]] = None
    held: Optional[str] = None


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
    Column("seq", "int64", "int64", held="q"),
    Column("phase", _PHASE_DTYPE, recorded=False),  # (the event's, when read)
    Column("event", _EVENT_DTYPE, "category"),  # (recorded as the Event: a str, its value)
    Column("epoch", "int64", "int64", held="i"),
    Column("batch", "int64", "int64", held="q"),
    Column("batch_in_epoch", "int64", "int64", held="q"),
    Column("microbatch", "Int64", "Int64"),
    Column("t_start", "float64", "float64", held="d"),  # (recorded: perf_counter; stored: s since the trace began)
    Column("t_end", held="d"),  # (perf_counter)
    Column("duration", "float64", "float64", recorded=False),
    Column("closure_call", "int64", "int64", held="i"),  # (which call of the optimizer's closure: 0, SAM's 1)
)
"""One row per fired event."""

INVOCATION_SCHEMA = (
    Column("seq", "int64", "int64", held="q"),
    Column("event", _EVENT_DTYPE, "category"),
    Column("batch", "int64", "int64", held="q"),
    Column("name", "category", "category"),  # (the trace's label of the instance)
    Column("cls", "category", recorded=False),
    Column("kind", _KIND_DTYPE, "category"),
    Column("matched", "bool", "bool", held="b"),  # (False: asked, said no or did not run; only at level 'all')
    Column("order", "Int64", "Int64"),
    Column("exit_code", "object", "object", encode=to_json, decode=_from_json),  # (what the call returned)
    Column("duration", "float64", "float64"),
    Column("changed", "object", "strings", decode=_field_names),  # (a tuple of TRACKED_FIELDS)
    Column("error", "string", "string"),  # ('Type: message' if it raised)
    Column("closure_call", "int64", "int64", held="i"),
    Column("epoch", stored="int64", held="i"),  # (both tables filter on it)
)
"""One row per algorithm or callback call, and at level 'all' one per algorithm asked that did
not run (``matched`` False)."""

NOTE_SCHEMA = (Column("seq", "int64"), Column("epoch", "Int64"), Column("batch", "Int64"), Column("kind", "string"),
               Column("text", "string"))
"""Something that is not an event, tied to the last event fired."""

SCHEMAS = {"events": EVENT_SCHEMA, "invocations": INVOCATION_SCHEMA, "notes": NOTE_SCHEMA}
DTYPES = {table: {c.name: c.dtype for c in schema if c.dtype is not None} for table, schema in SCHEMAS.items()}
"""Each frame's columns, in order, and their dtypes (``name``'s categories are the trace's labels)."""
STORED = {table: {c.name: c.stored for c in SCHEMAS[table] if c.stored} for table in ("events", "invocations")}
"""The columns of a chunk and their types."""
EVENT_COLUMNS, INVOCATION_COLUMNS, NOTE_COLUMNS = (tuple(columns) for columns in DTYPES.values())
KEYS = dict.fromkeys(STORED, ("seq", "batch", "epoch"))
"""The columns whose range each chunk notes, to skip the chunks a query cannot need."""


def recorded(schema: tuple) -> list[str]:
    """The names of the columns the engine records, in the schema's order."""
    return [c.name for c in schema if c.recorded]


EVENT_ROW = operator.itemgetter(*recorded(EVENT_SCHEMA))
"""An event's fields, given by name (a dict), as a row in :data:`EVENT_SCHEMA`'s order."""
INVOCATION_ROW = operator.itemgetter(*recorded(INVOCATION_SCHEMA))
"""A call's fields, given by name, as a row in :data:`INVOCATION_SCHEMA`'s order."""

EventRecord = namedtuple("EventRecord", recorded(EVENT_SCHEMA))
EventRecord.__doc__ = "An event's row read back by name (:data:`EVENT_SCHEMA`)."
InvocationRecord = namedtuple("InvocationRecord", recorded(INVOCATION_SCHEMA))
InvocationRecord.__doc__ = "A call's row read back by name (:data:`INVOCATION_SCHEMA`)."
NoteRecord = namedtuple("NoteRecord", recorded(NOTE_SCHEMA))
NoteRecord.__doc__ = "A note (:data:`NOTE_SCHEMA`)."

TRACE_FORMAT = "composer_lab.trace/4"
"""What :meth:`Trace.save` writes into trace.json: 4 since non-matches are rows and ``closure_call`` a column."""

TRACE_LEVELS = ("all", "ran", "off")
"""'all': every event and call, also the algorithms asked that did not run; 'ran': events and
the calls that ran; 'off': nothing."""
