"""Layer freezing (Brock et al., 2017): progressively stop training the first layers."""

from __future__ import annotations

from typing import Optional

from torch import nn

from composer_lab.algorithms.validation import check_fraction
from composer_lab.core.algorithm import Algorithm
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["LayerFreezing", "freeze_layers", "frozen_fraction"]


def frozen_fraction(current_duration: float, freeze_start: float = 0.5, freeze_level: float = 1.0) -> float:
    """The fraction of layers frozen: 0 before ``freeze_start``, then rising linearly to
    ``freeze_level`` at the end of training."""
    if current_duration < freeze_start or freeze_start >= 1:
        return 0.0
    return freeze_level * min(1.0, (current_duration - freeze_start) / (1.0 - freeze_start))


def freeze_layers(model: nn.Module, current_duration: float, freeze_start: float = 0.5,
                  freeze_level: float = 1.0) -> tuple[int, float]:
    """Freeze (``requires_grad=False``, gradient dropped) the first layers of ``model``, in module
    order, as :func:`frozen_fraction` says; a layer is a module owning parameters. The Parameter
    objects stay in the optimizers, which skip parameters without gradients. Returns the number
    of layers frozen and the fraction."""
    check_fraction("current_duration", current_duration)
    check_fraction("freeze_start", freeze_start)
    check_fraction("freeze_level", freeze_level)
    layers = [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]
    fraction = frozen_fraction(current_duration, freeze_start, freeze_level)
    count = int(fraction * len(layers))
    for layer in layers[:count]:
        for p in layer.parameters(recurse=False):
            p.requires_grad_(False)
            p.grad = None
    return count, fraction


class LayerFreezing(Algorithm):
    """Calls :func:`freeze_layers` at every EPOCH_END and logs the frozen share.

    Args:
        freeze_start: fraction of training after which freezing begins.
        freeze_level: fraction of layers frozen by the end of training.
    """

    def __init__(self, freeze_start: float = 0.5, freeze_level: float = 1.0) -> None:
        self.freeze_start = check_fraction("freeze_start", freeze_start)
        self.freeze_level = check_fraction("freeze_level", freeze_level)

    @property
    def find_unused_parameters(self) -> bool:
        return True

    events = frozenset({Event.EPOCH_END})
    writes = frozenset({"model"})

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        count, fraction = freeze_layers(state.model, state.get_elapsed_duration(), self.freeze_start,
                                        self.freeze_level)
        logger.log_metrics({"layer_freezing/layers_frozen": float(count), "layer_freezing/fraction": fraction})
        return None
