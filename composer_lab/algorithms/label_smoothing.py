"""Label smoothing (Szegedy et al., 2016): train towards ``(1 - s) * one_hot + s / classes``."""

from __future__ import annotations

from typing import Any, Optional

import torch

from composer_lab.algorithms.soft_targets import class_values
from composer_lab.algorithms.validation import check_fraction
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["LabelSmoothing", "smooth_labels"]


def smooth_labels(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1) -> torch.Tensor:
    """Soft targets ``values * (1 - smoothing) + smoothing / C``, ``C = logits.shape[1]``.

    ``target`` holds class indices (one dimension fewer than ``logits``) or per-class values
    (``logits``' shape, integer one-hot included); the class dimension is dimension 1, so
    segmentation logits (N, C, H, W) take targets (N, H, W) or (N, C, H, W).
    """
    smoothing = check_fraction("smoothing", smoothing, high_open=True)
    return smoothed(target, logits.shape, smoothing, logits.dtype if logits.is_floating_point() else torch.float32)


def smoothed(target: torch.Tensor, outputs_shape: torch.Size, smoothing: float,
             dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The smoothed targets for outputs of ``outputs_shape`` (``smoothing`` already checked)."""
    return class_values(target, outputs_shape, dtype).mul_(1.0 - smoothing).add_(smoothing / outputs_shape[1])


class LabelSmoothing(Algorithm):
    """Smooths the targets at BEFORE_LOSS and restores the originals at AFTER_LOSS, so
    metrics and later algorithms see the dataloader's targets.

    Args:
        smoothing: the probability mass spread evenly over all classes, in [0, 1).
    """

    def __init__(self, smoothing: float = 0.1) -> None:
        self.smoothing = check_fraction("smoothing", smoothing, high_open=True)
        self._original: Optional[Any] = None

    events = frozenset({Event.BEFORE_LOSS, Event.AFTER_LOSS})
    writes = frozenset({"batch"})

    def match(self, event: Event, state: State) -> bool:
        return event is Event.BEFORE_LOSS or (event is Event.AFTER_LOSS and self._original is not None)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.BEFORE_LOSS:
            self._original = state.batch_get_item(1)
            state.batch_set_item(1, smoothed(self._original, state.outputs.shape, self.smoothing))
        else:
            state.batch_set_item(1, self._original)
            self._original = None
        return None
