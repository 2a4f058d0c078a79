"""The trace's rows in memory as columns, one per column the engine records (:mod:`.schema`): an
:mod:`array` of machine numbers where the schema's ``held`` names a type code, a list otherwise.
A row then costs bytes in each column, not objects of its own (a record kept per row cost its
tuple, its floats and the collector's tracking, about 210 bytes a call row; the columns about 92)."""

from __future__ import annotations

from array import array
from typing import Any, Optional, Sequence

__all__ = ["Columns", "Rows"]

_HELD = {"q": "an int", "i": "an int below 2**31", "d": "a float", "b": "a bool"}
"""What each type code holds, as an error names it; 'b' holds bools as bytes, read back as bools."""


class Rows:
    """The first ``length`` rows of some columns: what a read works from while the columns grow
    (they are only appended to, and a spill starts new ones, so these rows stay as they were)."""

    def __init__(self, names: tuple, columns: tuple, length: int) -> None:
        self.names, self.columns, self.length = names, columns, length

    def __len__(self) -> int:
        return self.length

    def column(self, name: str) -> Sequence[Any]:
        """A copy of the column ``name``'s values in these rows (an array's as an array)."""
        return self.columns[self.names.index(name)][:self.length]

    def records(self, record: type) -> list:
        """These rows as records of the type ``record`` (a namedtuple of the same names), each
        value as it was recorded."""
        values = (self.column(name) for name in self.names)
        return list(map(record._make, zip(*(_recorded(column) for column in values))))


def _recorded(values: Sequence[Any]) -> Sequence[Any]:
    """A column's values as recorded: bools held as bytes read back as bools."""
    return list(map(bool, values)) if getattr(values, "typecode", None) == "b" else values


class Columns:
    """A table's rows not spilled yet: one column per recorded column of ``schema``, in its order.
    A record appended is kept as it is until ``STAGED`` of them are, then they move into the
    columns together (one ``extend`` per column, not one ``append`` per field: the cost of a row
    stays that of keeping a tuple); a read moves them first."""

    STAGED = 1024

    def __init__(self, schema: tuple) -> None:
        recorded = [c for c in schema if c.recorded]
        self.names = tuple(c.name for c in recorded)
        self.columns = tuple(array(c.held) if c.held else [] for c in recorded)
        self._staged: list[tuple] = []

    def __len__(self) -> int:
        return len(self.columns[-1]) + len(self._staged)

    def append(self, record: tuple) -> None:
        """Append a record, its fields in the schema's order."""
        self._staged.append(record)
        if len(self._staged) >= self.STAGED:
            self._move_staged()

    def _move_staged(self) -> None:
        """Move the staged records into the columns. A field a column cannot hold refuses its row
        (a TypeError naming the column, raised once the others moved): only that row is lost."""
        staged, self._staged = self._staged, []
        length = len(self.columns[-1])
        try:
            for column, values in zip(self.columns, zip(*staged)):
                column.extend(values)
        except (TypeError, OverflowError):
            for column in self.columns:
                del column[length:]
            errors = [error for error in map(self._append_row, staged) if error is not None]
            if errors:
                raise errors[0]

    def _append_row(self, record: tuple) -> Optional[TypeError]:
        """Append one record's fields: the whole row, or none of it and the TypeError naming the column."""
        try:
            for column, value in zip(self.columns, record):
                column.append(value)
        except (TypeError, OverflowError) as err:
            return self._refused(err, record)
        return None

    def _refused(self, err: BaseException, record: tuple) -> TypeError:
        """Drop the part of a row that ``err`` interrupted (the last column is appended to last, so
        its length is the rows'); the TypeError naming the column that could not hold its value."""
        length = len(self.columns[-1])
        failed = sum(len(column) > length for column in self.columns)
        for column in self.columns:
            del column[length:]
        held = _HELD.get(getattr(self.columns[failed], "typecode", None), "its type")
        error = TypeError(f"the trace's column {self.names[failed]!r} holds {held}, got "
                          f"{type(record[failed]).__name__} {record[failed]!r}; give it {held} (the columns "
                          f"are described in composer_lab/core/trace/schema.py)")
        error.__cause__ = err
        return error

    def rows(self) -> Rows:
        """The rows now, unchanged by later appends."""
        if self._staged:
            self._move_staged()
        return Rows(self.names, self.columns, len(self))
