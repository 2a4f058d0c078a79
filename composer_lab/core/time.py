"""Durations ('3ep', '120ba', '4096sp', '0.5dur') and the trainer's position in training."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Union

__all__ = ["TimeUnit", "Time", "Timestamp", "ensure_time"]


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


_TIMESTRING = re.compile(r"^(\d+(?:\.\d+)?)(ep|ba|sp|dur)$")
_EXAMPLES = "'3ep', '120ba', '4096sp' or '0.5dur'"


@dataclass(frozen=True)
class Time:
    """An amount of training time: an integer count of epochs, batches or samples, or a
    fraction in (0, 1] of the whole run (unit 'dur')."""

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
    def from_timestring(cls, text: str) -> "Time":
        """Parse '3ep', '120ba', '4096sp' or '0.5dur'."""
        if not isinstance(text, str):
            raise TypeError(f"a duration is a string such as {_EXAMPLES}, got {type(text).__name__} {text!r}")
        match = _TIMESTRING.match(text.strip())
        if match is None:
            raise ValueError(f"cannot read the duration {text!r}: write a number followed by one of the "
                             f"units ep, ba, sp, dur with no space, e.g. {_EXAMPLES}")
        number, unit = match.groups()
        if unit != "dur" and "." in number:
            raise ValueError(f"cannot read the duration {text!r}: epochs, batches and samples are whole "
                             f"numbers; write e.g. '{int(float(number)) or 1}{unit}'")
        return cls(float(number) if unit == "dur" else int(number), TimeUnit(unit))

    def __str__(self) -> str:
        # Positional notation, so that the string parses back: 1e-05 is written 0.00001.
        return f"{format(Decimal(repr(self.value)), 'f')}{self.unit.value}"


def ensure_time(value: Union[str, Time], name: str = "duration") -> Time:
    """Return ``value`` as a :class:`Time`, parsing strings; the error names the argument."""
    if isinstance(value, Time):
        return value
    try:
        return Time.from_timestring(value)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from None


@dataclass(frozen=True)
class Timestamp:
    """Where training stands: completed epochs, batches and samples, overall and in the epoch."""

    epoch: int = 0
    batch: int = 0
    sample: int = 0
    batch_in_epoch: int = 0
    sample_in_epoch: int = 0

    def get(self, unit: TimeUnit) -> int:
        """The count in ``unit`` (epochs, batches or samples)."""
        field = _FIELD_OF_UNIT.get(unit)
        if field is None:
            if TimeUnit(unit) is TimeUnit.DURATION:
                raise ValueError("a Timestamp counts epochs, batches and samples, not 'dur'; for the fraction "
                                 "of the run done, call State.get_elapsed_duration()")
            field = _FIELD_OF_UNIT[TimeUnit(unit)]
        return getattr(self, field)

    # Built directly rather than with dataclasses.replace: these run every batch.
    def to_next_batch(self, samples: int) -> "Timestamp":
        """The timestamp after one more batch of ``samples`` examples."""
        return Timestamp(self.epoch, self.batch + 1, self.sample + samples, self.batch_in_epoch + 1,
                         self.sample_in_epoch + samples)

    def to_next_epoch(self) -> "Timestamp":
        """The timestamp at the start of the next epoch."""
        return Timestamp(self.epoch + 1, self.batch, self.sample, 0, 0)

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Timestamp":
        return cls(**state)


_FIELD_OF_UNIT = {TimeUnit.EPOCH: "epoch", TimeUnit.BATCH: "batch", TimeUnit.SAMPLE: "sample"}
