"""The trace, a small package: its one schema (:mod:`.schema`), the recording the engine appends
to (:mod:`.recording`, :class:`Trace`), the parquet chunks it spills into (:mod:`.storage`) and
the queries that read it back as DataFrames (:mod:`.queries`)."""

from composer_lab.core.trace.queries import read_parquet, write_parquet
from composer_lab.core.trace.recording import Trace
from composer_lab.core.trace.schema import (EVENT_COLUMNS, EVENT_SCHEMA, INVOCATION_COLUMNS, INVOCATION_SCHEMA,
                                            NOTE_COLUMNS, NOTE_SCHEMA, TRACE_LEVELS, Column, EventRecord,
                                            InvocationRecord, NoteRecord)

__all__ = ["Trace", "TRACE_LEVELS", "Column", "EVENT_SCHEMA", "INVOCATION_SCHEMA", "NOTE_SCHEMA", "EVENT_COLUMNS",
           "INVOCATION_COLUMNS", "NOTE_COLUMNS", "EventRecord", "InvocationRecord", "NoteRecord", "write_parquet",
           "read_parquet"]
