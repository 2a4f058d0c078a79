"""Training-loop events: the points of the loop where algorithms and callbacks run."""

from __future__ import annotations

import difflib
from enum import Enum
from typing import Optional

__all__ = ["Event"]


class Event(str, Enum):
    """Marks one point of the training, eval or predict loop.

    The trainer fires them in this order (one fit; ``[...]`` repeats)::

        INIT, BEFORE_LOAD, AFTER_LOAD,
        FIT_START
          [EPOCH_START
            [BEFORE_DATALOADER, AFTER_DATALOADER, BATCH_START, BEFORE_TRAIN_BATCH
              [BEFORE_FORWARD, AFTER_FORWARD, BEFORE_LOSS, AFTER_LOSS,
               BEFORE_BACKWARD, AFTER_BACKWARD]           # once per microbatch
             AFTER_TRAIN_BATCH, BATCH_END                # BATCH_END after optimizer.step()
             (EVAL_BEFORE_ALL ... EVAL_AFTER_ALL)        # batch-wise evaluation, when due
             BATCH_CHECKPOINT]
           EPOCH_END, (EVAL_BEFORE_ALL ... EVAL_AFTER_ALL), EPOCH_CHECKPOINT]
        FIT_END

    An evaluation is ``EVAL_BEFORE_ALL, [EVAL_START, [EVAL_BATCH_START,
    EVAL_BEFORE_FORWARD, EVAL_AFTER_FORWARD, EVAL_BATCH_END], EVAL_END], EVAL_AFTER_ALL``;
    ``Trainer.eval()`` wraps one in EVAL_STANDALONE_START / EVAL_STANDALONE_END, and
    ``Trainer.predict()`` fires the PREDICT_* events.

    ``Event('after_loss') is Event.AFTER_LOSS``.
    """

    INIT = "init"
    BEFORE_LOAD = "before_load"
    AFTER_LOAD = "after_load"
    FIT_START = "fit_start"
    EPOCH_START = "epoch_start"
    BEFORE_DATALOADER = "before_dataloader"
    AFTER_DATALOADER = "after_dataloader"
    BATCH_START = "batch_start"
    BEFORE_TRAIN_BATCH = "before_train_batch"
    BEFORE_FORWARD = "before_forward"
    AFTER_FORWARD = "after_forward"
    BEFORE_LOSS = "before_loss"
    AFTER_LOSS = "after_loss"
    BEFORE_BACKWARD = "before_backward"
    AFTER_BACKWARD = "after_backward"
    AFTER_TRAIN_BATCH = "after_train_batch"
    BATCH_END = "batch_end"
    BATCH_CHECKPOINT = "batch_checkpoint"
    EPOCH_END = "epoch_end"
    EPOCH_CHECKPOINT = "epoch_checkpoint"
    FIT_END = "fit_end"
    EVAL_BEFORE_ALL = "eval_before_all"
    EVAL_START = "eval_start"
    EVAL_BATCH_START = "eval_batch_start"
    EVAL_BEFORE_FORWARD = "eval_before_forward"
    EVAL_AFTER_FORWARD = "eval_after_forward"
    EVAL_BATCH_END = "eval_batch_end"
    EVAL_END = "eval_end"
    EVAL_AFTER_ALL = "eval_after_all"
    EVAL_STANDALONE_START = "eval_standalone_start"
    EVAL_STANDALONE_END = "eval_standalone_end"
    PREDICT_START = "predict_start"
    PREDICT_BATCH_START = "predict_batch_start"
    PREDICT_BEFORE_FORWARD = "predict_before_forward"
    PREDICT_AFTER_FORWARD = "predict_after_forward"
    PREDICT_BATCH_END = "predict_batch_end"
    PREDICT_END = "predict_end"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> None:
        """Reject an unknown event, naming the closest one (``Event(...)`` raises this error)."""
        close = difflib.get_close_matches(str(value).lower(), [e.value for e in cls], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{value!r} is not an event{hint}; give an Event or its value, e.g. Event.AFTER_LOSS "
                         f"or 'after_loss'")

    # The names say it: every before event is named ``*before_*`` or ``*_start``, every after
    # event ``*after_*`` or ``*_end`` (tests/core/test_event.py checks them against the seed's lists).
    @property
    def is_before_event(self) -> bool:
        """Whether a matching "after" event closes this one (``BEFORE_LOSS``, ``EPOCH_START``...)."""
        return "before_" in self.value or self.value.endswith("_start")

    @property
    def is_after_event(self) -> bool:
        """Whether this event closes a "before" event (``AFTER_LOSS``, ``EPOCH_END``...)."""
        return "after_" in self.value or self.value.endswith("_end")

    @property
    def opening(self) -> Optional["Event"]:
        """The before-event this after-event closes (``AFTER_LOSS`` -> ``BEFORE_LOSS``,
        ``EVAL_AFTER_FORWARD`` -> ``EVAL_BEFORE_FORWARD``), or None: the pairing FILO reverses
        and the commutation check replays."""
        return _OPENING.get(self)

    @property
    def canonical_name(self) -> str:
        """The name without before/after/start/end markers: ``EPOCH_START`` and ``EPOCH_END`` give 'epoch'."""
        name = self.value
        for marker in ("before_", "after_", "_start", "_end"):
            name = name.replace(marker, "")
        return name

    @property
    def is_eval(self) -> bool:
        """Whether the event belongs to the eval loop."""
        return self.value.startswith("eval")

    @property
    def is_predict(self) -> bool:
        """Whether the event belongs to the predict loop."""
        return self.value.startswith("predict")

    @property
    def phase(self) -> str:
        """'eval', 'predict' or 'fit': the loop the event belongs to."""
        return _PHASE[self]

    @property
    def in_closure(self) -> bool:
        """Whether the optimizer's closure fires this event (``BEFORE_TRAIN_BATCH`` to
        ``AFTER_TRAIN_BATCH``): it fires once per call of the closure, twice a step under SAM."""
        return self in _CLOSURE_EVENTS


_PHASE = {e: "eval" if e.is_eval else "predict" if e.is_predict else "fit" for e in Event}
_CLOSURE_EVENTS = frozenset({Event.BEFORE_TRAIN_BATCH, Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS,
                             Event.AFTER_LOSS, Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD, Event.AFTER_TRAIN_BATCH})
_OPENING = {e: Event(e.value.replace("after_", "before_", 1)) for e in Event if "after_" in e.value}
