"""How long a run is: its length in batches, whether it is over, and training for longer."""

from __future__ import annotations

import math
from typing import Any, Optional, Union

from composer_lab.core.time import Time, Timestamp, TimeUnit, ensure_time

__all__ = ["total_batches", "reached_max_duration", "max_duration_after"]


def total_batches(state: Any) -> Optional[int]:
    """The run's length in batches, when ``max_duration`` and the dataloader tell it (epochs
    need its length, samples its batch size); None otherwise."""
    duration, per_epoch = state.max_duration, state.dataloader_len
    if duration.unit is TimeUnit.BATCH:
        return duration.value
    if duration.unit is TimeUnit.EPOCH and per_epoch:
        return duration.value * per_epoch
    batch_size = getattr(state.dataloader, "batch_size", None)
    if duration.unit is TimeUnit.SAMPLE and batch_size:
        return math.ceil(duration.value / batch_size)
    return None


def reached_max_duration(state: Any) -> bool:
    """Whether the timestamp has come to ``max_duration``, in its unit."""
    duration = state.max_duration
    return state.timestamp.get(duration.unit) >= duration.value


def max_duration_after(ts: Timestamp, duration: Union[str, Time]) -> Time:
    """The ``max_duration`` that trains ``duration`` more from the timestamp ``ts`` (``fit(duration)``)."""
    more = ensure_time(duration, "duration")
    if more.unit is TimeUnit.DURATION:
        raise ValueError(f"duration: fit({str(more)!r}) needs an amount to train, in epochs, batches or samples, "
                         f"e.g. fit('1ep')")
    return Time(ts.get(more.unit) + more.value, more.unit)
