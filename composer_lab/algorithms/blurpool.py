"""BlurPool (Zhang, 2019): low-pass filter before downsampling, for shift-invariant networks.

Strided convolutions become :class:`BlurConv2d` and max-pools :class:`BlurMaxPool2d`. Both
wrap the original module, so its weights (the same Parameter objects) keep training.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from composer_lab.algorithms.module_surgery import replace_modules, warn_if_unchanged
from composer_lab.algorithms.surgery_algorithm import StateDictSurgery
from composer_lab.core.event import Event
from composer_lab.core.logger import Logger
from composer_lab.core.state import State

__all__ = ["BlurPool", "BlurConv2d", "BlurMaxPool2d", "apply_blurpool", "blur_2d"]

_BINOMIAL = torch.tensor([1.0, 2.0, 1.0])


def blur_filter(channels: int, dtype: torch.dtype = torch.float32,
                device: Optional[torch.device] = None) -> torch.Tensor:
    """A depthwise 3x3 binomial filter, ``[1, 2, 1]`` outer ``[1, 2, 1]`` / 16, per channel."""
    kernel = torch.outer(_BINOMIAL, _BINOMIAL) / 16
    return kernel.to(device=device, dtype=dtype).expand(channels, 1, 3, 3).contiguous()


def blur_2d(input: torch.Tensor, stride: int = 1, filter: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Blur each channel of (N, C, H, W) with the binomial filter, then subsample by ``stride``."""
    channels = input.shape[1]
    if filter is None:
        filter = blur_filter(channels, input.dtype, input.device)
    return F.conv2d(input, filter.to(input.dtype), stride=stride, padding=1, groups=channels)


class BlurConv2d(nn.Module):
    """A strided convolution with a blur: before it (``blur_first``), or after it run at
    stride 1 with the blur doing the downsampling."""

    def __init__(self, conv: nn.Conv2d, blur_first: bool = True) -> None:
        super().__init__()
        self.conv = conv
        self.blur_first = blur_first
        self.stride = conv.stride
        channels = conv.in_channels if blur_first else conv.out_channels
        self.register_buffer("filter", blur_filter(channels, conv.weight.dtype, conv.weight.device), persistent=False)
        if not blur_first:
            conv.stride = (1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.blur_first:
            return self.conv(blur_2d(x, 1, self.filter))
        return blur_2d(self.conv(x), self.stride, self.filter)


class BlurMaxPool2d(nn.Module):
    """Max-pool at stride 1, then blur and subsample with the pool's stride (same output size)."""

    def __init__(self, pool: nn.MaxPool2d) -> None:
        super().__init__()
        self.pool = pool
        self.stride = pool.stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.pool
        pooled = F.max_pool2d(x, p.kernel_size, 1, p.padding, p.dilation, p.ceil_mode)
        return blur_2d(pooled, self.stride)


def _is_strided(conv: nn.Conv2d) -> bool:
    stride = conv.stride if isinstance(conv.stride, tuple) else (conv.stride, conv.stride)
    return max(stride) > 1


def apply_blurpool(model: nn.Module, replace_convs: bool = True, replace_maxpools: bool = True,
                   blur_first: bool = True, min_channels: int = 16) -> list[str]:
    """Wrap, in place, the strided ``Conv2d`` with at least ``min_channels`` input channels and
    every ``MaxPool2d``; returns the names of the replaced modules (each module once).
    :class:`~composer_lab.algorithms.warnings.NoEffectWarning` when there was none."""
    def replacement(module: nn.Module) -> Optional[nn.Module]:
        if replace_convs and type(module) is nn.Conv2d and _is_strided(module) \
                and module.in_channels >= min_channels:
            return BlurConv2d(module, blur_first)
        if replace_maxpools and type(module) is nn.MaxPool2d:
            return BlurMaxPool2d(module)
        return None

    replaced = replace_modules(model, replacement)
    warn_if_unchanged(replaced, "BlurPool", model, f"no strided Conv2d with at least {min_channels} input channels "
                      f"and no MaxPool2d (replace_convs={replace_convs}, replace_maxpools={replace_maxpools})")
    return replaced


def count_blur_layers(model: nn.Module) -> dict[str, float]:
    """Composer's counts of BlurPool's layers in ``model``, each module once."""
    modules = list(model.modules())
    return {"blurpool/num_blurpool_layers": float(sum(isinstance(m, BlurMaxPool2d) for m in modules)),
            "blurpool/num_blurconv_layers": float(sum(isinstance(m, BlurConv2d) for m in modules))}


class BlurPool(StateDictSurgery):
    """Applies :func:`apply_blurpool` at INIT.

    Logs ``BlurPool/num_replaced`` and Composer's ``blurpool/num_blurpool_layers`` and
    ``blurpool/num_blurconv_layers`` at INIT.

    Args:
        replace_convs: blur strided convolutions.
        replace_maxpools: blur max-pools.
        blur_first: blur before a strided convolution (cheaper) rather than after it.
        min_channels: leave convolutions with fewer input channels (the stem) alone.
    """

    def __init__(self, replace_convs: bool = True, replace_maxpools: bool = True, blur_first: bool = True,
                 min_channels: int = 16) -> None:
        super().__init__()
        if not (replace_convs or replace_maxpools):
            raise ValueError("BlurPool with replace_convs=False and replace_maxpools=False does nothing; "
                             "enable at least one")
        self.replace_convs = replace_convs
        self.replace_maxpools = replace_maxpools
        self.blur_first = blur_first
        self.min_channels = min_channels

    def operate(self, model: nn.Module, optimizers: list) -> list[str]:
        return apply_blurpool(model, self.replace_convs, self.replace_maxpools, self.blur_first, self.min_channels)

    def apply(self, event: Event, state: State, logger: Logger) -> Optional[int]:
        """The surgery, then Composer's layer counts (which it logs as hyperparameters) as metrics at INIT."""
        super().apply(event, state, logger)
        logger.log_metrics(count_blur_layers(state.model))
        return None
