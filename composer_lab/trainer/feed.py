"""Where the training loop's batches come from: each epoch's iterator (its shuffle seeded by
the epoch, the batches a resumed run already trained skipped), and the batch in flight."""

from __future__ import annotations

from typing import Any, Optional

from composer_lab.core.state import State
from composer_lab.trainer.rng import load_rng_state, preserved_rng, seed_epoch_data

__all__ = ["BatchFeed"]


class BatchFeed:
    """The batches of ``state.dataloader`` for the fit loop.

    :meth:`open_epoch` before an epoch's first ``BEFORE_DATALOADER``, :meth:`next` for each
    batch, :meth:`close_epoch` when the data ran out. A batch taken stays :attr:`in_flight`
    until the loop calls :meth:`applied`: a fit that fails before gets it again from
    :meth:`next`. A resumed run gets the checkpoint's random state (:meth:`resume_random_state`)
    back where the saving run went on from it, before the first batch trained (as Composer does).
    """

    def __init__(self, state: State) -> None:
        self.state = state
        self.in_flight: Any = None
        """The batch taken from the dataloader and not yet applied."""
        self._batches: Optional[Any] = None  # this epoch's iterator (None: open it, past the batches trained)
        self._random_state: Optional[dict[str, Any]] = None

    def resume_random_state(self, random_state: Optional[dict[str, Any]]) -> None:
        """Hold a checkpoint's random state (``rng`` and ``generators``) until :meth:`restore_random_state`."""
        self._random_state = random_state

    def restore_random_state(self) -> None:
        """Give the generators the held random state, once."""
        if self._random_state is not None:
            self.state.load_generator_states(self._random_state["generators"])
            load_rng_state(self._random_state["rng"])
            self._random_state = None

    def open_epoch(self) -> None:
        """Open this epoch's iterator, unless open, past the batches already trained (its
        creation and the skipped reads leave the global generators as they were), then
        restore a held random state."""
        if self._batches is None:
            state = self.state
            with preserved_rng():
                seed_epoch_data(state.dataloader, state.seed, state.timestamp.epoch, state.rank)
                batches = iter(state.dataloader)
                for _ in range(state.timestamp.batch_in_epoch):
                    next(batches, None)
            self._batches = batches
            self.restore_random_state()

    def next(self) -> Any:
        """The batch to train next, now in flight: the one a failed fit left, else the epoch's
        next one; None when the epoch's data ran out."""
        if self.in_flight is None:
            try:
                self.in_flight = next(self._batches, None)
            except BaseException:
                # A batch that failed to load is not skipped: the next fit opens this epoch's
                # iterator again, past the batches trained (a DataLoader's iterator would go on
                # to the next batch, a generator that raised is finished).
                self._batches = None
                raise
        return self.in_flight

    def applied(self) -> None:
        """The batch in flight was trained (optimizer step and timestamp advance)."""
        self.in_flight = None

    def close_epoch(self) -> None:
        """The epoch's data ran out: the next :meth:`open_epoch` opens the next epoch."""
        self._batches = None
