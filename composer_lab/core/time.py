"""Durations ('3ep', '120ba', '4096sp', '0.5dur') and the trainer's position in training."""

from __future__ import annotations

import dataclasses
import datetime
import re
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from functools import total_ordering
from typing import Any, Optional, Union

__all__ = ["TimeUnit", "Time", "Timestamp", "TimeInputError", "ensure_time"]


class TimeUnit(str, Enum):
    """The unit of a :class:`Time`: epochs, batches, samples or a fraction of the run."""

    EPOCH = "ep"
    BATCH = "ba"
    SAMPLE = "sp"
    DURATION = "dur"

    @classmethod
    def _missing_(cls, value: object) -> None:
        """Reject an unknown unit, listing the units (``TimeUnit(...)`` raises this error)."""
        raise ValueError(f"{value!r} is not a time unit; use one of 'ep' (epochs), 'ba' (batches), "
                         f"'sp' (samples) or 'dur' (fraction of the run), e.g. Time(3, 'ep')")


_UNITS = frozenset(unit.value for unit in TimeUnit)
_TIMESTRING = re.compile(r"^(\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)([a-z]+)$")
"""A number (with ``_`` between digits, decimals, an exponent: '3_0sp', '3e10sp') then a unit."""
_EXAMPLES = "'3ep', '120ba', '4096sp' or '0.5dur'"
_UNSUPPORTED_UNITS = {
    "sec": "wall-clock durations would make a run's length depend on the machine's speed, so runs could not be "
           "compared or repeated; give batches (e.g. '600ba'), or stop from a callback with state.stop_training() "
           "once state.timestamp.total_wct passes the time you want",
    "tok": "composer_lab does not count tokens; give batches or samples (a sample is a sequence), e.g. '600ba'",
    "iter": "composer_lab has no iterations apart from epochs; give epochs, e.g. '3ep'",
}
"""Composer's units that composer_lab refuses, with why and what to give instead."""


class TimeInputError(TypeError, RuntimeError):
    """What :meth:`Time.from_input` raises for a value it cannot read: a TypeError, and the
    RuntimeError Composer raises there."""


@total_ordering
@dataclass(frozen=True, eq=False)
class Time:
    """An amount of training time: an integer count of epochs, batches or samples, or a
    fraction in [0, 1] of the whole run (unit 'dur').

    As in Composer, Times of one unit add, subtract and compare (also with a plain number, read
    in the same unit, or a time string), a Time multiplies or divides by a number (counts are
    truncated to whole numbers) and by a 'dur' Time (``Time(10, 'ep') * Time(0.5, 'dur')`` is 5
    epochs). Mixing units raises ValueError; ``==`` across units is False.
    """

    value: Union[int, float]
    unit: TimeUnit

    def __post_init__(self) -> None:
        unit = TimeUnit(self.unit)
        object.__setattr__(self, "unit", unit)
        if unit is TimeUnit.DURATION:
            if not 0 <= self.value <= 1:
                raise ValueError(f"a 'dur' time is a fraction of the run between 0 and 1, got {self.value}; "
                                 f"write e.g. '0.5dur'")
            object.__setattr__(self, "value", float(abs(self.value)))  # -0.0 would print as '-0.0dur'
        else:
            if isinstance(self.value, bool) or not float(self.value).is_integer() or self.value < 0:
                raise ValueError(f"a time in '{unit.value}' is a whole number >= 0, got {self.value!r}; "
                                 f"write e.g. {_EXAMPLES}")
            object.__setattr__(self, "value", int(self.value))

    @classmethod
    def from_epoch(cls, epoch: int) -> "Time":
        """``Time(epoch, 'ep')``; likewise ``from_batch``, ``from_sample``, ``from_duration``."""
        return cls(epoch, TimeUnit.EPOCH)

    @classmethod
    def from_batch(cls, batch: int) -> "Time":
        return cls(batch, TimeUnit.BATCH)

    @classmethod
    def from_sample(cls, sample: int) -> "Time":
        return cls(sample, TimeUnit.SAMPLE)

    @classmethod
    def from_duration(cls, duration: float) -> "Time":
        return cls(duration, TimeUnit.DURATION)

    @classmethod
    def from_input(cls, value: Union[str, int, float, "Time"], default_int_unit: Union[TimeUnit, str, None] = None
                   ) -> "Time":
        """``value`` as a Time, as Composer's ``Time.from_input``: a Time as it is, a time string
        parsed, a number read in ``default_int_unit`` (required then)."""
        if isinstance(value, Time):
            return value
        if isinstance(value, str):
            return cls.from_timestring(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if default_int_unit is None:
                raise TimeInputError(f"Time.from_input({value!r}): a number needs its unit; pass "
                                     f"default_int_unit, e.g. Time.from_input({value!r}, 'ba'), or a string such "
                                     f"as '{value}ba'")
            return cls(value, TimeUnit(default_int_unit))
        raise TimeInputError(f"Time.from_input cannot read {type(value).__name__} {value!r}; give a Time, a time "
                             f"string such as {_EXAMPLES}, or a number with default_int_unit")

    @classmethod
    def from_timestring(cls, text: str) -> "Time":
        """Parse '3ep', '120ba', '4096sp' or '0.5dur'; as in Composer, a whole number may be
        written with decimals ('2.0ep', '3.000ba'), an exponent ('3e10sp') or ``_`` between
        digits ('3_000ba')."""
        if not isinstance(text, str):
            raise TypeError(f"a duration is a string such as {_EXAMPLES}, got {type(text).__name__} {text!r}")
        match = _TIMESTRING.match(text.strip())
        if match is None:
            raise ValueError(f"cannot read the duration {text!r}: write a number followed by one of the "
                             f"units ep, ba, sp, dur with no space, e.g. {_EXAMPLES}")
        number, unit = match.groups()
        if unit in _UNSUPPORTED_UNITS:
            raise ValueError(f"cannot read the duration {text!r}: '{unit}' is a unit of Composer's that "
                             f"composer_lab does not take: {_UNSUPPORTED_UNITS[unit]}")
        if unit not in _UNITS:
            raise ValueError(f"cannot read the duration {text!r}: write a number followed by one of the "
                             f"units ep, ba, sp, dur with no space, e.g. {_EXAMPLES}")
        value = float(number)
        if unit != "dur" and not value.is_integer():
            raise ValueError(f"cannot read the duration {text!r}: epochs, batches and samples are whole "
                             f"numbers; write e.g. '{int(value) or 1}{unit}'")
        return cls(value if unit == "dur" else int(value), TimeUnit(unit))

    def is_period(self) -> bool:
        """Whether this time can space something recurring: a whole number of epochs or batches, at least 1."""
        return self.unit in (TimeUnit.EPOCH, TimeUnit.BATCH) and self.value >= 1

    def __str__(self) -> str:
        # Positional notation, so that the string parses back: 1e-05 is written 0.00001.
        return f"{format(Decimal(repr(self.value)), 'f')}{self.unit.value}"

    def to_timestring(self) -> str:
        """The time string, e.g. '5ep' (what :meth:`from_timestring` reads)."""
        return str(self)

    def __int__(self) -> int:
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __hash__(self) -> int:
        return hash((self.value, self.unit))

    # -- arithmetic and comparison, as in Composer ------------------------------------------------
    def _same_unit(self, other: Any, verb: str) -> "Time":
        """``other`` as a Time in this unit (a number is read in it, a string parsed); a Time of
        another unit is a ValueError naming ``verb``."""
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            other = Time(other, self.unit)
        elif isinstance(other, str):
            other = Time.from_timestring(other)
        elif not isinstance(other, Time):
            raise TypeError(f"cannot {verb} {self} and {type(other).__name__} {other!r}; give a Time, a time "
                            f"string such as '3ep', or a number (read in '{self.unit.value}')")
        if other.unit is not self.unit:
            raise ValueError(f"cannot {verb} {self} and {other}: their units differ ('{self.unit.value}' and "
                             f"'{other.unit.value}'); convert one first, e.g. with State.get_elapsed_duration() "
                             f"or Timestamp.get(unit)")
        return other

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, (Time, str, int, float)):
            return NotImplemented
        try:
            return self.value == self._same_unit(other, "compare").value
        except (TypeError, ValueError):  # not a time, or another unit (Composer raises; here simply not equal)
            return False

    def __lt__(self, other: Any) -> bool:  # (total_ordering derives <=, > and >= from it and ==)
        return self.value < self._same_unit(other, "compare").value

    def __add__(self, other: Any) -> "Time":
        return Time(self.value + self._same_unit(other, "add").value, self.unit)

    __radd__ = __add__

    def __sub__(self, other: Any) -> "Time":
        return Time(self.value - self._same_unit(other, "subtract").value, self.unit)

    def __rsub__(self, other: Any) -> "Time":
        return Time(self._same_unit(other, "subtract").value - self.value, self.unit)

    def __mul__(self, other: Any) -> "Time":
        if isinstance(other, Time):
            if TimeUnit.DURATION not in (self.unit, other.unit):
                raise ValueError(f"cannot multiply {self} by {other}: one of them must be a fraction of the run "
                                 f"('dur'), e.g. Time(10, 'ep') * Time(0.5, 'dur')")
            scaled, factor = (self, other) if other.unit is TimeUnit.DURATION else (other, self)
            return scaled * factor.value
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return NotImplemented
        return Time(self._scaled(self.value * other), self.unit)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> "Time":
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return NotImplemented
        return Time(self._scaled(self.value / other), self.unit)

    def _scaled(self, value: float) -> Union[int, float]:
        """A scaled value in this unit: counts truncated to whole numbers (as Composer does)."""
        return float(value) if self.unit is TimeUnit.DURATION else int(value)


def ensure_time(value: Union[str, Time], name: str = "duration") -> Time:
    """Return ``value`` as a :class:`Time`, parsing strings; the error names the argument."""
    if isinstance(value, Time):
        return value
    try:
        return Time.from_timestring(value)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from None


_NO_TIME = datetime.timedelta(0)


@dataclass(frozen=True, eq=False)
class Timestamp:
    """Where training stands: completed epochs, batches and samples, overall and in the epoch,
    and the wall-clock time of the run, of the epoch and of the last batch (Composer's fields,
    less tokens). Like Composer's, it is never changed in place: ``to_next_*`` and :meth:`copy`
    return new ones. As Composer's, it compares with a :class:`Time` or a time string by its
    count in that unit (``timestamp < Time(10, 'ep')``, ``timestamp == '3ba'``), and with
    another Timestamp field by field."""

    epoch: int = 0
    batch: int = 0
    sample: int = 0
    batch_in_epoch: int = 0
    sample_in_epoch: int = 0
    total_wct: datetime.timedelta = _NO_TIME
    epoch_wct: datetime.timedelta = _NO_TIME
    batch_wct: datetime.timedelta = _NO_TIME

    def get(self, unit: TimeUnit) -> int:
        """The count in ``unit`` (epochs, batches or samples)."""
        field = _FIELD_OF_UNIT.get(TimeUnit(unit))
        if field is None:
            raise ValueError("a Timestamp counts epochs, batches and samples, not 'dur'; for the fraction "
                             "of the run done, call State.get_elapsed_duration()")
        return getattr(self, field)

    def copy(self, **fields: Any) -> "Timestamp":
        """A copy with the ``fields`` given (those not None) replaced, as Composer's ``Timestamp.copy``."""
        return dataclasses.replace(self, **{name: int(value) if isinstance(value, Time) else value
                                            for name, value in fields.items() if value is not None})

    def to_next_batch(self, samples: Union[int, Time] = 0,
                      duration: Optional[datetime.timedelta] = None) -> "Timestamp":
        """The timestamp after one more batch of ``samples`` examples that took ``duration`` (as in
        Composer, ``batch_wct`` becomes ``duration``, zero if not given)."""
        samples, duration = int(samples), duration if duration is not None else _NO_TIME
        return Timestamp(self.epoch, self.batch + 1, self.sample + samples, self.batch_in_epoch + 1,
                         self.sample_in_epoch + samples, self.total_wct + duration, self.epoch_wct + duration, duration)

    def to_next_epoch(self, duration: Optional[datetime.timedelta] = None) -> "Timestamp":
        """The timestamp at the start of the next epoch (in-epoch counts and clock back to 0)."""
        total = self.total_wct if duration is None else self.total_wct + duration
        return Timestamp(self.epoch + 1, self.batch, self.sample, 0, 0, total, _NO_TIME, self.batch_wct)

    def state_dict(self) -> dict:
        """The fields as plain numbers (clock times in seconds), for a checkpoint."""
        return {k: v.total_seconds() if isinstance(v, datetime.timedelta) else v for k, v in vars(self).items()}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Timestamp":
        return cls(**{k: datetime.timedelta(seconds=v) if k.endswith("_wct") else v for k, v in state.items()})

    # -- comparison, as Composer's Timestamp ------------------------------------------------------
    def _count(self, other: Any) -> Optional[Time]:
        """This timestamp's count in the unit of ``other`` (a Time or a time string); None for anything else."""
        if isinstance(other, str):
            other = Time.from_timestring(other)
        return Time(self.get(other.unit), other.unit) if isinstance(other, Time) else None

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Timestamp):
            return vars(self) == vars(other)
        count = self._count(other) if isinstance(other, (Time, str)) else None
        return NotImplemented if count is None else count == other

    def __hash__(self) -> int:
        return hash(tuple(vars(self).values()))

    def __lt__(self, other: Any) -> bool:
        count = self._count(other)
        return NotImplemented if count is None else count < other

    def __le__(self, other: Any) -> bool:
        count = self._count(other)
        return NotImplemented if count is None else count <= other

    def __gt__(self, other: Any) -> bool:
        count = self._count(other)
        return NotImplemented if count is None else count > other

    def __ge__(self, other: Any) -> bool:
        count = self._count(other)
        return NotImplemented if count is None else count >= other


_FIELD_OF_UNIT = {TimeUnit.EPOCH: "epoch", TimeUnit.BATCH: "batch", TimeUnit.SAMPLE: "sample"}
