"""ChannelsLast: store 4-D weights as NHWC, which convolution kernels on GPUs run faster."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from composer_lab.algorithms.surgery_algorithm import SurgeryAlgorithm
from composer_lab.algorithms.warnings import NoEffectWarning

__all__ = ["ChannelsLast", "apply_channels_last"]


def apply_channels_last(model: nn.Module) -> nn.Module:
    """Convert ``model``'s 4-D parameters and buffers to channels-last in place (the Parameter
    objects stay the same, only their storage changes); returns the model.
    :class:`~composer_lab.algorithms.warnings.NoEffectWarning` when it has no 4-D tensor."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"apply_channels_last needs a torch.nn.Module, got {type(model).__name__}; "
                        f"pass the model itself")
    if not any(t.dim() == 4 for t in (*model.parameters(), *model.buffers())):
        warnings.warn(NoEffectWarning(f"ChannelsLast changed nothing in {type(model).__name__}: it has no 4-D "
                                      f"weight (convolution) to store channels-last"), stacklevel=2)
        return model
    return model.to(memory_format=torch.channels_last)


class ChannelsLast(SurgeryAlgorithm):
    """Applies :func:`apply_channels_last` at INIT (nothing is replaced, so ``replaced`` is empty)."""

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        apply_channels_last(model)
        return []
