"""Evaluation metrics: the mean eval loss, and accuracy through torchmetrics for classifiers.

Values stay tensors on the device (no host sync per eval batch); the logger converts them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

import torch

from composer_lab.trainer.distributed import mean_over_ranks

if TYPE_CHECKING:  # torchmetrics is imported at the first classifier's evaluation (it takes seconds)
    from torchmetrics.classification import MulticlassAccuracy

__all__ = ["EvalMetrics", "Throughput"]


class EvalMetrics:
    """Accumulates one evaluation: ``update`` per batch, ``compute`` at the end, ``reset``.

    Accuracy (``metrics/eval/Accuracy``, micro-averaged MulticlassAccuracy) is tracked when the
    outputs are ``(N, C)`` scores and the targets ``N`` class indices; other outputs get the
    loss only.
    """

    def __init__(self) -> None:
        self.accuracy: Optional["MulticlassAccuracy"] = None
        self._loss_sum: Optional[torch.Tensor] = None
        self._count = 0

    def reset(self) -> None:
        self._loss_sum, self._count = None, 0
        if self.accuracy is not None:
            self.accuracy.reset()

    def update(self, outputs: Any, targets: Any, loss: Optional[torch.Tensor], n: int) -> None:
        """Add a batch of ``n`` examples whose mean loss is ``loss``."""
        if loss is not None:
            weighted = loss.detach().float() * n
            self._loss_sum = weighted if self._loss_sum is None else self._loss_sum + weighted
            self._count += n
        if _is_classification(outputs, targets):
            if self.accuracy is None:
                from torchmetrics.classification import MulticlassAccuracy
                self.accuracy = MulticlassAccuracy(num_classes=outputs.shape[-1], average="micro")
            if self.accuracy.device != outputs.device:
                self.accuracy = self.accuracy.to(outputs.device)
            self.accuracy.update(outputs.detach(), targets)

    def compute(self) -> dict[str, torch.Tensor]:
        """``{'loss/eval': ..., 'metrics/eval/Accuracy': ...}`` for what was seen; under torchrun,
        for what every rank saw (torchmetrics syncs accuracy itself; the loss is all-reduced).
        Every rank must call it."""
        out = {}
        if self._count:
            out["loss/eval"] = mean_over_ranks(self._loss_sum / self._count, self._count)
        if self.accuracy is not None and self.accuracy.update_count:
            out["metrics/eval/Accuracy"] = self.accuracy.compute()
        return out


class Throughput:
    """Samples per second between marks, from host timings (no device sync)."""

    def __init__(self) -> None:
        self._mark = (0, 0.0)

    def mark(self, samples: int) -> None:
        """Start counting from ``samples`` samples seen, now."""
        self._mark = (samples, time.perf_counter())

    def log(self, logger: Any, samples: int) -> None:
        """Log 'throughput/samples_per_sec' since the last mark, now that ``samples`` were seen, and mark."""
        since, start = self._mark
        now = time.perf_counter()
        if samples > since and now > start:
            logger.log_metrics({"throughput/samples_per_sec": (samples - since) / (now - start)}, phase="fit")
        self._mark = (samples, now)


def _is_classification(outputs: Any, targets: Any) -> bool:
    return (isinstance(outputs, torch.Tensor) and isinstance(targets, torch.Tensor)
            and outputs.dim() == 2 and targets.dim() == 1 and outputs.is_floating_point()
            and not targets.is_floating_point() and outputs.shape[0] == targets.shape[0])
