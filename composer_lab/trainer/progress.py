"""A progress bar over the batches of a fit: a widget in Jupyter, text in a terminal (tqdm.auto)."""

from __future__ import annotations

from typing import Any, Optional

from tqdm.auto import tqdm

from composer_lab.core.callback import Callback
from composer_lab.trainer.duration import total_batches

__all__ = ["ProgressBar"]


class ProgressBar(Callback):
    """One bar per ``fit``; shows the epoch and, every ``loss_every`` batches, the training loss
    last copied to the host in bulk (``logger.latest``, at the trainer's flush points): no device
    sync of its own."""

    writes = frozenset()  # reads the loss and the timestamp only: no model walk around its calls

    def __init__(self, loss_every: int = 25) -> None:
        self.loss_every = loss_every
        self.bar: Optional[Any] = None

    def fit_start(self, state: Any, logger: Any) -> None:
        self._end_bar()
        self.bar = tqdm(total=_batches_left(state), desc=state.run_name, unit="ba", dynamic_ncols=True)

    def batch_end(self, state: Any, logger: Any) -> None:
        self.bar.update(1)
        loss = logger.latest.get("loss/train")
        if state.timestamp.batch % self.loss_every == 0 and loss is not None:
            self.bar.set_postfix(epoch=state.timestamp.epoch, loss=f"{loss:.4f}", refresh=False)

    def fit_end(self, state: Any, logger: Any) -> None:
        self._end_bar()

    def close(self, state: Any, logger: Any) -> None:
        self._end_bar()

    def _end_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _batches_left(state: Any) -> Optional[int]:
    """Batches until max_duration, when the run's length in batches is knowable."""
    total = total_batches(state)
    return None if total is None else max(total - state.timestamp.batch, 0)
