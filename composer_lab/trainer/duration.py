"""How long a run is: its length in batches, whether it is over, and training for longer."""

from __future__ import annotations

import math
import warnings
from typing import Any, Optional, Union

from composer_lab.core.time import Time, Timestamp, TimeUnit, ensure_time

__all__ = ["total_batches", "reached_max_duration", "stops_mid_epoch", "max_duration_after", "plan_fit", "reached_end",
           "duration_change_note", "moved_schedules"]


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


def stops_mid_epoch(ts: Timestamp, limit: Time, per_epoch: Optional[int]) -> bool:
    """Whether a run that ends at ``limit`` ends before this epoch's data does (``per_epoch``
    batches, None when unknown): not when counted in epochs, which end with their data."""
    return (limit.unit is not TimeUnit.EPOCH and (per_epoch is None or ts.batch_in_epoch < per_epoch)
            and reached_max_duration(ts, limit))


def max_duration_after(ts: Timestamp, duration: Union[str, Time]) -> Time:
    """The ``max_duration`` that trains ``duration`` more from the timestamp ``ts`` (``fit(duration)``)."""
    more = ensure_time(duration, "duration")
    if more.unit is TimeUnit.DURATION:
        raise ValueError(f"duration: fit({str(more)!r}) needs an amount to train, in epochs, batches or samples, "
                         f"e.g. fit('1ep')")
    return Time(ts.get(more.unit) + more.value, more.unit)


def plan_fit(state: Any, trace: Any, duration: Union[str, Time]) -> Optional[Time]:
    """For ``fit(duration)``: where this fit stops (None: at max_duration). A ``duration`` that
    ends before max_duration (a run interrupted, then trained a little more) stops this fit there
    and keeps max_duration, so schedules in fractions of the run keep their batches; one that ends
    later becomes max_duration (Composer's ``fit(duration)``), with a warning when schedules in
    fractions of the run move. Each is noted in ``trace``."""
    target = max_duration_after(state.timestamp, duration)
    if _ends_before(state, target, state.max_duration):
        trace.note("duration", f"fit({str(duration)!r}) stops at {target}; max_duration {state.max_duration} is "
                   f"kept, so schedules in fractions of the run keep their batches", state.timestamp)
        return target
    if target == state.max_duration:
        trace.note("duration", f"fit({str(duration)!r}) stops at {target}, the run's max_duration", state.timestamp)
        return None
    note = duration_change_note(state, target)
    trace.note("duration", note, state.timestamp)
    if moved_schedules(state, target):
        warnings.warn(f"fit({str(duration)!r}): {note}; to keep them, set trainer.state.max_duration and call "
                      f"fit() without a duration", stacklevel=3)
    state.max_duration = target
    return None


def reached_end(ts: Timestamp, limits: list, per_epoch: Optional[int], mid_epoch: bool = False) -> bool:
    """Whether a fit ending at the first of ``limits`` (None: no limit) has ended; ``mid_epoch``:
    ended before this epoch's data (:func:`stops_mid_epoch`)."""
    if mid_epoch:
        return any(stops_mid_epoch(ts, limit, per_epoch) for limit in limits if limit is not None)
    return any(reached_max_duration(ts, limit) for limit in limits if limit is not None)


def _ends_before(state: Any, first: Time, second: Time) -> bool:
    """Whether ``first`` comes before ``second`` (in batches when their units differ; False when unknown)."""
    if first.unit is second.unit:
        return first.value < second.value
    first_batches, second_batches = total_batches(state, first), total_batches(state, second)
    return first_batches is not None and second_batches is not None and first_batches < second_batches


def duration_change_note(state: Any, longer: Time) -> str:
    """The trace note for ``max_duration`` becoming ``longer``: what moves with it. Schedules
    given as fractions of the run (a batch selection's ``[start, end)``) cover other batches
    from now on; the batches already trained keep what happened to them."""
    moved = moved_schedules(state, longer)
    text = f"max_duration {state.max_duration} -> {longer}"
    return text + (f"; schedules in fractions of the run move: {'; '.join(moved)}" if moved else "")


def moved_schedules(state: Any, longer: Time) -> list[str]:
    """The schedules in fractions of the run (a batch selection's ``[start, end)``) that cover
    other batches once ``max_duration`` becomes ``longer``, each as 'name [a, b) -> [c, d) batches'."""
    before, after = total_batches(state), total_batches(state, longer)
    if not before or not after:
        return []
    return [f"{type(a).__name__} [{a.start * before:g}, {a.end * before:g}) -> [{a.start * after:g}, "
            f"{a.end * after:g}) batches" for a in state.algorithms if _fraction_schedule(a)]


def _fraction_schedule(algorithm: Any) -> bool:
    return all(isinstance(getattr(algorithm, name, None), float) for name in ("start", "end"))

