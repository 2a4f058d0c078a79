"""Mixing two examples per slot (MixUp, CutMix): the batch is combined with a permutation of
itself at AFTER_DATALOADER, and the loss sees the matching mixed targets.

The soft targets ``m * one_hot(y) + (1 - m) * one_hot(y[perm])`` make cross-entropy equal to
the interpolated loss ``m * CE(out, y) + (1 - m) * CE(out, y[perm])``. Microbatches get the rows
of the permuted targets that match them (the trainer splits batches in order).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Optional

import torch
from scipy.special import betaincinv

from composer_lab.algorithms.soft_targets import SoftTargetAlgorithm, one_hot
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["sample_beta", "random_permutation", "MixingAlgorithm"]


def check_alpha(alpha: float) -> float:
    """``alpha`` > 0 as a float, else ValueError / TypeError."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha must be a positive number, got {type(alpha).__name__} {alpha!r}")
    if alpha <= 0:
        raise ValueError(f"alpha parameterises Beta(alpha, alpha) and must be > 0, got {alpha}")
    return float(alpha)


def sample_beta(alpha: float, generator: Optional[torch.Generator] = None) -> float:
    """One draw of Beta(alpha, alpha) from a CPU ``generator`` (inverse CDF of a uniform)."""
    uniform = torch.rand((), generator=generator).item()
    return float(betaincinv(alpha, alpha, uniform))


def random_permutation(n: int, device: torch.device, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A permutation of ``range(n)`` drawn on the CPU ``generator``, moved to ``device``."""
    return torch.randperm(n, generator=generator).to(device, non_blocking=True)


class MixingAlgorithm(SoftTargetAlgorithm):
    """Mixes the batch at AFTER_DATALOADER (:meth:`mix`) and gives the loss mixed targets."""

    interpolates_loss: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self._permuted: Optional[torch.Tensor] = None
        self._mixing = 1.0
        self._row = 0

    events = frozenset({Event.AFTER_DATALOADER, Event.BEFORE_LOSS, Event.AFTER_LOSS})

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER or super().match(event, state)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        if event is Event.AFTER_DATALOADER:
            inputs, targets = state.batch_get_item(0), state.batch_get_item(1)
            mixed, self._permuted, self._mixing = self.mix(inputs, targets, state.generator("cpu"))
            self._row = 0
            state.batch_set_item(0, mixed)
            return None
        return super().apply(event, state, logger)

    def soften(self, targets: torch.Tensor, num_classes: int) -> Optional[torch.Tensor]:
        if self._permuted is None:
            return None
        rows = slice(self._row, self._row + targets.shape[0])
        self._row = rows.stop
        soft = one_hot(targets, num_classes).mul_(self._mixing)
        return soft.add_(one_hot(self._permuted[rows], num_classes), alpha=1.0 - self._mixing)

    @abstractmethod
    def mix(self, inputs: torch.Tensor, targets: torch.Tensor,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, float]:
        """The mixed inputs, the permuted targets and the weight of the original examples."""
