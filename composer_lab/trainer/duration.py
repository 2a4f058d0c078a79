"""How long a run is: its length in batches, whether it is over, and training for longer."""

from __future__ import annotations

import math
from typing import Any, Optional, Union

from composer_lab.core.time import Time, Timestamp, TimeUnit, ensure_time

__all__ = ["total_batches", "reached_max_duration", "max_duration_after", "duration_change_note"]


def total_batches(state: Any, max_duration: Optional[Time] = None) -> Optional[int]:
    """The run's length in batches, when ``max_duration`` (default: the state's) and the
    dataloader tell it (epochs need its length, samples its batch size); None otherwise."""
    duration, per_epoch = max_duration or state.max_duration, state.dataloader_len
    if duration.unit is TimeUnit.BATCH:
        return duration.value
    if duration.unit is TimeUnit.EPOCH and per_epoch:
        return duration.value * per_epoch
    batch_size = getattr(state.dataloader, "batch_size", None)
    if duration.unit is TimeUnit.SAMPLE and batch_size:
        return math.ceil(duration.value / batch_size)
    return None


def reached_max_duration(timestamp: Timestamp, max_duration: Time) -> bool:
    """Whether ``timestamp`` has come to ``max_duration``, in its unit (a state's:
    ``reached_max_duration(state.timestamp, state.max_duration)``)."""
    return timestamp.get(max_duration.unit) >= max_duration.value


def max_duration_after(ts: Timestamp, duration: Union[str, Time]) -> Time:
    """The ``max_duration`` that trains ``duration`` more from the timestamp ``ts`` (``fit(duration)``)."""
    more = ensure_time(duration, "duration")
    if more.unit is TimeUnit.DURATION:
        raise ValueError(f"duration: fit({str(more)!r}) needs an amount to train, in epochs, batches or samples, "
                         f"e.g. fit('1ep')")
    return Time(ts.get(more.unit) + more.value, more.unit)


def duration_change_note(state: Any, longer: Time) -> str:
    """The trace note for ``max_duration`` becoming ``longer``: what moves with it. Schedules
    given as fractions of the run (a batch selection's ``[start, end)``) cover other batches
    from now on; the batches already trained keep what happened to them."""
    old, before = state.max_duration, total_batches(state)
    text = f"max_duration {old} -> {longer}"
    if before is None:
        return text
    after = total_batches(state, longer)
    moved = [f"{type(a).__name__} [{a.start * before:g}, {a.end * before:g}) -> [{a.start * after:g}, "
             f"{a.end * after:g}) batches" for a in state.algorithms if _fraction_schedule(a)]
    return text + (f"; schedules in fractions of the run move: {'; '.join(moved)}" if moved and after else "")


def _fraction_schedule(algorithm: Any) -> bool:
    return all(isinstance(getattr(algorithm, name, None), float) for name in ("start", "end"))

