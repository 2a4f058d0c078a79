"""Label smoothing (Szegedy et al., 2016): train towards ``(1 - s) * one_hot + s / classes``."""

from __future__ import annotations

from typing import Optional

import torch

from composer_lab.algorithms.soft_targets import SoftTargetAlgorithm, one_hot
from composer_lab.algorithms.validation import check_fraction

__all__ = ["LabelSmoothing", "smooth_labels"]


def smooth_labels(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1) -> torch.Tensor:
    """Soft targets ``target * (1 - smoothing) + smoothing / C``, ``C = logits.shape[-1]``;
    ``target`` holds class indices or class probabilities."""
    smoothing = check_fraction("smoothing", smoothing, high_open=True)
    classes = logits.shape[-1]
    return one_hot(target, classes, logits.dtype if logits.is_floating_point() else torch.float32) \
        .mul(1.0 - smoothing).add_(smoothing / classes)


class LabelSmoothing(SoftTargetAlgorithm):
    """Smooths the targets at BEFORE_LOSS and restores the originals at AFTER_LOSS.

    Args:
        smoothing: the probability mass spread evenly over all classes, in [0, 1).
    """

    def __init__(self, smoothing: float = 0.1) -> None:
        super().__init__()
        self.smoothing = check_fraction("smoothing", smoothing, high_open=True)

    def soften(self, targets: torch.Tensor, num_classes: int) -> Optional[torch.Tensor]:
        return one_hot(targets, num_classes).mul_(1.0 - self.smoothing).add_(self.smoothing / num_classes)
