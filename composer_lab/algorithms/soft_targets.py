"""Soft targets: algorithms that hand the loss class-probability targets for one loss call.

At BEFORE_LOSS the targets of the (micro)batch are replaced by soft targets of shape
(N, classes), ``classes`` read from the outputs; at AFTER_LOSS the originals come back, so
metrics and later algorithms see the dataloader's targets. The loss must accept class
probabilities as targets (``torch.nn.functional.cross_entropy`` does).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["one_hot", "SoftTargetAlgorithm"]


def one_hot(target: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Class indices (N,) as one-hot rows (N, num_classes); soft targets pass through."""
    if target.is_floating_point():
        if target.dim() < 1 or target.shape[-1] != num_classes:
            raise ValueError(f"soft targets must have {num_classes} classes in their last dimension, got shape "
                             f"{tuple(target.shape)}")
        return target.to(dtype)
    return torch.nn.functional.one_hot(target.long(), num_classes).to(dtype)


class SoftTargetAlgorithm(Algorithm):
    """Swaps in :meth:`soften`'s targets at BEFORE_LOSS and restores them at AFTER_LOSS."""

    def __init__(self) -> None:
        self._original: Optional[Any] = None

    events = frozenset({Event.BEFORE_LOSS, Event.AFTER_LOSS})

    def match(self, event: Event, state: State) -> bool:
        return event is Event.BEFORE_LOSS or (event is Event.AFTER_LOSS and self._original is not None)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.BEFORE_LOSS:
            targets = state.batch_get_item(1)
            soft = self.soften(targets, state.outputs.shape[-1])
            if soft is not None:
                self._original = targets
                state.batch_set_item(1, soft)
        elif event is Event.AFTER_LOSS:
            state.batch_set_item(1, self._original)
            self._original = None
        return None

    def soften(self, targets: torch.Tensor, num_classes: int) -> Optional[torch.Tensor]:
        """The soft targets for these (micro)batch targets, or None to leave them."""
        raise NotImplementedError
