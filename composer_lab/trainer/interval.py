"""When something recurring is due: evaluations and checkpoints every N epochs or batches."""

from __future__ import annotations

from typing import Union

from composer_lab.core.time import Time, Timestamp, TimeUnit, ensure_time

__all__ = ["Interval"]


class Interval:
    """Every ``'Nep'`` (checked at epoch ends) or ``'Nba'`` (checked after each batch)."""

    def __init__(self, every: Union[str, Time], name: str) -> None:
        time = ensure_time(every, name)
        if not time.is_period():
            raise ValueError(f"{name}: {every!r} is not an interval; give a whole number of epochs or "
                             f"batches, at least 1, e.g. '1ep' or '100ba'")
        self.time = time
        self.per_batch = time.unit is TimeUnit.BATCH

    def due_after_batch(self, ts: Timestamp) -> bool:
        """Whether it is due now that batch ``ts.batch`` finished."""
        return self.per_batch and ts.batch % self.time.value == 0

    def due_after_epoch(self, ts: Timestamp) -> bool:
        """Whether it is due now that epoch ``ts.epoch`` finished."""
        return not self.per_batch and ts.epoch % self.time.value == 0

    def __repr__(self) -> str:
        return f"Interval({str(self.time)!r})"
