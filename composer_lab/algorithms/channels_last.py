"""ChannelsLast: store 4-D weights as NHWC, which convolution kernels on GPUs run faster."""

from __future__ import annotations

import torch
from torch import nn

from composer_lab.algorithms.surgery_algorithm import SurgeryAlgorithm

__all__ = ["ChannelsLast", "apply_channels_last"]


def apply_channels_last(model: nn.Module) -> nn.Module:
    """Convert ``model``'s 4-D parameters and buffers to channels-last in place (the Parameter
    objects stay the same, only their storage changes); returns the model."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"apply_channels_last needs a torch.nn.Module, got {type(model).__name__}; "
                        f"pass the model itself")
    return model.to(memory_format=torch.channels_last)


class ChannelsLast(SurgeryAlgorithm):
    """Applies :func:`apply_channels_last` at INIT (nothing is replaced, so ``replaced`` is empty)."""

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        apply_channels_last(model)
        return []
