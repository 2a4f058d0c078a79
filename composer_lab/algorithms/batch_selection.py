"""Scheduled batch selection: train on a subset of some batches (Selective Backprop, RandomSubset).

The schedule is the one of Selective Backprop (Jiang et al., 2019): select only while the
elapsed fraction of training is in ``[start, end)``, and within that interval let every
``interrupt``-th batch of the epoch through whole. Subclasses decide *which* examples to keep.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

import torch

from composer_lab.algorithms.validation import check_fraction, check_positive
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["should_selective_backprop", "kept_count", "prune_batch", "BatchSelection"]


def check_schedule(start: float, end: float, interrupt: int) -> None:
    """Validate the ``[start, end)`` interval and ``interrupt``."""
    check_fraction("start", start)
    check_fraction("end", end)
    if start >= end:
        raise ValueError(f"start ({start}) must be smaller than end ({end}): selection runs while the "
                         f"elapsed fraction of training is in [start, end); e.g. start=0.5, end=0.9")
    check_positive("interrupt", interrupt, integer=True, allow_zero=True)


def should_selective_backprop(current_duration: float, batch_idx: int, start: float = 0.5,
                              end: float = 0.9, interrupt: int = 2) -> bool:
    """Whether this batch is a selective one.

    True when ``start <= current_duration < end`` and the batch is not an interrupting one:
    with ``interrupt=0`` every batch of the interval is selective, otherwise every
    ``interrupt``-th batch of the epoch (``batch_idx`` counts from 0) is a plain step, so
    ``interrupt=2`` alternates selective and plain steps.
    """
    check_schedule(start, end, interrupt)
    check_fraction("current_duration", current_duration)
    check_positive("batch_idx", batch_idx, integer=True, allow_zero=True)
    in_interval = start <= current_duration < end
    return in_interval and (interrupt == 0 or (batch_idx + 1) % interrupt != 0)


def kept_count(batch_size: int, keep: float) -> int:
    """``int(keep * batch_size)``; ValueError when that keeps no example."""
    count = int(keep * batch_size)
    if count < 1:
        raise ValueError(f"keep={keep} of a batch of {batch_size} keeps int({keep} * {batch_size}) = 0 "
                         f"examples; raise keep to at least {1 / batch_size:.3g}, use larger batches, or "
                         f"drop the small last batch (DataLoader(drop_last=True))")
    return count


def prune_batch(batch: Any, index: torch.Tensor, batch_size: int) -> Any:
    """The batch with every per-example tensor (leading dimension ``batch_size``) indexed by
    ``index``, so inputs, targets and any other per-example field stay paired."""
    def pick(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch_size:
            return value[index]
        return value

    if isinstance(batch, Mapping):
        return {key: pick(value) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(pick(value) for value in batch)
    raise TypeError(f"cannot select from a batch of type {type(batch).__name__}; batches are "
                    f"(input, target) tuples or dicts with 'input' and 'target'")


class BatchSelection(Algorithm):
    """Keeps ``int(keep * N)`` examples of the batch at AFTER_DATALOADER on scheduled steps.

    Every training step logs ``<metric_prefix>/keep_ratio`` (1.0 on plain steps); subclasses
    may add metrics of their own. Sorted first by ``sort_selective_backprop_first``.
    """

    selects_batch: ClassVar[bool] = True
    metric_prefix: ClassVar[str]

    def __init__(self, start: float = 0.5, end: float = 0.9, keep: float = 0.5, interrupt: int = 2) -> None:
        check_schedule(start, end, interrupt)
        self.start = float(start)
        self.end = float(end)
        self.keep = check_fraction("keep", keep, low_open=True)
        self.interrupt = interrupt
        self._ratio_key = f"{self.metric_prefix}/keep_ratio"

    events = frozenset({Event.INIT, Event.AFTER_DATALOADER})
    writes = frozenset({"batch"})

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.INIT:
            self.attach(state)
            return None
        self.check_inputs(state)
        if not self.active(event, state):
            logger.log_metrics({self._ratio_key: 1.0})
            return None
        inputs, targets = state.batch_get_item(0), state.batch_get_item(1)
        batch_size = inputs.shape[0]
        count = kept_count(batch_size, self.keep)
        index, metrics = self.select(state, inputs, targets, count)
        state.batch = prune_batch(state.batch, index, batch_size)
        logger.log_metrics({self._ratio_key: count / batch_size, **metrics})
        return None

    def active(self, event: Event, state: State) -> bool:
        """Selects only on the scheduled batches; ``match`` is True on the others too, so that
        their keep ratio of 1.0 is logged."""
        return event is Event.INIT or should_selective_backprop(
            state.get_elapsed_duration(), state.timestamp.batch_in_epoch, self.start, self.end, self.interrupt)

    def attach(self, state: State) -> None:
        """Runs at INIT: check what the selection needs from the state."""

    def check_inputs(self, state: State) -> None:
        """Runs at every AFTER_DATALOADER, scheduled or not: refuse, before the first step,
        inputs the selection could not use once its interval begins."""

    @abstractmethod
    def select(self, state: State, inputs: torch.Tensor, targets: Any,
               count: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """The indices of the ``count`` examples to keep, and metrics to log with them."""
