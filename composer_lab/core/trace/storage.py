"""Column chunks: a table too long to hold in memory, kept as immutable parquet files written as
it grows, and read back with only the rows a question needs.

A :class:`ChunkStore` writes each full chunk to a uniquely named file in its folder (a folder
given, or a temporary one removed when the store is collected) and remembers, per chunk, its
row count and the smallest and largest value of a few key columns; :meth:`ChunkStore.read`
skips the chunks whose key ranges miss the question and pushes the rest of the filter into the
parquet read. The trace (:mod:`composer_lab.core.trace`) spills its rows through it, and a
trainer's checkpoints keep its metrics in one (:mod:`composer_lab.trainer.checkpoint`).
"""

from __future__ import annotations

import functools
import io
import json
import operator
import os
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

__all__ = ["ChunkStore", "Bounds", "to_table", "where", "table_to_bytes", "table_from_bytes", "to_json", "columns",
           "temporary_folder"]

Bounds = Optional[tuple[Any, Any]]
"""A half-open range ``(lo, hi)`` of a column's values (either end None: open), or None: any."""

_TYPES = {"int64": pa.int64(), "Int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(), "string": pa.string(),
          "category": pa.string(), "object": pa.string(), "strings": pa.list_(pa.string())}
"""Column types by name: pandas dtype names (nullable or categorical as their values), and
'strings', a list of strings."""


def to_table(columns: Sequence[Sequence[Any]], types: Mapping[str, str]) -> pa.Table:
    """An arrow table of ``columns`` (one sequence per name in ``types``, in order), each of the
    type named there (:data:`_TYPES`); given types keep the schema of a chunk the same when a
    column holds only nulls."""
    schema = _schema(types)
    return pa.table([pa.array(col, type=field.type) for col, field in zip(columns, schema)], schema=schema)


def _schema(types: Mapping[str, str]) -> pa.Schema:
    return pa.schema([(name, _TYPES[kind]) for name, kind in types.items()])


def where(ranges: Mapping[str, Bounds], among: Mapping[str, Optional[Sequence[Any]]]) -> Optional[ds.Expression]:
    """The filter: each column of ``ranges`` in its range, each of ``among`` one of its values
    (None: no condition); None when there is no condition at all."""
    parts = [ds.field(col).isin(list(values)) for col, values in among.items() if values is not None]
    for col, bounds in ranges.items():
        lo, hi = bounds if bounds is not None else (None, None)
        parts += [ds.field(col) >= lo] if lo is not None else []
        parts += [ds.field(col) < hi] if hi is not None else []
    return functools.reduce(operator.and_, parts) if parts else None


def _overlaps(chunk: Mapping[str, Any], ranges: Mapping[str, Bounds]) -> bool:
    """Whether ``chunk`` may hold a row in ``ranges`` (by its key columns' smallest and largest values)."""
    for col, bounds in ranges.items():
        if bounds is None or col not in chunk["min"] or chunk["min"][col] is None:
            continue
        lo, hi = bounds
        if (lo is not None and chunk["max"][col] < lo) or (hi is not None and chunk["min"][col] >= hi):
            return False
    return True


def table_to_bytes(table: pa.Table) -> bytes:
    """``table`` as parquet bytes (for a checkpoint, which holds plain values)."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def table_from_bytes(data: bytes) -> pa.Table:
    return pq.read_table(io.BytesIO(data))


class ChunkStore:
    """Immutable parquet chunks of named tables in one folder. ``keys`` names, per table, the
    columns whose range each chunk notes. ``chunks`` lists them in the order written, as plain
    values: ``table``, ``file`` (its name in the folder), ``rows``, and the ``min`` and ``max``
    of the key columns. Files are never rewritten, so another store (a checkpoint's, a saved
    trace's) may refer to them too."""

    def __init__(self, folder: Union[str, os.PathLike, None], keys: Mapping[str, Sequence[str]],
                 chunks: Sequence[dict] = ()) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.keys = keys
        self.chunks = list(chunks)
        self.tail: dict[str, pa.Table] = {}
        """Rows not written as chunks, kept with the store (a restored checkpoint's)."""

    def view(self) -> "ChunkStore":
        """This store as it is now: a store that reads the chunks written so far and its
        :attr:`tail`, whatever this one writes after (a reader's state while another thread writes)."""
        view = ChunkStore(self.folder, self.keys, self.chunks)
        view.tail = self.tail
        return view

    def _target(self) -> Path:
        """The folder to write into: a temporary one (:func:`temporary_folder`), made at the first
        write when none was given."""
        if self.folder is None:
            self.folder = temporary_folder(self, "composer_lab-chunks-")
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.folder

    def write(self, data: Mapping[str, pa.Table]) -> None:
        """Write each non-empty table of ``data`` (name to rows) as a new chunk of that table."""
        for table, rows in data.items():
            if rows.num_rows:
                file = f"{table}-{uuid.uuid4().hex[:16]}.parquet"
                pq.write_table(rows, self._target() / file)
                bounds = {key: pc.min_max(rows[key]).as_py() for key in self.keys[table]}
                self.chunks.append({"table": table, "file": file, "rows": rows.num_rows,
                                    "min": {k: b["min"] for k, b in bounds.items()},
                                    "max": {k: b["max"] for k, b in bounds.items()}, "true": _trues(rows)})

    def read(self, table: str, types: Mapping[str, str], ranges: Mapping[str, Bounds] = {},
             among: Mapping[str, Optional[Sequence[Any]]] = {}, columns: Optional[list[str]] = None,
             tail: Optional[pa.Table] = None) -> pa.Table:
        """The rows of ``table`` (its columns typed as in :func:`to_table`) in ``ranges`` and
        ``among`` (see :func:`where`), from the chunks that may hold them and from ``tail``
        (rows not written yet, after this store's own :attr:`tail`), in that order."""
        expr, schema = where(ranges, among), _schema(types)
        parts = [pq.read_table(str(path), columns=columns, filters=expr, schema=schema)
                 for path in self._paths(table, ranges)]
        parts += [_selected(rows, expr, columns) for rows in (self.tail.get(table), tail) if rows is not None]
        if not parts:
            return pa.table({name: pa.array([], schema.field(name).type) for name in columns or schema.names})
        return pa.concat_tables(parts)

    def _paths(self, table: str, ranges: Mapping[str, Bounds]) -> list[Path]:
        """The files of ``table``'s chunks that may hold rows in ``ranges``; all of them must be there."""
        paths = [self.folder / c["file"] for c in self.chunks if c["table"] == table and _overlaps(c, ranges)]
        gone = [path.name for path in paths if not path.is_file()]
        if gone:
            raise FileNotFoundError(f"the chunk files {gone} are no longer in {self.folder}: a loaded or resumed trace "
                                    f"reads them when asked, so keep that folder while you use it (or read what you "
                                    f"need, e.g. trace.events, before removing it)")
        return paths

    def move_to(self, folder: Union[str, os.PathLike], link: bool = False) -> None:
        """Write into ``folder`` from now on, and move the chunks written so far there, or with
        ``link`` link them there (:func:`_share`: another store, a checkpoint's, still reads them)."""
        folder = Path(folder)
        if self.folder is not None and folder.resolve() != self.folder.resolve():
            folder.mkdir(parents=True, exist_ok=True)
            for chunk in self.chunks:
                (_share if link else shutil.move)(self.folder / chunk["file"], folder / chunk["file"])
        self.folder = folder

    def saved_into(self, folder: Union[str, os.PathLike], tail: Mapping[str, pa.Table]) -> list[dict]:
        """Put every chunk in ``folder`` (hard links, copies across file systems: the files are
        immutable, so both stores may read them) and ``tail`` as new chunks; the chunks there."""
        saved = ChunkStore(folder, self.keys, self.chunks)
        target = saved._target()
        for chunk in self.chunks:
            _share(self.folder / chunk["file"], target / chunk["file"])
        saved.write(self._with_tail(tail))
        return saved.chunks

    def snapshot(self, tail: Mapping[str, pa.Table]) -> dict[str, Any]:
        """The store as plain values (for a checkpoint): its folder, its chunks by reference and
        ``tail`` as parquet bytes; its size does not grow with the chunks' rows. :meth:`restored` reads it."""
        folder = None if self.folder is None else str(self.folder.resolve())
        tail = {name: table_to_bytes(rows) for name, rows in self._with_tail(tail).items()}
        return {"folder": folder, "chunks": self.chunks, "tail": tail}

    def _with_tail(self, tail: Mapping[str, pa.Table]) -> dict[str, pa.Table]:
        """This store's own :attr:`tail` followed by ``tail``, per table."""
        return {name: pa.concat_tables([rows[name] for rows in (self.tail, tail) if name in rows])
                for name in {**self.tail, **tail}}

    def rows(self, table: str, true_in: Optional[str] = None) -> int:
        """How many rows of ``table`` the chunks hold (the :attr:`tail` not counted); with
        ``true_in``, a bool column, those where it holds True."""
        return sum(c["rows"] if true_in is None else c["true"][true_in] for c in self.chunks if c["table"] == table)

    def tail_rows(self, table: str, true_in: Optional[str] = None) -> int:
        """As :meth:`rows`, of the :attr:`tail`."""
        rows = self.tail.get(table)
        return 0 if rows is None else rows.num_rows if true_in is None else _trues(rows)[true_in]

    def into_memory(self, types: Mapping[str, Mapping[str, str]]) -> None:
        """Read every chunk of the tables in ``types`` (name to column types) into :attr:`tail`:
        the store then needs its folder no more."""
        self.tail = {table: self.read(table, kinds) for table, kinds in types.items()}
        self.chunks = []

    @classmethod
    def restored(cls, saved: Mapping[str, Any], keys: Mapping[str, Sequence[str]]) -> "ChunkStore":
        """The store a :meth:`snapshot` describes, its ``tail`` read back."""
        store = cls(saved["folder"], keys, saved["chunks"])
        store.tail = {name: table_from_bytes(data) for name, data in saved["tail"].items()}
        return store


def _trues(rows: pa.Table) -> dict[str, int]:
    """How many rows hold True in each bool column of ``rows``."""
    return {field.name: int(pc.sum(rows[field.name]).as_py() or 0) for field in rows.schema
            if field.type == pa.bool_()}


def _selected(rows: pa.Table, expr: Optional[ds.Expression], columns: Optional[list[str]]) -> pa.Table:
    """The rows of ``rows`` that ``expr`` keeps (None: all), with ``columns`` (None: all)."""
    rows = rows.filter(expr) if expr is not None else rows
    return rows.select(columns) if columns is not None else rows


def temporary_folder(owner: Any, prefix: str) -> Path:
    """A new temporary folder, removed with what it holds when ``owner`` is collected."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    weakref.finalize(owner, shutil.rmtree, str(folder), True)
    return folder


def _share(source: Path, target: Path) -> None:
    """Make the immutable chunk file ``source`` readable as ``target`` too: a hard link, a copy
    across file systems; nothing when ``target`` is there (the same chunk: names are unique)."""
    if not target.exists():
        try:
            os.link(source, target)
        except OSError:
            shutil.copyfile(source, target)


def columns(rows: Sequence[tuple], width: int) -> list[list]:
    """The columns of ``rows`` (tuples of ``width`` fields), one list each, built without a tuple
    per row: a long run of new tuples sets off the garbage collector over the whole process
    (10 times slower here)."""
    return [list(map(operator.itemgetter(i), rows)) for i in range(width)]


def to_json(values: Any) -> list:
    """``values`` as JSON text, None kept (what JSON cannot hold, as its repr)."""
    return [None if value is None else json.dumps(value, default=repr) for value in values]
